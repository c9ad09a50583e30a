"""Parse nccl-tests output (``all_reduce_perf`` and friends) into rows.

Every historic layout is accepted: with or without the ``root`` column, ``#wrong`` (count of
wrong elements) or ``error`` (max abs error, older builds) columns, out-of-place and in-place
groups, ``N/A`` cells, the preamble (``# nThread 1 nGpus 8 minBytes 8 maxBytes ...``), device
lines (``#  Rank  0 Group  0 Pid ... device  0 [0x07] NVIDIA A100-SXM4-80GB``, ``Group`` absent in
old builds), the ``# Out of bounds values`` and ``# Avg bus bandwidth`` lines.  Lines that are not
part of the table (NCCL INFO/WARN output, blank lines) are skipped.

Units follow nccl-tests: size in bytes, count in elements (per rank), time in µs, algbw and
busbw in GB/s (1e9 bytes/s).

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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from topo_probe.errors import NcclTestsLogError

_FIXED = ("size", "count", "type", "redop")
_GROUP = ("time", "algbw", "busbw")
_PREAMBLE = {
    "n_threads": r"nThread\s+(\d+)", "n_gpus": r"nGpus\s+(\d+)", "min_bytes": r"minBytes\s+(\d+)",
    "max_bytes": r"maxBytes\s+(\d+)", "warmup_iters": r"warmup iters:\s*(\d+)",
    "iters": r"(?<!warmup )(?<!agg )iters:\s*(\d+)", "agg_iters": r"agg iters:\s*(\d+)",
    "validation": r"validation:\s*(\d+)", "graph": r"graph:\s*(\d+)",
}
_STEP = re.compile(r"step:\s*(\d+)\((factor|bytes)\)")
_DEVICE = re.compile(r"#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                     r"\[(0x[0-9a-fA-F]+)\]\s+(.*?)\s*$")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+|nan|inf)")
_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)")


@dataclass(frozen=True)
class Measurement:
    """One timing group: time (µs), algbw and busbw (GB/s); ``wrong`` is the ``#wrong`` count
    (int) or the ``error`` value (float) of older builds; None for ``N/A``."""

    time_us: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    wrong: int | float | None


@dataclass(frozen=True)
class Row:
    """One size of the sweep.  ``root`` is None when the column is absent or shows -1."""

    size: int
    count: int
    type: str
    redop: str
    root: int | None
    out_of_place: Measurement | None
    in_place: Measurement | None


@dataclass(frozen=True)
class Device:
    """A ``# Rank r Group g Pid p on host device d [bus] name`` line (group None in old builds)."""

    rank: int
    group: int | None
    pid: int
    host: str
    device: int
    bus_id: str
    name: str


@dataclass
class NcclTestsLog:
    """A parsed nccl-tests run; ``columns`` is the header as printed (``root`` / ``#wrong`` / ``error``)."""

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

    @property
    def num_ranks(self) -> int | None:
        """Ranks of the run: device lines counted, else ``nGpus`` (per thread/process)."""
        return len(self.devices) if self.devices else self.n_gpus

    def busbw_values(self) -> list[float]:
        """All busbw cells (out-of-place then in-place per row), as "Avg bus bandwidth" averages."""
        out = []
        for r in self.rows:
            for m in (r.out_of_place, r.in_place):
                if m is not None and m.busbw_gbps is not None:
                    out.append(m.busbw_gbps)
        return out


def _num(tok: str, kind, where: str):
    if tok.upper() == "N/A":
        return None
    try:
        return kind(tok)
    except ValueError:
        raise NcclTestsLogError(f"{where}: {tok!r} is not a number") from None


def _header(line: str) -> tuple[str, ...] | None:
    toks = line.lstrip("#").split()
    if len(toks) >= 7 and tuple(t.lower() for t in toks[:4]) == _FIXED:
        return tuple(toks)
    return None


def _layout(cols: tuple[str, ...], where: str) -> tuple[bool, str, int]:
    has_root = len(cols) > 4 and cols[4].lower() == "root"
    rest = [c.lower() for c in cols[5 if has_root else 4:]]
    groups, wrong = 0, "#wrong"
    k = 0
    while k < len(rest):
        if tuple(rest[k:k + 3]) != _GROUP:
            raise NcclTestsLogError(f"{where}: unexpected columns {' '.join(cols)}")
        k += 3
        if k < len(rest) and rest[k] in ("#wrong", "error", "wrong"):
            wrong = "error" if rest[k] == "error" else "#wrong"
            k += 1
        groups += 1
    if groups not in (1, 2):
        raise NcclTestsLogError(f"{where}: expected 1 or 2 time/algbw/busbw groups, got {groups}")
    return has_root, wrong, groups


def parse_nccl_tests(text: str, source: str = "nccl-tests log") -> NcclTestsLog:
    """Parse nccl-tests output text (see the module docstring).

    Raises
    ------
    NcclTestsLogError
        No column header, or a table row with the wrong number of cells / a non-number.
    """
    lines = text.splitlines()
    cols = None
    for ln, line in enumerate(lines, 1):
        if line.lstrip().startswith("#") and _header(line):
            cols, header_line = _header(line), ln
            break
    if cols is None:
        raise NcclTestsLogError(f"{source}: no nccl-tests column header (# size count type redop ...)")
    has_root, wrong_col, groups = _layout(cols, f"{source}: line {header_line}")
    per_group = [g for g in cols[5 if has_root else 4:]]
    width = len(cols)
    wrong_in_group = len(per_group) // groups == 4
    log = NcclTestsLog([], cols, has_root, wrong_col)
    for ln, line in enumerate(lines, 1):
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            _meta(log, s)
            continue
        toks = s.split()
        if not toks[0].isdigit():
            continue                      # NCCL INFO lines and other chatter
        where = f"{source}: line {ln}"
        if len(toks) != width:
            raise NcclTestsLogError(f"{where}: {len(toks)} cells, the header has {width}")
        size, count = _num(toks[0], int, where), _num(toks[1], int, where)
        k = 4
        root = None
        if has_root:
            root = _num(toks[4], int, where)
            root = None if root is None or root < 0 else root
            k = 5
        ms = []
        for _ in range(groups):
            t, a, b = (_num(x, float, where) for x in toks[k:k + 3])
            k += 3
            w = None
            if wrong_in_group:
                w = _num(toks[k], float if wrong_col == "error" else int, where)
                k += 1
            ms.append(Measurement(t, a, b, w))
        log.rows.append(Row(size, count, toks[2], toks[3], root, ms[0], ms[1] if groups == 2 else None))
    return log


def _meta(log: NcclTestsLog, line: str) -> None:
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
        log.devices.append(Device(int(r), None if g is None else int(g), int(pid), host, int(dev), bus, name))
        return
    m = _AVG.match(line)
    if m:
        log.avg_busbw_gbps = float(m.group(1))
        return
    m = _OOB.match(line)
    if m:
        log.out_of_bounds = int(m.group(1))


def load_nccl_tests(path: str | Path) -> NcclTestsLog:
    """Read and parse an nccl-tests log file (errors name the file)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise NcclTestsLogError(f"{p}: cannot read: {e.strerror}") from None
    return parse_nccl_tests(text, str(p))
