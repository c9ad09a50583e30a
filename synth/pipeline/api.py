"""``synthesize(topology)``: the main job as one Python call (what the ``synthesize`` command runs)."""

from __future__ import annotations

from pathlib import Path

from synth.ir.collectives import COLLECTIVES, canonical
from topo_probe.topology.model import Topology


def synthesize(topology: Topology, out_dir: str | Path | None = None, *, collectives=None,
               time_limit_s: float = 60.0, root: int = 0, force: bool = False, progress: bool = False,
               log=print, msccl_runtime: str | None = None) -> dict:
    """Synthesize verified schedules for ``topology``: a size-based plan, a report against the
    baselines and the lower bounds, and MSCCL XML, written to ``out_dir`` (default
    ``results/<topology name>``).  Returns the run's summary (what ``summary.json`` holds).

    Parameters
    ----------
    topology : Topology
    out_dir : path, optional
    collectives : iterable of str, optional
        Default: all eight.
    time_limit_s : float
        Solver budget per collective stage (s).
    root : int
        Root rank of rooted collectives.
    force : bool
        Redo results that are already there for this topology.
    progress, log
        Progress bars, and where progress lines go (``print``; ``lambda s: None`` for quiet).
    msccl_runtime : {"rccl", "msccl-executor-nccl"}, optional
        The MSCCL runtime ``msccl/`` is built and checked for (default: rccl where the GPUs are
        AMD, msccl-executor-nccl otherwise).
    """
    from synth.pipeline.output import folder_name
    from synth.pipeline.synthesize import SynthesisOptions, run
    names = tuple(dict.fromkeys(canonical(c) for c in collectives)) if collectives else COLLECTIVES
    from synth.formats.msccl.runtimes import RUNTIME_CHOICES
    if msccl_runtime is not None and msccl_runtime not in RUNTIME_CHOICES:
        from topo_probe.errors import InvalidArgument
        raise InvalidArgument(f"msccl_runtime must be one of {', '.join(RUNTIME_CHOICES)}, got {msccl_runtime!r}")
    opts = SynthesisOptions(collectives=names, time_limit_s=time_limit_s, root=root, progress=progress, log=log,
                            msccl_runtime=msccl_runtime)
    out = Path(out_dir) if out_dir is not None else Path("results") / folder_name(topology.name)
    return run(topology, out, opts, force=force)


__all__ = ["synthesize"]
