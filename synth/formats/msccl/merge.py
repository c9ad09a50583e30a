"""Merge consecutive messages of one connection into multi-chunk steps (``cnt`` > 1).

A runtime pays a per-step cost (flag polling, a pass of the interpreter loop) for every step,
so eight one-chunk sends of neighbouring chunks to one peer are slower than one eight-chunk
send; msccl-tools gets the same effect from chunk sizes, and RCCL's own algorithms use
``cnt="8"``.  Messages k and k+1 of a connection (sender, receiver, channel) merge when, on
both GPUs, their steps are plain (``s`` on the sender; ``r`` or ``rrc`` on the receiver), of
one kind, next to each other in their threadblock, on neighbouring buffer places, and the
later one waits for nothing that comes after the earlier one in program order; the merged
count stays below the runtime's limit (``cnt`` < 72).
"""

from __future__ import annotations

from synth.formats.msccl.layout import RUNTIME_MAX_COUNT
from synth.formats.msccl.lower import Op
from synth.formats.msccl.threadblocks import Threadblock


def _next(loc, k: int):
    return None if loc is None else (loc[0], loc[1] + k)


def _fits(where, head: Op, last: Op, op: Op, places: tuple[str, ...]) -> bool:
    if op.kind != head.kind or op.chan != head.chan or head.cnt + op.cnt >= RUNTIME_MAX_COUNT:
        return False
    if any(getattr(op, p) != _next(getattr(last, p), last.cnt) for p in places):
        return False
    home = where[id(head)][0]
    return all(d is last or d.order < head.order or where[id(d)][0] is home for d in op.deps)


def merge_messages(tbs: list[list[Threadblock]]) -> int:
    """Merge what may be merged, in place; returns how many steps were saved."""
    where: dict[int, tuple[Threadblock, int]] = {}
    conns: dict[tuple[int, int, int], tuple[list[Op], list[Op]]] = {}
    for rank_tbs in tbs:
        for t in rank_tbs:
            for i, op in enumerate(t.ops):
                where[id(op)] = (t, i)
                if op.kind == "s":
                    conns.setdefault((op.rank, op.send_peer, op.chan), ([], []))[0].append(op)
                elif op.kind in ("r", "rrc"):
                    conns.setdefault((op.recv_peer, op.rank, op.chan), ([], []))[1].append(op)
                elif op.send_peer >= 0:   # fused: its messages stay one chunk each
                    conns.setdefault((op.rank, op.send_peer, op.chan), ([], []))[0].append(None)
                if op.kind in ("rcs", "rrs", "rrcs"):
                    conns.setdefault((op.recv_peer, op.rank, op.chan), ([], []))[1].append(None)
    gone: dict[int, Op] = {}
    absorbed: dict[int, list[list[Op]]] = {}     # head -> its deps and those of the messages merged in
    for sends, recvs in conns.values():
        k = 0
        while k < len(sends):
            hs, hr = sends[k], recvs[k] if k < len(recvs) else None
            j = k + 1
            while hs is not None and hr is not None and j < len(sends) and j < len(recvs):
                s, r = sends[j], recvs[j]
                prev_s, prev_r = sends[j - 1], recvs[j - 1]
                if s is None or r is None or not (_adjacent(where, prev_s, s) and _adjacent(where, prev_r, r)):
                    break
                if not (_fits(where, hs, prev_s, s, ("src",))
                        and _fits(where, hr, prev_r, r, ("dst",) + (("src",) if r.kind == "rrc" else ()))):
                    break
                for head, op in ((hs, s), (hr, r)):
                    head.cnt += op.cnt
                    absorbed.setdefault(id(head), [head.deps]).append(op.deps)
                    gone[id(op)] = head
                j += 1
            k = j
    if not gone:
        return 0
    for rank_tbs in tbs:
        for t in rank_tbs:
            t.ops = [op for op in t.ops if id(op) not in gone]
            for op in t.ops:
                # a head waits for what it and the messages merged into it waited for, in that order
                deps = op.deps if id(op) not in absorbed else [d for lst in absorbed[id(op)] for d in lst]
                op.deps = [d for d in dict.fromkeys(gone.get(id(d), d) for d in deps) if d is not op]
    return len(gone)


def _adjacent(where, a: Op, b: Op) -> bool:
    ta, ia = where[id(a)]
    tb, ib = where[id(b)]
    return ta is tb and ib == ia + 1
