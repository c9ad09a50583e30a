"""Run an MSCCL program symbolically, as the runtime would, and record every chunk that crosses.

What each step does (RCCL ``src/device/msccl_kernel_impl.h``)::

    s     send src                        r     dst = recv
    rcs   dst = recv; send it on          rrs   send (recv + src) on, store nothing
    rrc   dst = recv + src                rrcs  dst = recv + src; send it on
    cpy   dst = src                       re    dst = dst + src      nop   only waits

A buffer place holds a value ``(chunk, contributions)``: the chunk id of
:mod:`synth.ir.collectives` and, for combining collectives, the bit mask of the ranks whose
inputs it sums.  Reductions of different chunks, or sums that count a rank twice, are errors.

Ordering is only what the runtime enforces: a threadblock runs its steps in order; a step
waits for its ``(depid, deps)`` (threadblock ``depid`` has finished a step ``>= deps`` whose
``hasdep`` is 1 — runtimes raise that flag only on such steps, never on ``nop``); a receive
takes the oldest message of its connection ``(sender, receiver, channel)``.  Sends are
buffered.  Times count network rounds: a network step occupies its threadblock for one round,
a transfer happens in round ``max(receiver ready, sent)`` and lands at the end of it; local
steps (``cpy``, ``re``, ``nop``) take no time.  Two accesses to one place, one of them a write,
that no chain of those orderings puts one before the other are a race
(:mod:`~synth.formats.msccl.races`) and reported.  Deadlocks, unmatched messages and outputs that
do not end with the right chunk are reported too, each as one
:class:`~topo_probe.errors.ScheduleFormatError` line naming gpu, threadblock and step.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field

from synth.formats.msccl.layout import RECEIVES, REDUCES, Loc, alias, chunk_offset
from synth.formats.msccl.program import Program, XStep
from synth.formats.msccl.races import HappensBefore, Slot
from synth.ir.collectives import CollectiveSpec
from topo_probe.errors import ScheduleFormatError

#: most chunk moves (sum of ``cnt`` over steps) a program may ask for
MAX_CHUNK_MOVES = 8_000_000

Value = tuple[int, int]            # (chunk id, contributions mask)
Origin = tuple[int, int, int]      # (gpu, threadblock, step)


def where(o: Origin) -> str:
    return f"gpu {o[0]} tb {o[1]} step {o[2]}"


@dataclass(frozen=True)
class NetTransfer:
    """A chunk that crossed from ``src`` to ``dst`` in round ``time``; ``origin`` is the receiving step."""

    time: int
    chunk: int
    src: int
    dst: int
    mask: int
    origin: Origin


@dataclass
class ReplayResult:
    transfers: list[NetTransfer] = field(default_factory=list)
    rounds: int = 0


@dataclass
class _Msg:
    values: list[Value]
    sent: int
    origin: Origin


class _Tb:
    __slots__ = ("free", "head", "queued", "sig_index", "sig_time")

    def __init__(self) -> None:
        self.head, self.free, self.queued = 0, 0, True
        self.sig_index: list[int] = []
        self.sig_time: list[int] = []


class Replay:
    """One symbolic run of ``program`` for ``spec``, in place or out of place."""

    def __init__(self, program: Program, spec: CollectiveSpec, *, inplace: bool, source: str) -> None:
        self.p, self.spec, self.inplace, self.source = program, spec, inplace, source
        self.slots: list[dict[Loc, Slot]] = [{} for _ in range(spec.ranks)]
        for ch in spec.chunks():
            for r in ch.pre:
                pos = spec.input_position(ch.id, r)
                loc = alias(spec, r, "i", chunk_offset(spec, pos), inplace=inplace)
                self.slots[r][loc] = Slot((ch.id, 1 << r if spec.combining else 0), 0, None)
        self.hb = HappensBefore([len(g.tbs) for g in program.gpus])
        self.tbs = {(g.id, tb.id): _Tb() for g in program.gpus for tb in g.tbs}
        self.queues: dict[tuple[int, int, int], deque[_Msg]] = {}
        self.waiting: dict[tuple, set] = {}
        self.blocked: dict[tuple[int, int], tuple] = {}
        self.result = ReplayResult()

    # ------------------------------------------------------------------ errors
    def fail(self, o: Origin, text: str) -> ScheduleFormatError:
        return ScheduleFormatError(f"{self.source}: {where(o)}: {text}")

    # ------------------------------------------------------------------ data
    def read(self, o: Origin, rank: int, buf: str, off: int, t: int) -> Value:
        slot = self.slots[rank].get(alias(self.spec, rank, buf, off, inplace=self.inplace))
        if slot is None:
            raise self.fail(o, f"reads {buf}[{off}] before anything is there")
        if slot.landed > t or self.hb.conflict(slot, o, False):
            raise self.fail(o, f"reads {buf}[{off}] written by {where(slot.writer)}, and nothing orders the two "
                            f"(a race)")
        slot.readers[o[1]] = o
        return slot.value

    def write(self, rank: int, buf: str, off: int, value: Value, landed: int, o: Origin) -> None:
        loc = alias(self.spec, rank, buf, off, inplace=self.inplace)
        old = self.slots[rank].get(loc)
        if old is not None:
            other = self.hb.conflict(old, o, True)
            if other is not None:
                raise self.fail(o, f"writes {buf}[{off}], which {where(other)} also uses, and nothing orders "
                                f"the two (a race)")
        self.slots[rank][loc] = Slot(value, landed, o)

    def combine(self, o: Origin, a: Value, b: Value) -> Value:
        if a[0] != b[0]:
            raise self.fail(o, f"reduces chunk {a[0]} with chunk {b[0]}")
        if a[1] & b[1]:
            twice = [r for r in range(self.spec.ranks) if (a[1] & b[1]) >> r & 1]
            raise self.fail(o, f"counts the contributions of ranks {twice} to chunk {a[0]} twice")
        return a[0], a[1] | b[1]

    # ------------------------------------------------------------------ scheduling
    def signal(self, key: tuple[int, int], deps: int) -> tuple[int, int] | None:
        """(round, step) of the first step ``>= deps`` of threadblock ``key`` that raised its flag."""
        tb = self.tbs[key]
        k = bisect.bisect_left(tb.sig_index, deps)
        return (tb.sig_time[k], tb.sig_index[k]) if k < len(tb.sig_index) else None

    def wait(self, on: tuple, key: tuple[int, int], why: tuple) -> None:
        self.waiting.setdefault(on, set()).add(key)
        self.blocked[key] = why

    def wake(self, on: tuple, ready: deque) -> None:
        for key in self.waiting.pop(on, ()):
            tb = self.tbs[key]
            if not tb.queued:
                tb.queued = True
                ready.append(key)

    def run(self) -> ReplayResult:
        ready = deque(sorted(self.tbs))
        while ready:
            key = ready.popleft()
            self.tbs[key].queued = False
            self.advance(key, ready)
        self.finish()
        return self.result

    def advance(self, key: tuple[int, int], ready: deque) -> None:
        rank, tid = key
        xtb = self.p.gpus[rank].tbs[tid]
        state = self.tbs[key]
        while state.head < len(xtb.steps):
            st = xtb.steps[state.head]
            start = state.free
            preds = ((rank, tid, st.index - 1),) if st.index else ()
            dep = None
            if st.depid >= 0:
                sig = self.signal((rank, st.depid), st.deps)
                if sig is None:
                    self.wait(("tb", rank, st.depid), key, ("dep", st))
                    return
                start = max(start, sig[0])
                dep = (rank, st.depid, sig[1])
                preds += (dep,)
            msg = None
            if st.kind in RECEIVES:
                conn = (xtb.recv, rank, xtb.chan)
                q = self.queues.get(conn)
                if not q:
                    self.wait(("conn",) + conn, key, ("msg", st))
                    return
                msg = q.popleft()
                preds += (msg.origin,)
                start = max(start, msg.sent)
            self.blocked.pop(key, None)
            self.hb.add((rank, tid, st.index), start, preds, dep)
            end = self.execute((rank, tid, st.index), xtb, st, start, msg, ready)
            state.head += 1
            state.free = end
            self.result.rounds = max(self.result.rounds, end)
            if st.kind != "nop" and st.hasdep != 0:
                state.sig_index.append(st.index)
                state.sig_time.append(end)
                self.hb.signal((rank, tid, st.index))
                self.wake(("tb", rank, tid), ready)

    def send(self, o: Origin, xtb, values: list[Value], sent: int, ready: deque) -> None:
        conn = (o[0], xtb.send, xtb.chan)
        self.queues.setdefault(conn, deque()).append(_Msg(values, sent, o))
        self.wake(("conn",) + conn, ready)

    def execute(self, o: Origin, xtb, st: XStep, start: int, msg: _Msg | None, ready: deque) -> int:
        rank, k = o[0], st.cnt
        if st.kind == "nop":
            return start
        if st.kind == "s":
            self.send(o, xtb, [self.read(o, rank, st.srcbuf, st.srcoff + i, start) for i in range(k)], start, ready)
            return start + 1
        if st.kind in ("cpy", "re"):
            vals = [self.read(o, rank, st.srcbuf, st.srcoff + i, start) for i in range(k)]
            if st.kind == "re":
                vals = [self.combine(o, self.read(o, rank, st.dstbuf, st.dstoff + i, start), v)
                        for i, v in enumerate(vals)]
            for i, v in enumerate(vals):
                self.write(rank, st.dstbuf, st.dstoff + i, v, start, o)
            return start
        if len(msg.values) != k:
            raise self.fail(o, f"receives {k} chunks but {where(msg.origin)} sent {len(msg.values)}")
        t = start  # already max(ready, sent)
        vals = list(msg.values)
        if st.kind in REDUCES:
            vals = [self.combine(o, self.read(o, rank, st.srcbuf, st.srcoff + i, t), v) for i, v in enumerate(vals)]
        if st.kind != "rrs":
            for i, v in enumerate(vals):
                self.write(rank, st.dstbuf, st.dstoff + i, v, t + 1, o)
        if st.kind in ("rcs", "rrs", "rrcs"):
            self.send(o, xtb, vals, t + 1, ready)
        for v in msg.values:
            self.result.transfers.append(NetTransfer(t, v[0], xtb.recv, rank, v[1], o))
        return t + 1

    # ------------------------------------------------------------------ the end
    def finish(self) -> None:
        stuck = [(key, why) for key, why in sorted(self.blocked.items())
                 if self.tbs[key].head < len(self.p.gpus[key[0]].tbs[key[1]].steps)]
        if stuck:
            (rank, tid), (kind, st) = stuck[0]
            o = (rank, tid, st.index)
            if kind == "dep":
                done = self.tbs[(rank, st.depid)].head >= len(self.p.gpus[rank].tbs[st.depid].steps)
                why = (f"waits on tb {st.depid} step {st.deps}, which never signals (no step from there on "
                       f"has hasdep=1)" if done else f"waits on tb {st.depid} step {st.deps} forever (deadlock)")
            else:
                xtb = self.p.gpus[rank].tbs[tid]
                why = f"waits forever for a message from gpu {xtb.recv} on channel {xtb.chan}"
            raise self.fail(o, f"{why}; {len(stuck)} threadblock(s) cannot finish")
        for conn, q in sorted(self.queues.items()):
            if q:
                raise self.fail(q[0].origin, f"sends to gpu {conn[1]} on channel {conn[2]} but no step "
                                f"receives it")

    def check_outputs(self) -> None:
        """Every post rank must end with its chunks (fully reduced) at their output places."""
        spec = self.spec
        for ch in spec.chunks():
            mask = sum(1 << r for r in ch.pre) if spec.combining else 0
            for r in ch.post:
                off = chunk_offset(spec, spec.output_position(ch.id, r))
                slot = self.slots[r].get(alias(spec, r, "o", off, inplace=self.inplace))
                mode = "in place" if self.inplace else "out of place"
                if slot is None or slot.value != (ch.id, mask):
                    have = "nothing" if slot is None else (
                        f"chunk {slot.value[0]}" + (f" with contributions of ranks "
                                                    f"{[q for q in range(spec.ranks) if slot.value[1] >> q & 1]}"
                                                    if spec.combining else ""))
                    last = f" (last written by {where(slot.writer)})" if slot and slot.writer else ""
                    raise ScheduleFormatError(
                        f"{self.source}: gpu {r}: run {mode}, output o[{off}] ends with {have}{last}, not "
                        f"the {'full sum of ' if spec.combining else ''}chunk {ch.id} {spec.name} needs there")


def check_size(program: Program, source: str) -> None:
    """Refuse programs that move more chunks than :data:`MAX_CHUNK_MOVES` before replaying them."""
    moves = sum(st.cnt for g in program.gpus for tb in g.tbs for st in tb.steps)
    if moves > MAX_CHUNK_MOVES:
        raise ScheduleFormatError(f"{source}: the program moves {moves} chunks, more than the "
                                  f"{MAX_CHUNK_MOVES} this reader replays")


def replay(program: Program, spec: CollectiveSpec, *, inplace: bool, source: str) -> ReplayResult:
    """Run ``program`` (see the module docstring) and check its outputs; returns the transfers."""
    if not spec.combining:
        for g in program.gpus:
            for tb in g.tbs:
                for st in tb.steps:
                    if st.kind in REDUCES:
                        raise ScheduleFormatError(f"{source}: {where((g.id, tb.id, st.index))}: a {st.kind!r} "
                                                  f"step in {spec.name}, which does not combine")
    run = Replay(program, spec, inplace=inplace, source=source)
    result = run.run()
    run.check_outputs()
    return result
