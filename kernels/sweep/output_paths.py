"""Which files a ``sweep`` may write: ``-J``, ``--plot`` and ``--csv`` are checked before anything
runs (an existing, writable folder, :func:`synth.sweep.output_file.check_output_file`; never a
folder; an existing file replaced only when it is a PNG topocoll drew for ``--plot``, a CSV of ours for ``--csv``), so a
sweep never creates folders, ends with a write error after all its work or overwrites a user's file."""

from __future__ import annotations

from pathlib import Path

from synth.sweep.output_file import check_output_file
from topo_probe.errors import UsageError
from topo_probe.pictures import is_our_png
from topo_probe.topology.serialize import check_replaceable


def check_output_paths(args) -> None:
    """Refuse, before anything runs, output files that cannot be written or are not ours to
    overwrite: ``-J``, ``--plot`` and ``--csv`` must name a file in an existing folder this
    process may write (no folder is created); ``--plot`` a ``.png`` that replaces only a PNG of ours
    (:func:`topo_probe.pictures.is_our_png`: its ``Software`` text names topocoll); a CSV (``--csv``
    or the one next to the plot) is only replaced when it is one of ours (its header is ours).  ``-J``
    never replaces a file (nccl-tests' rule: the first free ``FILE``, ``FILE.0``, ...).
    :func:`topo_probe.topology.serialize.check_replaceable` tells the files apart."""
    from kernels.sweep.compare import CSV_COLUMNS
    plot = Path(args.plot) if args.plot else None
    if plot is not None and plot.suffix.lower() != ".png":
        raise UsageError(f"--plot {args.plot}: the picture is a PNG; name a file ending in .png")
    csv = Path(args.csv) if args.csv else (plot.with_suffix(".csv") if plot is not None else None)
    json_file = Path(args.output_file) if getattr(args, "output_file", None) else None
    for flag, path in (("-J", json_file), ("--plot", plot), ("--csv", csv)):
        if path is not None:
            check_output_file(flag, path)
    if plot is not None:           # a picture of ours to redraw; anything else (another PNG too) is a user's file, kept
        check_replaceable("--plot", plot, is_our_png, "a PNG topocoll drew (its Software text names topocoll)")
    if csv is not None:
        flag, header = ("--csv" if args.csv else f"--plot {args.plot}"), ",".join(CSV_COLUMNS)
        check_replaceable(flag, csv, lambda head: head.decode("utf-8", "replace").split("\n", 1)[0].strip() == header,
                          "a sweep CSV", f"name another {'file' if args.csv else 'with --csv'}")


__all__ = ["check_output_paths"]
