"""The ``sweep`` console script (:func:`topo_probe.cli.entry.run_command`: a Ctrl-C while NumPy
and the executors load ends in one line, exit 130)."""

from __future__ import annotations

from topo_probe.cli.entry import run_command


def sweep() -> int:
    """The ``sweep`` command."""
    return run_command("sweep", "kernels.sweep.cli", exiting=True)


__all__ = ["sweep"]
