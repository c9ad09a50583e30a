"""Hierarchical allgather, reducescatter and allreduce for clusters of identical hosts.

Ranks are ``r = h * g + b`` (host ``h``, local GPU ``b``); a chunk of rank ``r`` is ``r * C + j``.

AllGather (two phases, each host alike):

1. **rails** (one step): every rank sends each of its chunks to the same local GPU of every
   other host (``(h, b) -> (h', b)``: rail ``b``'s NICs, or the NICs nearest GPU ``b``);
2. **hosts**: GPU ``b`` of host ``h`` now holds the blocks of ``(h', b)`` for every host
   ``h'``, all of which every GPU of host ``h`` needs: an allgather on the host's own fabric
   with ``H * C`` chunks per rank, run over the host's spanning trees
   (:func:`synth.solve.cluster.local_trees.local_forest`), tree level ``l`` in step ``l``,
   all hosts at once.

Each block crosses the network once per host, which is what the host cut needs: on
rail-optimized or single-switch DGX H100 clusters of 5 or more hosts the bandwidth term is
the cut bound ((H - 1) / 2 rounds per block: a host's 8 NICs bring in the other hosts' n - 8
blocks), and the host phase (``H x`` the host's own allgather term on NVLink) stays below it.
ReduceScatter is the same backwards on the reversed fabric (host reduce trees, then one step
of reduces along the rails); AllReduce is ReduceScatter then AllGather with the same chunk
ids, whose term meets the phased bound ``(RS + AG) / n`` when both phases meet theirs.

Steps declare the rounds their loads need (:func:`synth.ir.verifier.required_rounds`), the
schedule passes :func:`synth.ir.verifier.check`, and ``meta`` reports the bandwidth term
(:func:`synth.solve.bwopt.bandwidth_term.bandwidth_term`, from the transfers) against the cut
bound (:func:`synth.model.bounds.lower_bounds`).
"""

from __future__ import annotations

import time
from fractions import Fraction

from synth.ir.collectives import canonical
from synth.ir.fabric import Fabric, build_fabric
from synth.ir.schedule import Schedule, Step, Transfer
from synth.ir.verifier import check, required_rounds
from synth.solve.bwopt.bandwidth_term import bandwidth_term
from synth.solve.bwopt.trees import bfs_edges
from synth.solve.cluster.local_trees import LocalForest, local_forest
from topo_probe.errors import UnsupportedCollective

HIERARCHICAL = ("allgather", "reducescatter", "allreduce")


def host_fabric(fabric: Fabric) -> Fabric:
    """The fabric of one host of a cluster fabric, in the cluster's round unit (local names)."""
    if fabric.shape is None:
        raise UnsupportedCollective(f"fabric {fabric.topology_name!r} is not a cluster of identical hosts")
    return build_fabric(fabric.shape.host, unit_gbps=fabric.unit_gbps, structured=False)


def _tree_levels(parent: tuple[int, ...]) -> list[list[tuple[int, int]]]:
    """Edges (u, v) of a tree grouped by the depth of u."""
    depth = {parent.index(-1): 0}
    levels: list[list[tuple[int, int]]] = []
    for u, v in bfs_edges(parent):
        depth[v] = depth[u] + 1
        while len(levels) < depth[v]:
            levels.append([])
        levels[depth[v] - 1].append((u, v))
    return levels


def _assignments(forest: LocalForest, b: int) -> list[tuple[tuple[int, ...], int]]:
    """Tree of each of local source ``b``'s chunks, in chunk order."""
    return [p for p, m in forest.counts[b] for _ in range(m)]


def _host_copies(forest: LocalForest, g: int, H: int, C: int) -> list[list[Transfer]]:
    """Allgather host phase: per step, transfers of every host."""
    steps: list[list[Transfer]] = [[] for _ in range(forest.depth)]
    for b in range(g):
        for k, tree in enumerate(_assignments(forest, b)):
            layer, j = divmod(k, C)                   # local chunk k = block of rank (layer, b), piece j
            chunk = (layer * g + b) * C + j
            for lvl, edges in enumerate(_tree_levels(tree)):
                for h in range(H):
                    o = h * g
                    steps[lvl].extend(Transfer(chunk, o + u, o + v, "copy") for u, v in edges)
    return steps


def _host_reduces(forest: LocalForest, g: int, H: int, C: int) -> list[list[Transfer]]:
    """Reducescatter host phase: reduce trees towards each local owner, run backwards."""
    depth = forest.depth
    steps: list[list[Transfer]] = [[] for _ in range(depth)]
    for b in range(g):
        for k, tree in enumerate(_assignments(forest, b)):
            layer, j = divmod(k, C)
            chunk = (layer * g + b) * C + j
            for lvl, edges in enumerate(_tree_levels(tree)):
                for h in range(H):
                    o = h * g
                    steps[depth - 1 - lvl].extend(Transfer(chunk, o + v, o + u, "reduce") for u, v in edges)
    return steps


def _rails(g: int, H: int, C: int, reduce: bool) -> list[Transfer]:
    """One step along the rails: copies out of each rank's own chunks, or reduces into them."""
    out = []
    for r in range(g * H):
        h, b = divmod(r, g)
        for h2 in range(H):
            if h2 != h:
                peer = h2 * g + b
                out.extend(Transfer(r * C + j, peer, r, "reduce") if reduce else Transfer(r * C + j, r, peer, "copy")
                           for j in range(C))
    return out


def _steps(fabric: Fabric, phases: list[list[Transfer]]) -> tuple[Step, ...]:
    return tuple(Step(required_rounds(fabric, [(t.src, t.dst) for t in ts]), tuple(ts)) for ts in phases if ts)


def hierarchical(fabric: Fabric, collective: str, *, chunks: int = 1, time_limit_s: float = 30.0) -> Schedule:
    """The hierarchical schedule of ``collective`` on a cluster fabric (see the module docstring).

    Parameters
    ----------
    fabric : Fabric
        A fabric with a cluster shape (:func:`synth.ir.fabric.build_fabric` of identical hosts).
    collective : str
        ``allgather``, ``reducescatter`` or ``allreduce`` (any spelling).
    chunks : int
        Chunks per rank ``C``; the host phase spreads ``hosts x C`` chunks per GPU over trees.
    time_limit_s : float
        Budget (s) for the host's tree packing and whole-chunk search.

    Returns
    -------
    Schedule
        Verified; ``meta`` as :func:`synth.solve.bwopt.optimal.bandwidth_optimal`'s
        (``method`` ``"hierarchical"``, ``bound_rounds_per_block``, ``achieved_rounds_per_block``,
        ``ratio_to_bound``, allreduce ``ratio_to_phased_bound``) plus ``host_term`` (the host
        phase's rounds per local chunk) and ``solve_s``.

    Raises
    ------
    UnsupportedCollective
        Another collective, ``chunks < 1``, or a fabric without a cluster shape.
    """
    t0 = time.monotonic()
    name = canonical(collective)
    if name not in HIERARCHICAL:
        raise UnsupportedCollective(f"hierarchical: {name} is not supported (supported: {', '.join(HIERARCHICAL)})")
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise UnsupportedCollective(f"hierarchical: chunks must be an integer >= 1, got {chunks!r}")
    host = host_fabric(fabric)
    g, H, C = fabric.shape.gpus_per_host, fabric.shape.hosts, chunks
    budget = time_limit_s / (2 if name == "allreduce" else 1)
    phases: list[list[Transfer]] = []
    forests = []
    if name in ("reducescatter", "allreduce"):
        rs = local_forest(host, True, H * C, time_limit_s=budget)
        phases += _host_reduces(rs, g, H, C) + [_rails(g, H, C, True)]
        forests.append(rs)
    if name in ("allgather", "allreduce"):
        ag = local_forest(host, False, H * C, time_limit_s=budget)
        phases += [_rails(g, H, C, False)] + _host_copies(ag, g, H, C)
        forests.append(ag)
    sched = Schedule(name, g * H, C, _steps(fabric, phases), None, False, "hierarchical", fabric.topology_name,
                     fabric.fingerprint)
    check(sched, fabric)
    return sched.with_(meta=_meta(sched, fabric, name, forests, time.monotonic() - t0))


def _meta(sched: Schedule, fabric: Fabric, name: str, forests: list[LocalForest], solve_s: float) -> dict:
    from synth.solve.bounds_cache import fabric_bounds
    achieved = bandwidth_term(sched, fabric)
    b = fabric_bounds(fabric, name)
    bound = Fraction(b.bandwidth_rounds_per_block)
    meta = {"method": "hierarchical", "bound_rounds_per_block": float(bound), "bound_exact": str(bound),
            "achieved_rounds_per_block": float(achieved), "achieved_exact": str(achieved),
            "ratio_to_bound": float(achieved / bound) if bound else None,
            "host_term": float(max(f.term for f in forests)), "host_lp_term": max(f.lp_term for f in forests),
            "batch_chunks": sched.chunks_per_rank, "max_depth": max(f.depth for f in forests),
            "transfers": sum(len(s.transfers) for s in sched.steps), "solve_s": round(solve_s, 3)}
    if name == "allreduce":
        phased = b.phased_rounds_per_block
        meta.update(phased_bound_exact=str(phased), ratio_to_phased_bound=float(achieved / phased) if phased else None)
    return meta


__all__ = ["HIERARCHICAL", "hierarchical", "host_fabric"]
