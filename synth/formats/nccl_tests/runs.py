"""Real nccl-tests logs as they come: launcher prefixes and several tests in one file.

* Launcher prefixes are removed from every line that has one: ``0: `` (``srun -l``) at the
  start of a line, ``[1,0]<stdout>:`` / ``[1,0]<stderr>:`` (``mpirun --tag-output``) wherever
  they are (Open MPI tags every write, and nccl-tests writes a row in several pieces).
* A run without device lines of its own (a second test in the same job) takes the devices of the
  run before it.
* A file may hold several runs one after the other (``alltoall_perf`` then ``sendrecv_perf``,
  or the same binary twice): a run starts at ``# Collective test starting: NAME``, at a
  ``# nThread ...`` parameter line, or at a column header that follows table rows.  Each run is
  parsed on its own (:func:`~synth.formats.nccl_tests.reader.parse_nccl_tests`), so rows of two
  tests are never mixed; only the last run may end in a row cut short (a killed job: left out with a note).
* nccl-tests ``-N k`` (rccl-tests ``-s k``) prints the whole size sweep k times under one header
  (nccl-tests v2.19.6 common.cu:934-943, rccl-tests ae3e635 common.cu:803-817): :func:`cycles_of` counts
  them (the parameter line's loop, minBytes to maxBytes by its step, repeated whole; else a size sequence that
  repeats whole), :attr:`NcclTestsLog.cycles` holds the count and :func:`pick_rows` takes one
  cycle (the first unless told).  A size printed again in the next row is nccl-tests' own: it rounds each rank's
  block down to whole 16-byte units (v2.19.6 all_gather.cu ``AllGatherGetCollByteCount``), so ``-b 8`` on 4 ranks
  prints 0 three times and ``-b 64 -e 112 -i 16`` prints 64 four times; such a repeat is accepted only for those
  collectives (or an unknown one) and only as often as the log's parameter line rounds to it (:func:`printed_sizes`).
  A size repeated in any other way stays an error (:func:`check_sizes_once`).

>>> text = ("0: # Collective test starting: all_gather_perf\\n"
...         "0: #  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\\n"
...         "0:   1024  32 float none -1 10.0 0.10 0.09 0 10.0 0.10 0.09 0\\n"
...         "0: # Collective test starting: sendrecv_perf\\n"
...         "0: #  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\\n"
...         "0:   1024 256 float sum -1 5.0 0.20 0.20 0 5.0 0.20 0.20 0\\n")
>>> [(r.test, r.collective, len(r.rows)) for r in parse_runs(text)]
[('all_gather_perf', 'allgather', 1), ('sendrecv_perf', 'sendrecv', 1)]
"""

from __future__ import annotations

import re
from pathlib import Path

from synth.formats.nccl_tests.conventions import collective_of
from synth.formats.nccl_tests.network import network_of
from synth.formats.nccl_tests.reader import NcclTestsLog, parse_nccl_tests, read_log_text
from synth.formats.nccl_tests.textio import log_lines
from synth.formats.nccl_tests.version import version_of
from topo_probe.errors import NcclTestsLogError, TopocollError

_PREFIX = re.compile(r"^\d{1,6}: ?")
_TAG = re.compile(r"\[\d{1,6},\d{1,6}\]<std(?:out|err)>: ?")
_START = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_HEADER = re.compile(r"^#\s*(size|bytes)\s+(count|N)\s+type\b", re.I)
_ROW = re.compile(r"^\s*\d+\s+\d+\s+\S")


def strip_prefixes(text: str) -> list[str]:
    """The lines of ``text`` without launcher prefixes."""
    return [_TAG.sub(" ", _PREFIX.sub("", line, count=1)) for line in log_lines(text)]


def _segments(lines: list[str]) -> list[tuple[str | None, list[str], int]]:
    """The runs of ``lines``: (test name or None, their lines, the 0-based index of the first), those with a header."""
    segs: list[tuple[str | None, list[str], int]] = [(None, [], 0)]
    has_rows = False
    for i, line in enumerate(lines):
        s = line.strip()
        m = _START.match(s)
        new = m is not None or (has_rows and (_HEADER.match(s) or s.startswith("# nThread")))
        if new:
            segs.append((m.group(1) if m else None, [], i))
            has_rows = False
        segs[-1][1].append(line)
        has_rows |= bool(_ROW.match(line))
    return [seg for seg in segs if any(_HEADER.match(x.strip()) for x in seg[1])]


def guess_collective(log: NcclTestsLog, source: str | Path = "") -> str | None:
    """The collective of a run: its ``Collective test starting`` line, else a collective or
    nccl-tests binary name in the file name (``..._all_reduce.txt``), else None.

    >>> guess_collective(NcclTestsLog([], (), False, "#wrong"), "logs/h100_all_gather_ring.txt")
    'allgather'
    """
    if log.collective:
        return log.collective
    name = Path(str(source)).name.lower()
    for stem in ("reduce_scatter", "all_reduce", "all_gather", "alltoall", "all_to_all", "broadcast", "sendrecv",
                 "reducescatter", "allreduce", "allgather", "reduce", "gather", "scatter"):
        if stem in name:
            return collective_of(stem)
    return None


def parse_runs(text: str, source: str = "nccl-tests log") -> list[NcclTestsLog]:
    """Every run in ``text``, each parsed on its own (see the module docstring).

    Raises
    ------
    NcclTestsLogError
        No run with a column header, or a malformed row (names the source and the run).
    """
    lines = strip_prefixes(text)
    segs = _segments(lines)
    if not segs:
        raise NcclTestsLogError(f"{source}: no nccl-tests column header (# size count type redop ...)")
    preamble = [i for i, x in enumerate(lines[:next((i for i, x in enumerate(lines) if _HEADER.match(x.strip())), 0)])
                if x.lstrip().startswith("#")]             # (indices of the lines)
    out = []
    for k, (name, body, first) in enumerate(segs):
        where = source if len(segs) == 1 else f"{source} (run {k + 1}{': ' + name if name else ''})"
        has_devices = any("Rank" in x and "device" in x for x in body)
        at = list(range(first + 1, first + 1 + len(body)))                     # each line's line in the file
        if not (has_devices or k):
            body, at = [lines[i] for i in preamble] + body, [i + 1 for i in preamble] + at
        log = parse_nccl_tests("\n".join(body), where, k == len(segs) - 1, at)
        log.test = name or log.test
        # -N cycles end in one footer (common.cu:934-943, then the footer): rows below a footer are another run's
        log.cycles = cycles_of(log.rows, sizes_per_cycle(log)) if log.footer_row in (None, len(log.rows)) else 1
        if log.cycles > 1:
            log.notes.append(f"{where}: the sizes repeat {log.cycles} times (nccl-tests -N {log.cycles}): "
                             f"{log.cycles} cycles, one is compared (the first unless picked)")
        if not log.devices and out and out[-1].devices:
            log.devices, log.cut_device_lists = list(out[-1].devices), out[-1].cut_device_lists
        out.append(log)
    version = next((v for v in (version_of(x) for x in lines if "version" in x) if v), None)
    network = network_of(lines)
    for log in out:                 # NCCL INFO lines may sit outside the runs' segments
        log.nccl_version, log.network = version, network
    return out


def load_runs(path: str | Path) -> list[NcclTestsLog]:
    """Every run of an nccl-tests log file (errors name the file)."""
    return parse_runs(read_log_text(path), str(path))


def select_run(runs: list[NcclTestsLog], collective: str | None, source: str = "log") -> NcclTestsLog:
    """The run of ``collective`` (any spelling), or the only run when ``collective`` is None.

    Raises
    ------
    NcclTestsLogError
        No run of that collective, or several runs and no collective named.
    """
    names = [r.collective or "?" for r in runs]
    if collective is None:
        if len(runs) == 1:
            return runs[0]
        raise NcclTestsLogError(f"{source} holds {len(runs)} tests ({', '.join(names)}); name the collective")
    want = collective_of(collective) or collective
    hits = [r for r in runs if r.collective == want or (r.collective is None and len(runs) == 1)]
    if not hits:
        raise NcclTestsLogError(f"{source} holds no {want} test (it holds {', '.join(names)})")
    return hits[0]


def _is_op(redop: str) -> bool:
    """Whether a row's ``redop`` cell names a reduction (not ``none``, blank or ``N/A``)."""
    return redop.lower() not in ("", "none", "n/a")


def _one_of(have: list[str], want: str | None, what: str, flag: str, source: str) -> str | None:
    """The value of ``have`` (a log's datatypes or ops, in order) that ``want`` picks, or its only one."""
    if not have:                        # no rows, or a collective without a reduction: nothing to pick
        return None
    if want is not None and want != "all":
        if want not in have:
            raise NcclTestsLogError(f"{source} has no {want} rows (it holds {', '.join(have)}); pick one of them "
                                    f"with {flag}")
        return want
    if len(have) > 1:
        raise NcclTestsLogError(f"{source} holds rows of several {what} ({', '.join(have)}); pick one with {flag}")
    return have[0]


def pick_rows(log: NcclTestsLog, source: str, datatype: str | None = None, op: str | None = None,
              root: int | None = None, cycle: int | None = None, collective: str | None = None) -> list:
    """The rows of one datatype, one reduction op and one root of a run (nccl-tests ``-d all`` /
    ``-o all`` print a section per type or op, ``-r -1`` a row per root of each size): those of
    ``datatype`` / ``op`` (any spelling; None or ``all``: the log's only one) and ``root`` (None or
    -1: the log's only one), of ``cycle`` (1-based; None: the first) of ``-N`` logs.  Rows without an
    op (``none``, blank) or a root (-1) match any.  ``collective`` (any spelling; None: the log's) tells which sizes
    nccl-tests prints twice in a row (:func:`check_sizes_once`).

    Raises
    ------
    NcclTestsLogError
        Several types (ops, roots) and none picked, a picked one the log lacks, a cycle the log lacks, or
        a size that appears again after another size in one cycle for the picked type, op and root (two runs' rows
        in one table).
    """
    from synth.formats.nccl_tests.conventions import DTYPE_ALIASES
    types = list(dict.fromkeys(DTYPE_ALIASES.get(r.type, r.type) for r in log.rows))
    ops = list(dict.fromkeys(r.redop for r in log.rows if _is_op(r.redop)))
    typ = _one_of(types, DTYPE_ALIASES.get(datatype, datatype), "datatypes", "-d", source)
    red = _one_of(ops, op, "reduction ops", "-o", source)
    rows = [r for r in log.rows
            if DTYPE_ALIASES.get(r.type, r.type) == typ and (r.redop == red or not _is_op(r.redop))]
    rows = _of_root(rows, root, source)
    n = log.cycles
    if cycle is not None and not 1 <= cycle <= n:
        raise NcclTestsLogError(f"{source} has no cycle {cycle}: it holds {n} cycles of its sizes (nccl-tests -N)")
    rows = one_cycle(rows, cycle or 1, n)
    check_sizes_once(rows, source, log=log, collective=collective_of(collective) if collective else log.collective)
    return rows


def _by_series(rows: list) -> dict[tuple, list[int]]:
    """The positions in ``rows`` of each (type, op, root) series, in order."""
    out: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        out.setdefault((r.type, r.redop, r.root), []).append(i)
    return out


def _size_loop(log: NcclTestsLog) -> list[int] | None:
    """The sizes (bytes) nccl-tests' loop runs by the log's parameter line, minBytes to maxBytes by its step (v2.19.6
    src/common.cu lines 934-936); None without the line or for a loop that cannot run."""
    from synth.formats.nccl_tests.sizes import size_sweep
    if log.min_bytes is None or log.max_bytes is None or not log.step or log.step_kind not in ("factor", "bytes"):
        return None
    factor, step = (log.step, 0) if log.step_kind == "factor" else (1, log.step)
    try:
        return size_sweep(log.min_bytes, log.max_bytes, step, factor)
    except TopocollError:
        return None


def sizes_per_cycle(log: NcclTestsLog) -> int | None:
    """The rows one cycle of a type, op and root prints by the log's parameter line: nccl-tests' size loop from
    minBytes to maxBytes by its step (v2.19.6 src/common.cu lines 934-936); None without the line or for a loop
    that cannot run.

    >>> sizes_per_cycle(NcclTestsLog([], (), False, "#wrong", min_bytes=8, max_bytes=128, step=2, step_kind="factor"))
    5
    """
    loop = _size_loop(log)
    return None if loop is None else len(loop)


def printed_sizes(log: NcclTestsLog | None, collective: str | None, dtype: str) -> list[int] | None:
    """The sizes (bytes) one cycle of ``dtype`` rows prints by the log's parameter line (:func:`sizes_per_cycle`'s
    loop) on its :attr:`~synth.formats.nccl_tests.reader.NcclTestsLog.num_ranks` ranks, rounded as nccl-tests rounds
    a 16-byte-blocked collective (:data:`~synth.formats.nccl_tests.conventions.DIVIDED`,
    :func:`~synth.formats.nccl_tests.conventions.block_counts`; ``collective`` None: unknown, taken as one of them,
    which all print ``n`` blocks of the rounded count); None for another collective or without the parameter line,
    the rank count or a known ``dtype``.

    >>> log = NcclTestsLog([], (), False, "#wrong", n_gpus=4, min_bytes=64, max_bytes=128, step=16, step_kind="bytes")
    >>> printed_sizes(log, "allgather", "float"), printed_sizes(log, None, "float"), printed_sizes(log, "allreduce", "float")
    ([64, 64, 64, 64, 128], [64, 64, 64, 64, 128], None)
    """
    from synth.formats.nccl_tests.conventions import DIVIDED, DTYPE_ALIASES, DTYPE_BYTES, block_counts
    name = collective or DIVIDED[0]
    itemsize = DTYPE_BYTES.get(DTYPE_ALIASES.get(dtype, dtype))
    loop = _size_loop(log) if log is not None and name in DIVIDED and itemsize and log.num_ranks else None
    return None if loop is None else [block_counts(name, s, itemsize, log.num_ranks).size for s in loop]


def cycles_of(rows: list, per_cycle: int | None = None) -> int:
    """How many times every (type, op, root) series repeats its whole size sequence (nccl-tests ``-N``),
    the same count for all; 1 when the rows are no whole repetition (or only 0-byte rows).  A cycle is
    ``per_cycle`` rows (:func:`sizes_per_cycle`, the log's parameter line) where the rows repeat so and one cycle's
    sizes never drop (nccl-tests' loop grows them; a size printed again in the next row is its 16-byte rounding);
    else the shortest whole repetition (ambiguous for one size printed again and again: taken as cycles).

    >>> from types import SimpleNamespace as R
    >>> def rows(*sizes): return [R(type="float", redop="sum", root=None, size=s) for s in sizes]
    >>> cycles_of(rows(8, 16, 8, 16)), cycles_of(rows(8, 16, 8)), cycles_of(rows(0, 0, 64, 0, 0, 64))
    (2, 1, 2)
    >>> cycles_of(rows(64, 64, 64)), cycles_of(rows(64, 64, 64), per_cycle=3), cycles_of(rows(8, 16, 8, 16), 4)
    (3, 1, 2)
    """
    counts = set()
    for pos in _by_series(rows).values():
        sizes = [rows[i].size for i in pos]
        n = len(sizes)
        first = sizes[:per_cycle or n]
        if per_cycle and n % per_cycle == 0 and sizes == first * (n // per_cycle) and first == sorted(first):
            counts.add(n // per_cycle)
            continue
        period = next(p for p in range(1, n + 1) if n % p == 0 and sizes == sizes[:p] * (n // p))
        counts.add(n // period if any(sizes) else 1)     # only 0-byte rows: one sweep rounded to 0, not cycles
    return counts.pop() if len(counts) == 1 else 1


def one_cycle(rows: list, cycle: int = 1, n: int | None = None) -> list:
    """The rows of cycle ``cycle`` (1-based) of each series, in their order, of ``n`` cycles (a log's
    :attr:`~synth.formats.nccl_tests.reader.NcclTestsLog.cycles`; None: :func:`cycles_of` the rows)."""
    n = cycles_of(rows) if n is None else n
    if n == 1:
        return list(rows)
    keep = set()
    for pos in _by_series(rows).values():
        p = len(pos) // n
        keep.update(pos[(cycle - 1) * p:cycle * p])
    return [r for i, r in enumerate(rows) if i in keep]


def _of_root(rows: list, root: int | None, source: str) -> list:
    """The rows of ``root`` (None or -1: the rows' only root); rows without a root are kept."""
    roots = sorted({r.root for r in rows if r.root is not None})
    if not roots:                       # an unrooted collective, or no root column: nothing to pick
        return rows
    listed = ", ".join(map(str, roots))
    if root is not None and root >= 0 and root not in roots:
        raise NcclTestsLogError(f"{source} has no rows of root {root} (it holds root {listed}); pick one of them "
                                f"with -r")
    if (root is None or root < 0) and len(roots) > 1:
        raise NcclTestsLogError(f"{source} holds rows of several roots ({listed}: nccl-tests -r -1); pick one "
                                f"with -r")
    keep = root if root is not None and root >= 0 else roots[0]
    return [r for r in rows if r.root is None or r.root == keep]


def compared(row):
    """The measurement of ``row`` a comparison takes: out-of-place, else in-place (rows of an in-place-only
    log, rccl-tests ``-O 0``, or with nccl-tests' blank out-of-place body); None when it has neither.

    >>> log = parse_runs("#  in-place\\n# size count type redop root time algbw busbw #wrong\\n8 2 float sum -1 9.5 0 0 0")[0]
    >>> compared(log.rows[0]).time_us, log.rows[0].out_of_place
    (9.5, None)
    """
    return row.out_of_place if row.out_of_place is not None else row.in_place


def check_sizes_once(rows: list, source: str, cycles: int = 1, log: NcclTestsLog | None = None,
                     collective: str | None = None) -> None:
    """Refuse a size (above 0) that appears again for one datatype, op and root in one of ``cycles``
    cycles (a log's :attr:`~synth.formats.nccl_tests.reader.NcclTestsLog.cycles`: nccl-tests ``-N``) after another
    size: two runs' rows in one table.  A size again in the next row is accepted only as often as nccl-tests prints
    it: ``collective`` (canonical; None: unknown) rounds to 16-byte blocks and ``log``'s parameter line loops to it
    that many times (:func:`printed_sizes`); an all_reduce run ending at 16 then one from ``-b 16`` is refused.

    Raises
    ------
    NcclTestsLogError
        Names the source, the size, how many times and for which type and op (and, for a repeat in the next row,
        how often the parameter line prints it).
    """
    seen: dict[tuple, list] = {}
    last: dict[tuple, int] = {}
    loops: dict[str, list[int] | None] = {}
    twice, why = None, ""
    for r in one_cycle(rows, 1, cycles):
        series = (r.type, r.redop, r.root)
        if r.size > 0:
            again = seen.setdefault((*series, r.size), [])
            again.append(r)
            if len(again) > 1 and twice is None and last[series] != r.size:
                twice = again
            elif len(again) > 1 and twice is None:          # again in the next row: as often as nccl-tests prints it?
                if r.type not in loops:
                    loops[r.type] = printed_sizes(log, collective, r.type)
                printed = loops[r.type]
                if printed is None or len(again) > printed.count(r.size):
                    twice, why = again, (f"; the parameter line prints it {printed.count(r.size)} times"
                                         if printed is not None else "; only a 16-byte-blocked collective's log with "
                                         "its parameter line prints a size again")
        last[series] = r.size
    if twice is not None:
        pair = f"{twice[0].type} {twice[0].redop}" if _is_op(twice[0].redop) else twice[0].type
        at = f" root {twice[0].root}" if twice[0].root is not None else ""
        raise NcclTestsLogError(f"{source}: size {twice[0].size} appears {len(twice)} times for {pair}{at} (two runs "
                                f"in one table?{why}); keep one run's rows")


def load_nccl_tests(path: str | Path, collective: str | None = None) -> NcclTestsLog:
    """Read an nccl-tests log file: its only run, or the run of ``collective`` when the file holds
    several (launcher prefixes removed).  Errors name the file."""
    return select_run(load_runs(path), collective, str(path))


__all__ = ["parse_runs", "load_runs", "select_run", "strip_prefixes", "guess_collective", "load_nccl_tests",
           "pick_rows", "check_sizes_once", "cycles_of", "one_cycle", "compared", "sizes_per_cycle",
           "printed_sizes"]
