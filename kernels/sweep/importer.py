"""``sweep --import LOG``: read a real nccl-tests log into sweep rows.

Parsing is :mod:`synth.formats.nccl_tests.reader`'s (every historic layout: with or without the root
column, ``#wrong`` or ``error``); this module turns its rows into :class:`synth.sweep.driver.Row`
so that a measured NCCL curve prints in our layout and plots next to our predictions.

Conversions: a missing or ``-1`` root becomes ``-1``; ``#wrong`` counts are kept; older builds'
``error`` column (a maximum error, not a count) and ``N/A`` cells become ``wrong=None``.  A row
without an out-of-place measurement (rccl-tests ``-O 0``, nccl-tests' blank body) keeps None there, which the
writer prints as nccl-tests' ``writeBenchMarkLineNullBody`` (32 blanks, util.cu:480-485 at v2.19.6) and the
summary leaves out of its average; it plots its in-place numbers; a ``-N`` log (whole cycles of its sizes)
re-prints every row and plots its first cycle; the reader's notes (a cut-off last row, cycles) print as ``#`` lines,
as does a warning per row whose numbers disagree (:mod:`synth.formats.nccl_tests.consistency`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from synth.formats.nccl_tests.consistency import inconsistent_notes
from synth.formats.nccl_tests.reader import NcclTestsLog, parse_nccl_tests
from synth.formats.nccl_tests.runs import check_sizes_once, load_nccl_tests, one_cycle
from synth.sweep.driver import Result, Row, SweepSummary
from topo_probe.errors import NcclTestsLogError


@dataclass
class ImportedLog:
    """Sweep rows of a log (``rows``), plus the parsed log itself (``log``: preamble, devices)."""

    rows: list[Row]
    log: NcclTestsLog

    @property
    def summary(self) -> SweepSummary:
        return SweepSummary(list(self.rows))


def _result(m, counts_wrong: bool) -> Result | None:
    if m is None:
        return None
    wrong = int(m.wrong) if counts_wrong and m.wrong is not None else None
    return Result(m.time_us or 0.0, m.algbw_gbps or 0.0, m.busbw_gbps or 0.0, wrong)


def from_log(log: NcclTestsLog) -> ImportedLog:
    """Convert a parsed log (see the module docstring for the conversions)."""
    counts = log.wrong_column == "#wrong"
    rows = [Row(r.size, r.count, r.type, r.redop, -1 if r.root is None else r.root,
                _result(r.out_of_place, counts), _result(r.in_place, counts), "nccl")
            for r in log.rows]
    return ImportedLog(rows, log)


def read_log(path: str | Path, collective: str | None = None) -> ImportedLog:
    """Read an nccl-tests log file: its only test, or its test of ``collective`` (any spelling).

    Raises
    ------
    NcclTestsLogError
        Bad input (names the file and line), no test of ``collective`` in the file, a log of
        another collective (told by its test line or its file name), or a size twice in one
        type/op/root series (two runs' rows in one table: a plot would zig-zag).
    """
    from synth.formats.nccl_tests.runs import collective_of, guess_collective
    log = load_nccl_tests(path, collective)
    have = guess_collective(log, path)
    if collective is not None and have is not None and have != collective_of(collective):
        raise NcclTestsLogError(f"{path}: a {have} log, not {collective_of(collective)}")
    check_sizes_once(log.rows, str(path), log.cycles, log, have or collective_of(collective))
    return from_log(_checked(log, path))


def _checked(log: NcclTestsLog, path: str | Path) -> NcclTestsLog:
    """``log`` with a warning among its notes per row whose numbers disagree (a mangled copy?)."""
    log.notes += [f"warning: {line}" for line in inconsistent_notes(log, path)]
    return log


def parse_text(text: str, source: str = "nccl-tests output") -> ImportedLog:
    """Parse nccl-tests text, e.g. what ``sweep`` itself printed."""
    return from_log(parse_nccl_tests(text, source))


def measured_series(path: str | Path, collective: str | None = None) -> list:
    """The log's out-of-place busbw as ``measured`` plot series (one per type/op/root group; the first
    cycle of a ``-N`` log); in-place where a row has no out-of-place measurement."""
    from kernels.sweep.compare import series_from_rows
    imp = read_log(path, collective)
    n = imp.log.num_ranks
    rows = [r if r.out_of_place is not None else replace(r, out_of_place=r.in_place) for r in imp.rows]
    in_place = " in-place" if any(r.out_of_place is None for r in imp.rows) else ""
    label = f"NCCL measured{in_place}" + (f" ({n} ranks)" if n else "")
    return series_from_rows(label, "measured", [r for r in one_cycle(rows, 1, imp.log.cycles) if r.out_of_place.time_us > 0])


def log_lines(imp: ImportedLog, source: str) -> list[str]:
    """The log re-printed in our layout: its parameter line, a ``# sweep --import`` note, its
    device lines, the header, every row and the summary (the log's own values when it has them)."""
    from synth.formats.nccl_tests import writer as output

    log = imp.log
    out = []
    if log.n_gpus is not None and log.min_bytes is not None:
        step = f"{log.step}({log.step_kind})" if log.step is not None else "?"
        out.append(f"# nThread {log.n_threads or 1} nGpus {log.n_gpus} minBytes {log.min_bytes} maxBytes "
                   f"{log.max_bytes} step: {step} warmup iters: {log.warmup_iters} iters: {log.iters} "
                   f"agg iters: {log.agg_iters or 1} validation: {log.validation} graph: {log.graph or 0}")
    out.append(f"# sweep --import {source}: {len(imp.rows)} rows, {log.num_ranks or '?'} ranks, root column "
               f"{'yes' if log.has_root else 'no'}, {log.wrong_column} column")
    out += [f"# note: {note}" for note in log.notes]
    out += ["#", "# Using devices"]
    out += ["#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s"
            % (d.rank, d.group or 0, d.pid or 0, d.host, d.device, d.bus_id, d.name) for d in log.devices]
    out += output.header_lines()
    out += [output.row_line(row) for row in imp.rows]
    out += output.footer_lines(imp.summary, log.out_of_bounds, log.avg_busbw_gbps)
    return out


def import_only(path: str | Path, plot_path: str | None = None, csv_path: str | None = None) -> int:
    """Print every test of the log in our layout (and plot a one-test log); exit status 1 if it
    reported wrong results.  A log that cannot be plotted (several tests, a size twice in one
    series) is refused before any row is printed."""
    from synth.formats.nccl_tests.runs import guess_collective, load_runs
    runs = [from_log(_checked(r, path)) for r in load_runs(path)]
    if plot_path is not None:
        if len(runs) > 1:
            raise NcclTestsLogError(f"{path} holds {len(runs)} tests; name the collective to plot one "
                                    f"(sweep COLLECTIVE --import LOG --plot OUT.png)")
        log = runs[0].log
        check_sizes_once(log.rows, str(path), log.cycles, log, guess_collective(log, path))
    for k, imp in enumerate(runs, 1):
        name = f" (run {k}{': ' + imp.log.test if imp.log.test else ''})" if len(runs) > 1 else ""
        for line in log_lines(imp, str(path) + name):
            print(line, flush=True)
    if plot_path is not None:
        from kernels.sweep import compare
        series = measured_series(path)
        csv = Path(csv_path) if csv_path else Path(plot_path).with_suffix(".csv")
        compare.write_csv(csv, series)
        compare.plot(plot_path, series, f"nccl-tests log {Path(path).name}")
        print(f"# Wrote {plot_path} and {csv}", flush=True)
    return 1 if any(r.log.out_of_bounds or r.summary.errors for r in runs) else 0
