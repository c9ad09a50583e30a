"""The ``synthesize`` console script (:func:`topo_probe.cli.entry.run_command`: a Ctrl-C while
the solver's packages load ends in one line, exit 130)."""

from __future__ import annotations

from topo_probe.cli.entry import run_command


def synthesize() -> int:
    """The ``synthesize`` command."""
    return run_command("synthesize", "synth.cli.synthesize")


__all__ = ["synthesize"]
