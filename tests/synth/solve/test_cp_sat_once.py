"""synth.solve.cp_sat_once: a model solved to a proof is answered again without a solve, with the
answer and clock charge a fresh solve gives (the reference: CP-SAT itself, solved again under
the second limit); answers without proof are never kept."""

from ortools.sat.python import cp_model

from synth.solve.budget import SolveBudget, limit_cp_sat
from synth.solve.cp_sat_once import solve_cp_sat_once
from synth.solve.stoppable import solve_cp_sat


def _packing(n: int = 14) -> tuple[cp_model.CpModel, list]:
    """Pick items of weights 3..16 into two bins of 37 each, most value: a small model with many
    optimal-looking candidates, solved to optimality in milliseconds."""
    m = cp_model.CpModel()
    x = [[m.new_int_var(0, 1, f"x{i}_{b}") for b in range(2)] for i in range(n)]
    for i in range(n):
        m.add(x[i][0] + x[i][1] <= 1)
    for b in range(2):
        m.add(sum((3 + i) * x[i][b] for i in range(n)) <= 37)
    m.maximize(sum((5 + (7 * i) % 11) * (x[i][0] + x[i][1]) for i in range(n)))
    m.add_hint(x[0][0], 1)
    return m, [v for row in x for v in row]


def _hard(n: int = 120) -> cp_model.CpModel:
    """Two bins of 500 filled from 120 items of scattered weights and values, most value, with a
    complete hint (every bin empty): a solution at once, no proof of optimality in 0.05 clock s."""
    m = cp_model.CpModel()
    x = [[m.new_int_var(0, 1, f"x{i}_{b}") for b in range(2)] for i in range(n)]
    for i in range(n):
        m.add(x[i][0] + x[i][1] <= 1)
    for b in range(2):
        m.add(sum((3 + (i * 37) % 101) * x[i][b] for i in range(n)) <= 500)
    m.maximize(sum((5 + (i * 53) % 97) * (x[i][0] + x[i][1]) for i in range(n)))
    for row in x:
        for v in row:
            m.add_hint(v, 0)
    return m


def _solver(limit_s: float, seed: int = 0) -> cp_model.CpSolver:
    s = cp_model.CpSolver()
    limit_cp_sat(s, limit_s)
    s.parameters.random_seed = seed
    return s


def test_a_proven_solve_is_answered_again_as_a_fresh_solve_under_another_limit_answers():
    kept: dict = {}
    model, xs = _packing()
    first_budget = SolveBudget()
    status, values = solve_cp_sat_once(_solver(5.0), model, first_budget, kept)
    assert status == cp_model.OPTIMAL and len(kept) == 1

    again, again_budget = _solver(2.0), SolveBudget()
    status2, values2 = solve_cp_sat_once(again, _packing()[0], again_budget, kept)   # rebuilt: same text
    fresh, fresh_budget = _solver(2.0), SolveBudget()
    assert solve_cp_sat(fresh, _packing()[0], fresh_budget) == status2 == cp_model.OPTIMAL
    assert values2 == values == [fresh.value(v) for v in _packing()[1]]
    assert abs(again_budget.spent_s - fresh_budget.spent_s) <= 1e-9 * fresh_budget.spent_s
    assert again_budget.spent_s == first_budget.spent_s > 0
    try:                                   # answered from the store: the solver never ran
        again.response_proto
        solved = True
    except RuntimeError:
        solved = False
    assert not solved


def test_a_limit_at_or_below_the_kept_solves_time_or_other_parameters_solve_again():
    kept: dict = {}
    model, _ = _packing()
    budget = SolveBudget()
    solve_cp_sat_once(_solver(5.0), model, budget, kept)
    spent = budget.spent_s
    tight = _solver(0.01)
    tight.parameters.max_deterministic_time = spent            # the kept solve needed all of it
    solve_cp_sat_once(tight, model, SolveBudget(), kept)
    assert tight.response_proto is not None
    other = _solver(5.0, seed=7)                               # another search: not the same answer
    solve_cp_sat_once(other, model, SolveBudget(), kept)
    assert other.response_proto is not None and len(kept) == 2


def test_an_answer_without_proof_is_not_kept():
    kept: dict = {}
    status, values = solve_cp_sat_once(_solver(0.05), _hard(), SolveBudget(), kept)
    assert status == cp_model.FEASIBLE and len(values) == 240
    assert kept == {}
