"""Bandwidth-optimal schedules: LP arborescence packing turned into verified step schedules.

Method
------
1. **LP** (:func:`synth.trees.pack_trees`): on the fabric's channel graph, find the largest
   rate ``x`` (chunks per round) at which every source broadcasts at once over weighted
   spanning arborescences, each tree edge loading the resources of its channel's route.
   Switches relay but never copy: a chunk that a switch forwards to two GPUs crosses its
   uplink twice, exactly as the routes say.  Column generation (GLOP master, Chu-Liu/Edmonds
   pricing) reaches the LP optimum; its Lagrangian bound certifies it.
2. **Whole chunks** (:func:`synth.tree_batch.integer_batch`): a batch of ``c`` chunks per source
   is spread over the trees with integer counts so that one batch needs ``R`` whole rounds,
   ``R / c`` as small as possible (CP-SAT, exact rational loads).  Columns: the LP's trees,
   their images under the fabric's symmetries (:func:`synth.tree_symmetry.symmetries`), every
   generated tree, random-price trees, ring chains; when the symmetries map rank 0 to every
   rank, first "orbit bundles" (one tree and its images, one per source, always used
   together), which make symmetric exact batches easy to find.  ``R / c`` equals the LP's
   ``1 / x`` whenever the search finds an exact assignment; diving with the LP is the
   fallback.
3. **Steps** (:func:`synth.bw_staging.stage`, pipelining generalised): every chunk gets a
   tree and a delay ``d``; its tree level ``l`` moves in step ``d + l``.  CP-SAT picks trees
   and delays so that the sum over steps of each step's whole rounds is smallest while the
   batch still fits ``R`` rounds in all: balanced steps, so the schedule is fast even without
   further pipelining (a perfectly balanced staging has ``sum z_t = R``).  Each step declares
   the fewest whole rounds its loads need (exact rational arithmetic, so the verifier's
   capacity rule holds).

Collectives: allgather (a broadcast tree per source, chunk ``r*C + i`` rooted at ``r``),
reducescatter (the same on the reversed fabric, run backwards with reduces), allreduce
(reducescatter then allgather, same chunk ids, so chunk ``g`` is reduced at rank ``g // C``
between the phases), broadcast (trees from the root) and reduce (reversed).

Bandwidth term
--------------
See :func:`synth.bandwidth_term.bandwidth_term` (also importable from here):
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

from synth.bandwidth_term import bandwidth_term, lockstep_bandwidth_term
from synth.bw_staging import Staged, fits, stage
from synth.collectives import canonical
from synth.fabric import Fabric
from synth.schedule import Schedule, Step, Transfer
from synth.tree_batch import Batch, Bundle, dive_batch, integer_batch
from synth.tree_symmetry import permute_tree, symmetric_pool, symmetries, transversal
from synth.trees import (ChannelModel, Packing, bfs_edges, level_loads, pack_trees, random_trees, rounds_for,
                         tree_depth)
from topo_probe.errors import UnsupportedCollective

__all__ = ["SUPPORTED", "bandwidth_optimal", "bandwidth_term", "lockstep_bandwidth_term"]

SUPPORTED = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")


# ---------------------------------------------------------------------------- forests
def _bound(fabric: Fabric, name: str, root: int | None) -> Fraction | None:
    try:
        from synth.bounds import lower_bounds
    except ImportError:      # pragma: no cover - bounds is a sibling module
        return None
    return Fraction(lower_bounds(fabric, name, root).bandwidth_rounds_per_block)


class _Forest:
    """One collective's trees on one orientation: LP packing, tree pool, whole-chunk batch, steps."""

    def __init__(self, fabric: Fabric, reverse: bool, sources: list[int], efficiency=None) -> None:
        self.model = ChannelModel(fabric, reverse, efficiency)
        self.sources = sources
        self.packing: Packing | None = None
        self.target: Fraction | None = None
        self.batch: Batch | None = None
        self.staged: Staged | None = None
        self.pool: dict[int, list[tuple[int, ...]]] = {}
        self.chains: dict[int, list[tuple[int, ...]]] = {}
        self.gens: list[list[int]] = []
        self.trans: list[list[int]] | None = None
        self.orbit: list[Bundle] = []
        self.solve_s = 0.0

    def solve(self, bound: Fraction | None, max_chunks: int, time_limit_s: float) -> None:
        """LP packing, tree pool, whole chunk counts, then balanced steps."""
        t0 = time.monotonic()
        target_rate = float(1 / bound) if bound else None
        self.packing = pack_trees(self.model, self.sources, time_limit_s=0.5 * time_limit_s,
                                  target_rate=target_rate)
        lp = 1.0 / self.packing.rate
        near = bound is not None and lp <= float(bound) * (1 + 1e-7)
        self.target = bound if near else Fraction(lp).limit_denominator(10**4)
        self.pool = self._pool()
        left = lambda: time_limit_s - (time.monotonic() - t0)  # noqa: E731
        self.batch = self._integer(max_chunks, max(1.0, 0.4 * left()))
        self.staged = stage(self.model, self._stage_bundles(), self.batch, max(1.0, left()), self.chains,
                             self.packing.upper)
        self.solve_s = time.monotonic() - t0

    def _pool(self) -> dict[int, list[tuple[int, ...]]]:
        """Trees for the whole-chunk search: the LP's trees and their images under the fabric's
        symmetries, ring chains (up to 16 ranks), every generated column (up to 4000 in all)
        and random-price trees.  When the symmetries move rank 0 to every source, also
        ``self.orbit``: all these trees moved to source 0 plus random ones, each as a bundle
        of its images, one per source (see :func:`synth.tree_symmetry.transversal`)."""
        self.gens = symmetries(self.model)
        support = {s: list(ts) for s, ts in self.packing.trees.items()}
        pool = {s: ts for s, ts in symmetric_pool(support, self.gens, 64).items() if s in support}
        n, k = self.model.n, len(self.sources)
        self.chains = _ring_chains(self.model, self.sources) if n <= 16 else {}
        extra = random_trees(self.model, self.sources, max(4, 1600 // (n * k) + 4))
        cols = self.packing.columns if sum(map(len, self.packing.columns.values())) <= 4000 else {}
        for s in self.sources:
            more = self.chains.get(s, []) + list(cols.get(s, [])) + extra.get(s, [])
            pool[s] = list(dict.fromkeys(pool.get(s, []) + more))
        self.trans = transversal(self.gens, n) if k == n > 1 else None
        if self.trans:
            inv = [[0] * n for _ in range(n)]
            for s, sig in enumerate(self.trans):
                for i, j in enumerate(sig):
                    inv[s][j] = i
            mapped = [permute_tree(p, inv[s]) for s in self.sources for p in list(support.get(s, [])) + pool[s]]
            base = list(dict.fromkeys(mapped + random_trees(self.model, [0], 300, seed=1)[0]))
            self.orbit = [tuple((s, permute_tree(p, self.trans[s])) for s in self.sources)
                          for p in base[:max(200, 40000 // n)]]
        return pool

    def _integer(self, max_chunks: int, time_limit_s: float) -> Batch:
        """Whole chunk counts: symmetric bundles first (when there are), then per-tree, then diving."""
        t0 = time.monotonic()
        exact_ = lambda b: Fraction(b.rounds, b.chunks) <= self.target  # noqa: E731
        best = None
        if self.orbit:            # shallowest trees first: fewer steps later
            depths = sorted({tree_depth(b[0][1]) for b in self.orbit})
            for cap in [d for d in (3, 5, 8) if d < depths[-1]] + [depths[-1]]:
                some = [b for b in self.orbit if tree_depth(b[0][1]) <= cap]
                if not some or len({s for b in some for s, _ in b}) < len(self.sources):
                    continue
                got = integer_batch(self.model, self.packing, self.target, max_chunks=max_chunks,
                                    time_limit_s=max(1.0, time_limit_s / 8), bundles=some)
                if best is None or Fraction(got.rounds, got.chunks) < Fraction(best.rounds, best.chunks):
                    best = got
                if exact_(best):
                    return best
        left = time_limit_s - (time.monotonic() - t0)
        plain = integer_batch(self.model, self.packing, self.target, max_chunks=max_chunks,
                              time_limit_s=left / 2, pool=self.pool)
        if best is None or Fraction(plain.rounds, plain.chunks) < Fraction(best.rounds, best.chunks):
            best = plain
        sizes = sorted(range(1, max_chunks + 1), key=lambda c: (Fraction(math.ceil(c * self.target), c), c))
        for c in sizes[:4]:
            rounds = math.ceil(c * self.target)
            left = time_limit_s - (time.monotonic() - t0)
            if Fraction(rounds, c) >= Fraction(best.rounds, best.chunks) or left < 1:
                break
            dived = dive_batch(self.model, self.packing, c, rounds, time_limit_s=left / 2)
            if dived is not None:
                return dived
        return best

    def _stage_bundles(self) -> list[Bundle]:
        """Columns for the step search: with symmetric bundles, those whose source-0 tree is in
        the batch and the shallowest others; else the batch's trees, their symmetric images,
        ring chains and then the whole-chunk pool, up to a size budget per source."""
        used = {s: [p for p, _ in ts] for s, ts in self.batch.counts.items()}
        budget = max(8, 6000 // (self.model.n * len(self.sources)))
        if self.orbit:
            mine = [b for b in self.orbit if b[0][1] in used.get(b[0][0], [])]
            if sum(len(ts) for ts in used.values()) == len(mine) * len(self.sources):
                shallow = sorted(self.orbit, key=lambda b: tree_depth(b[0][1]))[:max(24, 2400 // self.model.n)]
                return list(dict.fromkeys(mine + shallow))
        pool = {s: ts for s, ts in symmetric_pool(used, self.gens, 16).items() if s in used}
        out = []
        for s in self.sources:
            first = list(dict.fromkeys(used[s] + pool.get(s, []) + self.chains.get(s, [])))
            out += [((s, p),) for p in list(dict.fromkeys(first + self.pool.get(s, [])))[:max(budget, len(first))]]
        return out

    def reuse(self, other: "_Forest") -> bool:
        """Adopt ``other``'s trees when they fit this orientation step by step in as many rounds
        (on a fabric whose links are the same both ways a broadcast forest, run backwards,
        is as good a reduce forest)."""
        st = other.staged
        total = np.zeros(len(self.model.resources), dtype=np.int64)
        for t, zt in enumerate(st.z):
            load = sum((m * lv[t - d] for ts in st.counts.values() for p, d, m in ts
                        for lv in [level_loads(self.model, p)] if 0 <= t - d < len(lv)),
                       np.zeros(len(self.model.resources), dtype=np.int64))
            if not fits(self.model, load, zt):
                return False
            total += load
        if not fits(self.model, total, st.rounds):
            return False
        self.packing, self.target, self.batch, self.staged = other.packing, other.target, other.batch, st
        return True

    @property
    def depth(self) -> int:
        return max(tree_depth(p) for ts in self.batch.counts.values() for p, _ in ts)


def _ring_chains(model: ChannelModel, sources: list[int]) -> dict[int, list[tuple[int, ...]]]:
    """Hamiltonian chains from each source along the rings of :mod:`synth.baselines` (both
    directions), where every hop is a tree edge of ``model``: rings are the balanced answer
    on fabrics that pack into rings (full DGX-1), so the step search should be able to use them."""
    try:
        from synth.baselines.ringsearch import find_rings
        rings = find_rings(model.fabric, 16).rings
    except Exception:           # noqa: BLE001 - rings are an optional hint
        return {}
    out: dict[int, list[tuple[int, ...]]] = {}
    n = model.n
    for ring in rings:
        for order in (list(ring), list(reversed(ring))):
            if len(order) != n:
                continue
            for s in sources:
                k = order.index(s)
                path = order[k:] + order[:k]
                if all(model.edge[a, b] for a, b in zip(path, path[1:])):
                    parent = [-1] * n
                    for a, b in zip(path, path[1:]):
                        parent[b] = a
                    out.setdefault(s, []).append(tuple(parent))
    return out



def _chunk_trees(forest: _Forest, chunk) -> list[tuple[int, tuple[int, ...], int]]:
    """``(chunk id, tree, delay)`` of every chunk; ``chunk(s, j)`` names source ``s``'s ``j``-th."""
    out = []
    for s in forest.sources:
        j = 0
        for parent, d, m in forest.staged.counts[s]:
            for _ in range(m):
                out.append((chunk(s, j), parent, d))
                j += 1
    return out


def _phase(forest: _Forest, chunk, reduce: bool) -> list[list[Transfer]]:
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
                      time_limit_s: float = 240.0, efficiency=None) -> Schedule:
    """A verified schedule whose bandwidth term reaches the LP optimum (the cut bound where the
    fabric's routes allow it).

    Parameters
    ----------
    fabric : Fabric
        Channels and capacities (:func:`synth.fabric.build_fabric`).
    collective : str
        ``allgather``, ``reducescatter``, ``allreduce``, ``broadcast`` or ``reduce`` (any spelling).
    root : int, optional
        Root of broadcast / reduce (default 0).
    max_chunks : int
        Largest batch the whole-chunk search tries (chunks per source); the step balancing
        may double it, so ``chunks_per_rank <= 2 * max_chunks`` (allreduce: the lcm of its
        two phases' batches).  Larger values allow exact batches for awkward rates.
    time_limit_s : float
        Budget (s) for the LPs and the whole-chunk search; on expiry the best schedule so far
        is returned and ``meta["lp_optimal"]`` says whether the tree LP was proven optimal.
    efficiency : callable or CostParams, optional
        Link kind -> achieved fraction of nominal bandwidth (e.g. a
        :class:`synth.cost.CostParams` or its ``efficiency``): optimise for these effective capacities
        instead of the nominal ones.  Steps still declare nominal rounds and the ``meta``
        terms stay nominal, so ``ratio_to_bound`` may then exceed 1.

    Returns
    -------
    Schedule
        Passed :func:`synth.verifier.check`.  ``meta``: ``method`` ("lp-trees"), ``lp_rate``
        (chunks per round per source; allreduce: of its allgather phase),
        ``bound_rounds_per_block``, ``achieved_rounds_per_block`` (:func:`bandwidth_term`),
        ``ratio_to_bound``, ``solve_s``, exact values as strings, ``lockstep_rounds_per_block``
        (:func:`lockstep_bandwidth_term`), ``batch_chunks``, ``trees``, ``max_depth``.

    Raises
    ------
    UnsupportedCollective
        Another collective, a bad root or bad sizes.
    SynthesisInfeasible
        A source cannot reach every rank over the fabric's channels.
    """
    t0 = time.monotonic()
    name = canonical(collective)
    n = fabric.num_ranks
    if name not in SUPPORTED:
        raise UnsupportedCollective(f"bandwidth_optimal: {name} is not supported "
                                    f"(supported: {', '.join(SUPPORTED)})")
    if max_chunks < 1:
        raise UnsupportedCollective(f"bandwidth_optimal: max_chunks must be >= 1, got {max_chunks}")
    rooted = name in ("broadcast", "reduce")
    if rooted:
        root = 0 if root is None else root
        if not 0 <= root < n:
            raise UnsupportedCollective(f"bandwidth_optimal: root must be a rank in 0..{n - 1}, got {root}")
    elif root is not None:
        raise UnsupportedCollective(f"bandwidth_optimal: {name} takes no root (got root={root})")
    sources = [root] if rooted else list(range(n))
    if n == 1:                                  # nothing to move
        return Schedule(name, 1, 1, (), root if rooted else None, False, "lp-trees", fabric.topology_name,
                        fabric.fingerprint, {"method": "lp-trees", "achieved_rounds_per_block": 0.0,
                                             "achieved_exact": "0", "ratio_to_bound": None})
    efficiency = getattr(efficiency, "efficiency", efficiency)      # a CostParams works too
    fw = _Forest(fabric, False, sources, efficiency) if name in ("allgather", "broadcast", "allreduce") else None
    rv = _Forest(fabric, True, sources, efficiency) if name in ("reducescatter", "reduce", "allreduce") else None
    bound = (lambda what: None) if efficiency else (lambda what: _bound(fabric, what, root))  # noqa: E731
    mirror = fw or _Forest(fabric, False, sources, efficiency)     # reduce trees: try mirrored ones first
    mirror.solve(bound("allgather" if not rooted else "broadcast"), max_chunks, time_limit_s / (2 if rv else 1))
    if rv and not rv.reuse(mirror):
        rv.solve(bound("reducescatter" if not rooted else "reduce"), max_chunks,
                 max(5.0, time_limit_s - (time.monotonic() - t0)))
    forests = [f for f in (rv, fw) if f]
    c = math.lcm(*(f.staged.chunks for f in forests))
    for f in forests:
        k = c // f.staged.chunks
        f.staged = Staged(c, f.staged.rounds * k, [z * k for z in f.staged.z],
                          {s: [(p, d, m * k) for p, d, m in ts] for s, ts in f.staged.counts.items()})

    def chunk(s: int, j: int) -> int:
        return (0 if rooted else s * c) + j

    phases = ([_phase(rv, chunk, True)] if rv else []) + ([_phase(fw, chunk, False)] if fw else [])
    sched = Schedule(name, n, c, _steps(fabric, ChannelModel(fabric), phases), root if rooted else None, False,
                     "lp-trees", fabric.topology_name, fabric.fingerprint)
    from synth.verifier import check
    check(sched, fabric)
    return sched.with_(meta=_meta(sched, fabric, name, root, forests, fw, time.monotonic() - t0))


def _phased(fabric: Fabric, name: str, achieved: Fraction) -> dict:
    """AllReduce only: the (RS + AG) / n bound of phase-separated schedules and our ratio to it."""
    if name != "allreduce":
        return {}
    from synth.bounds import phased_allreduce_bound
    phased = phased_allreduce_bound(fabric)
    return {"phased_bound_exact": str(phased),
            "ratio_to_phased_bound": float(achieved / phased) if phased else None}


def _meta(sched: Schedule, fabric: Fabric, name: str, root, forests, fw, solve_s: float) -> dict:
    achieved = bandwidth_term(sched, fabric)
    bound = _bound(fabric, name, root)
    lead = fw or forests[0]
    return {
        "method": "lp-trees",
        "lp_rate": lead.packing.rate,
        "lp_upper": lead.packing.upper,
        "lp_optimal": all(f.packing.optimal for f in forests),
        "lp_rounds_per_block": sum(1.0 / f.packing.rate for f in forests) / (sched.ranks if name == "allreduce"
                                                                               else 1),
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
        "optimized_for": "effective" if forests[0].model.efficiency else "nominal",
        "solve_s": round(solve_s, 3),
    }
