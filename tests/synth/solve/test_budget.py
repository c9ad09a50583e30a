"""Solver budgets (:mod:`synth.solve.budget`): the deterministic budget ends a CP-SAT solve; a
solve that the wall-clock safety limit ends instead is counted on its budget
(:attr:`~synth.solve.budget.SolveBudget.wall_stops`), since only such a solve may answer
differently on a re-run; and each solve owns its budget: two solves in one process do not share
a clock."""

import contextlib
import random

import pytest
from ortools.sat.python import cp_model

from synth.ir.fabric import build_fabric
from synth.solve import stoppable
from synth.solve.budget import LP_ITERATION_S, PRICING_S, SolveBudget, limit_cp_sat
from synth.solve.bwopt.trees import ChannelModel, pack_trees
from synth.solve.stoppable import solve_cp_sat
from topo_probe.machines.presets import get_preset


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
    solver, budget = cp_model.CpSolver(), SolveBudget()
    limit_cp_sat(solver, 1000.0)
    solver.parameters.max_time_in_seconds = 0.02          # the safety net fires long before the budget
    status = solve_cp_sat(solver, _knapsack(), budget)
    assert status != cp_model.OPTIMAL
    assert budget.wall_stops == 1


def test_a_solve_ended_by_its_deterministic_budget_is_not():
    solver, budget = cp_model.CpSolver(), SolveBudget()
    limit_cp_sat(solver, 0.05)
    status = solve_cp_sat(solver, _knapsack(), budget)
    assert status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    assert budget.wall_stops == 0
    assert 0 < budget.now() <= 0.05 * 1.5      # the clock advanced by the deterministic time
    assert budget.now() == solver.deterministic_time


def _packing_while_another_solve_spends(monkeypatch, victim_of_the_other: str):
    """Pack dgx1-v100's allgather trees (5 clock s) while, before each of its LP solves, another
    solve in this process spends 1000 clock seconds: of its own budget (``"other"``), or, as
    with the process-wide clock this module replaced, of this one's (``"same"``)."""
    mine, other = SolveBudget(), SolveBudget()
    real = stoppable.run_stoppable
    spender = other if victim_of_the_other == "other" else mine

    def interleaved(call, stop):
        spender.charge(1000.0)
        return real(call, stop)

    monkeypatch.setattr(stoppable, "run_stoppable", interleaved)
    model = ChannelModel(build_fabric(get_preset("dgx1-v100")))
    return pack_trees(model, list(range(model.n)), time_limit_s=5.0, budget=mine), mine, other


def test_one_exhausted_budget_does_not_shorten_another_solve(monkeypatch):
    """A solve on its own budget ends as it does alone (same iterations, trees, clock seconds)
    however much another budget spends meanwhile; the control, the same spending on a shared
    clock, cuts the column generation short after its first LP."""
    model = ChannelModel(build_fabric(get_preset("dgx1-v100")))
    alone_budget = SolveBudget()
    alone = pack_trees(model, list(range(model.n)), time_limit_s=5.0, budget=alone_budget)
    assert alone.optimal and alone.iterations >= 2      # needs several rounds of pricing: can be cut

    got, mine, other = _packing_while_another_solve_spends(monkeypatch, "other")
    assert other.now() >= 1000.0 * got.iterations       # the other budget is long exhausted
    assert (got.iterations, got.optimal, got.rate, got.trees) == \
        (alone.iterations, alone.optimal, alone.rate, alone.trees)
    assert mine.now() == alone_budget.now() == got.solve_s

    shared, _, _ = _packing_while_another_solve_spends(monkeypatch, "same")
    assert shared.iterations == 1 and not shared.optimal


@contextlib.contextmanager
def _lp_iterations():
    """A list that receives the simplex iterations of every LP solve run through
    :func:`synth.solve.stoppable.run_stoppable` while the block runs."""
    iterations = []
    real = stoppable.run_stoppable

    def counted(call, stop):
        out = real(call, stop)
        iterations.append(call.__self__.iterations())
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stoppable, "run_stoppable", counted)
        yield iterations


def test_the_clock_counts_lp_iterations_and_pricing():
    """A packing's clock seconds, recomputed by hand: LP_ITERATION_S per simplex iteration (read
    from each solve) plus PRICING_S x ranks^2 x sources per pricing round."""
    with _lp_iterations() as iterations:
        model = ChannelModel(build_fabric(get_preset("dgx1-v100")))
        budget = SolveBudget()
        got = pack_trees(model, list(range(model.n)), time_limit_s=5.0, budget=budget)
    expected = sum(LP_ITERATION_S * k for k in iterations if k > 0) + got.iterations * PRICING_S * model.n ** 3
    assert abs(budget.now() - expected) < 1e-12


def test_windows_count_from_their_opening():
    budget = SolveBudget()
    budget.charge(7.0)
    window = budget.window(10.0)
    budget.charge(-1.0)                   # nothing negative is charged
    budget.charge(4.0)
    assert (window.spent_s(), window.left_s(), window.over()) == (4.0, 6.0, False)
    budget.charge(6.0)
    assert window.over() and window.left_s() == 0.0 and budget.now() == 17.0


def test_the_cluster_alltoall_lp_is_charged_to_the_callers_budget():
    """The AllToAll LP of a cluster charges LP_ITERATION_S per simplex iteration of each of its
    solves (counted here from the solver) to the budget it is given, and runs stoppable."""
    from synth.solve.cluster.alltoall import cluster_alltoall
    from topo_probe.machines.clusters import cluster
    with _lp_iterations() as iterations:
        budget = SolveBudget()
        cluster_alltoall(build_fabric(cluster("dgx-a100", nodes=2)), budget=budget)
    assert len(iterations) >= 2 and sum(iterations) > 0        # both stages of the LP went through it
    assert abs(budget.now() - LP_ITERATION_S * sum(iterations)) < 1e-12
