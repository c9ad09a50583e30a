"""MSCCL XML text to a checked :class:`~.program.Program`, refusing hostile input early.

Before anything is built the text is bounded (:data:`MAX_XML_CHARS`), DOCTYPE and ENTITY
declarations are refused and the element depth and count are capped while expat streams
(:mod:`topo_probe.parsers.xml_bounds`).  Then every attribute is checked the way the runtimes check it (RCCL
``src/misc/msccl/msccl_parser.cc``): integers in range, threadblock ids contiguous from 0, at
most one send and one receive peer per threadblock and one threadblock per (channel, peer,
direction), offsets and counts inside the declared buffers, a send only in a threadblock with a
send peer, dependencies naming a step that exists.  Every failure is one
:class:`~topo_probe.errors.ScheduleFormatError` line naming the source, gpu, threadblock and step.

>>> p = parse_program('<algo name="x" proto="LL" nchannels="1" nchunksperloop="2" ngpus="2" '
...     'coll="allgather" inplace="0" outofplace="1" minBytes="0" maxBytes="0">'
...     '<gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0"><tb id="0" send="1" recv="-1" chan="0">'
...     '<step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" '
...     'hasdep="0"/></tb></gpu></algo>', source="x.xml")
Traceback (most recent call last):
...
topo_probe.errors.ScheduleFormatError: x.xml: <algo>: gpu 1 is missing (ngpus=2)
"""

from __future__ import annotations

from synth.formats.msccl.layout import PROTOCOLS, READS_SRC, RECEIVES, SENDS, STEP_TYPES, WRITES_DST
from synth.formats.msccl.program import Program, XGpu, XStep, XThreadblock
from synth.ir.collectives import canonical
from topo_probe.errors import ScheduleFormatError, TopocollError
from topo_probe.parsers.xml_bounds import MESSAGES, ExpatError, XmlRefused, int_attribute, stream

#: bounds checked before or while parsing (far above anything a runtime runs)
MAX_XML_CHARS = 32 * 2**20
MAX_DEPTH = 12
MAX_ELEMENTS = 300_000
MAX_GPUS = 4096
MAX_TBS_PER_GPU = 4096
MAX_CHUNKS = 1 << 20
MAX_COUNT = 1 << 16
MAX_CHANNELS = 4096
MAX_BYTES = (1 << 63) - 1
#: runtime-required <algo> attributes (RCCL reads all of them; msccl-tools leaves some out)
ALGO_REQUIRED = ("nchunksperloop", "nchannels", "ngpus", "proto", "coll", "minBytes", "maxBytes",
                 "inplace", "outofplace")
#: MSCCL functions without a topocoll collective (variable counts, point to point)
NOT_MODELLED = ("alltoallv", "send", "recv")


class _Node:
    __slots__ = ("attrs", "kids", "line")

    def __init__(self, attrs: dict, line: int) -> None:
        self.attrs, self.line, self.kids = attrs, line, []


def _tree(text: str, source: str) -> _Node:
    """Stream ``text`` through expat keeping only algo > gpu > tb > step (bounded)."""
    stack: list[_Node | None] = []
    found: list[_Node] = []
    wanted = ("algo", "gpu", "tb", "step")

    def start(tag, attrs, line, _col):
        depth = len(stack)
        parent = stack[-1] if stack else None
        node = None
        if depth < 4 and tag == wanted[depth] and (depth == 0 or parent is not None):
            node = _Node(attrs, line)
            (parent.kids if parent is not None else found).append(node)
        stack.append(node)

    try:
        stream(text, start=start, end=lambda tag: stack.pop(), max_chars=MAX_XML_CHARS, max_depth=MAX_DEPTH,
               max_elements=MAX_ELEMENTS)
    except XmlRefused as e:
        raise ScheduleFormatError(f"{source}: {e}") from None
    except ExpatError as e:
        raise ScheduleFormatError(f"{source}: invalid XML at line {e.lineno} column {e.offset + 1}: "
                                  f"{MESSAGES[e.code]}") from None
    if not found:
        raise ScheduleFormatError(f"{source}: root element must be <algo>")
    return found[0]


def _int(attrs: dict, key: str, where: str, lo: int, hi: int, default: int | None = None) -> int:
    val = attrs.get(key)
    if val is None:
        if default is not None:
            return default
        raise ScheduleFormatError(f"{where}: missing attribute {key!r}")
    return int_attribute(val, key, lo, hi, f"{where}:", ScheduleFormatError)


def _flag(attrs: dict, key: str, where: str, default: int) -> bool:
    return bool(_int(attrs, key, where, 0, 1, default))


def _algo_fields(node: _Node, source: str) -> dict:
    a, where = node.attrs, f"{source}: <algo>"
    spelling = a.get("coll")
    if spelling is None:
        raise ScheduleFormatError(f"{where}: missing attribute 'coll'")
    try:
        if spelling.strip().lower() in NOT_MODELLED:
            raise TopocollError(spelling)
        coll = canonical(spelling)
    except TopocollError:
        raise ScheduleFormatError(f"{where}: coll={spelling[:40]!r} is not a collective topocoll schedules "
                                  f"describe") from None
    proto = a.get("proto", "Simple")
    if proto not in PROTOCOLS:
        raise ScheduleFormatError(f"{where}: proto={proto[:40]!r} is not one of {', '.join(PROTOCOLS)}")
    f = {"name": a.get("name", "")[:200], "coll": coll, "coll_spelling": spelling, "proto": proto,
         "ngpus": _int(a, "ngpus", where, 1, MAX_GPUS),
         "nchunksperloop": _int(a, "nchunksperloop", where, 1, MAX_CHUNKS),
         "nchannels": _int(a, "nchannels", where, 1, MAX_CHANNELS, 0) or None,
         "min_bytes": _int(a, "minBytes", where, 0, MAX_BYTES, 0),
         "max_bytes": _int(a, "maxBytes", where, 0, MAX_BYTES, 0),
         "missing": tuple(k for k in ALGO_REQUIRED if k not in a)}
    f["inplace"] = _flag(a, "inplace", where, 0)
    f["outofplace"] = _flag(a, "outofplace", where, 0 if f["inplace"] and "outofplace" not in a else 1)
    if not (f["inplace"] or f["outofplace"]):
        raise ScheduleFormatError(f"{where}: inplace=0 and outofplace=0: no runtime would ever run it")
    if f["max_bytes"] and f["max_bytes"] < f["min_bytes"]:
        raise ScheduleFormatError(f"{where}: maxBytes={f['max_bytes']} is below minBytes={f['min_bytes']}")
    return f


def _step(node: _Node, position: int, where_tb: str, tb: dict) -> XStep:
    a = node.attrs
    s = _int(a, "s", f"{where_tb} step at line {node.line}", 0, MAX_ELEMENTS)
    where = f"{where_tb} step {s}"
    if s != position:
        raise ScheduleFormatError(f"{where}: steps must be numbered 0, 1, 2, ... in order (this is step "
                                  f"number {position} of its threadblock)")
    kind = a.get("type")
    if kind not in STEP_TYPES:
        raise ScheduleFormatError(f"{where}: step type {str(kind)[:40]!r} is not one of {', '.join(STEP_TYPES)}")
    bufs = []
    for key in ("srcbuf", "dstbuf"):
        buf = a.get(key)
        if buf not in ("i", "o", "s"):
            raise ScheduleFormatError(f"{where}: {key}={str(buf)[:40]!r} is not a buffer (i, o or s)")
        bufs.append(buf)
    if kind in SENDS and tb["send"] < 0:
        raise ScheduleFormatError(f"{where}: a {kind!r} step in a threadblock without a send peer")
    if kind in RECEIVES and tb["recv"] < 0:
        raise ScheduleFormatError(f"{where}: a {kind!r} step in a threadblock without a receive peer")
    hasdep = a.get("hasdep")
    return XStep(s, kind, bufs[0], _int(a, "srcoff", where, -1, MAX_CHUNKS), bufs[1],
                 _int(a, "dstoff", where, -1, MAX_CHUNKS),
                 _int(a, "cnt", where, 0 if kind == "nop" else 1, MAX_COUNT),
                 _int(a, "depid", where, -1, MAX_TBS_PER_GPU), _int(a, "deps", where, -1, MAX_ELEMENTS),
                 None if hasdep is None else _int(a, "hasdep", where, 0, 1), node.line)


def _threadblock(node: _Node, gpu: int, ngpus: int, where_gpu: str) -> XThreadblock:
    a = node.attrs
    tid = _int(a, "id", f"{where_gpu} <tb> at line {node.line}", 0, MAX_TBS_PER_GPU - 1)
    where = f"{where_gpu} tb {tid}"
    tb = {"send": _int(a, "send", where, -1, ngpus - 1), "recv": _int(a, "recv", where, -1, ngpus - 1),
          "chan": _int(a, "chan", where, 0, MAX_CHANNELS - 1, 0)}
    if gpu in (tb["send"], tb["recv"]):
        raise ScheduleFormatError(f"{where}: a threadblock cannot send to or receive from its own gpu {gpu}")
    steps = tuple(_step(st, k, where, tb) for k, st in enumerate(node.kids))
    return XThreadblock(tid, tb["send"], tb["recv"], tb["chan"], steps)


def _check_gpu(g: XGpu, where: str, nchannels: int | None) -> None:
    ids = sorted(tb.id for tb in g.tbs)
    if ids != list(range(len(ids))):
        gap = next(k for k, v in enumerate(ids + [-1]) if v != k)
        raise ScheduleFormatError(f"{where}: threadblock ids must be 0..{len(ids) - 1} once each; "
                                  f"tb {gap} is missing or repeated")
    owner: dict[tuple, int] = {}
    for tb in g.tbs:
        if nchannels is not None and tb.chan >= nchannels:
            raise ScheduleFormatError(f"{where} tb {tb.id}: channel {tb.chan} is not below nchannels={nchannels}")
        for direction, peer in (("send", tb.send), ("recv", tb.recv)):
            if peer >= 0:
                key = (tb.chan, direction, peer)
                if key in owner:
                    raise ScheduleFormatError(f"{where} tb {tb.id}: tb {owner[key]} already has {direction} peer "
                                              f"{peer} on channel {tb.chan} (one threadblock per connection)")
                owner[key] = tb.id
        for st in tb.steps:
            _check_step_refs(g, tb, st, f"{where} tb {tb.id} step {st.index}")


def _check_step_refs(g: XGpu, tb: XThreadblock, st: XStep, where: str) -> None:
    if st.depid >= 0:
        if st.depid >= len(g.tbs):
            raise ScheduleFormatError(f"{where}: depends on tb {st.depid}, which does not exist")
        other = g.tbs[st.depid].steps
        if not 0 <= st.deps < len(other):
            raise ScheduleFormatError(f"{where}: depends on tb {st.depid} step {st.deps}, which does not exist")
        if st.depid == tb.id and st.deps >= st.index:
            raise ScheduleFormatError(f"{where}: depends on a later step of its own threadblock")
    if st.kind == "nop":
        return
    for used, buf, off in ((st.kind in READS_SRC, st.srcbuf, st.srcoff), (st.kind in WRITES_DST, st.dstbuf, st.dstoff)):
        if used and not (0 <= off and off + st.cnt <= g.size(buf)):
            raise ScheduleFormatError(f"{where}: {buf}[{off}:{off + st.cnt}] is outside buffer {buf!r} of "
                                      f"{g.size(buf)} chunks")


def parse_program(text: str, *, source: str = "<xml>") -> Program:
    """Parse and check MSCCL XML (see the module docstring); raises ScheduleFormatError."""
    root = _tree(text, source)
    f = _algo_fields(root, source)
    n = f["ngpus"]
    gpus: dict[int, XGpu] = {}
    for node in root.kids:
        a = node.attrs
        gid = _int(a, "id", f"{source}: <gpu> at line {node.line}", 0, n - 1)
        where = f"{source}: gpu {gid}"
        if gid in gpus:
            raise ScheduleFormatError(f"{where}: a second <gpu id=\"{gid}\">")
        if len(node.kids) > MAX_TBS_PER_GPU:
            raise ScheduleFormatError(f"{where}: more than {MAX_TBS_PER_GPU} threadblocks")
        sizes = [_int(a, k, where, 0, MAX_CHUNKS) for k in ("i_chunks", "o_chunks", "s_chunks")]
        tbs = sorted((_threadblock(tb, gid, n, where) for tb in node.kids), key=lambda t: t.id)
        g = XGpu(gid, *sizes, tuple(tbs))
        _check_gpu(g, where, f["nchannels"])
        gpus[gid] = g
    for k in range(n):
        if k not in gpus:
            raise ScheduleFormatError(f"{source}: <algo>: gpu {k} is missing (ngpus={n})")
    nchannels = f.pop("nchannels") or 1 + max((tb.chan for g in gpus.values() for tb in g.tbs), default=0)
    return Program(nchannels=nchannels, gpus=tuple(gpus[k] for k in range(n)), **f)
