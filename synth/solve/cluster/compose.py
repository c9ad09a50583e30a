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

On 2-4 hosts the host phase is the busier one; there every GPU also *carries* ``e`` of the
``C`` pieces of other local GPUs' blocks (:func:`carriers`): each host first spreads its own
blocks over its trees, the rails step then sends the carried pieces too, and on every other
host the remote pieces go down their trees past the carriers, which have them from the
network.  :mod:`synth.solve.cluster.split` picks ``(C, e)`` (2 x dgx-h100: ``(2, 1)``, the cut
bound 3/4 rounds per block instead of 7/9).

On a leaf-spine network (:func:`synth.solve.cluster.leaf_relay.leaf_partners`) the rails step
is two steps: a chunk goes to the other hosts of its leaf and to one host of every other leaf,
which relays it to the rest of its leaf, so it crosses the spine once per leaf (from a partly
filled leaf, to a few hosts of a full one: :mod:`synth.solve.cluster.leaf_relay`).
A leaf's uplink then carries what the leaf cut needs (``H - L`` blocks in per GPU of the
leaf, over ``1/R`` of the leaf's NIC bandwidth), while every NIC still moves each block once;
the schedule is kept when its bandwidth term is smaller (2:1 and 4:1 spines: the larger of
the host cut and the leaf cut, instead of up to ``L`` times the leaf cut).

Without carried pieces each block crosses the network once per host, which is what the host cut needs: on
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
from synth.ir.schedule import Schedule, Transfer
from synth.ir.verifier import check, sized_steps
from synth.solve.budget import SolveBudget, budget_or_new
from synth.solve.bwopt.bandwidth_term import bandwidth_term, resource_term
from synth.solve.bwopt.trees import bfs_edges
from synth.solve.cluster.leaf_relay import best_relay, leaf_partners, relay_plan
from synth.solve.cluster.local_trees import LocalForest, local_forest
from synth.solve.cluster.split import best_split
from topo_probe.errors import UnsupportedCollective
from topo_probe.number_rules import is_int

HIERARCHICAL = ("allgather", "reducescatter", "allreduce")


def host_fabric(fabric: Fabric) -> Fabric:
    """The fabric of one host of a cluster fabric, in the cluster's round unit (local names)."""
    if fabric.shape is None:
        raise UnsupportedCollective(f"fabric {fabric.topology_name!r} is not a cluster of identical hosts")
    return build_fabric(fabric.shape.host, unit_gbps=fabric.unit_gbps, structured=False)


def tree_levels(parent: tuple[int, ...]) -> list[list[tuple[int, int]]]:
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


def carriers(g: int, C: int, e: int) -> dict[tuple[int, int], tuple[int, ...]]:
    """``(local source b, piece j) -> local GPUs besides b that carry piece j of b's blocks``:
    the ``t``-th of ``e`` extra carriers of ``b`` is GPU ``b + 1 + t`` (mod ``g``), carrying
    piece ``t mod C``, so every GPU carries ``e`` pieces.

    >>> carriers(4, 2, 3)[(0, 0)], carriers(4, 2, 3)[(0, 1)], carriers(4, 2, 3)[(3, 0)]
    ((1, 3), (2,), (0, 2))
    """
    out: dict[tuple[int, int], list[int]] = {(b, j): [] for b in range(g) for j in range(C)}
    for b in range(g):
        for t in range(e):
            out[(b, t % C)].append((b + 1 + t) % g)
    return {k: tuple(v) for k, v in out.items()}


def _host_phase(forest: LocalForest, g: int, H: int, C: int, carried: dict | None,
                own: bool | None) -> list[list[tuple[int, int, int]]]:
    """Broadcast-ordered ``(chunk, src, dst)`` per tree level, every host at once: a chunk of
    block ``(layer, b)`` goes down its tree in every host (``own``: only in host ``layer``;
    ``own is False``: only in the others, skipping the edges into its carriers, which have it
    from the network)."""
    steps: list[list[tuple[int, int, int]]] = [[] for _ in range(forest.depth)]
    for b in range(g):
        for k, tree in enumerate(_assignments(forest, b)):
            layer, j = divmod(k, C)                   # local chunk k = block of rank (layer, b), piece j
            chunk = (layer * g + b) * C + j
            skip = set(carried[(b, j)]) if carried and own is False else set()
            for lvl, edges in enumerate(tree_levels(tree)):
                for h in range(H):
                    if own is not None and (h == layer) != own:
                        continue
                    o = h * g
                    steps[lvl].extend((chunk, o + u, o + v) for u, v in edges if v not in skip)
    return steps


def _rails(g: int, H: int, C: int, carried: dict | None, leaves: list[list[int]] | None = None,
           direct: dict[tuple[int, int], int] | None = None) -> list[list[tuple[int, int, int]]]:
    """Steps along the rails, broadcast-ordered ``(chunk, src, dst)``: every rank sends its own
    chunks, and the pieces of local blocks it carries, to its peers on every other host.

    Without ``leaves``: one step, straight to every other host.  With ``leaves`` (the hosts of each
    leaf switch, :func:`synth.solve.cluster.leaf_relay.leaf_partners`): two steps, so that a chunk
    crosses the spine ``k`` times per other leaf instead of once per host there.  First it goes to
    the other hosts of its own leaf and to ``k`` hosts of every other leaf, then those relay it to
    the rest of their leaf.  ``k = direct[(size of the source's leaf, size of the other leaf)]``
    (default 1; a mean over the chunks where it is a fraction).  Who gets a chunk first and who
    relays it to whom is :func:`synth.solve.cluster.leaf_relay.relay_plan`'s: the hosts with the
    fewest sends, so a leaf's NICs share the relaying.  Every NIC still receives each chunk of its
    rail once per other host.  With leaves of one size and ``k = 1``, a leaf's uplink carries
    ``H - L`` host blocks out per rank of the leaf instead of ``L (H - L)``.
    """
    sends: dict[int, list[int]] = {}
    for r in range(g * H):
        h, b = divmod(r, g)
        mine = [(r * C + j) for j in range(C)]
        if carried:
            mine += [(h * g + s) * C + j for (s, j), vs in carried.items() if b in vs]
        sends[r] = mine
    if leaves is None:
        out = []
        for r, mine in sends.items():
            h, b = divmod(r, g)
            for h2 in range(H):
                if h2 != h:
                    out.extend((chunk, r, h2 * g + b) for chunk in mine)
        return [out]
    plan = relay_plan(H, len(sends[0]), leaves, direct)
    first: list[tuple[int, int, int]] = []
    relay: list[tuple[int, int, int]] = []
    for r, mine in sends.items():
        h, b = divmod(r, g)
        for n, chunk in enumerate(mine):
            firsts, relays = plan[(h, n)]
            first.extend((chunk, r, d * g + b) for d in firsts)
            relay.extend((chunk, u * g + b, v * g + b) for u, v in relays)
    return [first, relay]


def _as_transfers(phases: list[list[tuple[int, int, int]]], reduce: bool) -> list[list[Transfer]]:
    """Copies in broadcast order, or the time-reversed reduces."""
    if not reduce:
        return [[Transfer(c, u, v, "copy") for c, u, v in ts] for ts in phases]
    return [[Transfer(c, v, u, "reduce") for c, u, v in ts] for ts in reversed(phases)]


def _broadcast_phases(forest: LocalForest, g: int, H: int, C: int, e: int,
                      leaves: list[list[int]] | None, direct: dict | None = None) -> list[list[tuple[int, int, int]]]:
    """The allgather in broadcast order: rails, then every chunk down its host tree; with
    carriers (``e > 0``) the hosts first share their own blocks, then the rails carry them too,
    then the remote chunks go down their trees past the carriers.  ``leaves``, ``direct``: the
    rails relay through hosts of each leaf (:func:`_rails`)."""
    if e == 0:
        return _rails(g, H, C, None, leaves, direct) + _host_phase(forest, g, H, C, None, None)
    carried = carriers(g, C, e)
    return (_host_phase(forest, g, H, C, carried, True) + _rails(g, H, C, carried, leaves, direct)
            + _host_phase(forest, g, H, C, carried, False))




def _checked(name: str, chunks, carried) -> tuple[int | None, int | None]:
    """``chunks`` and ``carried`` as Python ints (None stays None), after checking them and ``name``."""
    if name not in HIERARCHICAL:
        raise UnsupportedCollective(f"hierarchical: {name} is not supported (supported: {', '.join(HIERARCHICAL)})")
    for what, v, low in (("chunks", chunks, 1), ("carried", carried, 0)):
        if v is not None and (not is_int(v) or v < low):
            raise UnsupportedCollective(f"hierarchical: {what} must be an integer >= {low}, got {v!r}")
    return (None if chunks is None else int(chunks)), (None if carried is None else int(carried))


def hierarchical(fabric: Fabric, collective: str, *, chunks: int | None = None, carried: int | None = None,
                 efficiency=None, time_limit_s: float = 30.0, budget: SolveBudget | None = None) -> Schedule:
    """The hierarchical schedule of ``collective`` on a cluster fabric (see the module docstring).

    Parameters
    ----------
    fabric : Fabric
        A fabric with a cluster shape (:func:`synth.ir.fabric.build_fabric` of identical hosts).
    collective : str
        ``allgather``, ``reducescatter`` or ``allreduce`` (any spelling).
    chunks : int, optional
        Chunks per rank ``C``; the host phase spreads ``hosts x C`` chunks per GPU over trees.
    carried : int, optional
        Pieces of other local GPUs' blocks each GPU carries over the network (default 0 when
        ``chunks`` is given).  Both left out: :func:`synth.solve.cluster.split.best_split`
        chooses, and the plain hierarchy (1 chunk, nothing carried) is kept where the split's
        schedule is no better.
    efficiency : callable, optional
        Link kind -> achieved fraction of nominal bandwidth: choose the split for these
        effective capacities (``meta`` stays nominal, as :func:`synth.solve.bwopt.optimal.bandwidth_optimal`'s).
    time_limit_s : float
        Budget (s) for the host's tree packing and whole-chunk search, on the clock of
        ``budget`` (default: a fresh :class:`~synth.solve.budget.SolveBudget`).

    Returns
    -------
    Schedule
        Verified; ``meta`` as :func:`synth.solve.bwopt.optimal.bandwidth_optimal`'s
        (``method`` ``"hierarchical"``, ``bound_rounds_per_block``, ``achieved_rounds_per_block``,
        ``ratio_to_bound``, allreduce ``ratio_to_phased_bound``) plus ``host_term`` (the host
        phase's rounds per local chunk), ``carried`` and ``solve_s``.

    Raises
    ------
    UnsupportedCollective
        Another collective, ``chunks < 1``, ``carried < 0``, or a fabric without a cluster shape.
    """
    t0 = time.monotonic()
    budget = budget_or_new(budget)
    name = canonical(collective)
    chunks, carried = _checked(name, chunks, carried)
    host = host_fabric(fabric)
    leaves = leaf_partners(fabric.shape.groups)
    variants: list[tuple[int, list | None, dict | None]] = [(1, None, None)]
    if leaves is not None:
        C0, direct = best_relay(fabric, leaves, efficiency)
        variants.append((C0, leaves, direct))
    candidates: list[Schedule] = []
    for C0, relay, direct in variants:
        if chunks is not None or carried is not None:
            candidates.append(_build(fabric, host, name, chunks or 1, carried or 0, time_limit_s, budget, relay,
                                     direct))
            continue
        plain = _build(fabric, host, name, C0, 0, time_limit_s, budget, relay, direct)
        candidates.append(plain)
        C, e = best_split(*_terms(plain, fabric, efficiency), fabric.shape.hosts, fabric.shape.gpus_per_host)
        if e:
            candidates.append(_build(fabric, host, name, C, e, time_limit_s, budget, relay, direct))
    sched = candidates[0]
    best = bandwidth_term(sched, fabric, efficiency) if len(candidates) > 1 else None
    for other in candidates[1:]:
        term = bandwidth_term(other, fabric, efficiency)
        if term < best:
            sched, best = other, term
    return sched.with_(meta={**sched.meta, "solve_s": round(time.monotonic() - t0, 3)})


def _build(fabric: Fabric, host: Fabric, name: str, C: int, e: int, time_limit_s: float, budget: SolveBudget,
           leaves: list[list[int]] | None = None, direct: dict | None = None) -> Schedule:
    """The schedule with ``C`` chunks per rank and ``e`` carried pieces per GPU (rails relayed
    through one host per leaf with ``leaves``), verified, with meta."""
    g, H = fabric.shape.gpus_per_host, fabric.shape.hosts
    if e > g - 1:
        raise UnsupportedCollective(f"hierarchical: at most {g - 1} carried pieces per GPU (distinct carriers "
                                    f"per block), got {e}")
    share = time_limit_s / (2 if name == "allreduce" else 1)
    phases: list[list[Transfer]] = []
    forests = []
    if name in ("reducescatter", "allreduce"):
        rs = local_forest(host, True, H * C, time_limit_s=share, budget=budget)
        phases += _as_transfers(_broadcast_phases(rs, g, H, C, e, leaves, direct), True)
        forests.append(rs)
    if name in ("allgather", "allreduce"):
        ag = local_forest(host, False, H * C, time_limit_s=share, budget=budget)
        phases += _as_transfers(_broadcast_phases(ag, g, H, C, e, leaves, direct), False)
        forests.append(ag)
    steps, loads = sized_steps(fabric, phases)
    sched = Schedule(name, g * H, C, steps, None, False, "hierarchical", fabric.topology_name,
                     fabric.fingerprint)
    check(sched, fabric, loads=loads)
    extra = {"leaf_relay": True} if leaves is not None else {}
    if direct:
        extra["leaf_direct"] = {f"{a}->{b}": str(k) for (a, b), k in sorted(direct.items())}
    return sched.with_(meta={**_meta(sched, fabric, name, forests, 0.0), "carried": e, **extra})


def _terms(plain: Schedule, fabric: Fabric, efficiency) -> tuple[Fraction, Fraction]:
    """(network term, host-link term) of the plain hierarchy, rounds per block: the busiest
    resource's load from the transfers between hosts, and from those inside hosts (one phase
    of an allreduce: its two phases load the same resources alike)."""
    g = fabric.shape.gpus_per_host
    steps = [st for st in plain.steps if all(t.op == "copy" for t in st.transfers)] or list(plain.steps)
    inter = [t for st in steps for t in st.transfers if t.src // g != t.dst // g]
    intra = [t for st in steps for t in st.transfers if t.src // g == t.dst // g]
    return resource_term(fabric, inter, efficiency), resource_term(fabric, intra, efficiency)


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


__all__ = ["HIERARCHICAL", "carriers", "hierarchical", "host_fabric", "tree_levels"]
