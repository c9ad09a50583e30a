"""The machine a communicator runs on: a Topology given, a preset name or file, the probed
local GPUs, or a fully connected default."""

from __future__ import annotations

import os

from synth.plan.user_warning import warn_user
from topo_probe.topology.model import Topology


def resolve_topology(topology, n: int | None) -> Topology:
    """A Topology from a Topology, preset name or file path; None: ``fully_connected(n)`` (one
    GPU named ``single`` when ``n`` is 1)."""
    if isinstance(topology, Topology):
        return topology
    if topology is None and n == 1:
        single = Topology("single", description="one GPU")
        single.add_gpu(0)
        return single
    if topology is None:
        from topo_probe.machines.generators import fully_connected
        return fully_connected(n)
    from topo_probe.load import load_topology
    return load_topology(str(topology))


def probe_devices(devices: list[int]):
    """Topology of the local GPUs ``devices`` (``topo_probe.probes.probe_machine``, imported
    lazily); None (then ``fully_connected(n)``, with a warning) when probing is impossible."""
    try:
        from topo_probe.probes import probe_machine
        topo, reasons = probe_machine()
    except ImportError as exc:
        topo, reasons = None, [str(exc)]
    if topo is None:
        warn_user(f"Communicator: cannot probe the GPU topology ({'; '.join(map(str, reasons))}); "
                  f"assuming fully connected")
        return None
    if list(devices) != list(range(topo.num_gpus)):
        topo = topo.subset(devices)
    return topo


def typed_topology(topology) -> str | None:
    """``topology`` as the user typed it (a preset name, spec or file path), else None (a Topology
    or nothing): the "no plan" warning names the ``synthesize`` command for it."""
    return os.fspath(topology) if isinstance(topology, (str, os.PathLike)) else None


__all__ = ["probe_devices", "resolve_topology", "typed_topology"]
