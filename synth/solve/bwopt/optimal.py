"""Bandwidth-optimal schedules: LP arborescence packing turned into verified step schedules.

Method
------
1. **LP** (:func:`synth.solve.bwopt.trees.pack_trees`): on the fabric's channel graph, find the largest
   rate ``x`` (chunks per round) at which every source broadcasts at once over weighted
   spanning arborescences, each tree edge loading the resources of its channel's route.
   Switches relay but never copy: a chunk that a switch forwards to two GPUs crosses its
   uplink twice, exactly as the routes say.  Column generation (GLOP master, Chu-Liu/Edmonds
   pricing) reaches the LP optimum; its Lagrangian bound certifies it.
2. **Whole chunks** (:func:`synth.solve.bwopt.tree_batch.integer_batch`): a batch of ``c`` chunks per source
   is spread over the trees with integer counts so that one batch needs ``R`` whole rounds,
   ``R / c`` as small as possible (CP-SAT, exact rational loads).  Columns: the LP's trees,
   their images under the fabric's symmetries (:func:`synth.solve.bwopt.tree_symmetry.symmetries`), every
   generated tree, random-price trees, ring chains; when the symmetries map rank 0 to every
   rank, first "orbit bundles" (one tree and its images, one per source, always used
   together), which make symmetric exact batches easy to find.  Batch sizes go up to the
   denominator of the target ``1 / x`` (at most :data:`synth.solve.bwopt.forest.EXACT_MAX_CHUNKS`,
   :func:`synth.solve.bwopt.forest.batch_limit`), so an exact batch is among them.  ``R / c``
   equals the LP's ``1 / x`` whenever the search finds an exact assignment; else the LP's
   weights read as exact fractions (:func:`synth.solve.bwopt.tree_batch.rational_batch`), then
   diving with the LP, are the fallbacks.
3. **Steps** (:func:`synth.solve.bwopt.staging.stage`, pipelining generalised): every chunk gets a
   tree and a delay ``d``; its tree level ``l`` moves in step ``d + l``.  CP-SAT picks trees
   and delays so that the sum over steps of each step's whole rounds is smallest while the
   batch still fits ``R`` rounds in all: balanced steps, so the schedule is fast even without
   further pipelining (a perfectly balanced staging has ``sum z_t = R``; the fewest steps that
   allow one are searched first).  Each step declares
   the fewest whole rounds its loads need (exact rational arithmetic, so the verifier's
   capacity rule holds).

Collectives: allgather (a broadcast tree per source, chunk ``r*C + i`` rooted at ``r``),
reducescatter (the same on the reversed fabric, run backwards with reduces), allreduce
(reducescatter then allgather, same chunk ids, so chunk ``g`` is reduced at rank ``g // C``
between the phases), broadcast (trees from the root) and reduce (reversed).

Determinism
-----------
Every budget (``time_limit_s``) is on the clock of one :class:`synth.solve.budget.SolveBudget`
(the caller's ``budget``, else a fresh one per call), which counts solver work, not
wall time: the same fabric gives the same schedule on every run and machine.  CP-SAT's
wall-clock limit is only a safety net; when it ends a search, ``meta["wall_limit_hit"]`` says so.

Bandwidth term
--------------
See :func:`synth.solve.bwopt.bandwidth_term.bandwidth_term` (also importable from here):
``max_r (sum over steps of load_r) / (cap_r * P)``, the rounds per block the schedule needs
when it is cut into many slices and pipelined (P = pieces per block).  It is computed from
the schedule's transfers, never from the LP.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from fractions import Fraction

import numpy as np

from synth.ir.collectives import canonical
from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule, Step, Transfer
from synth.solve.budget import SolveBudget, budget_or_new
from synth.solve.bwopt.bandwidth_term import bandwidth_term, lockstep_bandwidth_term
from synth.solve.bwopt.forest import Forest
from synth.solve.bwopt.staging import Staged, staging_meta
from synth.solve.bwopt.trees import (
    ChannelModel,
    bfs_edges,
    rounds_for,
)
from synth.solve.cluster.alltoall import cluster_alltoall
from synth.solve.cluster.delivery_bound import certified_bound, cut_bound
from synth.solve.cluster.compose import HIERARCHICAL, hierarchical
from synth.solve.cluster.rooted import ROOTED, hierarchical_rooted
from topo_probe.errors import InvalidArgument, UnsupportedCollective

__all__ = ["SUPPORTED", "TREES_MAX_RANKS", "bandwidth_optimal", "bandwidth_term", "lockstep_bandwidth_term"]

SUPPORTED = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")
#: the LP tree packing holds (ranks x ranks x links) load tables: clusters beyond this use the hierarchy
TREES_MAX_RANKS = 64
#: ``method="auto"`` keeps a hierarchical schedule this close to its certified bound (the larger of
#: the cut bound and :func:`synth.solve.cluster.delivery_bound.delivery_bound`) without trying the
#: tree packing
HIERARCHY_GOOD = 1.005


# ---------------------------------------------------------------------------- forests
def _bound(fabric: Fabric, name: str, root: int | None) -> Fraction | None:
    from synth.solve.bounds_cache import fabric_bounds
    return Fraction(fabric_bounds(fabric, name, root).bandwidth_rounds_per_block)



def _chunk_trees(forest: Forest, chunk) -> list[tuple[int, tuple[int, ...], int]]:
    """``(chunk id, tree, delay)`` of every chunk; ``chunk(s, j)`` names source ``s``'s ``j``-th."""
    out = []
    for s in forest.sources:
        j = 0
        for parent, d, m in forest.staged.counts[s]:
            for _ in range(m):
                out.append((chunk(s, j), parent, d))
                j += 1
    return out


def _phase(forest: Forest, chunk, reduce: bool) -> list[list[Transfer]]:
    """Transfers per step of one phase (a reduce phase is the time-reversed broadcast)."""
    S = forest.staged.steps
    steps: list[list[Transfer]] = [[] for _ in range(S)]
    for g, parent, d in _chunk_trees(forest, chunk):
        depth = {parent.index(-1): 0}
        for u, v in bfs_edges(parent):
            depth[v] = depth[u] + 1
            t = d + depth[v] - 1
            if reduce:
                steps[S - 1 - t].append(Transfer(g, v, u, "reduce"))
            else:
                steps[t].append(Transfer(g, u, v, "copy"))
    return steps


def _steps(fabric: Fabric, model: ChannelModel, phases: list[list[list[Transfer]]]) -> tuple[Step, ...]:
    """Concatenate phases; every step declares the fewest whole rounds its exact loads need."""
    index = {r: k for k, r in enumerate(model.resources)}
    out = []
    for transfers in (st for ph in phases for st in ph):
        if not transfers:
            continue
        load = np.zeros(len(model.resources), dtype=np.int64)
        for (i, j), k in Counter((t.src, t.dst) for t in transfers).items():
            for r, f in fabric.channels[(i, j)]:
                load[index[r]] += k * int(Fraction(f) * model.q)
        out.append(Step(rounds_for(model, load), tuple(transfers)))
    return tuple(out)


# ---------------------------------------------------------------------------- public entry
def bandwidth_optimal(fabric: Fabric, collective: str, *, root: int | None = None, max_chunks: int = 32,
                      time_limit_s: float = 240.0, efficiency=None, method: str = "auto", budget=None) -> Schedule:
    """A verified schedule whose bandwidth term reaches the LP optimum (the cut bound where the
    fabric's routes allow it).

    Parameters
    ----------
    fabric : Fabric
        Channels and capacities (:func:`synth.ir.fabric.build_fabric`).
    collective : str
        ``allgather``, ``reducescatter``, ``allreduce``, ``broadcast`` or ``reduce`` (any spelling).
    root : int, optional
        Root of broadcast / reduce (default 0).
    max_chunks : int
        Largest batch the whole-chunk search tries (chunks per source), raised to the target
        rate's denominator up to :data:`synth.solve.bwopt.forest.EXACT_MAX_CHUNKS` (a mesh of 5
        and 6 links per pair needs 38), else the common denominator of the LP's weights; step
        balancing may double it (allreduce: the lcm of its two phases' batches).
    time_limit_s : float
        Budget (s, on the clock of ``budget``, a :class:`~synth.solve.budget.SolveBudget`, else a
        fresh one) for the LPs and the whole-chunk search; on expiry the best schedule so far is
        returned and ``meta["lp_optimal"]`` says whether the tree LP was proven optimal.
    method : {"auto", "trees", "hierarchical"}
        ``trees``: the LP tree packing below on the whole fabric.  ``hierarchical``: on a
        cluster of identical hosts (``fabric.shape``), :func:`synth.solve.cluster.compose.hierarchical`
        (rails, then each host's trees; allgather, reducescatter, allreduce) or
        :func:`synth.solve.cluster.rooted.hierarchical_rooted` (broadcast, reduce).  ``auto``:
        the hierarchical schedule on clusters, kept when it is within :data:`HIERARCHY_GOOD` of
        the cut bound (allreduce: the phased bound) or of the certified bound
        (:func:`synth.solve.cluster.delivery_bound.certified_bound`), or the cluster has more
        than :data:`TREES_MAX_RANKS` ranks, else the better of it and the tree packing; the
        tree packing elsewhere.  On a cluster ``auto`` also takes ``alltoall`` (nominal
        capacities): the multicommodity-flow LP of
        :func:`synth.solve.cluster.alltoall.cluster_alltoall`.
    efficiency : callable or CostParams, optional
        Link kind -> achieved fraction of nominal bandwidth (e.g. a
        :class:`synth.model.cost.CostParams` or its ``efficiency``): optimise for these effective capacities
        instead of the nominal ones.  Steps still declare nominal rounds and the ``meta``
        terms stay nominal, so ``ratio_to_bound`` may then exceed 1.

    Returns
    -------
    Schedule
        Passed :func:`synth.ir.verifier.check`.  ``meta``: ``method`` ("lp-trees"), ``lp_rate``
        (chunks per round per source; allreduce: of its allgather phase),
        ``bound_rounds_per_block``, ``achieved_rounds_per_block`` (:func:`bandwidth_term`),
        ``ratio_to_bound``, ``solve_s``, exact values as strings, ``lockstep_rounds_per_block``
        (:func:`lockstep_bandwidth_term`), ``batch_chunks``, ``trees``, ``max_depth``;
        ``wall_limit_hit`` (present only then) when a wall-clock safety limit, not the
        deterministic budget (:mod:`synth.solve.budget`), ended a search: a re-run may differ.

    Raises
    ------
    UnsupportedCollective
        Another collective, a bad root or bad sizes.
    SynthesisInfeasible
        A source cannot reach every rank over the fabric's channels.
    """
    t0, budget = time.monotonic(), budget_or_new(budget)
    window, w0 = budget.window(time_limit_s), budget.wall_stops
    name, n = canonical(collective), fabric.num_ranks
    got = _by_method(fabric, name, method, efficiency, max_chunks, time_limit_s, root, budget)
    if got is not None:
        return got
    root = _checked_root(name, n, root, max_chunks)
    rooted = name in ("broadcast", "reduce")
    sources = [root] if rooted else list(range(n))
    if n == 1:                                  # nothing to move
        return Schedule(name, 1, 1, (), root if rooted else None, False, "lp-trees", fabric.topology_name,
                        fabric.fingerprint, {"method": "lp-trees", "achieved_rounds_per_block": 0.0,
                                             "achieved_exact": "0", "ratio_to_bound": None})
    efficiency = getattr(efficiency, "efficiency", efficiency)      # a CostParams works too
    fw, rv = _solved_forests(fabric, name, root, sources, efficiency, max_chunks, window)
    forests = [f for f in (rv, fw) if f]
    sched = _tree_schedule(fabric, name, root if rooted else None, _common_batch(forests), rv, fw)
    from synth.ir.verifier import check
    check(sched, fabric)
    meta = _meta(sched, fabric, name, root, forests, fw, time.monotonic() - t0)
    hit = {"wall_limit_hit": True} if budget.wall_stops > w0 else {}   # a safety net fired: a re-run may differ
    return sched.with_(meta={**meta, **hit})


def _tree_schedule(fabric: Fabric, name: str, root: int | None, c: int, rv: Forest | None,
                   fw: Forest | None) -> Schedule:
    """The reduce phase's trees, then the broadcast phase's, as steps of ``c`` chunks per source."""
    def chunk(s: int, j: int) -> int:
        return (0 if root is not None else s * c) + j

    phases = ([_phase(rv, chunk, True)] if rv else []) + ([_phase(fw, chunk, False)] if fw else [])
    return Schedule(name, fabric.num_ranks, c, _steps(fabric, ChannelModel(fabric), phases), root, False,
                    "lp-trees", fabric.topology_name, fabric.fingerprint)


def _by_method(fabric: Fabric, name: str, method: str, efficiency, max_chunks: int,
               time_limit_s: float, root: int | None, budget: SolveBudget) -> Schedule | None:
    """The cluster schedule ``method`` asks for (None: pack trees); refuses an unknown method and
    what neither method covers."""
    n = fabric.num_ranks
    if method not in ("auto", "trees", "hierarchical"):
        raise InvalidArgument(f"bandwidth_optimal: method must be auto, trees or hierarchical, got {method!r}")
    if method != "trees" and fabric.shape is not None and fabric.shape.hosts > 1:
        got = _on_cluster(fabric, name, method, max_chunks, time_limit_s, root, efficiency, budget)
        if got is not None:
            return got
    if method == "hierarchical" or (fabric.shape is not None and n > TREES_MAX_RANKS):
        raise UnsupportedCollective(f"bandwidth_optimal: {name} on {n} ranks: the tree packing stops at "
                                    f"{TREES_MAX_RANKS} ranks and the hierarchical method covers "
                                    f"{', '.join(HIERARCHICAL + ROOTED)}")
    return None


def _checked_root(name: str, n: int, root: int | None, max_chunks: int) -> int | None:
    """The root of a rooted collective (default 0), None otherwise; refuses an unsupported
    collective, a bad root or ``max_chunks < 1``."""
    if name not in SUPPORTED:
        raise UnsupportedCollective(f"bandwidth_optimal: {name} is not supported "
                                    f"(supported: {', '.join(SUPPORTED)})")
    if max_chunks < 1:
        raise InvalidArgument(f"bandwidth_optimal: max_chunks must be >= 1, got {max_chunks}")
    if name in ("broadcast", "reduce"):
        root = 0 if root is None else root
        if not 0 <= root < n:
            raise InvalidArgument(f"bandwidth_optimal: root must be a rank in 0..{n - 1}, got {root}")
    elif root is not None:
        raise InvalidArgument(f"bandwidth_optimal: {name} takes no root (got root={root})")
    return root


def _solved_forests(fabric: Fabric, name: str, root: int | None, sources: list[int], efficiency,
                    max_chunks: int, window) -> tuple[Forest | None, Forest | None]:
    """(forward forest, reverse forest) of ``name``'s phases (None where it has no such phase),
    each solved; the reverse trees first try mirroring the forward ones (``window``: the call's
    :class:`synth.solve.budget.Window` of ``time_limit_s`` clock seconds)."""
    rooted = name in ("broadcast", "reduce")
    time_limit_s, budget = window.limit_s, window.budget
    fw = Forest(fabric, False, sources, efficiency, budget) if name in ("allgather", "broadcast", "allreduce") else None
    rv = Forest(fabric, True, sources, efficiency, budget) if name in ("reducescatter", "reduce", "allreduce") else None
    bound = (lambda what: None) if efficiency else (lambda what: _bound(fabric, what, root))  # noqa: E731
    mirror = fw or Forest(fabric, False, sources, efficiency, budget)     # reduce trees: try mirrored ones first
    mirror.solve(bound("allgather" if not rooted else "broadcast"), max_chunks, time_limit_s / (2 if rv else 1))
    if rv and not rv.reuse(mirror):
        rv.solve(bound("reducescatter" if not rooted else "reduce"), max_chunks,
                 max(5.0, window.left_s()))
    return fw, rv


def _common_batch(forests: list[Forest]) -> int:
    """Rescale every forest's staging to the lcm of their batches (chunks per source); return it."""
    c = math.lcm(*(f.staged.chunks for f in forests))
    for f in forests:
        k = c // f.staged.chunks
        f.staged = Staged(c, f.staged.rounds * k, [z * k for z in f.staged.z],        # k copies: the gap
                          {s: [(p, d, m * k) for p, d, m in ts] for s, ts in f.staged.counts.items()},
                          f.staged.how, f.staged.lower * k)                          # sum z / lower stays
    return c


def _on_cluster(fabric: Fabric, name: str, method: str, max_chunks: int, time_limit_s: float, root: int | None,
                efficiency, budget: SolveBudget) -> Schedule | None:
    """The structured methods of :func:`bandwidth_optimal` on a cluster of identical hosts (None:
    the collective has none): the AllToAll LP, or the hierarchy, compared with the tree packing
    on clusters of at most :data:`TREES_MAX_RANKS` ranks where the hierarchy is not within
    :data:`HIERARCHY_GOOD` of its certified bound (at the effective capacities of
    ``efficiency``, a ``CostParams``, where given)."""
    window = budget.window(time_limit_s)
    if name == "alltoall":
        return cluster_alltoall(fabric, time_limit_s=time_limit_s, budget=budget) if efficiency is None else None
    if name not in HIERARCHICAL + ROOTED:
        return None
    params = _as_params(efficiency)
    eff = params.efficiency if params is not None else None
    share = min(60.0, time_limit_s / 2)
    if name in ROOTED:
        root = _checked_root(name, fabric.num_ranks, root, max_chunks)
        try:
            hier = hierarchical_rooted(fabric, name, root, efficiency=eff, time_limit_s=share, budget=budget)
        except UnsupportedCollective:            # hosts not joined pairwise: the tree packing, if any
            return None
    else:
        hier = hierarchical(fabric, name, efficiency=eff, time_limit_s=share, budget=budget)
    hier = hier.with_(meta={**hier.meta, "optimized_for": "effective" if eff else "nominal"})
    if method == "hierarchical" or fabric.num_ranks > TREES_MAX_RANKS:
        return hier
    achieved = float(bandwidth_term(hier, fabric, eff))
    if achieved <= HIERARCHY_GOOD * float(cut_bound(fabric, name, root, params)):
        return hier
    certified = certified_bound(fabric, name, root, params, budget)
    hier = hier.with_(meta={**hier.meta, "certified_bound": _lp_float(certified),     # GLOP: see LP_DIGITS
                            "ratio_to_certified_bound": _lp_float(achieved / certified) if certified else None})
    if achieved <= HIERARCHY_GOOD * certified:
        return hier
    trees = bandwidth_optimal(fabric, name, root=root, max_chunks=max_chunks, method="trees", efficiency=efficiency,
                              time_limit_s=max(5.0, window.left_s()), budget=budget)
    return min((hier, trees), key=lambda s: bandwidth_term(s, fabric, eff))


def _as_params(efficiency):
    """``efficiency`` as an object with an ``efficiency(kind)`` method (None stays None)."""
    if efficiency is None or hasattr(efficiency, "efficiency"):
        return efficiency

    class _Factors:
        def efficiency(self, kind: str) -> float:
            return efficiency(kind)
    return _Factors()


def _phased(fabric: Fabric, name: str, achieved: Fraction) -> dict:
    """AllReduce only: the (RS + AG) / n bound of phase-separated schedules and our ratio to it."""
    if name != "allreduce":
        return {}
    from synth.model.bounds import phased_allreduce_bound
    phased = phased_allreduce_bound(fabric)
    return {"phased_bound_exact": str(phased),
            "ratio_to_phased_bound": float(achieved / phased) if phased else None}


#: significant digits kept of the LP's own floats in a schedule's metadata: their last bits depend
#: on which BLAS kernels the LP solver picked on this CPU, and a saved result must not
LP_DIGITS = 12


def _lp_float(x: float) -> float:
    """``x`` rounded to :data:`LP_DIGITS` significant digits.

    >>> _lp_float(0.8571428633142861), _lp_float(0.857142863314286)
    (0.857142863314, 0.857142863314)
    """
    return float(f"{x:.{LP_DIGITS}g}")


def _meta(sched: Schedule, fabric: Fabric, name: str, root, forests, fw, solve_s: float) -> dict:
    achieved = bandwidth_term(sched, fabric)
    bound = _bound(fabric, name, root)
    lead = fw or forests[0]
    return {
        "method": "lp-trees",
        "lp_rate": _lp_float(lead.packing.rate),
        "lp_upper": _lp_float(lead.packing.upper),
        "lp_optimal": all(f.packing.optimal for f in forests),
        "lp_rounds_per_block": _lp_float(sum(1.0 / f.packing.rate for f in forests)
                                         / (sched.ranks if name == "allreduce" else 1)),
        "bound_rounds_per_block": float(bound) if bound is not None else None,
        "bound_exact": str(bound) if bound is not None else None,
        "achieved_rounds_per_block": float(achieved),
        "achieved_exact": str(achieved),
        "ratio_to_bound": float(achieved / bound) if bound else None,
        **_phased(fabric, name, achieved),
        "lockstep_rounds_per_block": float(lockstep_bandwidth_term(sched, fabric)),
        "batch_chunks": forests[0].batch.chunks,
        "trees": sum(len(ts) for f in forests for ts in f.staged.counts.values()),
        "max_depth": max(f.depth for f in forests),
        "cg_iterations": sum(f.packing.iterations for f in forests),
        **staging_meta([f.staged for f in forests]),
        "optimized_for": "effective" if forests[0].model.efficiency else "nominal",
        "solve_s": round(solve_s, 3),
    }
