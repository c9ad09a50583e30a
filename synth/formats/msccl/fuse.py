"""Instruction fusion where the msccl-tools compiler fuses (``msccl/language/rank_dag.py``,
``_optimize_rcs`` and ``_optimize_rrcs_rrs``), on one GPU's lowered ops:

* ``r`` into place X, then ``s`` of X (nothing writes X in between)  ->  ``rcs``;
* ``rrc`` into X, then ``s`` of X                                    ->  ``rrcs``;
* ... and when X is not read again before it is overwritten (or X is scratch and never read
  again), the store is useless                                          ->  ``rrs``.

A fused step saves a threadblock step and a round trip through memory on that GPU; the
forwarded chunk leaves as soon as it arrives.  Two runtime rules bound it: the receive and the
send must run in one threadblock, which has one receive and one send peer per channel (so the
(receive peer, send peer) pairs of a GPU and channel are chosen as a matching, most fusable
pairs first), and moving the send earlier must not overtake another send on the same
connection (receives match sends first in, first out).
"""

from __future__ import annotations

import bisect
import itertools

from synth.formats.msccl.lower import Op, RankState

FUSED = {"r": "rcs", "rrc": "rrcs"}


def _accesses(state: RankState, ops: list[Op]) -> dict:
    """place -> [(position, op, 'r' or 'w')] in program order (in-place aliases folded)."""
    acc: dict = {}
    for pos, op in enumerate(ops):
        if op.reads and op.src is not None:
            acc.setdefault(state.key(op.src), []).append((pos, op, "r"))
        if op.writes and op.dst is not None:
            acc.setdefault(state.key(op.dst), []).append((pos, op, "w"))
    return acc


def _candidates(state: RankState, ops: list[Op]) -> list[tuple[Op, Op, bool]]:
    """(receive, send, store needed) pairs that may fuse on this GPU."""
    acc = _accesses(state, ops)
    out = []
    taken: set[int] = set()
    for key, seq in acc.items():
        for k, (_, op, rw) in enumerate(seq):
            if rw != "w" or op.kind not in FUSED:
                continue
            read_between = False
            for j in range(k + 1, len(seq)):
                _, nxt, nrw = seq[j]
                if nrw == "w" or nxt is op:
                    break
                if nxt.kind == "s" and nxt.src == op.dst and nxt.chan == op.chan and id(nxt) not in taken:
                    after = next((a for a in itertools.islice(seq, j + 1, None) if a[1] is not nxt), None)
                    drop = op.kind == "rrc" and not read_between and (after[2] == "w" if after else key[0] == "s")
                    out.append((op, nxt, not drop))
                    taken.add(id(nxt))
                    break
                read_between = True
    out.sort(key=lambda c: c[0].order)
    return out


def _matching(cands: list[tuple[Op, Op, bool]]) -> set[tuple[int, int, int]]:
    """(channel, receive peer, send peer) triples, each peer used once per channel, most fusions first."""
    count: dict[tuple[int, int, int], int] = {}
    for r, s, _ in cands:
        key = (r.chan, r.recv_peer, s.send_peer)
        count[key] = count.get(key, 0) + 1
    used_recv, used_send, chosen = set(), set(), set()
    for (chan, a, b), _ in sorted(count.items(), key=lambda kv: (-kv[1], kv[0])):
        if (chan, a) not in used_recv and (chan, b) not in used_send:
            chosen.add((chan, a, b))
            used_recv.add((chan, a))
            used_send.add((chan, b))
    return chosen


class _OrderCounts:
    """The send orders of one connection as counts over a fixed sorted set of orders (a Fenwick
    tree): whether a send lies strictly between two orders, and moving a send, in O(log n)."""

    def __init__(self) -> None:
        self.sends: list[tuple] = []       # filled before start()
        self.targets: list[tuple] = []     # orders a send may move to, filled before start()

    def start(self) -> None:
        self.orders = sorted(set(self.sends) | set(self.targets))
        self.tree = [0] * (len(self.orders) + 1)
        for o in self.sends:
            self._add(o, 1)

    def _add(self, order: tuple, delta: int) -> None:
        i = bisect.bisect_left(self.orders, order) + 1
        while i < len(self.tree):
            self.tree[i] += delta
            i += i & -i

    def _first(self, i: int) -> int:
        """Sends at the first ``i`` orders."""
        total = 0
        while i > 0:
            total += self.tree[i]
            i -= i & -i
        return total

    def between(self, lo: tuple, hi: tuple) -> bool:
        """Whether a send lies strictly between orders ``lo`` and ``hi``."""
        return self._first(bisect.bisect_left(self.orders, hi)) > self._first(bisect.bisect_right(self.orders, lo))

    def move(self, old: tuple, new: tuple) -> None:
        self._add(old, -1)
        self._add(new, 1)


def fuse_rank(state: RankState, ops: list[Op]) -> tuple[list[Op], set[tuple[int, int, int]]]:
    """Fuse what may be fused on one GPU; returns its new op list and the (channel, receive
    peer, send peer) threadblock pairs the fusions need."""
    cands = _candidates(state, ops)
    pairs = _matching(cands)
    sends: dict[tuple[int, int], _OrderCounts] = {}
    for op in ops:
        if op.send_peer >= 0:
            sends.setdefault((op.send_peer, op.chan), _OrderCounts()).sends.append(op.order)
    for recv, send, _ in cands:
        if (recv.chan, recv.recv_peer, send.send_peer) in pairs:
            sends[(send.send_peer, send.chan)].targets.append(recv.order)
    for counts in sends.values():
        counts.start()
    replaced: dict[int, Op] = {}
    used = set()
    for recv, send, store in cands:
        if (recv.chan, recv.recv_peer, send.send_peer) not in pairs:
            continue
        counts = sends[(send.send_peer, send.chan)]
        if counts.between(recv.order, send.order):  # another send on this connection lies between: FIFO
            continue                                 # order would change
        counts.move(send.order, recv.order)
        recv.kind = FUSED[recv.kind] if store or recv.kind == "r" else "rrs"
        recv.send_peer = send.send_peer
        replaced[id(send)] = recv
        used.add((recv.chan, recv.recv_peer, send.send_peer))
    if not replaced:
        return ops, used
    kept = [op for op in ops if id(op) not in replaced]
    for op in kept:
        op.deps = [d for d in dict.fromkeys(replaced.get(id(d), d) for d in op.deps) if d is not op]
    return kept, used


def fused_counts(ops_by_rank: list[list[Op]]) -> dict[str, int]:
    """How many steps of each kind the lowered program has."""
    out: dict[str, int] = {}
    for ops in ops_by_rank:
        for op in ops:
            out[op.kind] = out.get(op.kind, 0) + 1
    return out
