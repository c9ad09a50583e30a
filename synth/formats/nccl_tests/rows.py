"""The table of an nccl-tests log: the column layout a header line announces, and the rows under it.

:func:`header_of` reads a header line, :func:`layout_of` its columns (one or two groups, the
``in-place`` banner above it), :func:`row_of` one row under it (see
:mod:`synth.formats.nccl_tests.reader` for every layout accepted).  Units: size in bytes, count in
elements per rank, time in µs, algbw/busbw in GB/s (1e9 B/s), as nccl-tests.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from topo_probe.errors import NcclTestsLogError, show
from topo_probe.limits import MAX_BYTES, MAX_GPUS, MAX_TIME_US
from topo_probe.number_checks import check_float, check_int

#: Largest algbw / busbw a row may show (GB/s): far above any machine, but no overflow-sized figure.
MAX_MEASURED_GBPS = 1e9

_SIZE, _COUNT = ("size", "bytes"), ("count", "n")
_TIME = ("time", "cputime")
_WRONG = {"#wrong": "#wrong", "wrong": "#wrong", "error": "error", "res": "error"}
_PER_ITER = ("i_min", "i_max", "i_p99", "i_cv%")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}$")
_CLOCK = re.compile(r"\d{2}:\d{2}:\d{2}(?:\.\d+)?$")
_GLUED = re.compile(r"(\d{2}:\d{2}:\d{2})(\d+)$")
_NULL_BODY = re.compile(r"\S {32,}\S")        # writeBenchMarkLineNullBody: 32 blanks between root and in-place


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
    ``redop`` is ``""`` when the column is absent or blank; ``timestamp`` as printed; ``line`` the
    1-based line of the text it was read from (the file's, read by :func:`~synth.formats.nccl_tests.runs.parse_runs`;
    not compared)."""

    size: int
    count: int
    type: str
    redop: str
    root: int | None
    out_of_place: Measurement | None
    in_place: Measurement | None
    timestamp: str | None = None
    line: int | None = field(default=None, compare=False)



@dataclass(frozen=True)
class Layout:
    """Column structure of one header (timestamp cells excluded from ``width``)."""

    lead_ts: bool
    has_redop: bool
    has_root: bool
    groups: int
    wrong: str | None
    per_iter: bool
    trail_ts: bool
    ms: bool
    #: one group, under an ``in-place`` banner (rccl-tests ``-O 0``)
    in_place_only: bool = False

    @property
    def group_width(self) -> int:
        return 3 + (self.wrong is not None) + 4 * self.per_iter

    @property
    def width(self) -> int:
        return 3 + self.has_redop + self.has_root + self.groups * self.group_width


def number(tok: str, kind, where: str):
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
        v = number(tok, float, where)
    if v is None:
        return None
    if not v.is_integer():
        raise NcclTestsLogError(f"{where}: {show(tok)} is not a count of wrong elements")
    return check_int(int(v), f"{where}: #wrong", NcclTestsLogError, hi=MAX_BYTES)


def measured(v: float | None, where: str, what: str, hi: float) -> float | None:
    """A measured cell: None (N/A) or finite in [0, hi] (a time > 0); else an error naming the cell."""
    lo_open = what.startswith("time")
    return None if v is None else check_float(v, f"{where}: {what}", NcclTestsLogError, lo=0.0, hi=hi, lo_open=lo_open)


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def header_of(line: str) -> tuple[str, ...] | None:
    toks = line.lstrip("#").split()
    low = [t.lower() for t in toks]
    k = 1 if low[:1] == ["timestamp"] else 0
    if len(low) >= k + 6 and low[k] in _SIZE and low[k + 1] in _COUNT and low[k + 2] == "type":
        return tuple(toks)
    return None


def layout_of(cols: tuple[str, ...], where: str, banner: str | None = None) -> Layout:
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
    return Layout(lead, has_redop, has_root, len(shapes), shapes[0][0], shapes[0][1], trail, body[0] == "bytes",
                   len(shapes) == 1 and banner == "in-place")


def _split_timestamps(toks: list[str], lay: Layout) -> tuple[list[str], str | None]:
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


class ShortRow(NcclTestsLogError):
    """A row with fewer cells than its header: the cut-off last row of a killed run, else an error."""


def row_of(line: str, lay: Layout, ms: bool, where: str) -> Row | None:
    """The table row of ``line``, or None for chatter (a line of the header's width led by ``-N`` is refused)."""
    toks, ts = _split_timestamps(line.split(), lay)
    if not toks or not (toks[0].isdigit() or re.fullmatch(r"[-+]\d{1,30}", toks[0]) and len(toks) == lay.width):
        return None
    gw = lay.group_width
    if lay.has_redop and len(toks) in (lay.width - 1, lay.width - 1 - gw) and _is_number(toks[3]):
        toks = toks[:3] + [""] + toks[3:]          # blank redop cell (op name "")
    null = lay.groups == 2 and len(toks) == lay.width - gw and _NULL_BODY.search(line) is not None
    if len(toks) != lay.width and not null:
        raise (ShortRow if len(toks) < lay.width else NcclTestsLogError)(
            f"{where}: {len(toks) + (ts is not None)} cells, the header has {lay.width + lay.lead_ts + lay.trail_ts}")
    size, count = (check_int(number(x, int, where), f"{where}: {what}", NcclTestsLogError, hi=MAX_BYTES)
                   for x, what in ((toks[0], "size"), (toks[1], "count")))
    k, redop, root = 3, "", None
    if lay.has_redop:
        redop, k = toks[3], 4
    if lay.has_root:
        root = number(toks[k], int, where)
        root = None if root is None or root < 0 else check_int(root, f"{where}: root", NcclTestsLogError, hi=MAX_GPUS)
        k += 1
    groups = []
    for _ in range(lay.groups - null):
        t, a, b = (number(x, float, where) for x in toks[k:k + 3])
        k += 3
        if ms and t is not None:
            t = round(t * 1e3, 6)
        t, a, b = (measured(v, where, what, hi) for v, what, hi in ((t, "time (µs)", MAX_TIME_US),
                   (a, "algbw (GB/s)", MAX_MEASURED_GBPS), (b, "busbw (GB/s)", MAX_MEASURED_GBPS)))
        w = it = None
        if lay.wrong == "error":
            w, k = measured(number(toks[k], float, where), where, "error", math.inf), k + 1
        elif lay.wrong:
            w, k = _count(toks[k], where), k + 1
        if lay.per_iter:
            it = IterStats(*(measured(number(x, float, where), where, "i_*", MAX_TIME_US) for x in toks[k:k + 4]))
            k += 4
        groups.append(Measurement(t, a, b, w, it))
    if null or lay.in_place_only:
        return Row(size, count, toks[2], redop, root, None, groups[0], ts)
    return Row(size, count, toks[2], redop, root, groups[0], groups[1] if lay.groups == 2 else None, ts)


__all__ = ["MAX_MEASURED_GBPS", "IterStats", "Measurement", "Row", "Layout", "ShortRow", "header_of", "layout_of",
           "row_of", "number", "measured"]
