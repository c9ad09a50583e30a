"""Spanning arborescences over rank channels: the channel model and LP tree packing.

A broadcast from rank ``s`` at rate ``x`` (chunks per round) is a set of spanning
arborescences rooted at ``s`` over the fabric's channel graph (ranks are nodes, channels
(i, j) are edges) with weights summing to ``x``.  A chunk sent down an arborescence crosses
each of its edges once, so it loads resource ``r`` by ``sum over tree edges of
fraction(edge, r)`` (see :class:`synth.ir.fabric.Fabric`): switches relay but never duplicate
data, which the channel routes already account for.

:func:`pack_trees` finds the largest common rate ``x`` at which every source in ``sources``
can broadcast at once within the resource capacities, by column generation: the master LP
(GLOP) picks tree weights, the pricing problem is a min-cost arborescence (Chu-Liu/Edmonds,
:func:`synth.solve.bwopt.arborescence.min_cost_arborescence`) under the LP's resource prices.  By
Edmonds' branching theorem this is the same optimum as the per-destination max-flow LP,
without its n^2 flow commodities, and it yields the trees directly.

Whole chunks: :mod:`synth.solve.bwopt.tree_batch` (:func:`~synth.solve.bwopt.tree_batch.integer_batch`, CP-SAT over
trees or symmetric bundles of trees, and :func:`~synth.solve.bwopt.tree_batch.dive_batch`, LP diving)
turns tree weights into integer chunk counts per batch with exact rational loads.
Symmetry: :mod:`synth.solve.bwopt.tree_symmetry` finds rank permutations that map the channel model
onto itself and applies them to trees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable

import numpy as np
from ortools.linear_solver import pywraplp

from synth.ir.fabric import Fabric, Resource
from synth.solve.budget import PRICING_S, SolveBudget, budget_or_new
from synth.solve.bwopt.arborescence import INF, exact, min_cost_arborescence
from synth.solve.stoppable import solve_lp
from topo_probe.errors import SynthesisInfeasible


@dataclass
class ChannelModel:
    """The fabric as the LP sees it: tree edges, their resource loads and capacities.

    ``reverse=True`` describes reduce trees: the tree edge u -> v (data flows from the root
    towards v in the *reversed* sense) is carried by channel (v, u), so a broadcast tree of
    this model, run backwards with reduces, is a reduce tree of the fabric.  ``efficiency``
    (link kind -> factor in (0, 1], e.g. :meth:`synth.model.cost.CostParams.efficiency`) scales
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
        c = (self.load * price).sum(axis=2)     # numpy's own summation, not BLAS: the same bits on every CPU
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
                 cap: np.ndarray, budget: SolveBudget) -> None:
        self.model, self.sources, self.demand, self.cap = model, sources, demand, cap
        self.budget = budget
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
        status = solve_lp(self.solver, self.budget)
        if status != pywraplp.Solver.OPTIMAL:
            self._build()
            status = solve_lp(self.solver, self.budget)
        if status != pywraplp.Solver.OPTIMAL:
            raise SynthesisInfeasible(f"trees: the master LP (GLOP) ended with status {status}, not optimal")


def pack_trees(model: ChannelModel, sources: list[int], *, time_limit_s: float = 60.0,
               target_rate: float | None = None, demand: dict[int, float] | None = None,
               capacity: np.ndarray | None = None,
               initial: dict[int, list[tuple[int, ...]]] | None = None, tol: float = 1e-9,
               budget: SolveBudget | None = None) -> Packing:
    """Largest common broadcast rate of ``sources`` over spanning arborescences (column generation).

    Maximises ``x`` subject to: source ``s``'s tree weights sum to at least ``x * demand[s]``
    (default 1) and every resource carries at most ``capacity`` (default: its chunks per
    round).  Starts from ``initial`` trees or :func:`seed_trees`; pricing is a min-cost
    arborescence per source under the LP's resource duals; the loop stops when no tree
    prices out, the Lagrangian upper bound meets the LP value, ``x`` reaches
    ``target_rate`` (a known upper bound such as the cut bound), or ``time_limit_s`` passes
    (then ``optimal`` is False) on ``budget``'s clock (default: a fresh
    :class:`~synth.solve.budget.SolveBudget`).

    Raises
    ------
    SynthesisInfeasible
        If a source cannot reach every rank over the channels.
    """
    budget = budget_or_new(budget)
    window = budget.window(time_limit_s)
    demand = demand or {s: 1.0 for s in sources}
    sources = [s for s in sources if demand.get(s, 0) > 0]
    cap = model.cap if capacity is None else np.maximum(np.asarray(capacity, dtype=float), 0.0)
    master = _Master(model, sources, demand, cap, budget)
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
        budget.charge(PRICING_S * model.n ** 2 * len(sources))
        if total > 0:
            upper = min(upper, float((price * cap).sum()) / total)
        done = (not new or rate >= upper * (1 - 1e-9)
                or (target_rate is not None and rate >= target_rate * (1 - 1e-9)))
        if done or window.spent_s() > window.limit_s:
            break
        for s, parent in new:
            master.add(s, parent)
    trees = {s: {p: v.solution_value() for p, v in cols.items() if v.solution_value() > 1e-12}
             for s, cols in master.columns.items()}
    optimal = bool(not new or rate >= upper * (1 - 1e-9)
                   or (target_rate is not None and rate >= target_rate * (1 - 1e-9)))
    return Packing(rate, max(upper, rate), trees, it, window.spent_s(), optimal,
                   {s: list(cols) for s, cols in master.columns.items()})


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


def rounds_for(model: ChannelModel, load_q: np.ndarray) -> int:
    """Fewest whole rounds (>= 1) in which exact loads ``load_q / q`` fit every capacity."""
    need = 1
    for k in np.flatnonzero(load_q):
        cap = model.cap_exact[k]
        need = max(need, -(-int(load_q[k]) * cap.denominator // (cap.numerator * model.q)))
    return need
