"""Solver calls that Ctrl-C and SIGTERM can stop at once.

Two habits of OR-Tools make a long solve deaf to signals:

* CP-SAT installs its own SIGINT handler for the duration of a solve and, when it is done, resets
  SIGINT to the *default* action at the C level (``catch_sigint_signal``, on by default): after
  the first solve Ctrl-C no longer reaches Python, it kills the process (exit -2) with no clean-up;
* a solve runs in C++ with the GIL released in the calling thread, and Python runs signal
  handlers only in the main thread between byte codes: a 60 s solve in the main thread answers
  Ctrl-C after 60 s.

So every call here turns ``catch_sigint_signal`` off, runs the solve in a helper thread while the
main thread waits in short, interruptible joins, and when a signal handler raises (Ctrl-C gives
``KeyboardInterrupt``) asks the solver to stop (``stop_search`` / ``InterruptSolve``), waits
for it (milliseconds) and re-raises.  Afterwards it re-installs the Python-level handlers of
SIGINT and SIGTERM at the C level, in case a solver changed them behind Python's back.
Each solve charges the :class:`synth.solve.budget.SolveBudget` its caller hands in; this module
keeps no state of its own.
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Callable, TypeVar

if TYPE_CHECKING:
    from synth.solve.budget import SolveBudget

T = TypeVar("T")

#: seconds between checks for a pending signal while a solve runs
POLL_S = 0.2


def solve_cp_sat(solver, model, budget: "SolveBudget") -> int:
    """``solver.solve(model)`` (a ``cp_model.CpSolver``), stoppable by a signal; returns the status
    and advances ``budget`` (a :class:`synth.solve.budget.SolveBudget`) by the solve's
    deterministic time (and counts the solve in its ``wall_stops`` when its wall-clock safety
    limit, not its deterministic budget, ended it)."""
    solver.parameters.catch_sigint_signal = False
    status = run_stoppable(lambda: solver.solve(model), solver.stop_search)
    budget.charge(solver.deterministic_time)
    if _wall_stopped(solver, status):
        budget.note_wall_stop()
    return status


def _wall_stopped(solver, status: int) -> bool:
    """Whether a CP-SAT solve ended at its wall-clock limit: an unfinished search (no proof of
    optimality or infeasibility) that stopped before its deterministic budget was spent."""
    from ortools.sat.python import cp_model
    if status in (cp_model.OPTIMAL, cp_model.INFEASIBLE, cp_model.MODEL_INVALID):
        return False
    return solver.deterministic_time < 0.99 * solver.parameters.max_deterministic_time


def solve_lp(lp, budget: "SolveBudget") -> int:
    """``lp.Solve()`` (a ``pywraplp.Solver``), stoppable by a signal; returns the result status
    and advances ``budget`` by :data:`synth.solve.budget.LP_ITERATION_S` per simplex iteration."""
    from synth.solve.budget import LP_ITERATION_S
    status = run_stoppable(lp.Solve, lp.InterruptSolve)
    budget.charge(LP_ITERATION_S * lp.iterations())
    return status


def run_stoppable(call: Callable[[], T], stop: Callable[[], object]) -> T:
    """``call()`` in a helper thread; an exception raised in the waiting main thread (a signal
    handler's ``KeyboardInterrupt``) calls ``stop()``, waits for ``call`` to return and re-raises.

    Outside the main thread (no signal handler runs there) ``call()`` runs directly.

    >>> run_stoppable(lambda: 6 * 7, lambda: None)
    42
    """
    if threading.current_thread() is not threading.main_thread():
        return call()
    box: dict = {}
    done = threading.Event()  # not Thread.join: a signal during join() can mark a live thread
    # stopped (CPython 3.11 releases the thread's own lock), and it would then be abandoned

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc
        finally:
            done.set()

    helper = threading.Thread(target=target, name="topocoll-solver", daemon=True)
    try:
        helper.start()  # waits for the thread to run: a signal can land here too
        while not done.wait(POLL_S):
            pass
    except BaseException:
        if helper.ident is not None:
            _stop_and_wait(done, stop)
        raise
    finally:
        resync_signal_handlers()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _stop_and_wait(done: threading.Event, stop: Callable[[], object]) -> None:
    """Stop the solve and wait until it has returned.  ``stop`` is repeated until then: a stop
    that lands before the solver has started is lost (CP-SAT and GLOP start each solve with a
    fresh flag), and a thread left inside a solve aborts the interpreter at exit.  A second
    signal meanwhile does not abandon the wait."""
    while not done.is_set():
        try:
            stop()
            done.wait(POLL_S / 4)
        except BaseException:  # noqa: BLE001 - already unwinding from the first signal
            pass


def resync_signal_handlers() -> None:
    """Install again, at the C level, the Python handlers of SIGINT and SIGTERM (a native
    library may have replaced them without Python knowing); only the main thread can."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if handler is not None:  # None: installed outside Python; leave it
            signal.signal(sig, handler)
