"""nccl-tests' text layout (column for column) and its ``-J`` JSON document.

The writer takes plain records (duck-typed, as :mod:`synth.sweep.driver` makes them): a
config with ``collective nranks minbytes maxbytes stepbytes stepfactor warmup iters check``;
devices with ``rank group pid hostname device bus info``; rows with ``size count type redop
root out_of_place in_place algorithm`` whose results have ``time_us algbw busbw wrong``; and
``extras`` per row (extra columns printed after the nccl-tests ones, named by ``extra_columns``).

The text is what ``all_reduce_perf`` prints: a ``#`` preamble (parameters, one line per rank
under ``# Using devices``), a blank ``#``, two header lines and a units line, one row per size
and the two summary lines.  Times print with 2, 1 or 0 decimals below 100, 10000 and above
(µs); bandwidths with 2 decimals (GB/s, 1e9 bytes/s); ``#wrong`` with ``%g`` or ``N/A``.

>>> fmt_time(38.854), fmt_time(103.8), fmt_time(16330.4)
('  38.85', '  103.8', '  16330')
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from synth.formats.nccl_tests.conventions import TEST_NAMES
from synth.ir.schedule import atomic_write_text

JSON_VERSION = 1


def fmt_time(us: float) -> str:
    """Time column (7 wide) as nccl-tests prints it."""
    if us >= 10000.0:
        return "%7.0f" % us
    if us >= 100.0:
        return "%7.1f" % us
    return "%7.2f" % us


def preamble_lines(cfg, devices: list, notes: list[str] = ()) -> list[str]:
    """Parameter line, our own ``# sweep:`` notes, then ``# Using devices`` and one line per rank."""
    step = f"{cfg.stepfactor}(factor)" if cfg.stepfactor > 1 else f"{cfg.stepbytes}(bytes)"
    out = [f"# nThread 1 nGpus {cfg.nranks} minBytes {cfg.minbytes} maxBytes {cfg.maxbytes} step: {step} "
           f"warmup iters: {cfg.warmup} iters: {cfg.iters} agg iters: 1 validation: {cfg.check} graph: 0"]
    out += [f"# {note}" for note in notes]
    out += ["#", "# Using devices"]
    out += ["#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s"
            % (d.rank, d.group, d.pid, d.hostname, d.device, d.bus, d.info) for d in devices]
    return out


def column_width(column: tuple) -> int:
    """Characters of an extra column: its third item where it has one, else 8."""
    return column[2] if len(column) > 2 else 8


def header_lines(extra_columns=()) -> list[str]:
    """The ``#`` separator, the two header lines and the units line; ``extra_columns`` are
    ``(name, unit)`` or ``(name, unit, width)`` tuples of columns printed after the nccl-tests
    ones (:func:`column_width` wide, right-aligned like the cells of :func:`row_line`)."""
    lines = _nccl_header()
    if extra_columns:
        lines[2] += "".join("  %*s" % (column_width(c), c[0]) for c in extra_columns)
        lines[3] += "".join("  %*s" % (column_width(c), c[1]) for c in extra_columns)
    return lines


def _nccl_header() -> list[str]:
    blank5 = ("",) * 5
    return [
        "#",
        "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          " % blank5,
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s"
        % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
           "time", "algbw", "busbw", "#wrong"),
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s"
        % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
    ]


def _cell(res) -> str:
    if res.wrong is None:
        return "  %7s  %6.2f  %6.2f  %5s" % (fmt_time(res.time_us), res.algbw, res.busbw, "N/A")
    return "  %7s  %6.2f  %6.2f  %5g" % (fmt_time(res.time_us), res.algbw, res.busbw, res.wrong)


def row_line(row, extra_columns=()) -> str:
    """One result row: size, count, type, redop, root, then out-of-place and in-place cells,
    then the row's ``extras`` (already formatted; as wide as their ``extra_columns``, 8 where
    none is named)."""
    widths = [column_width(c) for c in extra_columns]
    extras = getattr(row, "extras", ())
    return ("%12d  %12d  %8s  %6s  %6d" % (row.size, row.count, row.type, row.redop, row.root)
            + _cell(row.out_of_place) + _cell(row.in_place)
            + "".join("  %*s" % (widths[k] if k < len(widths) else 8, x) for k, x in enumerate(extras)))


def footer_lines(summary, errors: int | None = None, avg_busbw: float | None = None) -> list[str]:
    """``# Out of bounds values`` (failing results), ``# Avg bus bandwidth`` and a final ``#``;
    ``errors`` / ``avg_busbw`` override the values computed from the rows (imported logs)."""
    errors = summary.errors if errors is None else errors
    avg = summary.avg_busbw if avg_busbw is None else avg_busbw
    return [f"# Out of bounds values : {errors} {'FAILED' if errors else 'OK'}",
            "# Avg bus bandwidth    : %g " % avg,
            "#"]


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _result_json(res) -> dict:
    return {"time": res.time_us, "alg_bw": res.algbw, "bus_bw": res.busbw,
            "nwrong": None if res.wrong is None else float(res.wrong)}


def json_document(cfg, devices: list, summary, *, argv: list[str],
                  start_time: str, extra: dict | None = None) -> dict:
    """The ``-J`` document, key for key as nccl-tests writes it (``version`` 1), plus a
    ``topocoll`` object with what nccl-tests has no field for (backend, topology, algorithm)
    and an ``algorithm`` key per result.  ``env`` lists only ``NCCL_*`` and ``TOPOCOLL_*``
    variables."""
    import os
    step = {"step_factor": cfg.stepfactor} if cfg.stepfactor > 1 else {"step_bytes": cfg.stepbytes}
    config = {"nthreads": 1, "ngpus": cfg.nranks, "minimum_bytes": cfg.minbytes, "maximum_bytes": cfg.maxbytes,
              **step, "warmup_iters": cfg.warmup, "iterations": cfg.iters, "aggregated_iterations": 1,
              "validation": cfg.check, "graph": 0, "blocking_collectives": "false", "parallel_init": "false",
              "devices": [{"rank": d.rank, "group": d.group, "pid": d.pid, "hostname": d.hostname,
                           "device": d.device, "device_hex": d.bus, "device_info": d.info} for d in devices]}
    results = [{"size": r.size, "count": r.count, "type": r.type, "redop": r.redop, "root": "%6i" % r.root,
                "out_of_place": _result_json(r.out_of_place), "in_place": _result_json(r.in_place),
                "actual_iterations": cfg.iters, "experiment_name": TEST_NAMES[cfg.collective],
                "algorithm": r.algorithm} for r in summary.rows]
    env = [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "TOPOCOLL_"))]
    return {"version": JSON_VERSION, "start_time": start_time, "args": list(argv), "env": env,
            "nccl_version": 0, "config": config, "results": results,
            "out_of_bounds": {"count": summary.errors, "okay": "true" if summary.errors == 0 else "false"},
            "average_bus_bandwidth": {"bandwidth": summary.avg_busbw, "okay": "unchecked"},
            "errors": [], "topocoll": dict(extra or {}), "end_time": now()}


def free_json_path(path: str | Path) -> Path:
    """nccl-tests never overwrites: ``path``, else ``path.0``, ``path.1``, ... (first free)."""
    p = Path(path)
    k = 0
    while p.exists():
        p = Path(f"{path}.{k}")
        k += 1
    return p


def write_json(path: Path, doc: dict) -> None:
    """Write the document atomically."""
    atomic_write_text(path, json.dumps(doc, indent=1) + "\n")
