"""Lowering: schedule + element count + dtype + in-place flag -> concrete per-step buffer ops.

All the executor logic lives here; backends only move bytes.  The result, a :class:`Program`
(the data types live in :mod:`kernels.program.ops`), lists for every
step of the schedule the ops to run: a **copy** (``dst <- src``), a **reduce**
(``dst <- acc (op) src``, where ``acc`` is the receiving rank's own partial) or a
**scale** (``dst <- dst / n`` for integer ``avg``), each naming its :class:`Region` (rank, physical
buffer ``input`` / ``output`` / ``scratch``, element range).  Every op runs on the stream of
the rank it writes (``op.rank``); ``src_deps`` and ``dst_deps`` name the earlier ops whose
completion it must wait for (read-after-write on what it reads, write-after-read and
write-after-write on what it writes).  Deps inside one step only ever link ops that write
the same slot (several reduces into one chunk), so a step's ops can otherwise run at once.

Where values live
-----------------
A rank's value of a chunk starts in its input buffer (synth.ir.collectives positions, never
written out-of-place).  Received values go to the chunk's *home*: its output position when
the rank has one, else a scratch slot.  Because every transfer of a step reads the state at
the start of the step, an op never writes a slot that another op of the same step reads;
such a write (e.g. two ranks reducing into each other, or in-place alltoall overwriting data
not yet sent) goes to a scratch slot instead, and an **epilogue** (extra steps after the
schedule's) copies values that did not end at home, then applies integer ``avg``'s division.

Several reduces into one (rank, chunk) in one step are summed in
:func:`synth.ir.sum_order.reduce_order` (source ranks in order, the receiver's own value at its
rank's position), whatever order the schedule lists them in (unless ``lower(..., rank_order=False)``:
the torch path's ops exact in any order), so every rank of a one-shot all-reduce gets the same bits;
where neither of the first two is the receiver's own value, the
first peer's value is copied into the destination (never the own value's slot) and the rest are
reduced into it.

``avg`` follows NCCL (``hostToDevRedOp`` in NCCL's ``src/enqueue.cc``): integers sum, then
divide with truncation (``ncclDevSumPostDiv``); floating types multiply every contribution by
``1/n`` (rounded to the type through float32, float64 directly) before summing
(``ncclDevPreMulSum``).  A value that is still one rank's contribution is raw; the reduce that
first combines it scales it (:attr:`Op.premul`), so each contribution is scaled exactly once.

In-place (NCCL aliasing): allgather's and gather's (root) input is block ``rank`` of the
output; reducescatter's and scatter's (root) output is block ``rank`` of the input; the
others use one array.  Aliased regions are mapped onto one physical buffer, so ops only name
physical buffers; :attr:`Program.bindings` says which user array backs each of them.

The lowering also checks the schedule's semantics (a sender holds the chunk, a reduce target
holds a partial, no contribution is combined twice, every post rank ends with the complete
chunk); it does not check link capacities (that is synth.ir.verifier's job).

>>> from synth.ir.schedule import Schedule, Step, Transfer
>>> s = Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),))
>>> p = lower(s, 4, "float32")
>>> [(o.kind, o.dst.rank, o.dst.buf, o.dst.start, o.src.buf) for o in p.ops()]
[('copy', 1, 'output', 0, 'input'), ('copy', 0, 'output', 4, 'input'), ('copy', 0, 'output', 0, 'input'), ('copy', 1, 'output', 4, 'input')]
>>> p.num_steps, p.schedule_steps
(2, 1)
"""

from __future__ import annotations

import numpy as np

from kernels.program.ops import (INPUT, OUTPUT, SCRATCH, Op, Program, Region, bindings, has_input, has_output,
                                 is_float)
from kernels.program.reduce_op import check_reduce_op
from synth.ir.collectives import Position, element_range
from synth.ir.schedule import Schedule
from synth.ir.sum_order import rank_order_groups
from topo_probe.errors import InvalidArgument, ScheduleInvalid
from topo_probe.number_rules import is_int


class _Lowerer:
    """State of one lowering run: where each (rank, chunk) value lives, who wrote what."""

    def __init__(self, schedule: Schedule, count: int, dtype: np.dtype, inplace: bool, op: str,
                 rank_order: bool = True):
        self.s, self.spec, self.count, self.inplace, self.op = schedule, schedule.spec, count, inplace, op
        self.rank_order = rank_order
        self.dtype = dtype
        n = self.spec.ranks
        self.chunks = {c.id: c for c in self.spec.chunks()}
        self.combining = self.spec.combining
        #: floating avg: scale each raw contribution by 1/n as it enters a reduce (module docstring)
        self.premul = op == "avg" and self.combining and is_float(dtype)
        self.aliased = [inplace and has_input(self.spec, r) and has_output(self.spec, r) for r in range(n)]
        self.length, self.phase = {}, {}
        #: elements per 16 bytes: scratch slots start at the same offset modulo this as the
        #: chunk's piece does in a user buffer, so vector copies between them stay aligned
        self.vector = max(1, 16 // dtype.itemsize)
        for k, c in self.chunks.items():
            pos = self.spec.input_position(k, c.pre[0])
            a, b = element_range(self.spec, count, pos)
            self.length[k] = b - a
            self.phase[k] = a % self.vector
        self.loc: dict[tuple[int, int], tuple] = {}        # (rank, chunk) -> slot
        self.contrib: dict[tuple[int, int], frozenset] = {}
        self.occupant: dict[tuple, tuple[int, int]] = {}    # slot key -> (rank, chunk)
        self.scratch: dict[tuple[int, int], list] = {}
        self.scratch_size = [0] * n
        self.last_writer: dict[tuple, int] = {}
        self.readers: dict[tuple, list[int]] = {}
        self.steps: list[list[Op]] = []
        self.next_id = 0
        self.last_read: dict[tuple[int, int], int] = {}
        for t, step in enumerate(schedule.steps):
            for tr in step.transfers:
                self.last_read[(tr.src, tr.chunk)] = t
                if tr.op == "reduce":
                    self.last_read[(tr.dst, tr.chunk)] = t
        for k, c in self.chunks.items():
            for r in c.pre:
                slot = self._slot(r, INPUT, self.spec.input_position(k, r))
                self.loc[(r, k)] = slot
                self.occupant[slot[0]] = (r, k)
                self.contrib[(r, k)] = frozenset([r])

    # ------------------------------------------------------------------ slots
    def _slot(self, rank: int, logical: str, pos: Position) -> tuple:
        """(key, Region) of a chunk position, mapped onto the physical buffer."""
        a, b = element_range(self.spec, self.count, pos)
        block, buf = pos.block, logical
        if self.aliased[rank]:
            name = self.spec.name
            if logical == INPUT and name in ("allgather", "gather"):
                buf, block, a, b = OUTPUT, rank, a + rank * self.count, b + rank * self.count
            elif logical == OUTPUT and name in ("reducescatter", "scatter"):
                buf, block, a, b = INPUT, rank, a + rank * self.count, b + rank * self.count
            elif logical == INPUT and name not in ("reducescatter", "scatter"):
                buf = OUTPUT
        return (rank, buf, block, pos.piece), Region(rank, buf, a, b)

    def _home(self, rank: int, k: int) -> tuple | None:
        pos = self.spec.output_position(k, rank)
        return None if pos is None else self._slot(rank, OUTPUT, pos)

    def _new_scratch(self, rank: int, k: int) -> tuple:
        lst = self.scratch.setdefault((rank, k), [])
        start = self.scratch_size[rank]
        start += (self.phase[k] - start) % self.vector
        self.scratch_size[rank] = start + self.length[k]
        slot = ((rank, SCRATCH, k, len(lst)), Region(rank, SCRATCH, start, start + self.length[k]))
        lst.append(slot)
        return slot

    def _final(self, rank: int, k: int) -> bool:
        return rank in self.chunks[k].post and self.spec.output_position(k, rank) is not None

    def _needed(self, owner: tuple[int, int], t: int) -> bool:
        return self.last_read.get(owner, -1) >= t or self._final(*owner)

    def _choose(self, rank: int, k: int, t: int, read_keys: set) -> tuple:
        home = self._home(rank, k)
        cands = ([home] if home is not None else []) + self.scratch.get((rank, k), [])
        for slot in cands:
            if slot[0] in read_keys:
                continue
            occ = self.occupant.get(slot[0])
            if occ is not None and occ != (rank, k) and self._needed(occ, t):
                continue
            return slot
        return self._new_scratch(rank, k)

    # ------------------------------------------------------------------ emit
    def _emit(self, t: int, kind: str, dst: tuple, src: tuple | None, acc: tuple | None,
              k: int, transfer: int | None, premul: tuple[bool, bool] = (False, False)) -> None:
        while len(self.steps) <= t:
            self.steps.append([])
        if self.length[k] == 0:
            return
        oid = self.next_id
        self.next_id += 1
        src_deps, dst_deps = set(), set()
        if src is not None and src[0] in self.last_writer:
            src_deps.add(self.last_writer[src[0]])
        reads = [x for x in (src, acc) if x is not None] + ([dst] if kind == "scale" else [])
        if acc is not None and acc[0] in self.last_writer:
            dst_deps.add(self.last_writer[acc[0]])
        if dst[0] in self.last_writer:
            dst_deps.add(self.last_writer[dst[0]])
        dst_deps.update(self.readers.get(dst[0], ()))
        src_deps.discard(oid)
        dst_deps.discard(oid)
        for x in reads:
            self.readers.setdefault(x[0], []).append(oid)
        self.last_writer[dst[0]] = oid
        self.readers[dst[0]] = []
        self.steps[t].append(Op(oid, t, kind, dst[1], None if src is None else src[1],
                                None if acc is None else acc[1], tuple(sorted(src_deps)),
                                tuple(sorted(dst_deps)), k, transfer, premul))

    def _fail(self, msg: str, rule: str, t: int | None, i: int | None, rank: int, k: int):
        where = f"step {t} transfer {i}: " if t is not None else "after the last step: "
        return ScheduleInvalid(f"{self.spec.name}: schedule {self.s.name or self.spec.name!r}: {where}{msg}",
                               rule=rule, step=t, transfer=i, rank=rank, chunk=k)

    # ------------------------------------------------------------------ steps
    def run_step(self, t: int) -> None:
        step = self.s.steps[t]
        src_slot: list[tuple] = []
        read_keys: set = set()
        for i, tr in enumerate(step.transfers):
            slot = self.loc.get((tr.src, tr.chunk))
            if slot is None:
                raise self._fail(f"rank {tr.src} sends chunk {tr.chunk} but does not hold it",
                                 "not-held", t, i, tr.src, tr.chunk)
            src_slot.append(slot)
            read_keys.add(slot[0])
        groups: dict[tuple[int, int], list[int]] = {}
        for i, tr in enumerate(step.transfers):
            groups.setdefault((tr.dst, tr.chunk), []).append(i)
        while len(self.steps) <= t:
            self.steps.append([])
        plans = []
        ranked = rank_order_groups(step) if self.rank_order else {}
        for (d, k), idxs in groups.items():
            self._check_group(t, d, k, idxs)
            terms = ranked.get((d, k))
            own = self.loc.get((d, k))
            head_copy = terms is not None and terms[0] is not None and terms[1] is not None
            target = self._choose(d, k, t, read_keys | {own[0]} if head_copy else read_keys)
            plans.append((d, k, idxs, terms, target))
        moves = []
        for d, k, idxs, terms, target in plans:
            if terms is None:
                contrib = self._in_transfer_order(t, step, d, k, idxs, target, src_slot)
            else:
                contrib = self._in_rank_order(t, step, d, k, terms, target, src_slot)
            moves.append(((d, k), target, contrib))
        for (d, k), _, _ in moves:
            old = self.loc.get((d, k))
            if old is not None and self.occupant.get(old[0]) == (d, k):
                del self.occupant[old[0]]
        for (d, k), target, contrib in moves:
            prev = self.occupant.get(target[0])
            if prev is not None and prev != (d, k):
                self.loc.pop(prev, None)
                self.contrib.pop(prev, None)
            self.occupant[target[0]] = (d, k)
            self.loc[(d, k)] = target
            self.contrib[(d, k)] = contrib

    def _check_group(self, t: int, d: int, k: int, idxs: list[int]) -> None:
        """The reduces into (rank ``d``, chunk ``k``) of step ``t`` in transfer order: each into a
        partial, none counting a rank twice."""
        held = (d, k) in self.loc
        contrib = self.contrib.get((d, k), frozenset())
        for i in idxs:
            tr = self.s.steps[t].transfers[i]
            got = self.contrib[(tr.src, k)]
            if tr.op == "reduce":
                if not held:
                    raise self._fail(f"rank {d} reduces chunk {k} but holds no partial of it",
                                     "reduce-into-empty", t, i, d, k)
                if self.combining and contrib & got:
                    raise self._fail(f"reduce of chunk {k} into rank {d} counts rank(s) "
                                     f"{sorted(contrib & got)} twice", "double-count", t, i, d, k)
                contrib = contrib | got
            else:
                contrib = got
            held = True

    def _in_transfer_order(self, t, step, d, k, idxs, target, src_slot) -> frozenset:
        value, contrib = self.loc.get((d, k)), self.contrib.get((d, k))
        for i in idxs:
            tr = step.transfers[i]
            got = self.contrib[(tr.src, k)]
            if tr.op == "reduce":
                raw = (len(contrib) == 1, len(got) == 1) if self.premul else (False, False)
                self._emit(t, "reduce", target, src_slot[i], value, k, i, raw)
                contrib = contrib | got
            else:
                self._emit(t, "copy", target, src_slot[i], None, k, i)
                contrib = got
            value = target
        return contrib

    def _in_rank_order(self, t, step, d, k, terms, target, src_slot) -> frozenset:
        """Left fold over ``terms`` (:func:`synth.ir.sum_order.rank_order_groups`) into ``target``;
        where neither of the first two is ``d``'s own value, the first is copied to ``target`` (a slot other than the own
        value's, run_step) and the rest reduced into it (the device program runs the copy and
        its reduces as one chain)."""
        own, own_contrib = self.loc[(d, k)], self.contrib[(d, k)]

        def operand(term):
            if term is None:
                return own, own_contrib, None
            return src_slot[term], self.contrib[(step.transfers[term].src, k)], term
        if terms[0] is not None and terms[1] is not None:     # two peers first: copy the first in
            self._emit(t, "copy", target, src_slot[terms[0]], None, k, terms[0])
            acc, contrib, rest = target, self.contrib[(step.transfers[terms[0]].src, k)], terms[1:]
        else:
            acc, contrib, rest = own, own_contrib, [x for x in terms[:2] if x is not None] + list(terms[2:])
        for term in rest:
            slot, got, i = operand(term)
            raw = (len(contrib) == 1, len(got) == 1) if self.premul else (False, False)
            self._emit(t, "reduce", target, slot, acc, k, i, raw)
            acc, contrib = target, contrib | got
        return contrib

    def epilogue(self) -> None:
        t = len(self.s.steps)
        moves = []
        for k, c in sorted(self.chunks.items()):
            for r in c.post:
                slot = self.loc.get((r, k))
                if slot is None:
                    raise self._fail(f"rank {r} does not hold chunk {k} (it is in the chunk's post)",
                                     "postcondition", None, None, r, k)
                if self.combining and self.contrib[(r, k)] != frozenset(c.pre):
                    miss = sorted(set(c.pre) - self.contrib[(r, k)])
                    raise self._fail(f"rank {r} ends with chunk {k} missing the contribution(s) of "
                                     f"rank(s) {miss}", "postcondition", None, None, r, k)
                home = self._home(r, k)
                if home is not None and slot[0] != home[0]:
                    moves.append((r, k, slot, home))
        homes = {m[3][0] for m in moves}
        if any(m[2][0] in homes for m in moves):   # a source is another's destination: stage it
            staged = []
            for r, k, slot, home in moves:
                if slot[0] in homes:
                    tmp = self._new_scratch(r, k)
                    self._emit(t, "copy", tmp, slot, None, k, None)
                    slot = tmp
                staged.append((r, k, slot, home))
            moves, t = staged, t + 1
        for r, k, slot, home in moves:
            self._emit(t, "copy", home, slot, None, k, None)
        if self.op == "avg" and self.combining and not self.premul:   # integers: sum, then divide
            for k, c in sorted(self.chunks.items()):
                for r in c.post:
                    home = self._home(r, k)
                    self._emit(t, "scale", home, None, None, k, None)
        while self.steps and not self.steps[-1] and len(self.steps) > len(self.s.steps):
            self.steps.pop()


def lower(schedule: Schedule, count: int, dtype, *, inplace: bool = False, op: str = "sum",
          rank_order: bool = True) -> Program:
    """Lower ``schedule`` for blocks of ``count`` elements of ``dtype``.

    Parameters
    ----------
    schedule : Schedule
        Any schedule (it is checked for holdings and contributions, not capacities).
    count : int
        Elements per block (see :mod:`synth.ir.collectives`); 0 gives a program without ops.
    dtype : numpy dtype or name
        Element type (sizes the scratch and the traffic figures).
    inplace : bool
        Whether send and receive buffers alias as in NCCL (see module docstring).
    op : str
        Reduction op, one of sum/prod/max/min/avg; ``avg`` adds the division ops.
    rank_order : bool
        Sum several reduces into one (rank, chunk) in rank order (module docstring); False keeps
        the transfers' order, for a caller whose op and dtype give the same bits in any order.

    Raises
    ------
    ScheduleInvalid
        The schedule does not implement its collective (message names step, transfer, rank, chunk).
    UnsupportedCollective
        Bad ``count`` or ``op``.
    """
    if not is_int(count) or count < 0:
        raise InvalidArgument(f"{schedule.collective}: count must be an integer >= 0, got {count!r}")
    check_reduce_op(op, schedule.collective)
    dt = np.dtype(dtype)
    lw = _Lowerer(schedule, int(count), dt, bool(inplace), op, bool(rank_order))
    for t in range(len(schedule.steps)):
        lw.run_step(t)
    lw.epilogue()
    spec = lw.spec
    sizes, binds = [], []
    for r in range(spec.ranks):
        b = bindings(spec, r, bool(inplace))
        sz = {}
        if INPUT in b:
            sz[INPUT] = spec.input_blocks() * count
        if OUTPUT in b:
            sz[OUTPUT] = spec.output_blocks() * count
        if lw.scratch_size[r]:
            sz[SCRATCH] = lw.scratch_size[r]
        sizes.append(sz)
        binds.append(b)
    return Program(spec.name, spec.ranks, spec.chunks_per_rank, spec.root, int(count), dt, bool(inplace), op,
                   len(schedule.steps), tuple(tuple(s) for s in lw.steps), tuple(sizes), tuple(binds))
