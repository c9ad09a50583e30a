"""Progress and stage times of a ``synthesize`` run, kept out of the solvers: a solver reports
events to a callback and this module draws them.

:class:`RunProgress` times every stage of a run (seconds per collective and stage, and for the
run-wide stages) and, on a terminal, keeps one rich line saying which collective and stage run
now (``allreduce (3/8): bwopt 12 s``); in a pipe or a file it draws nothing.  With ``verbose``
it logs each collective's stage times as the collective ends.

Solver events are ``(kind, text, status)`` with kind ``start`` (a search begins), ``update``
(what it tries now), ``point`` (a result line to print) and ``done``.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable


class RunProgress:
    """Stage timer and progress line of one run.

    Parameters
    ----------
    collectives : sequence of str
        The run's collectives, in order (for the ``k/n`` count).
    enabled : bool
        Draw the progress line (only when ``console`` is a terminal).
    verbose : bool
        Log every collective's stage times when it ends, and the run-wide ones at the end.
    log : callable
        Where verbose lines go.
    console : rich Console, optional
        Default: a Console on standard output.

    Examples
    --------
    >>> p = RunProgress(["allgather"], enabled=False)
    >>> with p.stage("bwopt", "allgather"):
    ...     pass
    >>> sorted(p.collective_stages("allgather"))
    ['bwopt']
    """

    def __init__(self, collectives, enabled: bool = True, verbose: bool = False,
                 log: Callable[[str], None] = print, console=None) -> None:
        self.collectives = list(collectives)
        self.verbose = verbose
        self.log = log
        self.per_collective: dict[str, dict[str, float]] = {c: {} for c in self.collectives}
        self.run_wide: dict[str, float] = {}
        self._bar = None
        self._task = None
        if enabled:
            from rich.console import Console
            console = console if console is not None else Console()
            if console.is_terminal:
                from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
                self._bar = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), TimeElapsedColumn(),
                                     TextColumn("{task.fields[status]}"), console=console, transient=True)

    # ---------------------------------------------------------------- display
    def __enter__(self) -> "RunProgress":
        if self._bar is not None:
            self._bar.start()
            self._task = self._bar.add_task("synthesize", total=None, status="")
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()

    def _show(self, text: str, status: str = "") -> None:
        if self._bar is not None and self._task is not None:
            shown = self._bar.tasks[0]
            changed = (shown.description, shown.fields.get("status")) != (text, status)
            self._bar.update(self._task, description=text, status=status, refresh=changed)

    @contextmanager
    def stage(self, name: str, collective: str | None = None):
        """Time ``name`` (of ``collective``, or of the whole run), adding to earlier times."""
        if collective is not None:
            k = self.collectives.index(collective) + 1 if collective in self.collectives else 0
            self._show(f"{collective} ({k}/{len(self.collectives)}): {name}")
        else:
            self._show(f"{name}")
        t0 = time.perf_counter()
        try:
            yield
        finally:
            table = self.per_collective.setdefault(collective, {}) if collective is not None else self.run_wide
            table[name] = table.get(name, 0.0) + time.perf_counter() - t0

    def collective_stages(self, collective: str) -> dict[str, float]:
        """Seconds per stage of ``collective``, rounded to ms (what ``summary.json`` records)."""
        return {k: round(v, 3) for k, v in self.per_collective.get(collective, {}).items()}

    def run_stages(self) -> dict[str, float]:
        """Seconds per run-wide stage, rounded to ms."""
        return {k: round(v, 3) for k, v in self.run_wide.items()}

    def collective_done(self, collective: str) -> None:
        """Log the stage times of ``collective`` (verbose only)."""
        if self.verbose:
            self.log(f"  {collective}: {format_stages(self.collective_stages(collective))}")

    def run_done(self) -> None:
        """Log the run-wide stage times (verbose only)."""
        if self.verbose:
            self.log(f"  run: {format_stages(self.run_stages())}")

    @contextmanager
    def solver_status(self):
        """A callback ``report(kind, text, status="")`` for a solver's events, drawn as the status of
        the progress line (None without one: solvers then report nothing)."""
        if self._bar is None:
            yield None
            return
        head = self._bar.tasks[0].description if self._bar.tasks else ""

        def report(kind: str, text: str, status: str = "") -> None:
            if kind == "point":
                self._bar.console.print(text)
            else:
                self._show(head, f"{text} {status}".strip())
        yield report


#: what :func:`format_stages` writes (the report marks it as wall-clock times)
STAGES_PATTERN = r"total [0-9]+\.[0-9] s: (?:[a-z_]+ [0-9]+\.[0-9](?:, [a-z_]+ [0-9]+\.[0-9])*)?"


def format_stages(stages: dict[str, float]) -> str:
    """``total 3.0 s: bwopt 2.0, verify 1.0`` (largest first; stages under 0.05 s left out).

    >>> format_stages({"verify": 1.0, "bwopt": 2.0, "save": 0.01})
    'total 3.0 s: bwopt 2.0, verify 1.0'
    """
    parts = ", ".join(f"{k} {v:.1f}" for k, v in sorted(stages.items(), key=lambda kv: -kv[1]) if v >= 0.05)
    return f"total {sum(stages.values()):.1f} s: {parts}"


@contextmanager
def status_bar(enabled: bool):
    """A callback ``report(kind, text, status="")`` drawing a rich spinner per search (None when
    not ``enabled``: solvers then report nothing)."""
    if not enabled:
        yield None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    with Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), TimeElapsedColumn(),
                  TextColumn("{task.fields[status]}"), transient=False) as bar:
        current = []

        def report(kind: str, text: str, status: str = "") -> None:
            if kind == "start" or not current:
                current.append(bar.add_task(text, total=None, status=status))
            elif kind == "point":
                bar.console.print(text)
            else:
                bar.update(current[-1], description=text, status=status)
        yield report


__all__ = ["RunProgress", "STAGES_PATTERN", "format_stages", "status_bar"]
