"""Lower a verified schedule to per-GPU MSCCL operations on buffer places, with dependencies.

A transfer (chunk g, src -> dst) becomes a send ``s`` on src reading where src holds g, and on
dst a receive ``r`` (copy) or ``rrc`` (receive, add the partial dst holds, store) writing g's
*home* on dst: its output place when dst's output has one for g, else a scratch slot (``s``
buffer, one per chunk that needs one).  A reduce reads the local partial where it is (the
input, at first) and writes the home, so inputs are never written.  When several partials of g
reach dst in one step, the first comes with an ``rrc`` and the others side by side into
scratch, summed by a chain of local ``re`` steps (as RCCL's all-pairs algorithms do) instead of
a chain of ``rrc`` taking one round each.  Transfers of one step read the state at its start:
sends are recorded before the step's receives.  Out of place, a rank that must end with a chunk
somewhere else than its output place copies it there last (``cpy``).

Without full ops (``full_ops=False``, for RCCL, which launches no ``rrc``): a reduce becomes
``r`` into a scratch slot of its connection (one per receiving channel and peer, reused), a
``cpy`` of the local partial to the chunk's home where it is elsewhere, and ``re`` adding the
slot into the home, both in the receive's threadblock right after it.  ``msgs_per_channel``
cuts each connection's messages, in program order, into runs of that many per channel (more
channels, fewer steps per threadblock).

Dependencies are inferred on buffer places, with the in-place aliases of
:func:`~synth.formats.msccl.layout.alias` (so the program stays correct when the runtime calls
it in place): a step waits for the last write of what it reads and for the last write and the
reads since of what it writes.  Concurrent transfers on one connection in one step go on
separate channels (up to ``max_channels``, each taking a run of neighbouring chunks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from synth.formats.msccl.layout import Loc, alias, chunk_offset
from synth.ir.collectives import CollectiveSpec
from synth.ir.schedule import Schedule


@dataclass(eq=False)
class Op:
    """One MSCCL step before threadblock assignment (``kind``: s, r, rrc, cpy; after fusion
    also rcs, rrs, rrcs; ``nop`` carries an extra dependency)."""

    kind: str
    rank: int
    src: Loc | None
    dst: Loc | None
    order: tuple
    send_peer: int = -1
    recv_peer: int = -1
    chan: int = 0
    chunk: int = -1
    cnt: int = 1
    deps: list[Op] = field(default_factory=list)
    tb: int = -1
    index: int = -1
    hasdep: bool = False
    #: a local step placed in the threadblock of this receive, right after it (RCCL lowering)
    follow: Op | None = None

    @property
    def reads(self) -> bool:
        return self.kind in ("s", "rrc", "cpy", "rrs", "rrcs", "re")

    @property
    def writes(self) -> bool:
        return self.kind in ("r", "rrc", "cpy", "rcs", "rrcs", "re")


class RankState:
    """Where each chunk a rank holds lives, scratch slots, and the ops that last touched each place."""

    def __init__(self, spec: CollectiveSpec, rank: int, held: list[int] | None = None) -> None:
        """``held``: the chunks ``rank`` has in its input, in chunk order (default: from the spec)."""
        self.spec, self.rank = spec, rank
        self.where: dict[int, Loc] = {}
        self.scratch: dict[int, int] = {}
        self.last_write: dict[Loc, Op] = {}
        self.readers: dict[Loc, list[Op]] = {}
        self._keys: dict[Loc, Loc] = {}
        if held is None:
            held = [ch.id for ch in spec.chunks() if rank in ch.pre]
        for g in held:
            self.where[g] = ("i", chunk_offset(spec, spec.input_position(g, rank)))

    def temp(self) -> Loc:
        """A fresh scratch slot (for a partial received beside others of the same chunk)."""
        key = -1 - len(self.scratch)
        self.scratch[key] = len(self.scratch)
        return "s", self.scratch[key]

    def recv_slot(self, peer: int, chan: int) -> Loc:
        """The scratch slot a receive from ``peer`` on ``chan`` lands in before its ``re``."""
        key = ("recv", peer, chan)
        if key not in self.scratch:
            self.scratch[key] = len(self.scratch)
        return "s", self.scratch[key]

    def home(self, chunk: int) -> Loc:
        pos = self.spec.output_position(chunk, self.rank)
        if pos is not None:
            return "o", chunk_offset(self.spec, pos)
        if chunk not in self.scratch:
            self.scratch[chunk] = len(self.scratch)
        return "s", self.scratch[chunk]

    def key(self, loc: Loc) -> Loc:
        """The place ``loc`` names when the runtime calls the program in place (memoized)."""
        got = self._keys.get(loc)
        if got is None:
            got = self._keys[loc] = alias(self.spec, self.rank, loc[0], loc[1], inplace=True)
        return got

    def record(self, op: Op, reads: list[Loc], writes: list[Loc]) -> None:
        deps = []
        for loc in map(self.key, reads):
            if loc in self.last_write:
                deps.append(self.last_write[loc])
        for loc in map(self.key, writes):
            if loc in self.last_write:
                deps.append(self.last_write[loc])
            deps.extend(self.readers.get(loc, []))
        op.deps = [d for d in dict.fromkeys(deps) if d is not op]
        for loc in map(self.key, reads):
            self.readers.setdefault(loc, []).append(op)
        for loc in map(self.key, writes):
            self.last_write[loc] = op
            self.readers[loc] = []


def _channels(step, max_channels: int) -> list[int]:
    """Channel of each transfer: the transfers of a step on one pair, in chunk order, cut into
    up to ``max_channels`` runs of neighbouring chunks (so each channel can merge its run)."""
    by_pair: dict[tuple[int, int], list[int]] = {}
    for idx, t in enumerate(step.transfers):
        by_pair.setdefault((t.src, t.dst), []).append(idx)
    chans = [0] * len(step.transfers)
    for idxs in by_pair.values():
        idxs.sort(key=lambda i: step.transfers[i].chunk)
        k = min(max_channels, len(idxs))
        for pos, i in enumerate(idxs):
            chans[i] = pos * k // len(idxs)
    return chans


def _local_sum(st: RankState, chunk: int, parts: list[tuple[Op, Loc]], order: tuple) -> list[Op]:
    """``re`` steps adding partials received side by side into the chunk's home, where the
    first partial arrived with an ``rrc``.  The first waits for every receive; the rest only
    for the one before, so RCCL chains them into one multi-source reduction (its parser fuses
    consecutive ``re`` steps without dependencies)."""
    target = st.where[chunk]
    out: list[Op] = []
    for i, (recv, slot) in enumerate(parts):
        re = Op("re", st.rank, slot, target, order + (1 + i,), chunk=chunk)
        st.record(re, [slot, target], [target])
        if i == 0:
            re.deps = list(dict.fromkeys(re.deps + [r for r, _ in parts]))
        else:
            re.deps = [d for d in re.deps if d in out or d is recv] + [out[-1]]
        out.append(re)
    st.where[chunk] = target
    return out


def _recv_reduce(st: RankState, t, source: Loc, home: Loc, order: tuple, chan: int) -> list[Op]:
    """``r`` into the connection's slot, ``cpy`` of the local partial home when it is elsewhere,
    ``re`` of the slot into home (the RCCL form of ``rrc``)."""
    local = st.where[t.chunk]
    slot = st.recv_slot(t.src, chan)
    r = Op("r", t.dst, source, slot, order, recv_peer=t.src, chan=chan, chunk=t.chunk)
    st.record(r, [], [slot])
    out = [r]
    if local != home:
        cp = Op("cpy", t.dst, local, home, order + (1,), chunk=t.chunk, follow=r)
        st.record(cp, [local], [home])
        out.append(cp)
    re = Op("re", t.dst, slot, home, order + (2,), chunk=t.chunk, follow=r)
    st.record(re, [slot, home], [home])
    out.append(re)
    st.where[t.chunk] = home
    return out


def _split(step, chans: list[int], width: int, sent: dict, quota: int | None) -> list[int]:
    """Channels with each connection's messages cut into runs of ``quota`` (``width`` channels a run)."""
    if quota is None:
        return chans
    out = []
    for t, c in zip(step.transfers, chans):
        key = (t.src, t.dst, c)
        k = sent.get(key, 0)
        sent[key] = k + 1
        out.append(c + width * (k // quota))
    return out


def max_parallel(schedule: Schedule) -> int:
    """Most transfers one step puts on one (src, dst) pair (the channels worth using)."""
    best = 1
    for step in schedule.steps:
        seen: dict[tuple[int, int], int] = {}
        for t in step.transfers:
            seen[(t.src, t.dst)] = seen.get((t.src, t.dst), 0) + 1
        best = max(best, max(seen.values(), default=1))
    return best


def lower(schedule: Schedule, max_channels: int = 1, *, full_ops: bool = True,
          msgs_per_channel: int | None = None) -> tuple[list[RankState], list[list[Op]]]:
    """Per-rank states (scratch use) and op lists in program order (see the module docstring);
    concurrent transfers on one pair spread over up to ``max_channels`` channels (:func:`_channels`)."""
    spec = schedule.spec
    n = spec.ranks
    chunks = spec.chunks()
    held: list[list[int]] = [[] for _ in range(n)]
    ends: list[list[int]] = [[] for _ in range(n)]
    for ch in chunks:                # one pass: each rank's input and output chunks, in chunk order
        for r in set(ch.pre):
            held[r].append(ch.id)
        for r in set(ch.post):
            ends[r].append(ch.id)
    states = [RankState(spec, r, held[r]) for r in range(n)]
    ops: list[list[Op]] = [[] for _ in range(n)]
    sent: dict = {}
    for k, step in enumerate(schedule.steps):
        sources = [states[t.src].where[t.chunk] for t in step.transfers]
        targets = [states[t.dst].home(t.chunk) for t in step.transfers]
        chans = _split(step, _channels(step, max_channels), max_channels, sent, msgs_per_channel)
        for idx, t in enumerate(step.transfers):
            op = Op("s", t.src, sources[idx], targets[idx], (k, 0, idx), send_peer=t.dst, chan=chans[idx],
                    chunk=t.chunk)
            states[t.src].record(op, [sources[idx]], [])
            ops[t.src].append(op)
        fan_in: dict[tuple[int, int], list[int]] = {}
        for idx, t in enumerate(step.transfers):
            if t.op == "reduce":
                fan_in.setdefault((t.dst, t.chunk), []).append(idx)
        gathered: dict[tuple[int, int], list[tuple[Op, Loc]]] = {}
        for idx, t in enumerate(step.transfers):
            st = states[t.dst]
            if t.op == "reduce" and fan_in[(t.dst, t.chunk)][0] != idx:
                slot = st.temp()   # several partials at once: receive side by side, sum locally
                op = Op("r", t.dst, sources[idx], slot, (k, 1, idx), recv_peer=t.src, chan=chans[idx],
                        chunk=t.chunk)
                st.record(op, [], [slot])
                gathered.setdefault((t.dst, t.chunk), []).append((op, slot))
            elif t.op == "reduce" and not full_ops:
                ops[t.dst].extend(_recv_reduce(st, t, sources[idx], targets[idx], (k, 1, idx), chans[idx]))
                continue
            elif t.op == "reduce":
                local = st.where[t.chunk]
                op = Op("rrc", t.dst, local, targets[idx], (k, 1, idx), recv_peer=t.src, chan=chans[idx],
                        chunk=t.chunk)
                st.record(op, [local], [targets[idx]])
                st.where[t.chunk] = targets[idx]
            else:
                op = Op("r", t.dst, sources[idx], targets[idx], (k, 1, idx), recv_peer=t.src, chan=chans[idx],
                        chunk=t.chunk)
                st.record(op, [], [targets[idx]])
                st.where[t.chunk] = targets[idx]
            ops[t.dst].append(op)
        for n, ((dst, chunk), parts) in enumerate(sorted(gathered.items())):
            ops[dst].extend(_local_sum(states[dst], chunk, parts, (k, 2, n)))
    last = len(schedule.steps)
    for r, st in enumerate(states):
        for g in ends[r]:
            pos = spec.output_position(g, r)
            if pos is None:
                continue
            want = ("o", chunk_offset(spec, pos))
            have = st.where.get(g)
            if have is not None and have != want:
                op = Op("cpy", r, have, want, (last, 2, g), chunk=g)
                st.record(op, [have], [want])
                ops[r].append(op)
    return states, ops
