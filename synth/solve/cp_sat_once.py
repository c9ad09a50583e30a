"""CP-SAT solves kept by their caller: a model solved once to a proof is not solved again.

A CP-SAT solve with one worker and a fixed seed (:func:`synth.solve.budget.limit_cp_sat`) is
deterministic: the same model and parameters make the same search, and its deterministic time
limit only says where the search stops.  So a solve that ended with a proof (optimal or
infeasible) after ``d`` clock seconds makes the very same search, with the same answer and the
same ``d``, under any limit above ``d``: a second solve of the same model (its text: every
variable, constraint, hint and the objective) with the same parameters apart from the limits
takes the first one's status and values instead, and the budget is charged the same ``d``.
A solve that stopped at its limit (an answer without proof) or at its wall-clock safety limit
(:mod:`synth.solve.budget`) is not kept: another limit could answer differently.

``synthesize`` meets this where a reduce's trees are its broadcast's run backwards: at the
links' effective capacities the reduce solves the broadcast forest again as its mirror, with
half the time, and the whole-chunk batch's CP-SAT models
(:func:`synth.solve.bwopt.tree_batch.integer_batch`) are the broadcast's, byte for byte
(2 x dgx-h100 rail: three solves, about 0.45 s CPU).  The caller owns the store (a ``dict``, e.g.
``Fabric.memo("cp_sat")``); this module keeps none.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from synth.solve.stoppable import solve_cp_sat

if TYPE_CHECKING:
    from synth.solve.budget import SolveBudget

__all__ = ["solve_cp_sat_once"]

#: parameters that only say when a solve stops (and how signals reach it): not part of the key
STOP_FIELDS = ("max_deterministic_time", "max_time_in_seconds", "catch_sigint_signal")


def solve_cp_sat_once(solver, model, budget: "SolveBudget", kept: dict) -> tuple[int, list[int]]:
    """:func:`synth.solve.stoppable.solve_cp_sat` of ``model`` (a ``cp_model.CpModel``) with
    ``solver``'s parameters, answered from ``kept`` where the same model and parameters (less
    :data:`STOP_FIELDS`) were solved to a proof in fewer clock seconds than ``solver``'s limit
    (the budget is charged that solve's deterministic time).  Returns the status and the
    solution's values by variable index (empty without a solution)."""
    from ortools.sat.python import cp_model

    params = "\n".join(line for line in str(solver.parameters).splitlines()
                       if line.split(":")[0].strip() not in STOP_FIELDS)
    key = hashlib.sha256(f"{params}\n--\n{model.Proto()}".encode()).hexdigest()
    hit = kept.get(key)
    if hit is not None and hit[1] < solver.parameters.max_deterministic_time:
        status, seconds, values = hit
        budget.charge(seconds)
        return status, list(values)
    stops = budget.wall_stops
    status = solve_cp_sat(solver, model, budget)
    values = list(solver.response_proto.solution) if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else []
    if status in (cp_model.OPTIMAL, cp_model.INFEASIBLE) and budget.wall_stops == stops:
        kept[key] = (status, solver.deterministic_time, tuple(values))
    return status, values
