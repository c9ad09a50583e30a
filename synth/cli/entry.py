"""The ``synthesize`` and ``simulate`` console scripts (:func:`topo_probe.cli.entry.run_command`:
a Ctrl-C while the solver's or the models' packages load ends in one line, exit 130)."""

from __future__ import annotations

from topo_probe.cli.entry import run_command


def synthesize() -> int:
    """The ``synthesize`` command."""
    return run_command("synthesize", "synth.cli.synthesize", exiting=True)


def simulate() -> int:
    """The ``simulate`` command."""
    return run_command("simulate", "synth.cli.simulate", exiting=True)


__all__ = ["simulate", "synthesize"]
