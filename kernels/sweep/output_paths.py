"""Which files a ``sweep`` may write: ``-J``, ``--plot`` and ``--csv`` are checked before anything
runs (an existing, writable folder, :func:`synth.sweep.output_file.check_output_file`; never a
folder; a CSV replaced only when it is one of ours), so a sweep never creates folders or ends
with a write error after all its work."""

from __future__ import annotations

from pathlib import Path

from synth.sweep.output_file import check_output_file
from topo_probe.errors import UsageError


def check_output_paths(args) -> None:
    """Refuse, before anything runs, output files that cannot be written or are not ours to
    overwrite: ``-J``, ``--plot`` and ``--csv`` must name a file in an existing folder this
    process may write (no folder is created); ``--plot`` a ``.png``; a CSV (``--csv`` or the one
    next to the plot) is only replaced when it is one of ours (its header is ours).  ``-J`` never
    replaces a file (nccl-tests' rule: the first free ``FILE``, ``FILE.0``, ...)."""
    from kernels.sweep.compare import CSV_COLUMNS
    plot = Path(args.plot) if args.plot else None
    if plot is not None and plot.suffix.lower() != ".png":
        raise UsageError(f"--plot {args.plot}: the picture is a PNG; name a file ending in .png")
    csv = Path(args.csv) if args.csv else (plot.with_suffix(".csv") if plot is not None else None)
    json_file = Path(args.output_file) if getattr(args, "output_file", None) else None
    for flag, path in (("-J", json_file), ("--plot", plot), ("--csv", csv)):
        if path is not None:
            check_output_file(flag, path)
    if csv is not None and csv.exists():
        flag = "--csv" if args.csv else f"--plot {args.plot}"
        try:
            first = csv.open(encoding="utf-8", errors="replace").readline().strip()
        except OSError as e:
            raise UsageError(f"{flag} would replace {csv}: {e.strerror}") from None
        if first != ",".join(CSV_COLUMNS):
            raise UsageError(f"{flag} would replace {csv}, which is not a sweep CSV; name another "
                             f"{'file' if args.csv else 'with --csv'}")


__all__ = ["check_output_paths"]
