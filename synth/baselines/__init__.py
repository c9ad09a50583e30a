"""NCCL-style baseline schedules, each verified against the fabric before it is returned.

========  ==========================================================  ===========================
name      algorithm                                                   collectives
========  ==========================================================  ===========================
ring      capacity-disjoint Hamiltonian rings (NCCL channels)         all eight
tree      double binary tree (NCCL), over channels                    allreduce, broadcast, reduce,
                                                                      gather, scatter
direct    one step of all-pairs transfers (two for allreduce)         all eight, when every needed
                                                                      pair is a channel
rhd       recursive halving / doubling (Rabenseifner), 2^k ranks      reducescatter, allgather,
                                                                      allreduce
bruck     Bruck (ceil(log2 n) steps)                                  allgather, alltoall
oneshot   every rank reduces every peer's whole buffer (one step)     allreduce, when every pair
                                                                      is a channel
========  ==========================================================  ===========================

Examples
--------
>>> from topo_probe.machines.generators import ring as ring_topology
>>> from synth.ir.fabric import build_fabric
>>> f = build_fabric(ring_topology(8))
>>> s = baseline("ring", f, "allgather", chunks=1)
>>> s.num_steps, s.meta["baseline"]
(7, 'ring')
>>> available_baselines(f, "allgather")
['ring']
"""

from __future__ import annotations

from synth.baselines import bruck, direct, oneshot, rhd, ring, tree
from synth.ir.collectives import canonical
from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule
from topo_probe.errors import InvalidArgument, UnsupportedCollective

BASELINES = {"ring": ring.build, "tree": tree.build, "direct": direct.build, "rhd": rhd.build,
             "bruck": bruck.build, "oneshot": oneshot.build}


def baseline(name: str, fabric: Fabric, collective: str, *, root: int | None = None,
             chunks: int | None = None) -> Schedule:
    """The verified ``name`` baseline schedule of ``collective`` on ``fabric``.

    Parameters
    ----------
    name : str
        One of ``ring``, ``tree``, ``direct``, ``rhd``, ``bruck``.
    fabric : Fabric
        Channels and capacities (:func:`synth.ir.fabric.build_fabric`).
    collective : str
        Collective name in any accepted spelling.
    root : int, optional
        Root rank of rooted collectives (default 0).
    chunks : int, optional
        Chunks per rank (``chunks_per_rank``); each baseline has its own default.

    Raises
    ------
    UnsupportedCollective
        Unknown baseline or collective, or the baseline does not apply (the reason says why).
    """
    if name not in BASELINES:
        raise InvalidArgument(f"unknown baseline {name!r}; expected one of {', '.join(BASELINES)}")
    return BASELINES[name](fabric, collective, root=root, chunks=chunks)


def available_baselines(fabric: Fabric, collective: str) -> list[str]:
    """Names of the baselines that apply to ``collective`` on ``fabric`` (root 0 if rooted).

    Each is built (and verified) once with one chunk per rank; applicability does not depend
    on the chunk count.
    """
    canonical(collective)
    out = []
    for name, build in BASELINES.items():
        try:
            build(fabric, collective, chunks=1)
        except UnsupportedCollective:
            continue
        out.append(name)
    return out


__all__ = ["BASELINES", "available_baselines", "baseline"]
