"""nccl-tests' text layout (column for column) and its ``-J`` JSON document.

The writer takes plain records (duck-typed, as :mod:`synth.sweep.driver` makes them): a
config with ``collective nranks minbytes maxbytes stepbytes stepfactor warmup iters check`` (and
``nthreads gpus_per_thread``, nccl-tests' ``-t`` and ``-g``; 1 and ``nranks`` without them);
devices with ``rank group pid hostname device bus info``; rows with ``size count type redop
root out_of_place in_place algorithm`` whose results have ``time_us algbw busbw wrong`` (None: not
measured, printed as nccl-tests' ``writeBenchMarkLineNullBody``, 32 blanks, src/util.cu lines 480-485); and
``extras`` per row (extra columns printed after the nccl-tests ones, named by ``extra_columns``).

The text is what ``all_reduce_perf`` of NVIDIA/nccl-tests v2.19.6 prints (src/util.cu): a ``#``
preamble (``# Collective test starting``, parameters, one line per rank under ``# Using devices``),
a blank ``#``, two header lines and a units line (lines 756-760), one row per size and the summary
lines (lines 777-780).  Times (µs, 7 wide) and bandwidths (GB/s, 1e9 bytes/s, 6 wide) print as its
``getFloatStr`` (lines 487-492): 2 decimals where they fit, else 1, else 0, else exponent form;
``#wrong`` with ``%6g`` or ``N/A`` (lines 508-510).  Not printed: its ``# nccl-tests version``
line (no nccl-tests or NCCL library runs here, and readers take the NCCL version from it).

>>> fmt_time(38.854), fmt_time(103.8), fmt_time(16330.4), fmt_time(123456.7), float_str(1234.5, 6)
('  38.85', ' 103.80', '16330.4', ' 123457', '1234.5')
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from synth.formats.nccl_tests.conventions import NCCL_NAMES, TEST_NAMES
from synth.ir.schedule import atomic_write_text
from topo_probe.errors import InvalidArgument
from topo_probe.number_checks import check_float

#: nccl-tests' JSON layout version at v2.19.6 (src/util.cu line 52): 1 until v2.19.1, 2 adds per_iter_timing, 3 per_iter_skip
JSON_VERSION = 3


def float_str(value: float, width: int) -> str:
    """``value`` in ``width`` characters as nccl-tests' ``getFloatStr`` (v2.19.6 src/util.cu lines 487-492): the first
    of ``%.2f``, ``%.1f``, ``%.0f`` that fits, else ``%.1e`` (7 wide and more) or ``%.0e``, cut to ``width``
    as its ``snprintf(str, width+1, ...)`` cuts it."""
    for fmt in ("%*.2f", "%*.1f", "%*.0f"):
        text = fmt % (width, value)
        if len(text) <= width:
            return text
    return ((("%*.1e" if width >= 7 else "%*.0e") % (width, value)))[:width]


def fmt_time(us: float) -> str:
    """Time column (7 wide) as nccl-tests prints it (:func:`float_str`)."""
    return float_str(us, 7)


def program_name(collective: str) -> str:
    """The nccl-tests binary of a canonical collective (``allreduce`` -> ``all_reduce_perf``)."""
    return f"{NCCL_NAMES[collective]}_perf"


def threads_and_gpus(cfg) -> tuple[int, int]:
    """nccl-tests' ``nThread`` and ``nGpus`` of a config: its ``-t`` threads per process and ``-g`` GPUs per thread
    (``nranks`` in one thread for a config without them)."""
    return getattr(cfg, "nthreads", 1), getattr(cfg, "gpus_per_thread", cfg.nranks)


def preamble_lines(cfg, devices: list, notes: list[str] = ()) -> list[str]:
    """``# Collective test starting``, the parameter line (v2.19.6 src/util.cu lines 624-628: ``nThread`` and
    ``nGpus`` as ``-t`` and ``-g`` gave them, :func:`threads_and_gpus`), our own ``# sweep:`` notes, then
    ``# Using devices`` and one line per rank."""
    step = f"{cfg.stepfactor}(factor)" if cfg.stepfactor > 1 else f"{cfg.stepbytes}(bytes)"
    threads, gpus = threads_and_gpus(cfg)
    out = [f"# Collective test starting: {program_name(cfg.collective)}",
           f"# nThread {threads} nGpus {gpus} minBytes {cfg.minbytes} maxBytes {cfg.maxbytes} step: {step} "
           f"warmup iters: {cfg.warmup} iters: {cfg.iters} agg iters: 1 validation: {cfg.check} graph: 0 unalign: 0"]
    out += [f"# {note}" for note in notes]
    out += ["#", "# Using devices"]
    out += [d.line() for d in devices]
    return out


def column_width(column: tuple) -> int:
    """Characters of an extra column: its third item where it has one, else 8."""
    return column[2] if len(column) > 2 else 8


def header_lines(extra_columns=()) -> list[str]:
    """The ``#`` separator, the two header lines and the units line; ``extra_columns`` are
    ``(name, unit)`` or ``(name, unit, width)`` tuples of columns printed after the nccl-tests
    ones (:func:`column_width` wide, right-aligned like the cells of :func:`row_line`)."""
    lines = _nccl_header()
    if extra_columns:                    # nccl-tests' lines end in a blank (its empty timestamp column)
        lines[2], lines[3] = lines[2][:-1], lines[3][:-1]
        lines[2] += "".join("  %*s" % (column_width(c), c[0]) for c in extra_columns)
        lines[3] += "".join("  %*s" % (column_width(c), c[1]) for c in extra_columns)
    return lines


def _nccl_header() -> list[str]:
    blank5 = ("",) * 5
    return [
        "#",
        "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          " % blank5,
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s "
        % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
           "time", "algbw", "busbw", "#wrong"),
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s "
        % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
    ]


#: nccl-tests' ``writeBenchMarkLineNullBody`` (v2.19.6 src/util.cu lines 480-485): 32 blanks where a body is not
#: measured, a character narrower than a ``%6g`` ``#wrong`` body, as wide as an ``N/A`` one
NULL_BODY = " " * 32


def _cell(res) -> str:
    if res is None:
        return NULL_BODY
    nums = (fmt_time(res.time_us), float_str(res.algbw, 6), float_str(res.busbw, 6))
    if res.wrong is None:
        return "  %7s  %6s  %6s    N/A" % nums
    return "  %7s  %6s  %6s  %6g" % (*nums, res.wrong)


def row_line(row, extra_columns=()) -> str:
    """One result row: size, count, type, redop, root, then out-of-place and in-place cells,
    then the row's ``extras`` (already formatted; as wide as their ``extra_columns``, 8 where
    none is named).  nccl-tests' ``N/A`` cell is a character narrower than a ``#wrong`` one (util.cu
    lines 508-510), and so is a measurement that is None (:data:`NULL_BODY`); before extras the row is padded to
    the header's width, so they stay in line."""
    widths = [column_width(c) for c in extra_columns]
    extras = getattr(row, "extras", ())
    line = ("%12d  %12d  %8s  %6s  %6d" % (row.size, row.count, row.type, row.redop, row.root)
            + _cell(row.out_of_place) + _cell(row.in_place))
    if not extras:
        return line
    return (line.ljust(len(_nccl_header()[2]) - 1)
            + "".join("  %*s" % (widths[k] if k < len(widths) else 8, x) for k, x in enumerate(extras)))


def min_bw_gbps(environ=os.environ) -> float | None:
    """``NCCL_TESTS_MIN_BW`` (GB/s), the average bus bandwidth below 0.9 times which nccl-tests fails a run
    (v2.19.6 src/common.cu lines 1829-1830, 1853; util.cu line 778); None when unset, empty or -1 (its
    "unchecked"); InvalidArgument for a value that is not a finite number (nccl-tests' ``atof`` would read
    it as 0 and pass every run)."""
    text = environ.get("NCCL_TESTS_MIN_BW", "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise InvalidArgument(f"NCCL_TESTS_MIN_BW={text!r} is not a number of GB/s") from None
    value = check_float(value, "NCCL_TESTS_MIN_BW (GB/s)", InvalidArgument, lo=-math.inf, hi=math.inf)
    return None if value == -1 else value


def below_min_bw(avg_busbw: float, min_bw: float | None) -> bool:
    """Whether an average bus bandwidth fails ``NCCL_TESTS_MIN_BW`` (below 0.9 times it)."""
    return min_bw is not None and avg_busbw < min_bw * 0.9


def footer_lines(summary, errors: int | None = None, avg_busbw: float | None = None, *,
                 min_bw: float | None = None, program: str | None = None) -> list[str]:
    """``# Out of bounds values`` (failing results), ``# Avg bus bandwidth`` (with ``OK`` / ``FAILED``
    against ``min_bw``, :func:`min_bw_gbps`), a final ``#`` and, given ``program``, ``# Collective test
    concluded``; ``errors`` / ``avg_busbw`` override the values computed from the rows (imported logs)."""
    errors = summary.errors if errors is None else errors
    avg = summary.avg_busbw if avg_busbw is None else avg_busbw
    verdict = "" if min_bw is None else "FAILED" if below_min_bw(avg, min_bw) else "OK"
    return [f"# Out of bounds values : {errors} {'FAILED' if errors else 'OK'}",
            "# Avg bus bandwidth    : %g %s" % (avg, verdict),
            "#"] + ([f"# Collective test concluded: {program}"] if program else [])


def is_json_name(path: str | Path) -> bool:
    """Whether nccl-tests writes ``-J path`` at all: only a name whose extension (after the last ``.`` that
    follows the last ``/``, something after it) is ``json`` in any case (v2.19.6 src/common.cu lines 135-173,
    ``getExtension`` / ``classifyOutputFile``); any other name is not written.

    >>> [is_json_name(p) for p in ("out.json", "OUT.JSON", ".json", "out.txt", "out", "a.json/b", "out.")]
    [True, True, True, False, False, False, False]
    """
    text = str(path)
    dot = text.rfind(".")
    return dot > text.rfind("/") and dot + 1 != len(text) and text[dot + 1:].lower() == "json"


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _result_json(res) -> dict | None:
    if res is None:                      # util.cu lines 482-484: "out_of_place": null
        return None
    return {"time": res.time_us, "alg_bw": res.algbw, "bus_bw": res.busbw,
            "nwrong": None if res.wrong is None else float(res.wrong)}


def json_document(cfg, devices: list, summary, *, argv: list[str],
                  start_time: str, extra: dict | None = None, min_bw: float | None = None) -> dict:
    """The ``-J`` document, key for key as nccl-tests v2.19.6 writes it (``version`` 3, src/util.cu lines 52, 356-378,
    645-664; ``experiment_name`` "" as its common.cu line 941 passes it; ``-G``, ``-z``, ``-I`` not applied: 0 and
    "false"), plus a ``topocoll`` object with what nccl-tests has no field for (backend, topology, algorithm, the
    collective's nccl-tests name) and an ``algorithm`` key per result.  ``env`` lists only ``NCCL_*`` and
    ``TOPOCOLL_*`` variables."""
    import os
    step = {"step_factor": cfg.stepfactor} if cfg.stepfactor > 1 else {"step_bytes": cfg.stepbytes}
    threads, gpus = threads_and_gpus(cfg)
    config = {"nthreads": threads, "ngpus": gpus, "minimum_bytes": cfg.minbytes, "maximum_bytes": cfg.maxbytes,
              **step, "warmup_iters": cfg.warmup, "iterations": cfg.iters, "aggregated_iterations": 1,
              "validation": cfg.check, "graph": 0, "blocking_collectives": "false", "per_iter_timing": "false",
              "per_iter_skip": 0, "parallel_init": "false",
              "devices": [{"rank": d.rank, "group": d.group, "pid": d.pid, "hostname": d.host,
                           "device": d.device, "device_hex": d.bus_id, "device_info": d.name} for d in devices]}
    results = [{"size": r.size, "count": r.count, "type": r.type, "redop": r.redop, "root": "%6i" % r.root,
                "out_of_place": _result_json(r.out_of_place), "in_place": _result_json(r.in_place),
                "actual_iterations": cfg.iters, "experiment_name": "",
                "algorithm": r.algorithm} for r in summary.rows]
    env = [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "TOPOCOLL_"))]
    return {"version": JSON_VERSION, "start_time": start_time, "args": list(argv), "env": env,
            "nccl_version": 0, "config": config, "results": results,
            "out_of_bounds": {"count": summary.errors, "okay": "true" if summary.errors == 0 else "false"},
            "average_bus_bandwidth": {"bandwidth": summary.avg_busbw, "okay": "unchecked" if min_bw is None else
                                      "false" if below_min_bw(summary.avg_busbw, min_bw) else "true"},
            "errors": [], "topocoll": {"collective": TEST_NAMES[cfg.collective], **(extra or {})}, "end_time": now()}


def json_output_line(path: str | Path) -> str:
    """What nccl-tests prints for ``-J FILE`` before the preamble (rank 0 only; v2.19.6 src/util.cu line 349)."""
    return f"# Writing JSON output to {path}"


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
