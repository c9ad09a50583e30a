"""Proofs that a staging cannot exist, so :func:`synth.solve.bwopt.staging.stage` need not ask
CP-SAT for one: LP relaxations of its model over the bundles no deeper than ``S`` steps.

A staging of ``c`` chunks per source in ``S`` steps uses only bundles whose trees fit ``S``
levels, and its loads, in exact units (``model.cap_exact * model.q`` per round), fit each
resource's capacity: in all ``R`` rounds, and, for a perfect staging (``sum z = R``), the
largest sum of ``floor(z_t * cap)`` over ``S`` whole ``z_t >= 1`` summing to ``R``
(:func:`step_capacity`).  If even fractional bundle counts cannot carry ``c`` chunks per
source within those totals, no staging can.  The LPs' capacities get a relative slack of
1e-6, so a float rounding can only make them answer "possible".
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from synth.solve.budget import SolveBudget
from synth.solve.bwopt.trees import ChannelModel

__all__ = ["PROOF_MAX_ROUNDS", "perfect_possible", "staging_possible", "step_capacity"]

#: largest batch rounds ``R`` for which :func:`perfect_possible` tabulates capacities (R^2 S work each)
PROOF_MAX_ROUNDS = 64


def perfect_possible(model: ChannelModel, levels: dict, sources: list[int], c: int, R: int, S: int,
                     budget: SolveBudget) -> bool:
    """False only when no perfect staging (``sum z = R``) of ``c`` chunks per source in ``S``
    steps exists over these bundles (``levels``: bundle -> loads per tree level): in a step of
    ``z`` whole rounds resource ``r`` carries at most ``floor(z * cap_r)`` chunks, so in all at
    most :func:`step_capacity` (see the module docstring)."""
    if S > R or R > PROOF_MAX_ROUNDS:
        return S <= R
    return _carried(model, levels, sources, c, S, lambda cap: step_capacity(cap, R, S), budget)


def staging_possible(model: ChannelModel, levels: dict, sources: list[int], c: int, R: int, S: int,
                     budget: SolveBudget) -> bool:
    """False only when no staging at all of ``c`` chunks per source in ``S`` steps keeps the
    batch within ``R`` rounds over these bundles: the bundles no deeper than ``S`` cannot carry
    it within ``floor(R * cap_r)`` of every resource even fractionally.  Bundles of more steps
    are more columns, so the answer is False for every step count below one where it is False."""
    return _carried(model, levels, sources, c, S, lambda cap: math.floor(R * cap), budget)


def _carried(model: ChannelModel, levels: dict, sources: list[int], c: int, S: int, capacity,
             budget: SolveBudget) -> bool:
    """Whether fractional counts of the bundles of at most ``S`` levels carry ``c`` chunks per
    source within ``capacity(units per round)`` of every resource they load."""
    from ortools.linear_solver import pywraplp

    from synth.solve.stoppable import solve_lp
    lp = pywraplp.Solver.CreateSolver("GLOP")
    cols = [(b, lp.NumVar(0, lp.infinity(), "")) for b, lv in levels.items() if len(lv) <= S]
    if not cols:
        return False
    carried = lp.NumVar(0, c, "")
    held = [{src for src, _ in b} for b, _ in cols]
    for s in sources:                             # sum of the bundles holding s >= carried
        row = lp.Constraint(0, lp.infinity())
        row.SetCoefficient(carried, -1)
        for (_, x), srcs in zip(cols, held):
            if s in srcs:
                row.SetCoefficient(x, 1)
    total = np.array([sum(levels[b]) for b, _ in cols], dtype=np.int64)       # bundles x resources
    resource, bundle = np.nonzero(total.T)       # rows by resource, each row's bundles in order
    xs, bound, row, last = [x for _, x in cols], {}, None, -1
    for r, k, a in zip(resource.tolist(), bundle.tolist(), total.T[resource, bundle].tolist()):
        if r != last:                            # a resource's row; its capacity once per figure
            per_round, last = model.cap_exact[r], r
            if per_round not in bound:
                bound[per_round] = capacity(per_round * model.q) * (1 + 1e-6)
            row = lp.Constraint(-lp.infinity(), bound[per_round])
        row.SetCoefficient(xs[k], a)
    lp.Maximize(carried)
    if solve_lp(lp, budget) != pywraplp.Solver.OPTIMAL:
        return True
    return carried.solution_value() >= c * (1 - 1e-6)


def step_capacity(per_round: Fraction, R: int, S: int) -> int:
    """The most whole units a resource carrying ``per_round`` units per round can move in ``S``
    steps of whole rounds ``z_t >= 1`` summing to ``R``: ``max sum_t floor(z_t * per_round)``
    (max-plus convolution, exact; -1 where ``S > R``).

    >>> [step_capacity(Fraction(96, 25), 12, S) for S in (1, 2, 3, 12)]     # 3.84: 46, 23+23, 15+15+15, 12 x 3
    [46, 46, 45, 36]
    """
    table = _step_capacities(per_round, R)
    return table[S - 1] if S <= len(table) else -1


@functools.lru_cache(maxsize=1024)
def _step_capacities(per_round: Fraction, R: int) -> tuple[int, ...]:
    """:func:`step_capacity` of ``R`` rounds at 1, 2, ..., ``R`` steps, each step count's
    max-plus convolution made from the one before: one table per capacity and ``R`` (the
    staging's proofs ask every resource at every step count)."""
    one = [-1] + [(z * per_round.numerator) // per_round.denominator for z in range(1, R + 1)]
    best, out = one, [one[R]]
    for _ in range(R - 1):
        best = [-1] + [max((one[a] + best[m - a] for a in range(1, m) if best[m - a] >= 0), default=-1)
                       for m in range(1, R + 1)]
        out.append(best[R])
    return tuple(out)
