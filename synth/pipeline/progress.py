"""Progress display of a ``synthesize`` run (rich), kept out of the solvers: a solver reports
events to a callback and this module draws them.

Events are ``(kind, text, status)`` with kind ``start`` (a search begins), ``update`` (what it
tries now), ``point`` (a result line to print) and ``done``.
"""

from __future__ import annotations

from contextlib import contextmanager


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


__all__ = ["status_bar"]
