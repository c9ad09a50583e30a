"""The intra-host part of a hierarchical schedule: whole chunks over one host's spanning trees.

In a hierarchical allgather every GPU ``b`` of a host ends up holding ``c`` pieces (its own
block's and, after the inter-host phase, its rail peers' blocks) that all GPUs of the host
need: an allgather on the host's own fabric with ``c`` chunks per rank.  The tree packing LP
(:func:`synth.solve.bwopt.trees.pack_trees`) gives every source weighted spanning
arborescences; :func:`local_forest` turns them into whole chunk counts, ``c`` per source,
minimising the busiest resource's load per chunk (CP-SAT over the LP's columns, hinted by
largest-remainder rounding).  Unlike :func:`synth.solve.bwopt.tree_batch.integer_batch` the batch
size is fixed by the cluster (hosts x chunks per rank), and step rounds do not matter: the
hosts' layers share every step, so only the loads count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from synth.ir.fabric import Fabric
from synth.solve.budget import SolveBudget, budget_or_new, limit_cp_sat
from synth.solve.bwopt.forest import ring_chains
from synth.solve.bwopt.trees import ChannelModel, pack_trees, random_trees, tree_depth
from synth.solve.stoppable import solve_cp_sat

#: R of the CP-SAT model counts 1/64 rounds
_FINE = 64


@dataclass
class LocalForest:
    """``counts[s]``: ``(tree, chunks)`` pairs summing to ``chunks`` for every local source ``s``;
    ``term`` is the busiest resource's load over its capacity, per chunk (rounds per chunk),
    ``lp_term`` the LP optimum's (a lower bound of ``term``)."""

    model: ChannelModel
    chunks: int
    counts: dict[int, list[tuple[tuple[int, ...], int]]]
    term: Fraction
    lp_term: float

    @property
    def depth(self) -> int:
        return max(tree_depth(p) for ts in self.counts.values() for p, _ in ts)


def _term(model: ChannelModel, counts: dict, chunks: int) -> Fraction:
    load = sum((m * model.tree_load(p, exact_q=True) for ts in counts.values() for p, m in ts),
               np.zeros(len(model.resources), dtype=np.int64))
    return max((Fraction(int(load[k]), model.q) / c for k, c in enumerate(model.cap_exact) if load[k]),
               default=Fraction(0)) / chunks


def _apportion(weights: dict[tuple[int, ...], float], c: int) -> list[tuple[tuple[int, ...], int]]:
    trees = sorted(weights, key=lambda p: (-weights[p], p))
    w = np.array([weights[p] for p in trees])
    share = w / w.sum() * c
    base = np.floor(share).astype(int)
    for j in np.argsort(-(share - base), kind="stable")[: c - int(base.sum())]:
        base[j] += 1
    return [(p, int(m)) for p, m in zip(trees, base) if m]


def _improve(model: ChannelModel, columns: dict, hint: dict, chunks: int, time_limit_s: float,
             budget: SolveBudget) -> dict | None:
    """CP-SAT: ``chunks`` per source over ``columns``, smallest integer R with loads <= R / 64 x
    capacity (exact: loads in units of 1 / q, capacities times the lcm of their denominators);
    None when it finds nothing better."""
    from ortools.sat.python import cp_model

    den = math.lcm(*(c.denominator for c in model.cap_exact))
    cap_units = [int(c * den) * model.q for c in model.cap_exact]
    m = cp_model.CpModel()
    x = {(s, p): m.NewIntVar(0, chunks, "") for s, ps in columns.items() for p in ps}
    for s, ps in columns.items():
        m.Add(sum(x[s, p] for p in ps) == chunks)
    loads = {key: model.tree_load(key[1], exact_q=True) * (den * _FINE) for key in x}
    hint_term = _term(model, hint, chunks) * chunks
    top = math.ceil(hint_term * _FINE) + 1
    R = m.NewIntVar(0, top, "R")
    for k, cu in enumerate(cap_units):
        terms = [(int(v[k]), x[key]) for key, v in loads.items() if v[k]]
        if terms:
            m.Add(sum(a * var for a, var in terms) <= R * cu)
    for s, ts in hint.items():
        for p, c in ts:
            if (s, p) in x:
                m.AddHint(x[s, p], c)
    m.Minimize(R)
    solver = cp_model.CpSolver()
    limit_cp_sat(solver, max(0.5, time_limit_s))
    if solve_cp_sat(solver, m, budget) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    got = {s: [(p, int(solver.Value(x[s, p]))) for p in ps if solver.Value(x[s, p])] for s, ps in columns.items()}
    return got if _term(model, got, chunks) < _term(model, hint, chunks) else None


def local_forest(host: Fabric, reverse: bool, chunks: int, *, time_limit_s: float = 10.0,
                 budget: SolveBudget | None = None) -> LocalForest:
    """``chunks`` whole chunks per rank of ``host`` over spanning arborescences (broadcast trees,
    or reduce trees with ``reverse``), loads as balanced as the LP's trees allow, within
    ``time_limit_s`` clock seconds of ``budget`` (default: a fresh
    :class:`~synth.solve.budget.SolveBudget`)."""
    budget = budget_or_new(budget)
    model = ChannelModel(host, reverse)
    sources = list(range(host.num_ranks))
    packing = pack_trees(model, sources, time_limit_s=max(1.0, time_limit_s / 2), budget=budget)
    hint = {s: _apportion(packing.trees[s], chunks) for s in sources}
    best = hint
    lp_term = 1.0 / packing.rate
    if _term(model, hint, chunks) > Fraction(lp_term).limit_denominator(10**9) * (1 + Fraction(1, 10**9)):
        chains = ring_chains(model, sources) if model.n <= 16 else {}
        extra = random_trees(model, sources, 8)
        columns = {s: list(dict.fromkeys(list(packing.trees[s]) + chains.get(s, []) + packing.columns.get(s, [])
                                         + extra.get(s, [])))[:96] for s in sources}
        better = _improve(model, columns, hint, chunks, time_limit_s / 2, budget)
        best = better or hint
    return LocalForest(model, chunks, best, _term(model, best, chunks), lp_term)


__all__ = ["LocalForest", "local_forest"]
