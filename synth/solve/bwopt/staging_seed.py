"""A complete staging in exactly ``S`` steps, built in two stages, to seed the CP-SAT staging
search of :func:`synth.solve.bwopt.staging.stage` at step counts where no perfect staging exists.

1. **Counts** (:func:`count_seed`): an exact CP-SAT model of whole bundle counts only, no
   steps: the bundles no deeper than ``S`` levels carry ``c`` chunks per source and their
   total loads fit ``R`` whole rounds of every resource (exact rational capacities), with
   shallow bundles preferred (``sum depth * count`` smallest), so that delays have room.
2. **Delays** (:func:`place_greedily`): those chunks, deepest bundle first, each at the delay
   that adds the fewest whole rounds to the steps it loads (ties: the earliest).

The result is a staging: every chunk is placed once within ``S`` steps and the totals are
stage 1's, within ``R`` rounds.  On 2 x dgx-h100 rail at effective capacities (broadcast,
184 chunks in 12 rounds) the seeds at 12, 11, 10 and 9 steps have 27 (in 11 steps), 27, 29 and
38 whole rounds, where CP-SAT over every bundle found no staging in 0.3 clock seconds; the best
of them (27 in 11 steps) is CP-SAT's complete hint, over its bundles only, and the search
improves it to 25 whole rounds within those 0.3 clock seconds.
"""

from __future__ import annotations

import numpy as np

from synth.solve.budget import SolveBudget, limit_cp_sat
from synth.solve.bwopt.tree_batch import Bundle
from synth.solve.bwopt.trees import ChannelModel
from synth.solve.stoppable import solve_cp_sat

__all__ = ["SEED_S", "count_seed", "place_greedily"]

#: clock seconds (deterministic CP-SAT time) of the count model: 2 x dgx-h100 rail proves its
#: optimum in 0.12
SEED_S = 0.3


def count_seed(model: ChannelModel, levels: dict[Bundle, list[np.ndarray]], sources: list[int], c: int,
               R: int, S: int, time_limit_s: float, budget: SolveBudget) -> dict[Bundle, int] | None:
    """Whole counts of the bundles no deeper than ``S`` (``levels``: bundle -> loads per tree
    level) carrying ``c`` chunks per source within ``R`` rounds of every resource, the shallowest
    found within ``time_limit_s`` clock seconds (charged to ``budget``); None if none found."""
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    cols = [(b, m.NewIntVar(0, c, "")) for b, lv in levels.items() if len(lv) <= S]
    for s in sources:
        held = [x for b, x in cols if any(src == s for src, _ in b)]
        if not held:
            return None
        m.Add(sum(held) == c)
    totals = {b: sum(levels[b]) for b, _ in cols}
    for r, cap in enumerate(model.cap_exact):
        terms = [(int(totals[b][r]) * cap.denominator, x) for b, x in cols if totals[b][r]]
        if terms:
            m.Add(sum(a * x for a, x in terms) <= R * cap.numerator * model.q)
    m.Minimize(sum(len(levels[b]) * x for b, x in cols))
    solver = cp_model.CpSolver()
    limit_cp_sat(solver, time_limit_s)
    if solve_cp_sat(solver, m, budget) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return {b: int(solver.Value(x)) for b, x in cols if solver.Value(x)}


def place_greedily(model: ChannelModel, levels: dict[Bundle, list[np.ndarray]], counts: dict[Bundle, int],
                   S: int) -> tuple[list[int], dict[tuple[Bundle, int], int]]:
    """``counts[b]`` chunks of each bundle placed within ``S`` steps, deepest bundles first, each
    at the delay that adds the fewest whole rounds to the steps it loads (ties: the earliest).
    Returns each step's whole rounds (0 for a step no chunk loads) and the chunks per
    ``(bundle, delay)``.  Exact integers (Python ints where int64 could overflow)."""
    dens, nums = [q.denominator for q in model.cap_exact], [q.numerator * model.q for q in model.cap_exact]
    most = sum(k * int(sum(levels[b]).max()) for b, k in counts.items()) * max(dens)
    kind = np.int64 if max(most, *nums) < 2 ** 62 else object
    cap = (np.array(dens, dtype=kind), np.array(nums, dtype=kind))
    load = np.zeros((S, len(model.resources)), dtype=kind)
    z = np.zeros(S, dtype=kind)
    placed: dict[tuple[Bundle, int], int] = {}
    for b in sorted(counts, key=lambda b: -len(levels[b])):        # stable: ties keep their order
        lv = np.array(levels[b], dtype=kind)
        span = np.arange(S - len(lv) + 1)[:, None] + np.arange(len(lv))     # (delays, levels): steps
        for _ in range(counts[b]):
            added = (whole_rounds(load[span] + lv, cap) - z[span]).sum(axis=1)
            d = int(np.argmin(added))
            load[span[d]] += lv
            z[span[d]] = whole_rounds(load[span[d]], cap)
            placed[(b, d)] = placed.get((b, d), 0) + 1
    return [int(v) for v in z], placed


def whole_rounds(load_q: np.ndarray, cap: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """:func:`synth.solve.bwopt.trees.rounds_for` over the last axis: the fewest whole rounds
    (>= 1) in which exact loads fit every capacity ``cap = (denominators, numerators * q)``."""
    return np.maximum((-(-(load_q * cap[0]) // cap[1])).max(axis=-1), 1)
