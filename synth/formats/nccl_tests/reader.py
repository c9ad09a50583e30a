"""Parse nccl-tests output (``all_reduce_perf`` and friends) into rows.

Every historic layout is accepted:

- the column header ``size count type [redop] [root] <groups>``: ``redop`` is absent in early
  per-collective headers (``all_gather``: ``size count type time ...``; ``broadcast``:
  ``size count type root time ...``) and the first builds spell it ``bytes N type op ... res``
  (times in ms there, converted to µs here);
- one or two (out-of-place, in-place) groups of ``time`` (or ``cputime``, ``-C 1``), ``algbw``,
  ``busbw``, then ``#wrong`` (wrong elements, ``%g`` in new builds so ``1.07374e+09`` is read
  as a count), ``error`` / ``res`` (max error of older builds) and, with per-iteration timing,
  ``i_min i_max i_p99 i_cv%``; one group under an ``in-place`` banner is in-place (rccl-tests ``-O 0``,
  common.cu:1330-1333 at ae3e635), else out-of-place;
- rows with a blank out-of-place body (nccl-tests' ``writeBenchMarkLineNullBody``, 32 blanks, v2.19.6
  util.cu:480-485): in-place only;
- a run cut off mid-row (a killed job): its last row, short of cells with no row or footer after
  it, is left out with a note in ``notes``; a short row anywhere else is an error;
- a ``timestamp`` column (``%Y-%m-%d %H:%M:%S``) first or last;
- blank ``redop`` cells (builds that passed ``""`` as the op name, e.g. ``alltoall``), ``N/A``;
- the preamble (``# nThread 1 nGpus 8 minBytes 8 maxBytes ...``, also ``nThread: 1`` spellings),
  device lines ``#  Rank 0 Group 0 Pid 1 on host device 0 [bus] name`` with ``Group`` and
  ``Pid`` optional and any bus text (:mod:`~synth.formats.nccl_tests.device_line`; one that begins as a
  device line and does not end as one is an error naming the line, except the one nccl-tests cut at 2,048 bytes with
  ``...``: skipped, with a note), the
  ``Out of bounds values`` and ``Avg bus bandwidth`` lines (with or without ``#``).

Other lines (NCCL INFO/WARN, blanks, rows before the first header) are skipped.  Units: size in bytes,
count in elements per rank, time in µs, algbw/busbw in GB/s (1e9 B/s), as nccl-tests.

Examples
--------
>>> text = '''#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
... #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
...            8             2     float     sum      -1    40.12    0.00    0.00      0    38.85    0.00    0.00      0
... # Avg bus bandwidth    : 0.0000
... '''
>>> log = parse_nccl_tests(text)
>>> r = log.rows[0]
>>> r.size, r.count, r.type, r.redop, r.root, r.out_of_place.time_us, r.in_place.wrong
(8, 2, 'float', 'sum', None, 40.12, 0)
>>> old = parse_nccl_tests('#  bytes  N  type  op  time  algbw  busbw  res\\n  1000000  250000  float  sum  0.125  8.00  12.00  0e+00\\n')
>>> old.rows[0].out_of_place.time_us, old.wrong_column, old.time_unit
(125.0, 'error', 'ms')
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from synth.formats.nccl_tests.device_line import Device, is_cut_device_line, parse_device_line
from synth.formats.nccl_tests.rows import (MAX_MEASURED_GBPS, IterStats, Layout, Measurement, Row, ShortRow, header_of,
                                           layout_of, measured, number, row_of)
from synth.formats.nccl_tests.textio import log_lines, read_log_text
from topo_probe.errors import NcclTestsLogError, show

_N = r"(\d{1,18})(?!\d)"     # at most 18 digits: int() of thousands raises, and no count is that large
_PREAMBLE = {
    "n_threads": r"nThread:?\s+" + _N, "n_gpus": r"nGpus:?\s+" + _N, "min_bytes": r"minBytes:?\s+" + _N,
    "max_bytes": r"maxBytes:?\s+" + _N, "warmup_iters": r"warmup ?[iI]ters:\s*" + _N,
    "iters": r"(?<!warmup )(?<!agg )(?<![A-Za-z])iters:\s*" + _N, "agg_iters": r"agg iters:\s*" + _N,
    "validation": r"validation:\s*" + _N, "graph": r"graph:\s*" + _N,
}
_STEP = re.compile(r"step:\s*(\d{1,18})\((factor|bytes)\)")
_AVG = re.compile(r"#?\s*Avg bus bandwidth\s*:\s*([-+]?(?:[0-9.]+(?:[eE][-+]?\d+)?|nan|inf))")
_OOB = re.compile(r"#?\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)")
_TEST = re.compile(r"Collective test starting:\s*(\S+)")
_BANNER = re.compile(r"#\s*((?:out-of-place\s+)?in-place)\b")


@dataclass
class NcclTestsLog:
    """A parsed nccl-tests run; ``columns`` is the header as printed (``root`` / ``#wrong`` /
    ``error``); ``time_unit`` is the unit the log printed (times here are always µs)."""

    rows: list[Row]
    columns: tuple[str, ...]
    has_root: bool
    wrong_column: str
    avg_busbw_gbps: float | None = None
    out_of_bounds: int | None = None
    devices: list[Device] = field(default_factory=list)
    #: device lists nccl-tests cut at 2,048 bytes (``...``, v2.19.6 src/util.cu lines 668-694): ranks missing there
    cut_device_lists: int = 0
    n_threads: int | None = None
    n_gpus: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    step: int | None = None
    step_kind: str | None = None
    warmup_iters: int | None = None
    iters: int | None = None
    agg_iters: int | None = None
    validation: int | None = None
    graph: int | None = None
    has_redop: bool = True
    time_unit: str = "us"
    #: the nccl-tests binary (``all_reduce_perf``) when the log names it, else None
    test: str | None = None
    #: set by ``parse_runs``: the NCCL/RCCL (major, minor, patch) and network (``network_of``) its lines name
    nccl_version: tuple[int, int, int] | None = None
    network: object | None = None
    #: what the reader left out or chose (a cut-off last row, ``-N`` cycles), one sentence each
    notes: list[str] = field(default_factory=list)
    #: times the whole size sequence repeats (nccl-tests ``-N``, common.cu:934-943 at v2.19.6), set by ``parse_runs``
    cycles: int = 1
    #: rows above the first footer line (``Out of bounds values`` / ``Avg bus bandwidth``), None without one
    footer_row: int | None = None

    @property
    def collective(self) -> str | None:
        """Canonical collective of :attr:`test` (``sendrecv`` for ``sendrecv_perf``), else None."""
        from synth.formats.nccl_tests.conventions import collective_of
        return collective_of(self.test)

    @property
    def num_ranks(self) -> int | None:
        """Ranks of the run: distinct device lines (every process lists its ``nThread * nGpus``
        ranks, util.cu:675-687 at v2.19.6), else ``nThread * nGpus`` (one process: nccl-tests'
        ``nranks = nProcs*nGpus*nThreads``, common.cu:901).  Where nccl-tests cut a list (:attr:`cut_device_lists`),
        the highest rank listed, rounded up to whole processes of :attr:`ranks_per_process` (a process's ranks are
        ``proc*nThreads*nGpus+i``, util.cu:676, and each list keeps its first lines)."""
        distinct = {(d.rank, d.group, d.pid, d.host, d.device) for d in self.devices}
        if distinct and self.cut_device_lists:
            per = self.ranks_per_process
            return max(len(distinct), -(-(max(d.rank for d in self.devices) + 1) // per) * per)
        if distinct:
            return len(distinct)
        return self.ranks_per_process if self.n_gpus else self.n_gpus

    @property
    def ranks_per_process(self) -> int:
        """GPUs one process of the run drives: ``nThread * nGpus`` (nccl-tests' ``-t`` threads of ``-g`` GPUs each,
        common.cu:901 at v2.19.6); 1 where the log prints neither.  :attr:`num_ranks` counts all processes."""
        return (self.n_gpus or 1) * self.threads_per_process

    @property
    def threads_per_process(self) -> int:
        """Threads one process of the run splits its GPUs over (nccl-tests' ``-t``, each thread enqueueing its own
        ``nGpus`` GPUs: common.cu lines 548-619 and 1725-1768 at v2.19.6); 1 where the log prints none."""
        return self.n_threads or 1

    def machine_fields(self) -> dict:
        """The NCCL model's machine settings this log gives: ``gpus_per_process`` (:attr:`ranks_per_process`),
        ``threads_per_process`` (each thread enqueues its own ``-g`` GPUs: the host time) and, where the first
        device line names a known GPU, its ``arch`` (``sm90``, ``gfx942``...)."""
        from synth.model.nccl.machine import arch_of_gpu_name
        out = {"gpus_per_process": self.ranks_per_process, "threads_per_process": self.threads_per_process}
        arch = arch_of_gpu_name(self.devices[0].name) if self.devices else None
        return {**out, "arch": arch} if arch else out

    def busbw_values(self) -> list[float]:
        """All busbw cells (out-of-place then in-place per row), as "Avg bus bandwidth" averages."""
        out = []
        for r in self.rows:
            for m in (r.out_of_place, r.in_place):
                if m is not None and m.busbw_gbps is not None:
                    out.append(m.busbw_gbps)
        return out


def _start(log: NcclTestsLog, cols: tuple[str, ...], lay: Layout) -> None:
    log.columns, log.has_root, log.has_redop = cols, lay.has_root, lay.has_redop
    log.wrong_column = lay.wrong or "#wrong"


def parse_nccl_tests(text: str, source: str = "nccl-tests log", cut_ok: bool = True,
                     file_lines: list[int] | None = None) -> NcclTestsLog:
    """Parse nccl-tests output text (see the module docstring); ``cut_ok``: a short last row is
    left out with a note (a run cut off), else it is an error too.  Each row records its line
    (``Row.line``), and each error names its line: of ``text``, or ``file_lines[i]`` for the text's
    line ``i + 1`` when given (the line of the user's file when ``text`` is one run cut out of it).

    Raises
    ------
    NcclTestsLogError
        No column header, a second header with other columns, or a table row with the wrong
        number of cells / a non-number (the message names the source and line).
    """
    log, lay, banner, short = NcclTestsLog([], (), False, "#wrong"), None, None, None
    for ln, line in enumerate(log_lines(text), 1):
        s = line.strip()
        at = ln if file_lines is None else file_lines[ln - 1]
        where = f"{source}: line {at}"
        cols = header_of(s) if s.startswith("#") else None
        if short is not None and (cols is not None or s.startswith(("#", "Out of bounds", "Avg bus"))
                                  and (_AVG.match(s) or _OOB.match(s))):
            raise short                 # more of the table after a short row: it was not cut off
        if cols is not None:
            new = layout_of(cols, where, banner)
            if lay is not None and new != lay:
                raise NcclTestsLogError(f"{where}: a second column header with other columns "
                                        f"({' '.join(cols)}); split the log per run")
            if lay is None:
                _start(log, cols, new)
            lay, log.time_unit = new, "ms" if new.ms else "us"
        elif s.startswith("#") or s.startswith(("Out of bounds", "Avg bus")):
            if lay is not None and "(elements)" in s and ("(ms)" in s or "(us)" in s):
                log.time_unit = "ms" if "(ms)" in s else "us"      # the units line under the header
            if log.footer_row is None and (_AVG.match(s) or _OOB.match(s)):
                log.footer_row = len(log.rows)
            m = _BANNER.match(s)
            banner = m.group(1).split()[0] if m and s[m.end():].strip() == "" else banner
            _meta(log, s, where)
        elif s and lay is not None:       # rows before any header, NCCL INFO lines: skipped
            row, short = _table_row(s, lay, log.time_unit == "ms", where, short)
            if row is not None:
                log.rows.append(replace(row, line=at))
    if lay is None:
        raise NcclTestsLogError(f"{source}: no nccl-tests column header (# size count type redop ...)")
    if short is not None:
        if not cut_ok:
            raise short
        log.notes.append(f"{short}: a row cut short (the run was stopped?), left out")
    return log


def _table_row(s: str, lay: Layout, ms: bool, where: str, short: ShortRow | None):
    """(row or None, the pending short row): a second row after a short one raises the short one."""
    try:
        row = row_of(s, lay, ms, where)
    except ShortRow as e:
        if short is not None:
            raise short from None
        return None, e
    if row is not None and short is not None:
        raise short
    return row, short


def _meta(log: NcclTestsLog, line: str, where: str = "nccl-tests log") -> None:
    m = _TEST.search(line)
    if m:
        log.test = log.test or m.group(1)
        return
    if "nThread" in line or "minBytes" in line:
        for key, pat in _PREAMBLE.items():
            m = re.search(pat, line)
            if m:
                setattr(log, key, int(m.group(1)))
        m = _STEP.search(line)
        if m:
            log.step, log.step_kind = int(m.group(1)), m.group(2)
        return
    if is_cut_device_line(line):      # nccl-tests' own 2,048-byte cut (v2.19.6 src/util.cu lines 668-694)
        log.cut_device_lists += 1
        log.notes.append(f"{where}: a device list cut at 2,048 bytes by nccl-tests itself, "
                         "the ranks after it not listed")
        return
    dev = parse_device_line(line, where)
    if dev is not None:
        log.devices.append(dev)
        return
    m = _AVG.match(line)
    if m:       # nccl-tests prints nan (0 / 0) when it measured no row: None
        v = number(m.group(1), float, f"{where}: Avg bus bandwidth {show(m.group(1))}")
        log.avg_busbw_gbps = None if math.isnan(v) else measured(v, where, "Avg bus bandwidth", MAX_MEASURED_GBPS)
        return
    m = _OOB.match(line)
    if m and len(m.group(1)) <= 18:
        log.out_of_bounds = int(m.group(1))


__all__ = ["IterStats", "Measurement", "Row", "NcclTestsLog", "parse_nccl_tests", "read_log_text",
           "MAX_MEASURED_GBPS"]
