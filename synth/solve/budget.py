"""Deterministic solver budgets: :class:`SolveBudget`, a clock that advances by the work solvers
do, not by wall time, owned by one solve.

Every ``time_limit_s`` of :mod:`synth.solve` is a budget on such a clock, so the same input makes
the same decisions on every run, whatever the machine's load.  A budget is created once per
``synthesize`` run (or per top-level solver call, e.g. :func:`synth.solve.bwopt.optimal.bandwidth_optimal`
called as a library without one) and handed down explicitly: two solves in one process never
share a clock, and nothing here is module state.

* CP-SAT gets its share as ``max_deterministic_time`` (its own count of work, close to seconds
  on one core), a fixed seed and one worker or a deterministic interleave (:func:`limit_cp_sat`,
  :func:`limit_step_search`); each solve advances the budget's
  clock by the deterministic time it reports (:func:`synth.solve.stoppable.solve_cp_sat`);
* an LP solve advances it by :data:`LP_ITERATION_S` per simplex iteration
  (:func:`synth.solve.stoppable.solve_lp`), and Python work in solver loops by fixed charges
  (:meth:`SolveBudget.charge`, e.g. the arborescence pricing of column generation).

CP-SAT also keeps a wall-clock limit of :data:`WALL_SAFETY` times its budget plus
:data:`WALL_SLACK_S`, only as a safety net against runaway solves (the deterministic budget ends
a solve long before it on any machine that is not starved): a run that reaches it is no longer
reproducible, so each such stop is counted (:attr:`SolveBudget.wall_stops`, recorded by
:func:`synth.solve.stoppable.solve_cp_sat`) and callers report it (e.g. ``meta["wall_limit_hit"]``
of :func:`synth.solve.bwopt.optimal.bandwidth_optimal`).
"""

from __future__ import annotations

#: clock seconds charged per simplex iteration of an LP solve
LP_ITERATION_S = 2e-5
#: clock seconds per (ranks^2 x sources) of one round of arborescence pricing
PRICING_S = 1e-6
#: CP-SAT's wall-clock limit: this many times its deterministic budget, plus WALL_SLACK_S
WALL_SAFETY = 20.0
WALL_SLACK_S = 30.0


class SolveBudget:
    """The deterministic clock of one solve: clock seconds charged so far (``spent_s``) and the
    solves its wall-clock safety limit ended (``wall_stops``).

    >>> b = SolveBudget(); b.charge(1.5); w = b.window(4.0); b.charge(1.0)
    >>> b.now(), w.spent_s(), w.left_s(), w.over()
    (2.5, 1.0, 3.0, False)
    """

    def __init__(self) -> None:
        self.spent_s = 0.0
        self.wall_stops = 0
        #: when a list, every charge is also appended to it (to replay a search's charges in order)
        self.charges: list[float] | None = None

    def now(self) -> float:
        """Clock seconds charged to this budget so far (only differences mean anything to callers)."""
        return self.spent_s

    def charge(self, seconds: float) -> None:
        """Advance the clock by ``seconds`` of deterministic work."""
        if seconds > 0:
            self.spent_s += float(seconds)
            if self.charges is not None:
                self.charges.append(float(seconds))

    def note_wall_stop(self) -> None:
        """Count one solve that its wall-clock safety limit ended (its answer may differ on re-runs)."""
        self.wall_stops += 1

    def window(self, limit_s: float) -> "Window":
        """A share of ``limit_s`` clock seconds of this budget, starting now."""
        return Window(self, self.spent_s, limit_s)


class Window:
    """``limit_s`` clock seconds of a :class:`SolveBudget` from ``start`` on: what a solver loop
    has spent of its time limit and what is left."""

    __slots__ = ("budget", "start", "limit_s")

    def __init__(self, budget: SolveBudget, start: float, limit_s: float) -> None:
        self.budget, self.start, self.limit_s = budget, start, limit_s

    def spent_s(self) -> float:
        """Clock seconds charged since the window opened."""
        return self.budget.spent_s - self.start

    def left_s(self) -> float:
        """Clock seconds left of ``limit_s`` (negative once overspent)."""
        return self.limit_s - (self.budget.spent_s - self.start)

    def over(self) -> bool:
        """Whether the whole limit is spent."""
        return self.budget.spent_s - self.start >= self.limit_s


def budget_or_new(budget: SolveBudget | None) -> SolveBudget:
    """``budget``, or a fresh one for a caller that brought none (a top-level solver call)."""
    return SolveBudget() if budget is None else budget


#: CP-SAT strategies of the step-synthesis search after its opening (:func:`limit_step_search`); CP-SAT adds
#: its feasibility jump local search to them
STEP_SEARCH_SUBSOLVERS = ("max_lp",)


def limit_cp_sat(solver, budget_s: float, workers: int = 1) -> None:
    """Give a ``cp_model.CpSolver`` a deterministic budget of ``budget_s`` clock seconds, a fixed
    seed and ``workers`` threads (more than one: interleaved, so still deterministic)."""
    p = solver.parameters
    p.max_deterministic_time = max(0.01, float(budget_s))
    p.max_time_in_seconds = WALL_SAFETY * max(0.01, float(budget_s)) + WALL_SLACK_S
    p.num_workers = int(workers)
    p.random_seed = 0
    if workers > 1:
        p.interleave_search = True


def limit_step_search(solver, budget_s: float) -> None:
    """:func:`limit_cp_sat` for CP-SAT's deterministic interleaved search over :data:`STEP_SEARCH_SUBSOLVERS`
    and the feasibility jump, one task at a time (``num_workers`` 1, ``interleave_batch_size`` 1).
    OR-Tools 9.15 ``sat_parameters.proto``: ``interleave_search`` makes the search deterministic; its
    log of such a solve lists "1 full problem subsolver: [max_lp]" and "1 first solution subsolver: [fj]".

    Measured on 2 shared cores (benchmarks/bench_synthesis.py, docs/synthesis.md): DGX-1 alltoall S8 R8 C3
    takes 1.0 deterministic s (3 s wall) against 45 s (112 s) for the five-strategy interleave over two
    threads of ``limit_cp_sat(workers=2)``: feasibility jump finds the schedule, and max_lp refutes the
    infeasible (S, R, C) of the Pareto searches fastest.
    """
    limit_cp_sat(solver, budget_s)
    p = solver.parameters
    p.interleave_search = True
    p.interleave_batch_size = 1
    for name in STEP_SEARCH_SUBSOLVERS:
        p.subsolvers.append(name)


__all__ = ["LP_ITERATION_S", "PRICING_S", "STEP_SEARCH_SUBSOLVERS", "WALL_SAFETY", "WALL_SLACK_S", "SolveBudget",
           "Window", "budget_or_new", "limit_cp_sat", "limit_step_search"]
