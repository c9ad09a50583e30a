"""Deterministic solver budgets: a clock that advances by the work solvers do, not by wall time.

Every ``time_limit_s`` of :mod:`synth.solve` is a budget on this clock, so the same input makes
the same decisions on every run, whatever the machine's load:

* CP-SAT gets its share as ``max_deterministic_time`` (its own count of work, close to seconds
  on one core), one worker, a fixed seed (:func:`limit_cp_sat`); each solve advances the clock
  by the deterministic time it reports (:func:`synth.solve.stoppable.solve_cp_sat`);
* an LP solve advances it by :data:`LP_ITERATION_S` per simplex iteration
  (:func:`synth.solve.stoppable.solve_lp`), and Python work in solver loops by fixed charges
  (:func:`charge`, e.g. the arborescence pricing of column generation).

CP-SAT also keeps a wall-clock limit of :data:`WALL_SAFETY` times its budget plus
:data:`WALL_SLACK_S`, only as a safety net against runaway solves (the deterministic budget ends
a solve long before it on any machine that is not starved): a run that reaches it is no longer
reproducible, so each such stop is counted (:func:`wall_stops`, recorded by
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

_spent = [0.0]
_wall_stops = [0]


def now() -> float:
    """Clock seconds charged so far in this process (only differences mean anything)."""
    return _spent[0]


def charge(seconds: float) -> None:
    """Advance the clock by ``seconds`` of deterministic work."""
    if seconds > 0:
        _spent[0] += float(seconds)


def note_wall_stop() -> None:
    """Count one solve that its wall-clock safety limit ended (its answer may differ on re-runs)."""
    _wall_stops[0] += 1


def wall_stops() -> int:
    """Solves ended by their wall-clock safety limit so far in this process (only differences mean anything)."""
    return _wall_stops[0]


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


__all__ = ["LP_ITERATION_S", "PRICING_S", "WALL_SAFETY", "WALL_SLACK_S", "charge", "limit_cp_sat",
           "note_wall_stop", "now", "wall_stops"]
