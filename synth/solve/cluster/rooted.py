"""Hierarchical broadcast and reduce for clusters of identical hosts.

Ranks are ``r = h * g + b`` as in :mod:`synth.solve.cluster.compose`; the root is ``(h0, b0)``.
The block is cut into ``C = k * g`` pieces; piece ``j`` travels on *lane* ``l = j mod g`` (the
NICs of local GPU ``l``, or of its rail).  Broadcast, in steps:

1. **scatter** (one step): the root sends every piece once over its host's links, piece ``j``
   to GPU ``l`` of its host, or (the root's own lane) to the other GPUs in turn;
2. **rails** (``H - 1`` steps): piece ``j`` goes along lane ``l`` from host to host, a chain
   ``h0 -> h0 + 1 -> ...`` (mod ``H``), so every NIC sends and receives each piece of its lane
   once;
3. **hosts**: in every other host GPU ``l`` holds its lane's pieces, which the other GPUs
   need: an allgather of ``k`` chunks per GPU over the host's spanning trees
   (:func:`synth.solve.cluster.local_trees.local_forest`); in the root's host each piece goes
   down a tree of the GPU the scatter gave it to, past the root.

A host's NICs take the block in once, ``1 / (g x NIC rate)`` rounds, the cut bound of the
host (2 x dgx-h100: 1/16); the host links carry at most a block in or out per GPU (the root
sends each piece once), below that on NVSwitch hosts.  Reduce is the same on the reversed
fabric, backwards with reduces.  ``meta`` as :func:`synth.solve.cluster.compose.hierarchical`'s.
"""

from __future__ import annotations

import time
from fractions import Fraction

from synth.ir.collectives import canonical
from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule, Transfer
from synth.ir.verifier import check, sized_steps
from synth.solve.budget import SolveBudget, budget_or_new
from synth.solve.bwopt.bandwidth_term import bandwidth_term
from synth.solve.cluster.compose import host_fabric, tree_levels
from synth.solve.cluster.local_trees import LocalForest, local_forest
from topo_probe.errors import InvalidArgument, UnsupportedCollective
from topo_probe.number_rules import is_int

ROOTED = ("broadcast", "reduce")


def _sources(g: int, C: int, b0: int) -> list[int]:
    """The GPU of the root's host that the scatter gives piece ``j`` to: its lane's GPU, or for
    the root's own lane the other GPUs in turn.

    >>> _sources(4, 8, 1)
    [0, 0, 2, 3, 0, 2, 2, 3]
    """
    others = [b for b in range(g) if b != b0]
    out, turn = [], 0
    for j in range(C):
        if j % g != b0:
            out.append(j % g)
        else:
            out.append(others[turn % len(others)])
            turn += 1
    return out


def _trees_of(forest: LocalForest) -> dict[int, list[tuple[int, ...]]]:
    return {b: [p for p, m in ts for _ in range(m)] for b, ts in forest.counts.items()}


def _broadcast_phases(forest: LocalForest, g: int, H: int, k: int, root: int) -> list[list[tuple[int, int, int]]]:
    """Broadcast-ordered ``(piece, src, dst)`` per step (see the module docstring)."""
    h0, b0 = divmod(root, g)
    C = k * g
    src = _sources(g, C, b0)
    trees = _trees_of(forest)
    used = {b: 0 for b in range(g)}
    scatter = [(j, root, h0 * g + src[j]) for j in range(C) if src[j] != b0]
    rails = [[(j, ((h0 + i) % H) * g + j % g, ((h0 + i + 1) % H) * g + j % g) for j in range(C)]
             for i in range(H - 1)]
    hosts: list[list[tuple[int, int, int]]] = []
    for j in range(C):
        lane = j % g
        for h in range(H):
            start = src[j] if h == h0 else lane
            tree = trees[start][used[start] % len(trees[start])] if h == h0 else trees[lane][j // g]
            for lvl, edges in enumerate(tree_levels(tree)):
                while len(hosts) <= lvl:
                    hosts.append([])
                hosts[lvl].extend((j, h * g + u, h * g + v) for u, v in edges if not (h == h0 and v == b0))
        used[src[j]] += 1
    return [scatter] + rails + hosts


def hierarchical_rooted(fabric: Fabric, collective: str, root: int = 0, *, pieces_per_gpu: int | None = None,
                        efficiency=None, time_limit_s: float = 30.0,
                        budget: SolveBudget | None = None) -> Schedule:
    """The hierarchical broadcast or reduce of a cluster fabric (see the module docstring).

    Parameters
    ----------
    fabric : Fabric
        A fabric with a cluster shape.
    collective : str
        ``broadcast`` or ``reduce`` (any spelling).
    root : int
        The root rank.
    pieces_per_gpu : int, optional
        ``k``: the block is cut into ``k x g`` pieces (chunks per rank).  Default: the better
        (bandwidth term, at ``efficiency``'s capacities where given) of 1 and ``g - 1``, which
        spreads the root's own lane evenly over the other GPUs of its host.
    efficiency : callable, optional
        Link kind -> achieved fraction of nominal bandwidth, for choosing ``k``.
    time_limit_s : float
        Budget (s) for the host's tree packing, on the clock of ``budget`` (default: a fresh
        :class:`~synth.solve.budget.SolveBudget`).

    Raises
    ------
    UnsupportedCollective
        Another collective, ``pieces_per_gpu < 1``, a fabric without a cluster shape, or hosts
        whose GPUs are not all joined pairwise (the root scatters to every GPU of its host).
    InvalidArgument
        A root that is not a rank.
    """
    t0 = time.monotonic()
    budget = budget_or_new(budget)
    name = canonical(collective)
    if name not in ROOTED:
        raise UnsupportedCollective(f"hierarchical_rooted: {name} is not supported (supported: {', '.join(ROOTED)})")
    if pieces_per_gpu is not None and (not is_int(pieces_per_gpu) or pieces_per_gpu < 1):
        raise UnsupportedCollective(f"hierarchical_rooted: pieces_per_gpu must be an integer >= 1, "
                                    f"got {pieces_per_gpu!r}")
    host = host_fabric(fabric)
    if not is_int(root) or not 0 <= root < fabric.num_ranks:
        raise InvalidArgument(f"hierarchical_rooted: root must be a rank in 0..{fabric.num_ranks - 1}, got {root!r}")
    root = int(root)
    pieces_per_gpu = None if pieces_per_gpu is None else int(pieces_per_gpu)
    g = fabric.shape.gpus_per_host
    missing = next(((u, v) for u in range(g) for v in range(g) if u != v and not host.has_channel(u, v)), None)
    if missing is not None:
        raise UnsupportedCollective(f"hierarchical_rooted: GPUs {missing[0]} and {missing[1]} of a host are not "
                                    f"joined; the root's scatter needs every pair of a host joined")
    best = None
    for k in [pieces_per_gpu] if pieces_per_gpu else sorted({1, max(1, g - 1)}):
        sched = _build(fabric, host, name, root, k, time_limit_s, budget)
        term = bandwidth_term(sched, fabric, efficiency)
        if best is None or term < best[0]:
            best = (term, sched)
    sched = best[1]
    return sched.with_(meta={**sched.meta, "solve_s": round(time.monotonic() - t0, 3)})


def _build(fabric: Fabric, host: Fabric, name: str, root: int, k: int, time_limit_s: float,
           budget: SolveBudget) -> Schedule:
    """The schedule with ``k`` pieces per GPU, verified, with meta."""
    g, H = fabric.shape.gpus_per_host, fabric.shape.hosts
    reduce = name == "reduce"
    forest = local_forest(host, reduce, 2 * k, time_limit_s=time_limit_s, budget=budget)
    phases = _broadcast_phases(forest, g, H, k, root)
    if reduce:
        steps = [[Transfer(c, v, u, "reduce") for c, u, v in ts] for ts in reversed(phases)]
    else:
        steps = [[Transfer(c, u, v, "copy") for c, u, v in ts] for ts in phases]
    sized, loads = sized_steps(fabric, steps)
    sched = Schedule(name, fabric.num_ranks, k * g, sized, root, False, "hierarchical", fabric.topology_name,
                     fabric.fingerprint)
    check(sched, fabric, loads=loads)
    return sched.with_(meta=_meta(sched, fabric, name, root, forest, 0.0))


def _meta(sched: Schedule, fabric: Fabric, name: str, root: int, forest: LocalForest, solve_s: float) -> dict:
    from synth.solve.bounds_cache import fabric_bounds
    achieved = bandwidth_term(sched, fabric)
    bound = Fraction(fabric_bounds(fabric, name, root).bandwidth_rounds_per_block)
    return {"method": "hierarchical", "bound_rounds_per_block": float(bound), "bound_exact": str(bound),
            "achieved_rounds_per_block": float(achieved), "achieved_exact": str(achieved),
            "ratio_to_bound": float(achieved / bound) if bound else None, "host_term": float(forest.term),
            "batch_chunks": sched.chunks_per_rank, "max_depth": forest.depth,
            "transfers": sum(len(s.transfers) for s in sched.steps), "solve_s": round(solve_s, 3)}


__all__ = ["ROOTED", "hierarchical_rooted"]
