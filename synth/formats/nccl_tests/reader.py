"""Parse nccl-tests output (``all_reduce_perf`` and friends) into rows.

Every historic layout is accepted:

- the column header ``size count type [redop] [root] <groups>``: ``redop`` is absent in early
  per-collective headers (``all_gather``: ``size count type time ...``; ``broadcast``:
  ``size count type root time ...``) and the first builds spell it ``bytes N type op ... res``
  (times in ms there, converted to µs here);
- one or two (out-of-place, in-place) groups of ``time`` (or ``cputime``, ``-C 1``), ``algbw``,
  ``busbw``, then ``#wrong`` (wrong elements, ``%g`` in new builds so ``1.07374e+09`` is read
  as a count), ``error`` / ``res`` (max error of older builds) and, with per-iteration timing,
  ``i_min i_max i_p99 i_cv%``;
- a ``timestamp`` column (``%Y-%m-%d %H:%M:%S``) first or last;
- blank ``redop`` cells (builds that passed ``""`` as the op name, e.g. ``alltoall``), ``N/A``;
- the preamble (``# nThread 1 nGpus 8 minBytes 8 maxBytes ...``, also ``nThread: 1`` spellings),
  device lines ``#  Rank 0 Group 0 Pid 1 on host device 0 [bus] name`` with ``Group`` and
  ``Pid`` optional and any bus text (``[0x07]``, ``[0000:07:00]``, our own ``[cpu]``), the
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
from dataclasses import dataclass, field
from pathlib import Path

from topo_probe.errors import NcclTestsLogError
from topo_probe.guard import MAX_BYTES, MAX_GPUS, MAX_TIME_US, check_float, check_int, show

#: Largest algbw / busbw a row may show (GB/s): far above any machine, but no overflow-sized figure.
MAX_MEASURED_GBPS = 1e9

_SIZE, _COUNT = ("size", "bytes"), ("count", "n")
_TIME = ("time", "cputime")
_WRONG = {"#wrong": "#wrong", "wrong": "#wrong", "error": "error", "res": "error"}
_PER_ITER = ("i_min", "i_max", "i_p99", "i_cv%")
_N = r"(\d{1,18})(?!\d)"     # at most 18 digits: int() of thousands raises, and no count is that large
_PREAMBLE = {
    "n_threads": r"nThread:?\s+" + _N, "n_gpus": r"nGpus:?\s+" + _N, "min_bytes": r"minBytes:?\s+" + _N,
    "max_bytes": r"maxBytes:?\s+" + _N, "warmup_iters": r"warmup ?[iI]ters:\s*" + _N,
    "iters": r"(?<!warmup )(?<!agg )(?<![A-Za-z])iters:\s*" + _N, "agg_iters": r"agg iters:\s*" + _N,
    "validation": r"validation:\s*" + _N, "graph": r"graph:\s*" + _N,
}
_STEP = re.compile(r"step:\s*(\d{1,18})\((factor|bytes)\)")
_DEVICE = re.compile(r"#\s*Rank\s+(\d{1,9})\s+(?:Group\s+(\d{1,9})\s+)?(?:Pid\s+(\d{1,9})\s+)?on\s+(\S+)\s+device\s+"
                     r"(\d{1,9})\s+\[([^\]]*)\]\s*((?:\S+(?:\s+\S+)*)?)\s*$")   # not (.*?)\s*$: quadratic on blanks
_AVG = re.compile(r"#?\s*Avg bus bandwidth\s*:\s*([-+]?(?:[0-9.]+(?:[eE][-+]?\d+)?|nan|inf))")
_OOB = re.compile(r"#?\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)")
_TEST = re.compile(r"Collective test starting:\s*(\S+)")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}$")
_CLOCK = re.compile(r"\d{2}:\d{2}:\d{2}(?:\.\d+)?$")
_GLUED = re.compile(r"(\d{2}:\d{2}:\d{2})(\d+)$")


@dataclass(frozen=True)
class IterStats:
    """Per-iteration timing columns (``i_min i_max i_p99`` in µs, ``i_cv%`` in percent)."""

    min_us: float | None
    max_us: float | None
    p99_us: float | None
    cv_pct: float | None


@dataclass(frozen=True)
class Measurement:
    """One timing group: time (µs), algbw and busbw (GB/s); ``wrong`` is the ``#wrong`` count
    (int) or the ``error`` value (float) of older builds; None for ``N/A``.  ``per_iter`` holds
    the per-iteration columns when the build printed them."""

    time_us: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    wrong: int | float | None
    per_iter: IterStats | None = None


@dataclass(frozen=True)
class Row:
    """One size of the sweep.  ``root`` is None when the column is absent or shows -1;
    ``redop`` is ``""`` when the column is absent or blank; ``timestamp`` as printed."""

    size: int
    count: int
    type: str
    redop: str
    root: int | None
    out_of_place: Measurement | None
    in_place: Measurement | None
    timestamp: str | None = None


@dataclass(frozen=True)
class Device:
    """A ``# Rank r Group g Pid p on host device d [bus] name`` line (group / pid None when the
    build did not print them; ``bus_id`` is the text between the brackets)."""

    rank: int
    group: int | None
    pid: int | None
    host: str
    device: int
    bus_id: str
    name: str


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

    @property
    def collective(self) -> str | None:
        """Canonical collective of :attr:`test` (``sendrecv`` for ``sendrecv_perf``), else None."""
        from synth.formats.nccl_tests.conventions import collective_of
        return collective_of(self.test)

    @property
    def num_ranks(self) -> int | None:
        """Ranks of the run: distinct device lines (MPI runs list every rank), else ``nGpus``
        (per thread/process)."""
        distinct = {(d.rank, d.group, d.pid, d.host, d.device) for d in self.devices}
        return len(distinct) if distinct else self.n_gpus

    def busbw_values(self) -> list[float]:
        """All busbw cells (out-of-place then in-place per row), as "Avg bus bandwidth" averages."""
        out = []
        for r in self.rows:
            for m in (r.out_of_place, r.in_place):
                if m is not None and m.busbw_gbps is not None:
                    out.append(m.busbw_gbps)
        return out


@dataclass(frozen=True)
class _Layout:
    """Column structure of one header (timestamp cells excluded from ``width``)."""

    lead_ts: bool
    has_redop: bool
    has_root: bool
    groups: int
    wrong: str | None
    per_iter: bool
    trail_ts: bool
    ms: bool

    @property
    def width(self) -> int:
        group = 3 + (self.wrong is not None) + 4 * self.per_iter
        return 3 + self.has_redop + self.has_root + self.groups * group


def _num(tok: str, kind, where: str):
    if tok.upper() == "N/A":
        return None
    try:
        return kind(tok)
    except ValueError:
        raise NcclTestsLogError(f"{where}: {tok!r} is not a number") from None


def _count(tok: str, where: str) -> int | None:
    """A ``#wrong`` cell: an integer, or ``%g`` of one (``1.07374e+09``, 6 significant digits)."""
    try:
        return check_int(int(tok), f"{where}: #wrong", NcclTestsLogError, hi=MAX_BYTES)
    except ValueError:
        v = _num(tok, float, where)
    if v is None:
        return None
    if not v.is_integer():
        raise NcclTestsLogError(f"{where}: {show(tok)} is not a count of wrong elements")
    return check_int(int(v), f"{where}: #wrong", NcclTestsLogError, hi=MAX_BYTES)


def _measured(v: float | None, where: str, what: str, hi: float) -> float | None:
    """A measured cell: None (N/A) or finite in [0, hi] (a time > 0); else an error naming the cell."""
    lo_open = what.startswith("time")
    return None if v is None else check_float(v, f"{where}: {what}", NcclTestsLogError, lo=0.0, hi=hi, lo_open=lo_open)


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def _header(line: str) -> tuple[str, ...] | None:
    toks = line.lstrip("#").split()
    low = [t.lower() for t in toks]
    k = 1 if low[:1] == ["timestamp"] else 0
    if len(low) >= k + 6 and low[k] in _SIZE and low[k + 1] in _COUNT and low[k + 2] == "type":
        return tuple(toks)
    return None


def _layout(cols: tuple[str, ...], where: str) -> _Layout:
    low = [c.lower() for c in cols]
    lead, trail = low[0] == "timestamp", low[-1] == "timestamp"
    body = low[int(lead):len(low) - int(trail)]
    k = 3
    has_redop = k < len(body) and body[k] in ("redop", "op")
    k += has_redop
    has_root = k < len(body) and body[k] == "root"
    k += has_root
    shapes = []
    while k < len(body):
        if body[k] not in _TIME or body[k + 1:k + 3] != ["algbw", "busbw"]:
            raise NcclTestsLogError(f"{where}: unexpected columns {' '.join(cols)}")
        k += 3
        wrong = _WRONG.get(body[k]) if k < len(body) else None
        k += wrong is not None
        per_iter = tuple(body[k:k + 4]) == _PER_ITER
        k += 4 * per_iter
        shapes.append((wrong, per_iter))
    if len(shapes) not in (1, 2):
        raise NcclTestsLogError(f"{where}: expected 1 or 2 time/algbw/busbw groups, got {len(shapes)}")
    if shapes[0] != shapes[-1]:
        raise NcclTestsLogError(f"{where}: unexpected columns {' '.join(cols)}")
    return _Layout(lead, has_redop, has_root, len(shapes), shapes[0][0], shapes[0][1], trail, body[0] == "bytes")


def _split_timestamps(toks: list[str], lay: _Layout) -> tuple[list[str], str | None]:
    """Remove the leading / trailing ``date time`` cells the layout has; return them joined."""
    ts = []
    if lay.lead_ts and toks and _DATE.match(toks[0]):
        glued = _GLUED.match(toks[1]) if len(toks) > 1 else None   # "%21s%12li": 12-digit sizes touch
        if glued:
            toks = toks[:1] + list(glued.groups()) + toks[2:]
        n = 2 if len(toks) > 1 and _CLOCK.match(toks[1]) else 1
        ts, toks = toks[:n], toks[n:]
    if lay.trail_ts and toks and (_CLOCK.match(toks[-1]) or _DATE.match(toks[-1])):
        n = 2 if _CLOCK.match(toks[-1]) and len(toks) > 1 and _DATE.match(toks[-2]) else 1
        ts, toks = toks[-n:], toks[:-n]
    return toks, (" ".join(ts) or None)


def _row(toks: list[str], lay: _Layout, ms: bool, where: str) -> Row | None:
    """The table row of ``toks``, or None for chatter (a line of the header's width led by ``-N`` is refused)."""
    toks, ts = _split_timestamps(toks, lay)
    if not toks or not (toks[0].isdigit() or re.fullmatch(r"[-+]\d{1,30}", toks[0]) and len(toks) == lay.width):
        return None
    if lay.has_redop and len(toks) == lay.width - 1 and _is_number(toks[3]):
        toks = toks[:3] + [""] + toks[3:]          # blank redop cell (op name "")
    if len(toks) != lay.width:
        raise NcclTestsLogError(f"{where}: {len(toks) + (ts is not None)} cells, the header has "
                                f"{lay.width + lay.lead_ts + lay.trail_ts}")
    size, count = (check_int(_num(x, int, where), f"{where}: {what}", NcclTestsLogError, hi=MAX_BYTES)
                   for x, what in ((toks[0], "size"), (toks[1], "count")))
    k, redop, root = 3, "", None
    if lay.has_redop:
        redop, k = toks[3], 4
    if lay.has_root:
        root = _num(toks[k], int, where)
        root = None if root is None or root < 0 else check_int(root, f"{where}: root", NcclTestsLogError, hi=MAX_GPUS)
        k += 1
    groups = []
    for _ in range(lay.groups):
        t, a, b = (_num(x, float, where) for x in toks[k:k + 3])
        k += 3
        if ms and t is not None:
            t = round(t * 1e3, 6)
        t, a, b = (_measured(v, where, what, hi) for v, what, hi in ((t, "time (µs)", MAX_TIME_US),
                   (a, "algbw (GB/s)", MAX_MEASURED_GBPS), (b, "busbw (GB/s)", MAX_MEASURED_GBPS)))
        w = it = None
        if lay.wrong == "error":
            w, k = _measured(_num(toks[k], float, where), where, "error", math.inf), k + 1
        elif lay.wrong:
            w, k = _count(toks[k], where), k + 1
        if lay.per_iter:
            it = IterStats(*(_measured(_num(x, float, where), where, "i_*", MAX_TIME_US) for x in toks[k:k + 4]))
            k += 4
        groups.append(Measurement(t, a, b, w, it))
    return Row(size, count, toks[2], redop, root, groups[0], groups[1] if lay.groups == 2 else None, ts)


def _start(log: NcclTestsLog, cols: tuple[str, ...], lay: _Layout) -> None:
    log.columns, log.has_root, log.has_redop = cols, lay.has_root, lay.has_redop
    log.wrong_column = lay.wrong or "#wrong"


def parse_nccl_tests(text: str, source: str = "nccl-tests log") -> NcclTestsLog:
    """Parse nccl-tests output text (see the module docstring).

    Raises
    ------
    NcclTestsLogError
        No column header, a second header with other columns, or a table row with the wrong
        number of cells / a non-number (the message names the source and line).
    """
    log, lay = NcclTestsLog([], (), False, "#wrong"), None
    for ln, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        where = f"{source}: line {ln}"
        cols = _header(s) if s.startswith("#") else None
        if cols is not None:
            new = _layout(cols, where)
            if lay is not None and new != lay:
                raise NcclTestsLogError(f"{where}: a second column header with other columns "
                                        f"({' '.join(cols)}); split the log per run")
            if lay is None:
                _start(log, cols, new)
            lay, log.time_unit = new, "ms" if new.ms else "us"
        elif s.startswith("#") or s.startswith(("Out of bounds", "Avg bus")):
            if lay is not None and "(elements)" in s and ("(ms)" in s or "(us)" in s):
                log.time_unit = "ms" if "(ms)" in s else "us"      # the units line under the header
            _meta(log, s, where)
        elif s and lay is not None:       # rows before any header, NCCL INFO lines: skipped
            row = _row(s.split(), lay, log.time_unit == "ms", where)
            if row is not None:
                log.rows.append(row)
    if lay is None:
        raise NcclTestsLogError(f"{source}: no nccl-tests column header (# size count type redop ...)")
    return log


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
    m = _DEVICE.match(line)
    if m:
        r, g, pid, host, dev, bus, name = m.groups()
        log.devices.append(Device(int(r), None if g is None else int(g), None if pid is None else int(pid),
                                  host, int(dev), bus, name))
        return
    m = _AVG.match(line)
    if m:       # nccl-tests prints nan (0 / 0) when it measured no row: None
        v = _num(m.group(1), float, f"{where}: Avg bus bandwidth {show(m.group(1))}")
        log.avg_busbw_gbps = None if math.isnan(v) else _measured(v, where, "Avg bus bandwidth", MAX_MEASURED_GBPS)
        return
    m = _OOB.match(line)
    if m and len(m.group(1)) <= 18:
        log.out_of_bounds = int(m.group(1))


def read_log_text(path: str | Path) -> str:
    """The text of a log file (undecodable bytes replaced; errors name the file)."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise NcclTestsLogError(f"{p}: cannot read: {e.strerror}") from None
