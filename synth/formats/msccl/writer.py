"""MSCCL XML export and import of verified schedules.

The XML is what the msccl runtimes load (microsoft/msccl and Azure's msccl-executor-nccl)::

    <algo name proto nchannels nchunksperloop ngpus coll inplace outofplace minBytes maxBytes>
      <gpu id i_chunks o_chunks s_chunks>
        <tb id send recv chan>
          <step s type srcbuf srcoff dstbuf dstoff cnt depid deps hasdep/>

How a schedule becomes threadblocks
-----------------------------------
* Every rank gets one threadblock per peer it talks to (``send`` = ``recv`` = that peer, or -1
  for a direction it does not use), all on channel 0: at most one send and one receive peer per
  threadblock, ids contiguous from 0.
* A transfer (chunk g, src -> dst) becomes a ``s`` step in src's block for dst and an ``r``
  (copy) or ``rrc`` (receive, reduce with the local partial, store) step in dst's block for
  src.  Steps keep the schedule's order, so sends and receives on one connection match FIFO.
* Buffers: ``i`` input, ``o`` output, ``s`` scratch; offsets and ``cnt`` in chunks, where a
  buffer of B blocks has B * P chunks (P = pieces per block, see :mod:`synth.ir.collectives`).
  A chunk a rank must end with lives at its output position; anything else a rank receives gets
  a scratch slot.  Out-of-place, a post rank that already held its chunk gets a final ``cpy``.
* Dependencies: a step waits for the last write of what it reads (read after write), a write
  waits for earlier reads and writes of its target (write after read/write).  A step waits on at
  most one (depid, deps); extra dependencies become ``nop`` steps placed just before it.  A
  step that others wait on has ``hasdep=1``.

MSCCL cuts a buffer into ``nchunksperloop`` equal chunks; that agrees with our layout
(:func:`synth.ir.collectives.piece_bounds`) whenever the count per block is a multiple of P.

:func:`from_msccl_xml` replays the program (sends matched to receives FIFO per connection,
dependencies honoured, every ready pair in a round forming one step) back into a Schedule.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from synth.formats.msccl.layout import COLL_NAMES, Loc, chunk_offset, chunks_in
from synth.ir.collectives import CollectiveSpec
from synth.ir.schedule import Schedule
from topo_probe.errors import InvalidArgument, UnsupportedCollective


@dataclass
class _Op:
    kind: str            # s, r, rrc, cpy, nop
    src: Loc | None
    dst: Loc | None
    peer: int            # -1 for local ops
    order: tuple         # global order key
    deps: list[tuple[int, int]] = field(default_factory=list)  # (tb id, index in ops) resolved later
    dep_ops: list["_Op"] = field(default_factory=list)
    tb: int = -1
    index: int = -1
    hasdep: bool = False
    chan: int = 0

    @property
    def tb_key(self) -> tuple[str, int, int]:
        """Threadblock this op runs in: (direction, peer, channel)."""
        return ("send" if self.kind == "s" else "recv", self.peer, self.chan)


class _RankState:
    """Where each chunk a rank holds currently lives, and the ops that last touched each place."""

    def __init__(self, spec: CollectiveSpec, rank: int) -> None:
        self.spec, self.rank = spec, rank
        self.where: dict[int, Loc] = {}
        self.scratch: dict[int, int] = {}
        self.last_write: dict[Loc, _Op] = {}
        self.reads: dict[Loc, list[_Op]] = {}
        for ch in spec.chunks():
            if rank in ch.pre:
                self.where[ch.id] = ("i", chunk_offset(spec, spec.input_position(ch.id, rank)))

    def home(self, chunk: int) -> Loc:
        pos = self.spec.output_position(chunk, self.rank)
        if pos is not None:
            return ("o", chunk_offset(self.spec, pos))
        if chunk not in self.scratch:
            self.scratch[chunk] = len(self.scratch)
        return ("s", self.scratch[chunk])


def _record(state: _RankState, op: _Op, reads: list[Loc], writes: list[Loc]) -> None:
    for loc in reads:
        if loc in state.last_write:
            op.dep_ops.append(state.last_write[loc])
    for loc in writes:
        if loc in state.last_write:
            op.dep_ops.append(state.last_write[loc])
        op.dep_ops.extend(state.reads.get(loc, []))
    for loc in reads:
        state.reads.setdefault(loc, []).append(op)
    for loc in writes:
        state.last_write[loc] = op
        state.reads[loc] = []


def to_msccl_xml(schedule: Schedule, *, style: str = "msccl", proto: str = "Simple",
                 min_bytes: int = 0, max_bytes: int | None = None, name: str | None = None) -> str:
    """Export a (verified) schedule as MSCCL XML; ``style`` picks the collective spelling."""
    if style not in COLL_NAMES:
        raise InvalidArgument(f"style must be 'msccl' or 'azure', got {style!r}")
    spec = schedule.spec
    if schedule.inplace:
        raise UnsupportedCollective("export the out-of-place schedule: MSCCL XML here is outofplace=1")
    n = spec.ranks
    states = [_RankState(spec, r) for r in range(n)]
    ops: list[list[_Op]] = [[] for _ in range(n)]
    for k, step in enumerate(schedule.steps):
        # every transfer of a step reads the state at the start of the step: sends first
        sources = [states[t.src].where[t.chunk] for t in step.transfers]
        targets = [states[t.dst].home(t.chunk) for t in step.transfers]
        seen: dict[tuple[int, int], int] = {}
        chans = []
        for t in step.transfers:  # concurrent transfers on one connection use separate channels
            chans.append(seen.get((t.src, t.dst), 0))
            seen[(t.src, t.dst)] = chans[-1] + 1
        for idx, (t, src_loc, target) in enumerate(zip(step.transfers, sources, targets)):
            send = _Op("s", src_loc, target, t.dst, (k, 0, idx), chan=chans[idx])
            _record(states[t.src], send, [src_loc], [])
            ops[t.src].append(send)
        for idx, (t, src_loc, target) in enumerate(zip(step.transfers, sources, targets)):
            dst_state = states[t.dst]
            if t.op == "reduce":
                local = dst_state.where.get(t.chunk, target)
                if local != target:  # move the local partial to its home first (input stays intact)
                    cpy = _Op("cpy", local, target, t.src, (k, 1, idx, 0), chan=chans[idx])
                    _record(dst_state, cpy, [local], [target])
                    ops[t.dst].append(cpy)
                recv = _Op("rrc", target, target, t.src, (k, 1, idx, 1), chan=chans[idx])   # src: the local partial
                _record(dst_state, recv, [target], [target])
            else:
                recv = _Op("r", src_loc, target, t.src, (k, 1, idx, 1), chan=chans[idx])
                _record(dst_state, recv, [], [target])
            ops[t.dst].append(recv)
            dst_state.where[t.chunk] = target
    last = len(schedule.steps)
    for r, st in enumerate(states):  # out-of-place: post ranks must end with the chunk in o
        for ch in spec.chunks():
            pos = spec.output_position(ch.id, r)
            if pos is None or r not in ch.post:
                continue
            want = ("o", chunk_offset(spec, pos))
            have = st.where.get(ch.id)
            if have is not None and have != want:
                op = _Op("cpy", have, want, -1, (last, 2, ch.id))
                _record(st, op, [have], [want])
                ops[r].append(op)
    return _emit(schedule, spec, states, ops, style, proto, min_bytes, max_bytes, name)


def _assign_threadblocks(rank_ops: list[_Op]) -> dict[tuple[str, int, int], int]:
    """Threadblock ids of a rank: one per (direction, peer, channel) it uses, local ops in tb 0."""
    keys = sorted({op.tb_key for op in rank_ops if op.peer >= 0}, key=lambda k: (k[2], k[1], k[0]))
    tb_of = {key: i for i, key in enumerate(keys)}
    if not tb_of:
        tb_of[("local", -1, 0)] = 0
    return tb_of


def _emit(schedule, spec, states, ops, style, proto, min_bytes, max_bytes, name) -> str:
    n = spec.ranks
    i_chunks = chunks_in(spec, spec.input_blocks())
    o_chunks = chunks_in(spec, spec.output_blocks())
    nchannels = 1 + max((op.chan for lst in ops for op in lst), default=0)
    algo = ET.Element("algo", {
        "name": name or schedule.name or f"topocoll-{spec.name}", "proto": proto,
        "nchannels": str(nchannels), "nchunksperloop": str(max(i_chunks, o_chunks)), "ngpus": str(n),
        "coll": COLL_NAMES[style][spec.name], "inplace": "0", "outofplace": "1",
        "minBytes": str(min_bytes), "maxBytes": str(max_bytes if max_bytes is not None else 0)})
    tb_keys = [_assign_threadblocks(ops[r]) for r in range(n)]
    tbs_per_rank: list[dict[int, list[_Op]]] = []
    for r in range(n):
        tbs: dict[int, list[_Op]] = {tb: [] for tb in tb_keys[r].values()}
        for op in sorted(ops[r], key=lambda o: o.order):
            op.tb = tb_keys[r][op.tb_key] if op.peer >= 0 else 0
            tbs[op.tb].append(op)
        tbs_per_rank.append(tbs)
    for r in range(n):  # extra dependencies become nops, then number the steps
        for tb, lst in tbs_per_rank[r].items():
            out: list[_Op] = []
            for op in lst:
                deps = _cross_deps(op)
                for extra in deps[1:]:
                    nop = _Op("nop", None, None, -1, op.order, tb=tb)
                    nop.dep_ops = [extra]
                    out.append(nop)
                op.dep_ops = deps[:1]
                out.append(op)
            for i, op in enumerate(out):
                op.index, op.tb = i, tb
            tbs_per_rank[r][tb] = out
    for r in range(n):
        for lst in tbs_per_rank[r].values():
            for op in lst:
                for d in op.dep_ops:
                    d.hasdep = True
    for r in range(n):
        gpu = ET.SubElement(algo, "gpu", {"id": str(r), "i_chunks": str(i_chunks), "o_chunks": str(o_chunks),
                                          "s_chunks": str(len(states[r].scratch))})
        for (direction, peer, chan), tb in sorted(tb_keys[r].items(), key=lambda kv: kv[1]):
            tbe = ET.SubElement(gpu, "tb", {"id": str(tb), "send": str(peer if direction == "send" else -1),
                                            "recv": str(peer if direction == "recv" else -1),
                                            "chan": str(max(chan, 0))})
            for op in tbs_per_rank[r][tb]:
                dep = op.dep_ops[0] if op.dep_ops else None
                src = op.src or ("i", -1)
                dst = op.dst or ("o", -1)
                ET.SubElement(tbe, "step", {
                    "s": str(op.index), "type": op.kind, "srcbuf": src[0], "srcoff": str(src[1]),
                    "dstbuf": dst[0], "dstoff": str(dst[1]), "cnt": "1" if op.kind != "nop" else "0",
                    "depid": str(dep.tb if dep else -1), "deps": str(dep.index if dep else -1),
                    "hasdep": "1" if op.hasdep else "0"})
    ET.indent(algo)
    return ET.tostring(algo, encoding="unicode") + "\n"


def _cross_deps(op: _Op) -> list[_Op]:
    """Dependencies on other threadblocks, keeping only the latest per threadblock."""
    latest: dict[int, _Op] = {}
    for d in op.dep_ops:
        if d is op or d.tb == op.tb:
            continue
        if d.tb not in latest or d.order > latest[d.tb].order:
            latest[d.tb] = d
    return [latest[tb] for tb in sorted(latest)]


# ---------------------------------------------------------------------------------- import
