"""Console-script entry points: :func:`run_command` imports a command's module and runs its
``main``.  A Ctrl-C while the command's packages load (NumPy, networkx, OR-Tools: up to a second
on a busy machine) ends as ``<command>: interrupted``, exit 130, not a traceback; once ``main``
runs, the command's own handling (:func:`topo_probe.cli.exits.signals_interrupt`) takes over.
A run that needs more memory than the process may have (past the admission checks, which
refuse what they can estimate before allocating) ends in one line, exit 2, not a traceback.
This module and the package inits above each entry point import nothing heavy.

>>> run_command("demo", "topo_probe.no_such_module")
Traceback (most recent call last):
ModuleNotFoundError: No module named 'topo_probe.no_such_module'
"""

from __future__ import annotations

import importlib
import sys


def run_command(prog: str, module: str, argv: list[str] | None = None, *, exiting: bool = False) -> int:
    """Import ``module`` and return its ``main(argv)``; 130 after one line where Ctrl-C
    arrives while it loads; 2 after one line where the run runs out of memory.  ``exiting`` (the
    console scripts and ``python -m``: the process ends next): once the command's own signal
    handling is left, Ctrl-C and SIGTERM are ignored, and the process ends at once with ``main``'s
    status (stdout and stderr flushed, :func:`os._exit`), without the interpreter's shutdown: a
    signal while it frees the solver's and NumPy's memory (up to half a second) cannot end a
    finished run by signal, and CPython 3.11's record of a KeyboardInterrupt that once passed
    through ``PyRun_String`` (pybind11 code; caught or not) cannot turn an exit 0 or 130 into a
    death by SIGINT (-2) after ``python -m``."""
    status = _run(prog, module, argv, exiting)
    if exiting:
        _end_now(status)
    return status


def _run(prog: str, module: str, argv: list[str] | None, exiting: bool) -> int:
    try:
        main = importlib.import_module(module).main
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except MemoryError:            # the packages alone do not fit (ulimit -v of a few hundred MB)
        return _out_of_memory(prog)
    if exiting:
        from topo_probe.cli.exits import end_with_signals_ignored
        end_with_signals_ignored()
    try:
        return main(argv)
    except MemoryError:
        return _out_of_memory(prog)
    except KeyboardInterrupt:      # between main's own handling and the end of this call
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    finally:
        if exiting:
            _ignore_signals()


def _end_now(status: int) -> None:
    """Flush what the command wrote, finalize MPI where a command started it (mpirun fails a job
    whose rank ends without ``MPI_Finalize``: mpi4py's own call is an exit handler, which
    :func:`os._exit` skips), and end the process with ``status``, skipping the interpreter's
    shutdown (every file the commands write is closed before they return)."""
    import os
    if "logging" in sys.modules:
        sys.modules["logging"].shutdown()
    mpi = sys.modules.get("mpi4py.MPI")          # under mpirun: a rank that skips MPI_Finalize fails the job
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):    # a reader gone (| head): nothing to say
            pass
    os._exit(0 if status is None else int(status))


def _ignore_signals() -> None:
    import signal
    import threading
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)


def _out_of_memory(prog: str) -> int:
    print(f"{prog}: error: out of memory (more than this process may allocate: free memory, ulimit -v or "
          "its cgroup's limit); use fewer ranks or GPUs, or smaller sizes", file=sys.stderr)
    return 2


def topo_probe() -> int:
    """The ``topo-probe`` command."""
    return run_command("topo-probe", "topo_probe.cli.main", exiting=True)


__all__ = ["run_command", "topo_probe"]
