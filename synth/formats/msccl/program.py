"""Read an MSCCL XML algorithm into a checked, plain program: every GPU's threadblocks and their
steps, ``cnt`` expanded into one operation per chunk, every attribute range-checked.

Accepted: the step types ``s r rcs rrs rrc rrcs cpy re nop``; buffers ``i``, ``o``, ``s``
(scratch); ``inplace="1"`` (the input lives inside the output, as NCCL's in-place calls);
``nchunksperloop``; any channels and threadblocks; cross-threadblock ``depid``/``deps``.  Hostile
input is refused early and cheaply: at most :data:`MAX_BYTES` of text, no DTD or entity
declarations, bounded GPUs, threadblocks, steps and chunks, before anything is built.  Every
problem is a one-line :class:`~topo_probe.errors.ScheduleFormatError` naming gpu, threadblock and
step.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from synth.ir.collectives import canonical
from topo_probe.errors import ScheduleFormatError

MAX_BYTES = 64 << 20
MAX_GPUS = 4096
MAX_TBS = 4096
MAX_OPS = 4_000_000
MAX_CHUNKS = 1 << 20
MAX_CNT = 1 << 16
STEP_TYPES = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop")
#: step types that receive from the threadblock's recv peer / send to its send peer
RECEIVES = ("r", "rcs", "rrs", "rrc", "rrcs")
SENDS = ("s", "rcs", "rrs", "rrcs")


@dataclass(frozen=True)
class Op:
    """One chunk's share of a step: ``kind`` (a step type), source and destination (buffer,
    chunk offset), peers (``-1`` when unused) and the (tb, step) it waits for, if any."""

    rank: int
    tb: int
    step: int
    kind: str
    src: tuple[str, int]
    dst: tuple[str, int]
    send_peer: int
    recv_peer: int
    chan: int
    dep: tuple[int, int] | None

    @property
    def where(self) -> str:
        return f"gpu {self.rank} tb {self.tb} step {self.step}"


@dataclass
class Program:
    """A checked MSCCL program: the ``<algo>`` attributes and each (gpu, tb)'s operations."""

    name: str
    collective: str
    ngpus: int
    proto: str
    inplace: bool
    nchunksperloop: int
    min_bytes: int
    max_bytes: int
    chunks: dict[int, dict[str, int]] = field(default_factory=dict)     # rank -> {"i": n, "o": n, "s": n}
    tbs: dict[tuple[int, int], list[Op]] = field(default_factory=dict)
    channels: set[int] = field(default_factory=set)


def _int(el: ET.Element, key: str, where: str, lo: int, hi: int, default: int | None = None) -> int:
    val = el.get(key)
    if val is None:
        if default is not None:
            return default
        raise ScheduleFormatError(f"{where}: missing attribute {key!r}")
    text = val.strip()
    if not (text.lstrip("-").isascii() and text.lstrip("-").isdigit()) or len(text) > 12:
        raise ScheduleFormatError(f"{where}: attribute {key}={val[:20]!r} is not an integer")
    v = int(text)
    if not lo <= v <= hi:
        raise ScheduleFormatError(f"{where}: attribute {key}={v} is out of range {lo}..{hi}")
    return v


def _root(text: str, source: str) -> ET.Element:
    if len(text) > MAX_BYTES:
        raise ScheduleFormatError(f"{source}: {len(text)} bytes is more than the {MAX_BYTES} an MSCCL file may have")
    head = text[:4096].upper()
    if "<!DOCTYPE" in head or "<!ENTITY" in text.upper():
        raise ScheduleFormatError(f"{source}: DTD / entity declarations are not accepted in MSCCL XML")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ScheduleFormatError(f"{source}: invalid XML: {e}") from None
    except RecursionError:
        raise ScheduleFormatError(f"{source}: XML nested too deeply") from None
    if root.tag != "algo":
        raise ScheduleFormatError(f"{source}: root element must be <algo>, got <{root.tag[:40]}>")
    return root


def parse_program(text: str, source: str = "<xml>") -> Program:
    """The checked :class:`Program` of MSCCL XML ``text`` (see the module docstring)."""
    algo = _root(text, source)
    coll = algo.get("coll", "")
    try:
        name = canonical(coll.replace("reduce_scatter", "reducescatter"))
    except Exception:
        raise ScheduleFormatError(f"{source}: unknown coll {coll[:40]!r}") from None
    n = _int(algo, "ngpus", source, 1, MAX_GPUS)
    prog = Program(algo.get("name", "")[:200], name, n, algo.get("proto", "Simple")[:20],
                   algo.get("inplace", "0").strip() == "1", _int(algo, "nchunksperloop", source, 0, MAX_CHUNKS, 0),
                   _int(algo, "minBytes", source, 0, 1 << 62, 0), _int(algo, "maxBytes", source, 0, 1 << 62, 0))
    count = 0
    for g in algo.findall("gpu"):
        rank = _int(g, "id", f"{source}: <gpu>", 0, n - 1)
        where = f"{source}: gpu {rank}"
        if rank in prog.chunks:
            raise ScheduleFormatError(f"{where}: listed twice")
        prog.chunks[rank] = {b: _int(g, f"{b}_chunks", where, 0, MAX_CHUNKS, 0) for b in "ios"}
        tbs = g.findall("tb")
        if len(tbs) > MAX_TBS:
            raise ScheduleFormatError(f"{where}: {len(tbs)} threadblocks (at most {MAX_TBS})")
        for tb in tbs:
            count = _read_tb(prog, tb, rank, n, f"{where} tb", count, source)
    missing = [r for r in range(n) if r not in prog.chunks]
    if missing:
        raise ScheduleFormatError(f"{source}: ngpus={n} but no <gpu> for rank {missing[0]}")
    return prog


def _read_tb(prog: Program, tb: ET.Element, rank: int, n: int, where: str, count: int, source: str) -> int:
    tid = _int(tb, "id", where, 0, MAX_TBS - 1)
    where = f"{source}: gpu {rank} tb {tid}"
    if (rank, tid) in prog.tbs:
        raise ScheduleFormatError(f"{where}: threadblock id used twice")
    send, recv = _int(tb, "send", where, -1, n - 1), _int(tb, "recv", where, -1, n - 1)
    chan = _int(tb, "chan", where, 0, 1023, 0)
    prog.channels.add(chan)
    ops: list[Op] = []
    for k, st in enumerate(tb.findall("step")):
        sw = f"{where} step {st.get('s', k)}"
        idx = _int(st, "s", sw, 0, MAX_OPS)
        if idx != k:
            raise ScheduleFormatError(f"{sw}: steps must be numbered 0, 1, 2, ... (expected s={k})")
        kind = st.get("type", "")
        if kind not in STEP_TYPES:
            raise ScheduleFormatError(f"{sw}: step type {kind[:20]!r} is not one of {' '.join(STEP_TYPES)}")
        if kind in SENDS and send < 0:
            raise ScheduleFormatError(f"{sw}: a {kind} step in a threadblock without a send peer")
        if kind in RECEIVES and recv < 0:
            raise ScheduleFormatError(f"{sw}: a {kind} step in a threadblock without a recv peer")
        depid, deps = _int(st, "depid", sw, -1, MAX_TBS - 1, -1), _int(st, "deps", sw, -1, MAX_OPS, -1)
        cnt = _int(st, "cnt", sw, 0, MAX_CNT, 1)
        dep = (depid, deps) if depid >= 0 and deps >= 0 else None
        if kind == "nop" or cnt == 0:
            ops.append(Op(rank, tid, idx, "nop", ("", -1), ("", -1), -1, -1, chan, dep))
            continue
        src, dst = (st.get("srcbuf", "i"), _int(st, "srcoff", sw, -1, MAX_CHUNKS)), \
                   (st.get("dstbuf", "o"), _int(st, "dstoff", sw, -1, MAX_CHUNKS))
        for buf in (src[0], dst[0]):
            if buf not in ("i", "o", "s"):
                raise ScheduleFormatError(f"{sw}: buffer {buf[:10]!r} is not i, o or s")
        count += cnt
        if count > MAX_OPS:
            raise ScheduleFormatError(f"{source}: more than {MAX_OPS} chunk operations")
        for j in range(cnt):
            ops.append(Op(rank, tid, idx, kind, (src[0], src[1] + j), (dst[0], dst[1] + j), send, recv, chan,
                          dep if j == 0 else None))
    prog.tbs[(rank, tid)] = ops
    return count


__all__ = ["Program", "Op", "parse_program", "STEP_TYPES", "RECEIVES", "SENDS", "MAX_BYTES"]
