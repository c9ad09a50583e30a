"""Spanning arborescences over rank channels: min-cost search and LP packing.

A broadcast from rank ``s`` at rate ``x`` (chunks per round) is a set of spanning
arborescences rooted at ``s`` over the fabric's channel graph (ranks are nodes, channels
(i, j) are edges) with weights summing to ``x``.  A chunk sent down an arborescence crosses
each of its edges once, so it loads resource ``r`` by ``sum over tree edges of
fraction(edge, r)`` (see :class:`synth.fabric.Fabric`): switches relay but never duplicate
data, which the channel routes already account for.

:func:`pack_trees` finds the largest common rate ``x`` at which every source in ``sources``
can broadcast at once within the resource capacities, by column generation: the master LP
(GLOP) picks tree weights, the pricing problem is a min-cost arborescence (Chu-Liu/Edmonds,
:func:`min_cost_arborescence`) under the LP's resource prices.  By Edmonds' branching
theorem this is the same optimum as the per-destination max-flow LP, without its n^2 flow
commodities, and it yields the trees directly.

Whole chunks: :func:`integer_batch` (CP-SAT over trees or symmetric bundles of trees) and
:func:`dive_batch` (LP diving) turn tree weights into integer chunk counts per batch with
exact rational loads.  Symmetry: :func:`symmetries` finds rank permutations that map the
channel model onto itself, :func:`symmetric_pool` and :func:`transversal` use them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable

import numpy as np
from ortools.linear_solver import pywraplp

from synth.fabric import Fabric, Resource
from topo_probe.errors import SynthesisInfeasible

INF = float("inf")


def exact(value: float) -> Fraction:
    """A float figure (GB/s, fraction) as the nearest fraction with denominator <= 10**6.

    >>> exact(31.5), exact(0.1)
    (Fraction(63, 2), Fraction(1, 10))
    """
    return Fraction(value).limit_denominator(10**6)


def min_cost_arborescence(cost: np.ndarray, root: int) -> list[int]:
    """Minimum-cost spanning arborescence rooted at ``root`` (Chu-Liu/Edmonds).

    Parameters
    ----------
    cost : numpy.ndarray
        (n, n) edge costs, ``cost[i, j]`` for the edge i -> j; ``inf`` where there is no edge.
    root : int
        The root node.

    Returns
    -------
    list of int
        ``parent[v]`` for every node (``-1`` for the root).

    Raises
    ------
    SynthesisInfeasible
        If some node cannot be reached from ``root``.

    Examples
    --------
    >>> c = np.array([[INF, 1, 5], [INF, INF, 1], [INF, 9, INF]])
    >>> min_cost_arborescence(c, 0)
    [-1, 0, 1]
    """
    w = np.array(cost, dtype=float)
    n = w.shape[0]
    np.fill_diagonal(w, INF)
    w[:, root] = INF
    parent = _edmonds(w, root)
    if parent is None:
        raise SynthesisInfeasible(f"trees: some rank cannot be reached from rank {root} over the channels")
    parent[root] = -1
    return [int(p) for p in parent[:n]]


def _edmonds(w: np.ndarray, root: int) -> np.ndarray | None:
    """Recursive Chu-Liu/Edmonds on a dense matrix (diagonal and root column are inf)."""
    n = w.shape[0]
    best = np.argmin(w, axis=0)
    bestc = w[best, np.arange(n)]
    bestc[root] = 0.0
    best[root] = root
    if np.isinf(bestc).any():
        return None
    cycle = _find_cycle(best, root)
    if cycle is None:
        return best
    inc = np.zeros(n, dtype=bool)
    inc[cycle] = True
    rest = np.flatnonzero(~inc)
    m = len(rest)                     # contracted node gets index m
    sub = np.full((m + 1, m + 1), INF)
    sub[:m, :m] = w[np.ix_(rest, rest)]
    into = w[np.ix_(rest, cycle)] - bestc[cycle][None, :]        # rest -> cycle, reduced
    enter = np.argmin(into, axis=1)
    sub[:m, m] = into[np.arange(m), enter]
    outof = w[np.ix_(cycle, rest)]                                  # cycle -> rest
    leave = np.argmin(outof, axis=0)
    sub[m, :m] = outof[leave, np.arange(m)]
    new_root = int(np.searchsorted(rest, root))
    p = _edmonds(sub, new_root)
    if p is None:
        return None
    parent = best.copy()
    for k in range(m):
        v = rest[k]
        parent[v] = cycle[leave[k]] if p[k] == m else rest[p[k]]
    u = int(p[m])                     # the edge entering the cycle
    parent[cycle[enter[u]]] = rest[u]
    return parent


def _find_cycle(parent: np.ndarray, root: int) -> np.ndarray | None:
    n = len(parent)
    color = np.zeros(n, dtype=np.int64)   # 0 new, >0 id of the walk that visited it
    for start in range(n):
        if color[start]:
            continue
        v, walk = start, start + 1
        while not color[v] and v != root:
            color[v] = walk
            v = int(parent[v])
        if v != root and color[v] == walk:
            cyc = [v]
            u = int(parent[v])
            while u != v:
                cyc.append(u)
                u = int(parent[u])
            return np.array(sorted(cyc))
        color[start] = color[start] or walk
    return None


@dataclass
class ChannelModel:
    """The fabric as the LP sees it: tree edges, their resource loads and capacities.

    ``reverse=True`` describes reduce trees: the tree edge u -> v (data flows from the root
    towards v in the *reversed* sense) is carried by channel (v, u), so a broadcast tree of
    this model, run backwards with reduces, is a reduce tree of the fabric.  ``efficiency``
    (link kind -> factor in (0, 1], e.g. :meth:`synth.cost.CostParams.efficiency`) scales
    capacities to what a runtime achieves; None keeps the nominal figures.
    """

    fabric: Fabric
    reverse: bool = False
    efficiency: Callable[[str], float] | None = None
    resources: list[Resource] = field(init=False)
    cap: np.ndarray = field(init=False)           # chunks per round, per resource
    load: np.ndarray = field(init=False)          # (n, n, R): load of tree edge u -> v
    edge: np.ndarray = field(init=False)          # (n, n) bool: tree edge u -> v exists
    #: exact figures: ``load_q / q`` is ``load``; ``cap_exact[k]`` is resource k's chunks per round
    q: int = field(init=False)
    load_q: np.ndarray = field(init=False)
    cap_exact: list[Fraction] = field(init=False)

    def __post_init__(self) -> None:
        fab = self.fabric
        n = fab.num_ranks
        self.resources = sorted(fab.resources)
        index = {r: k for k, r in enumerate(self.resources)}
        eff = self.efficiency or (lambda kind: 1.0)
        self.cap_exact = [exact(fab.resources[r].bandwidth_gbps) * exact(eff(fab.resources[r].kind))
                          / exact(fab.unit_gbps) for r in self.resources]
        self.cap = np.array([float(c) for c in self.cap_exact])
        self.q = math.lcm(*(Fraction(f).denominator for route in fab.channels.values() for _, f in route))
        self.load_q = np.zeros((n, n, len(self.resources)), dtype=np.int64)
        self.edge = np.zeros((n, n), dtype=bool)
        for (i, j), route in fab.channels.items():
            u, v = (j, i) if self.reverse else (i, j)
            self.edge[u, v] = True
            for r, f in route:
                self.load_q[u, v, index[r]] += int(Fraction(f) * self.q)
        self.load = self.load_q / self.q

    @property
    def n(self) -> int:
        return self.fabric.num_ranks

    def tree_load(self, parent: tuple[int, ...], exact_q: bool = False) -> np.ndarray:
        """Resource loads (chunks) of sending one chunk down the tree ``parent``
        (times ``q``, as exact integers, when ``exact_q``)."""
        kids = [v for v, p in enumerate(parent) if p >= 0]
        return (self.load_q if exact_q else self.load)[[parent[v] for v in kids], kids].sum(axis=0)

    def edge_costs(self, price: np.ndarray) -> np.ndarray:
        """(n, n) cost of each tree edge under resource prices ``price`` (inf: no edge)."""
        c = self.load @ price
        return np.where(self.edge, c, INF)


@dataclass
class Packing:
    """Result of :func:`pack_trees`.

    ``trees[s]`` maps each arborescence rooted at ``s`` (a parent tuple, ``-1`` at the
    root) to its weight (chunks per round); every source's weights sum to ``rate``.
    ``upper`` is a proven upper bound on the optimal rate (Lagrangian bound of the
    column generation), ``optimal`` says whether ``rate`` reached it.
    """

    rate: float
    upper: float
    trees: dict[int, dict[tuple[int, ...], float]]
    iterations: int
    solve_s: float
    optimal: bool
    #: every tree generated for each source (weight 0 or not)
    columns: dict[int, list[tuple[int, ...]]] = field(default_factory=dict)


def hop_matrix(model: ChannelModel) -> np.ndarray:
    """``hops[s, u]``: fewest tree edges from ``s`` to ``u`` (breadth-first; n if unreachable)."""
    n = model.n
    hops = np.full((n, n), n, dtype=np.int64)
    for s in range(n):
        frontier, hops[s, s], d = [s], 0, 0
        while frontier:
            d += 1
            nxt = [v for u in frontier for v in np.flatnonzero(model.edge[u]) if hops[s, v] > d]
            nxt = sorted(set(int(v) for v in nxt))
            hops[s, nxt] = d
            frontier = nxt
    return hops


def _tree_value(costs: np.ndarray, parent: tuple[int, ...]) -> float:
    kids = [v for v, p in enumerate(parent) if p >= 0]
    return float(costs[[parent[v] for v in kids], kids].sum())


def seed_trees(model: ChannelModel, sources: list[int], rounds: int = 3, eps: float = 0.3,
               hops: np.ndarray | None = None) -> dict[int, list[tuple[int, ...]]]:
    """Trees spread over the fabric by multiplicative weights (Garg-Koenemann style).

    In each of ``rounds`` rounds every source in turn takes its min-cost arborescence under
    the current prices (start: 1 / capacity; ties broken towards shallow trees), then the
    price of every resource it loads grows by ``1 + eps * load / capacity`` (normalised by
    the tree's busiest resource).  Good starting columns: balanced and shallow.
    """
    hops = hop_matrix(model) if hops is None else hops
    price = 1.0 / np.maximum(model.cap, 1e-12)
    out: dict[int, list[tuple[int, ...]]] = {s: [] for s in sources}
    for _ in range(rounds):
        for s in sources:
            costs = model.edge_costs(price)
            scale = np.nanmax(np.where(np.isfinite(costs), costs, np.nan))
            parent = tuple(min_cost_arborescence(costs + 1e-6 * scale * (1 + hops[s][:, None]), s))
            if parent not in out[s]:
                out[s].append(parent)
            use = model.tree_load(parent) / np.maximum(model.cap, 1e-12)
            price = price * (1.0 + eps * use / max(use.max(), 1e-12))
    return out


def random_trees(model: ChannelModel, sources: list[int], rounds: int, seed: int = 0,
                 base: np.ndarray | None = None) -> dict[int, list[tuple[int, ...]]]:
    """Diverse cheap trees: min-cost arborescences under random resource prices.

    Each of ``rounds`` rounds draws prices ``(base or 1/capacity) * u**3`` (``u`` uniform,
    seeded) and takes every source's min-cost arborescence.  They widen the choice of the
    whole-chunk and step-balancing searches.
    """
    rng = np.random.default_rng(seed)
    base = 1.0 / np.maximum(model.cap, 1e-12) if base is None else np.maximum(base, 1e-9 * base.max())
    out: dict[int, list[tuple[int, ...]]] = {s: [] for s in sources}
    for _ in range(rounds):
        costs = model.edge_costs(base * rng.random(len(base)) ** 3)
        for s in sources:
            parent = tuple(min_cost_arborescence(costs, s))
            if parent not in out[s]:
                out[s].append(parent)
    return out


def level_loads(model: ChannelModel, parent: tuple[int, ...]) -> list[np.ndarray]:
    """Exact loads (times ``q``) of each level of the tree: level ``l`` holds the edges that
    leave nodes at depth ``l``."""
    depth = {parent.index(-1): 0}
    out: list[np.ndarray] = []
    for u, v in bfs_edges(parent):
        depth[v] = depth[u] + 1
        if len(out) < depth[v]:
            out.append(np.zeros(len(model.resources), dtype=np.int64))
        out[depth[v] - 1] += model.load_q[u, v]
    return out


def bfs_edges(parent: tuple[int, ...]) -> list[tuple[int, int]]:
    """Tree edges (u, v) in breadth-first order from the root.

    >>> bfs_edges((-1, 0, 1, 0))
    [(0, 1), (0, 3), (1, 2)]
    """
    kids: dict[int, list[int]] = {}
    for v, p in enumerate(parent):
        if p >= 0:
            kids.setdefault(p, []).append(v)
    out, frontier = [], [parent.index(-1)]
    while frontier:
        edges = [(u, v) for u in frontier for v in kids.get(u, [])]
        out += edges
        frontier = [v for _, v in edges]
    return out


class _Master:
    """The master LP of :func:`pack_trees` (GLOP): max x, tree weights per source, capacities."""

    def __init__(self, model: ChannelModel, sources: list[int], demand: dict[int, float],
                 cap: np.ndarray) -> None:
        self.model, self.sources, self.demand, self.cap = model, sources, demand, cap
        self.columns: dict[int, dict[tuple[int, ...], object]] = {s: {} for s in sources}
        self._build()

    def _build(self) -> None:
        self.solver = solver = pywraplp.Solver.CreateSolver("GLOP")
        self.x = solver.NumVar(0.0, solver.infinity(), "x")
        self.src_row = {s: solver.Constraint(-solver.infinity(), 0.0, f"src{s}") for s in self.sources}
        for s in self.sources:
            self.src_row[s].SetCoefficient(self.x, float(self.demand[s]))
        self.res_row = [solver.Constraint(-solver.infinity(), float(c), f"res{k}") for k, c in enumerate(self.cap)]
        solver.Maximize(self.x)
        old, self.columns = self.columns, {s: {} for s in self.sources}
        for s, cols in old.items():
            for parent in cols:
                self.add(s, parent)

    def add(self, s: int, parent: tuple[int, ...]) -> None:
        if parent in self.columns[s]:
            return
        var = self.solver.NumVar(0.0, self.solver.infinity(), f"w{s}_{len(self.columns[s])}")
        self.src_row[s].SetCoefficient(var, -1.0)
        load = self.model.tree_load(parent)
        for k in np.flatnonzero(load > 0):
            self.res_row[k].SetCoefficient(var, float(load[k]))
        self.columns[s][parent] = var

    def solve(self) -> None:
        """Solve; GLOP can stall on a degenerate warm start, so retry once from a fresh model."""
        status = self.solver.Solve()
        if status != pywraplp.Solver.OPTIMAL:
            self._build()
            status = self.solver.Solve()
        if status != pywraplp.Solver.OPTIMAL:
            raise SynthesisInfeasible(f"trees: the master LP (GLOP) ended with status {status}, not optimal")


def pack_trees(model: ChannelModel, sources: list[int], *, time_limit_s: float = 60.0,
               target_rate: float | None = None, demand: dict[int, float] | None = None,
               capacity: np.ndarray | None = None,
               initial: dict[int, list[tuple[int, ...]]] | None = None, tol: float = 1e-9) -> Packing:
    """Largest common broadcast rate of ``sources`` over spanning arborescences (column generation).

    Maximises ``x`` subject to: source ``s``'s tree weights sum to at least ``x * demand[s]``
    (default 1) and every resource carries at most ``capacity`` (default: its chunks per
    round).  Starts from ``initial`` trees or :func:`seed_trees`; pricing is a min-cost
    arborescence per source under the LP's resource duals; the loop stops when no tree
    prices out, the Lagrangian upper bound meets the LP value, ``x`` reaches
    ``target_rate`` (a known upper bound such as the cut bound), or ``time_limit_s`` passes
    (then ``optimal`` is False).

    Raises
    ------
    SynthesisInfeasible
        If a source cannot reach every rank over the channels.
    """
    t0 = time.monotonic()
    demand = demand or {s: 1.0 for s in sources}
    sources = [s for s in sources if demand.get(s, 0) > 0]
    cap = model.cap if capacity is None else np.maximum(np.asarray(capacity, dtype=float), 0.0)
    master = _Master(model, sources, demand, cap)
    hops = hop_matrix(model)
    for s, trees in (initial or seed_trees(model, sources, hops=hops)).items():
        for parent in trees:
            if s in master.columns:
                master.add(s, parent)
    upper, it, rate, new = INF, 0, 0.0, []
    while sources:
        it += 1
        master.solve()
        rate = master.x.solution_value()
        price = np.array([max(0.0, row.dual_value()) for row in master.res_row])
        mu = {s: master.src_row[s].dual_value() for s in sources}
        costs = model.edge_costs(price)
        delta = 1e-10 * max(1e-12, float(np.nanmax(np.where(np.isfinite(costs), costs, np.nan))))
        new, total = [], 0.0
        for s in sources:       # ties broken towards shallow trees; delta keeps the bound valid
            parent = tuple(min_cost_arborescence(costs + delta * (1 + hops[s][:, None]), s))
            value = _tree_value(costs, parent)
            total += demand[s] * max(0.0, value - delta * model.n * (model.n + 1))
            if value < mu[s] - tol * max(1.0, abs(mu[s])):
                new.append((s, parent))
        if total > 0:
            upper = min(upper, float(price @ cap) / total)
        done = (not new or rate >= upper * (1 - 1e-9)
                or (target_rate is not None and rate >= target_rate * (1 - 1e-9)))
        if done or time.monotonic() - t0 > time_limit_s:
            break
        for s, parent in new:
            master.add(s, parent)
    trees = {s: {p: v.solution_value() for p, v in cols.items() if v.solution_value() > 1e-12}
             for s, cols in master.columns.items()}
    optimal = bool(not new or rate >= upper * (1 - 1e-9)
                   or (target_rate is not None and rate >= target_rate * (1 - 1e-9)))
    return Packing(rate, max(upper, rate), trees, it, time.monotonic() - t0, optimal,
                   {s: list(cols) for s, cols in master.columns.items()})


def dive_batch(model: ChannelModel, packing: Packing, chunks: int, rounds: int, *,
               time_limit_s: float = 20.0) -> Batch | None:
    """Whole chunk counts for a batch of ``chunks`` per source in ``rounds`` rounds, by diving.

    Repeatedly solves the LP for the chunks still unassigned within the capacity left
    (exact), commits ``floor(w)`` copies of every tree with LP weight ``w >= 1`` (that keeps
    the LP feasible), or else one copy of the heaviest tree, and re-solves; gives up
    (returns None) when the LP can no longer place the rest or time runs out.
    """
    t0 = time.monotonic()
    den = math.lcm(*(c.denominator for c in model.cap_exact))   # exact units: 1 / (q * den) chunk
    left = np.array([int(rounds * c * model.q * den) for c in model.cap_exact], dtype=np.int64)
    need = {s: chunks for s in packing.trees}
    counts: dict[int, dict[tuple[int, ...], int]] = {s: {} for s in need}
    pool = {s: list(packing.columns.get(s, [])) for s in need}
    while any(need.values()):
        if time.monotonic() - t0 > time_limit_s:
            return None
        cap = left / (model.q * den)
        part = pack_trees(model, list(need), demand={s: float(v) for s, v in need.items()},
                          capacity=cap, initial=pool, target_rate=1.0,
                          time_limit_s=max(0.5, time_limit_s - (time.monotonic() - t0)))
        if part.rate < 1 - 1e-7:
            return None
        for s, ts in part.columns.items():
            pool[s] = list(dict.fromkeys(pool[s] + ts))
        picks = [(s, p, int(math.floor(w + 1e-9))) for s, ts in part.trees.items() for p, w in ts.items()
                 if w >= 1 - 1e-9]
        if not picks:
            s, p, _ = max(((s, p, w) for s, ts in part.trees.items() for p, w in ts.items()),
                          key=lambda t: t[2])
            picks = [(s, p, 1)]
        placed = 0
        for s, p, m in picks:
            m = min(m, need[s])
            load = model.tree_load(p, exact_q=True) * den
            if m <= 0 or np.any(m * load > left):
                continue
            left = left - m * load
            need[s] -= m
            counts[s][p] = counts[s].get(p, 0) + m
            placed += m
        if not placed:
            return None
    return Batch(chunks, rounds, {s: list(c.items()) for s, c in counts.items()})


def tree_depth(parent: tuple[int, ...]) -> int:
    """Edges on the longest root-to-leaf path of the arborescence ``parent``.

    >>> tree_depth((-1, 0, 1, 0))
    2
    """
    depth = [0] * len(parent)
    for v in range(len(parent)):
        d, u = 0, v
        while parent[u] >= 0:
            d, u = d + 1, parent[u]
        depth[v] = d
    return max(depth)


@dataclass
class Batch:
    """Integer version of a packing: each source sends ``chunks`` chunks per batch, ``counts[s]``
    says how many go down each tree; one batch fits ``rounds`` rounds of every resource."""

    chunks: int
    rounds: int
    counts: dict[int, list[tuple[tuple[int, ...], int]]]


def rounds_for(model: ChannelModel, load_q: np.ndarray) -> int:
    """Fewest whole rounds (>= 1) in which exact loads ``load_q / q`` fit every capacity."""
    need = 1
    for k in np.flatnonzero(load_q):
        cap = model.cap_exact[k]
        need = max(need, -(-int(load_q[k]) * cap.denominator // (cap.numerator * model.q)))
    return need


Bundle = tuple[tuple[int, tuple[int, ...]], ...]
"""Trees that always carry the same number of chunks: ``((source, tree), ...)``."""


def integer_batch(model: ChannelModel, packing: Packing, target: Fraction, *, max_chunks: int,
                  time_limit_s: float = 20.0, pool: dict[int, list[tuple[int, ...]]] | None = None,
                  bundles: list[Bundle] | None = None) -> Batch:
    """Whole chunk counts per tree with the smallest batch time per chunk, ``rounds / chunks``.

    Batch sizes ``c <= max_chunks`` are tried in order of the best ratio they allow,
    ``ceil(c * target) / c`` (``target``: rounds per chunk of the LP optimum or a lower
    bound).  For each, CP-SAT minimises the integer ``R`` such that each source's counts sum
    to ``c`` and every resource's exact load is at most ``R`` times its capacity, breaking
    ties towards shallow trees.  Columns are the trees of ``pool`` (default: every generated
    column) or ``bundles`` (e.g. one tree's images under a symmetry, one per source); the
    largest-remainder rounding of the LP weights is the hint and the fallback.  Stops when
    no untried ``c`` can beat the best ratio found, or at the time limit.
    """
    from ortools.sat.python import cp_model

    if bundles is None:
        columns = pool if pool is not None else packing.columns
        bundles = [((s, p),) for s in sorted(columns) for p in columns[s]]
    sources = sorted({s for b in bundles for s, _ in b})
    loads = np.array([sum(model.tree_load(p, exact_q=True) for _, p in b) for b in bundles])   # times q
    depth = [max(tree_depth(p) for _, p in b) for b in bundles]
    cover = {s: [k for k, b in enumerate(bundles) if any(t == s for t, _ in b)] for s in sources}
    sizes = sorted(range(1, max_chunks + 1), key=lambda c: (Fraction(math.ceil(c * target), c), c))
    best: Batch | None = None
    t0 = time.monotonic()
    for c in sizes:
        floor = Fraction(math.ceil(c * target), c)
        if best is not None and Fraction(best.rounds, best.chunks) <= floor:
            break
        hint = _apportion(packing, bundles, cover, c)
        if hint is None and best is None:      # bundles: any one covering all sources will do
            hint = [0] * len(bundles)
            for s, ks in cover.items():
                if not any(hint[k] for k in ks):
                    hint[ks[0]] = c
        if hint is not None:
            rounds = rounds_for(model, (np.array(hint)[:, None] * loads).sum(axis=0))
            if best is None or Fraction(rounds, c) < Fraction(best.rounds, best.chunks):
                best = _batch(bundles, hint, c, rounds)
        left = time_limit_s - (time.monotonic() - t0)
        if left <= 0.5 or (best is not None and Fraction(best.rounds, best.chunks) <= floor):
            break
        lo = math.ceil(c * target)
        hi = math.ceil(Fraction(best.rounds, best.chunks) * c) - 1 if best else lo + 4 * c
        if hi < lo:
            continue
        m = cp_model.CpModel()
        R = m.NewIntVar(lo, hi, "R")
        w = [m.NewIntVar(0, c, f"m{k}") for k in range(len(bundles))]
        for ks in {tuple(v) for v in cover.values()}:
            m.Add(sum(w[k] for k in ks) == c)
        for r, cap in enumerate(model.cap_exact):
            ks = np.flatnonzero(loads[:, r])
            if len(ks):
                m.Add(sum(int(loads[k, r]) * cap.denominator * w[k] for k in ks)
                      <= R * (cap.numerator * model.q))
        for k, v in enumerate(hint or []):
            m.AddHint(w[k], v)
        m.Minimize(R * (c * len(bundles) * max(depth) + 1) + sum(d * x for d, x in zip(depth, w)))
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.5, min(left, time_limit_s / 4))
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = 0
        if solver.Solve(m) in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            best = _batch(bundles, [int(solver.Value(x)) for x in w], c, int(solver.Value(R)))
    if best is None:
        raise SynthesisInfeasible("trees: no whole-chunk assignment of the trees fits")
    return best


def _batch(bundles: list[Bundle], counts: list[int], c: int, rounds: int) -> Batch:
    out: dict[int, dict[tuple[int, ...], int]] = {s: {} for b in bundles for s, _ in b}
    for b, m in zip(bundles, counts):
        for s, p in b:
            if m:
                out[s][p] = out[s].get(p, 0) + int(m)
    return Batch(c, rounds, {s: list(d.items()) for s, d in out.items()})


def _apportion(packing: Packing, bundles: list[Bundle], cover: dict[int, list[int]], c: int) -> list[int] | None:
    """Largest-remainder rounding of the LP weights to ``c`` chunks per source (single-tree
    bundles only; None otherwise)."""
    if any(len(b) != 1 for b in bundles):
        return None
    out = [0] * len(bundles)
    for s, ks in cover.items():
        w = np.array([packing.trees.get(s, {}).get(bundles[k][0][1], 0.0) for k in ks])
        share = w / w.sum() * c if w.sum() > 0 else np.eye(len(ks))[0] * c
        base = np.floor(share).astype(int)
        for j in np.argsort(-(share - base), kind="stable")[: c - int(base.sum())]:
            base[j] += 1
        for k, v in zip(ks, base):
            out[k] = int(v)
    return out


# ---------------------------------------------------------------------------- symmetry
def symmetries(model: ChannelModel) -> list[list[int]]:
    """Rank permutations that map the channel model onto itself (a few cheap candidates).

    Candidates: shifting every rank by one host (clusters of identical hosts, ranks numbered
    host by host), and, inside every host at once, a cyclic shift, a reversal and XOR with
    each power of two.  A candidate is kept when some resource bijection with equal
    capacities maps every channel's loads onto its image's (resources are matched by the
    set of (channel, load) pairs they carry).
    """
    fab, n = model.fabric, model.n
    hosts = fab.hosts or [0] * n
    g = hosts.count(hosts[0])
    if n % g or any(hosts[r] != hosts[(r // g) * g] for r in range(n)) or len(set(hosts)) != n // g:
        g = n
    cands = [[(r + g) % n for r in range(n)]] if n > g else []
    local = [lambda i: (i + 1) % g, lambda i: g - 1 - i]
    local += [lambda i, k=1 << b: i ^ k for b in range(g.bit_length()) if (1 << b) < g and g % (2 << b) == 0]
    cands += [[(r // g) * g + f(r % g) for r in range(n)] for f in local]
    inc: list[list[tuple[int, int, int]]] = [[] for _ in model.resources]
    for u, v, r in zip(*np.nonzero(model.load_q)):
        inc[r].append((int(u), int(v), int(model.load_q[u, v, r])))
    keys = {(model.cap_exact[r], frozenset(inc[r])) for r in range(len(inc))}
    out = []
    for sig in cands:
        if sig != list(range(n)) and all(
                (model.cap_exact[r], frozenset((sig[u], sig[v], q) for u, v, q in inc[r])) in keys
                for r in range(len(inc))):
            out.append(sig)
    return out


def symmetric_pool(trees: dict[int, list[tuple[int, ...]]], gens: list[list[int]],
                   per_source: int = 48) -> dict[int, list[tuple[int, ...]]]:
    """``trees`` closed under the permutations ``gens`` (at most ``per_source`` trees a source)."""
    pool = {s: list(ts) for s, ts in trees.items()}
    seen = {(s, t) for s, ts in pool.items() for t in ts}
    queue = sorted(seen)
    while queue:
        s, t = queue.pop(0)
        for sig in gens:
            image = [0] * len(t)
            for v, p in enumerate(t):
                image[sig[v]] = -1 if p < 0 else sig[p]
            key = (sig[s], tuple(image))
            if key not in seen and len(pool.setdefault(sig[s], [])) < per_source:
                seen.add(key)
                pool[sig[s]].append(key[1])
                queue.append(key)
    return pool


def permute_tree(parent: tuple[int, ...], sig: list[int]) -> tuple[int, ...]:
    """The image of arborescence ``parent`` under the rank permutation ``sig``.

    >>> permute_tree((-1, 0, 1), [2, 0, 1])
    (2, 0, -1)
    """
    image = [0] * len(parent)
    for v, p in enumerate(parent):
        image[sig[v]] = -1 if p < 0 else sig[p]
    return tuple(image)


def transversal(gens: list[list[int]], n: int, limit: int = 20000) -> list[list[int]] | None:
    """For every rank ``s`` a product ``sigma_s`` of ``gens`` with ``sigma_s(0) = s`` (breadth
    first, shortest products first), or None if the group is not transitive.

    >>> transversal([[1, 2, 0]], 3)
    [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    """
    ident = tuple(range(n))
    found, seen, queue = {0: ident}, {ident}, [ident]
    while queue and len(found) < n and len(seen) < limit:
        g = queue.pop(0)
        for h in gens:
            gh = tuple(h[g[i]] for i in range(n))
            if gh not in seen:
                seen.add(gh)
                queue.append(gh)
                found.setdefault(gh[0], gh)
    return [list(found[s]) for s in range(n)] if len(found) == n else None
