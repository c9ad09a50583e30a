"""CP-SAT budgets: the deterministic budget ends a solve; a solve that the wall-clock safety
limit ends instead is counted (:func:`synth.solve.clock.wall_stops`), since only such a solve
may answer differently on a re-run."""

import random

from ortools.sat.python import cp_model

from synth.solve import clock
from synth.solve.stoppable import solve_cp_sat


def _knapsack(items: int = 80, dims: int = 6) -> cp_model.CpModel:
    """A multi-dimensional knapsack (seeded): far from proven optimal within a few milliseconds."""
    rng = random.Random(7)
    m = cp_model.CpModel()
    x = [m.NewBoolVar(f"x{i}") for i in range(items)]
    for _ in range(dims):
        w = [rng.randint(10, 99) for _ in range(items)]
        m.Add(sum(a * v for a, v in zip(w, x)) <= sum(w) // 3)
    m.Maximize(sum(rng.randint(10, 99) * v for v in x))
    return m


def test_a_solve_ended_by_wall_time_is_counted():
    solver = cp_model.CpSolver()
    clock.limit_cp_sat(solver, 1000.0)
    solver.parameters.max_time_in_seconds = 0.02          # the safety net fires long before the budget
    before = clock.wall_stops()
    status = solve_cp_sat(solver, _knapsack())
    assert status != cp_model.OPTIMAL
    assert clock.wall_stops() == before + 1


def test_a_solve_ended_by_its_deterministic_budget_is_not():
    solver = cp_model.CpSolver()
    clock.limit_cp_sat(solver, 0.05)
    before, spent = clock.wall_stops(), clock.now()
    status = solve_cp_sat(solver, _knapsack())
    assert status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    assert clock.wall_stops() == before
    assert 0 < clock.now() - spent <= 0.05 * 1.5      # the clock advanced by the deterministic time
