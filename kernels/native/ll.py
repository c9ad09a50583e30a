"""The LL protocol of the native executor: a device program rewritten so that small calls cost
one memory latency per dependency instead of a write, a fence, a flag and a poll.

Two changes to a Simple device program (:func:`to_ll`):

* **LL edges.**  Where record C of one block waits for record P of another only to read what P
  wrote (C's ``src``, or a chain source, is exactly P's destination, and neither touches what
  the other writes otherwise), the wait goes: P also writes its result, 8 data bytes at a time,
  into an *LL region* on C's rank, as 16-byte lines ``{data, flag, data, flag}`` whose flags
  are the call's epoch (NCCL's LL line), and C reads that operand from the lines, polling each
  until both its flags are the epoch.  A line is written once per call and its flags name the
  call, so a line of an earlier call is never taken for this one's, and a line torn between its
  two 8-byte halves is not accepted until both halves have landed.  Each producer writes one
  region per consumer rank (at most :data:`MAX_LL_OUT`; further consumers keep the flag).
* **Passes.**  Consecutive records of a block that do not touch each other's elements run in
  one pass (:data:`BATCH`): every thread of the block takes 8-byte units of any of them, so a
  block with eight small copies costs one memory latency, not eight.  A record with a flag wait
  starts a pass (its waits come before the pass), a record that publishes a flag ends one, and
  a pass holds at most :data:`MAX_BATCH` records.

Every record of an LL program carries :data:`LL`; the kernel runs such records unit by unit
(8 data bytes per thread and unit), Simple records as before.  LL moves twice the bytes of the
data through its lines and runs units without 16-byte vectors, so it is for small calls
(:data:`LL_MAX_BYTES`).

>>> from synth.ir.schedule import Schedule, Step, Transfer
>>> from kernels.program.lowering import lower
>>> from kernels.native.device_program import build_device_program
>>> s = Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),))
>>> dp = build_device_program(lower(s, 6, "float32"), protocol="ll")
>>> dp.protocol, [int(k) & (BATCH | LL) for k in dp.records[:, 0]]    # per rank: copy in, own copy: one pass
('ll', [128, 192, 128, 192])
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kernels.native.record_format import (BATCH, KIND_MASK, KINDS, LL, LL_LINE_BYTES,
                                          LL_OUT_SHIFT, LL_SRC_SHIFT, MAX_BATCH, MAX_CHAIN, MAX_LL_OUT, PUBLISH,
                                          ll_source, ll_units)

#: calls of at most this many bytes (nccl-tests size) may run under LL
LL_MAX_BYTES = 1 << 20
#: the slot name of a rank's LL lines
LL_BUF = "@ll"
#: record columns of a device program (see :mod:`kernels.native.device_program`)
_DST, _SRC, _ACC, _COUNT, _TILE = 1, 3, 5, 7, 8
_CHAIN = KINDS["reduce_chain"]


def _operands(rec: np.ndarray, sources: np.ndarray) -> list[tuple[int, int]]:
    """(slot, offset) of what a record reads besides ``acc`` (a chain's sources, else ``src``)."""
    kind = int(rec[0]) & KIND_MASK
    if kind == _CHAIN:
        return [(int(a), int(b)) for a, b in sources[int(rec[_SRC]):int(rec[_SRC]) + int(rec[_SRC + 1])]]
    if kind == KINDS["scale"] or int(rec[_SRC]) < 0:
        return []
    return [(int(rec[_SRC]), int(rec[_SRC + 1]))]


def _reads(rec: np.ndarray, sources: np.ndarray, skip: tuple = ()) -> list[tuple[int, int, int]]:
    """(slot, first, end) of every region a record reads (operands at positions ``skip`` left out)."""
    n = int(rec[_COUNT])
    out = [(s, o, o + n) for j, (s, o) in enumerate(_operands(rec, sources)) if j not in skip]
    if int(rec[_ACC]) >= 0:
        out.append((int(rec[_ACC]), int(rec[_ACC + 1]), int(rec[_ACC + 1]) + n))
    if int(rec[0]) & KIND_MASK == KINDS["scale"]:
        out.append(_writes(rec))
    return out


def _writes(rec: np.ndarray) -> tuple[int, int, int]:
    return (int(rec[_DST]), int(rec[_DST + 1]), int(rec[_DST + 1]) + int(rec[_COUNT]))


def _overlap(a: list, b: list) -> bool:
    return any(sa == sb and lo_a < hi_b and lo_b < hi_a for sa, lo_a, hi_a in a for sb, lo_b, hi_b in b)


def _ll_operands(recs: np.ndarray, sources: np.ndarray, p: int, c: int, awaited: list[int]) -> tuple[int, ...]:
    """Positions of consumer ``c``'s operands it may read from producer ``p``'s LL lines (empty:
    the wait stays a flag: a tiled record, another length, any other contact between the two,
    or another awaited record writing the same elements).  ``recs``/``sources`` are the
    program's own (not yet rewritten) arrays; ``awaited`` every record ``c`` waits for."""
    P, C = recs[p], recs[c]
    if int(P[_TILE]) or int(C[_TILE]) or int(P[_COUNT]) != int(C[_COUNT]):
        return ()
    out = _writes(P)
    js = tuple(j for j, (s, o) in enumerate(_operands(C, sources)) if (s, o) == out[:2])
    if not js:
        return ()
    if _overlap([_writes(C)], _reads(P, sources) + [out]) or _overlap(_reads(C, sources, js), [out]):
        return ()
    if any(q != p and _overlap([_writes(recs[q])], [out]) for q in awaited):
        return ()
    return js


def to_ll(dp):
    """``dp`` (a Simple :class:`~kernels.native.device_program.DeviceProgram` built without tiles)
    as an LL program (module docstring)."""
    item = dp.dtype.itemsize
    recs = np.zeros((len(dp.records), len(dp.records[0]) if len(dp.records) else 12), np.int64)
    recs[:, :dp.records.shape[1]] = dp.records
    recs[:, 0] &= ~PUBLISH
    sources = dp.sources.copy()
    block_of = np.repeat(np.arange(dp.num_blocks), np.diff(dp.block_start))
    rank_of = dp.block_rank[block_of]
    slots = list(dp.slots)
    ll_slot: dict[int, int] = {}
    lines = [0] * dp.ranks
    outs: dict[int, dict[int, tuple[int, int]]] = {}          # producer -> consumer rank -> (slot, offset)
    kept, wait_start = [], [0]
    for c in range(len(recs)):
        mine_waits = dp.waits[dp.wait_start[c]:dp.wait_start[c + 1]]
        awaited = [int(dp.block_start[wb]) + int(wj) for wb, wj in mine_waits]
        for (wb, wj), p in zip(mine_waits, awaited):
            js = _ll_operands(dp.records, dp.sources, p, c, awaited)
            r = int(rank_of[c])
            mine = outs.setdefault(p, {})
            if not js or (r not in mine and len(mine) >= MAX_LL_OUT):
                kept.append((int(wb), int(wj)))
                continue
            if r not in mine:
                if r not in ll_slot:
                    ll_slot[r] = len(slots)
                    slots.append((r, LL_BUF))
                mine[r] = (ll_slot[r], lines[r] * LL_LINE_BYTES // item)
                lines[r] += ll_units(int(recs[p, _COUNT]), item)
            for j in js:
                recs[c, 0] |= 1 << (LL_SRC_SHIFT + j)
                if int(recs[c, 0]) & KIND_MASK == _CHAIN:
                    sources[int(recs[c, _SRC]) + j] = mine[r]
                else:
                    recs[c, _SRC:_SRC + 2] = mine[r]
        wait_start.append(len(kept))
    starts = dp.block_start.astype(np.int64)
    for wb, wj in kept:
        recs[starts[wb] + wj, 0] |= PUBLISH
    targets = []
    for p in sorted(outs):
        if outs[p]:
            recs[p, 10:12] = (len(targets), len(outs[p]))
            recs[p, 0] |= len(outs[p]) << LL_OUT_SHIFT
            targets.extend(outs[p][r] for r in sorted(outs[p]))
    _mark_passes(recs, sources, starts, np.array(wait_start))
    return dataclasses.replace(
        dp, records=recs, sources=sources, waits=np.array(kept, np.int32).reshape(-1, 2),
        wait_start=np.array(wait_start, np.int32), slots=tuple(slots),
        ll_targets=np.array(targets, np.int64).reshape(-1, 2),
        ll_bytes=tuple(n * LL_LINE_BYTES for n in lines), protocol="ll")


def _mark_passes(recs: np.ndarray, sources: np.ndarray, starts: np.ndarray, wait_start: np.ndarray) -> None:
    """Set :data:`LL` on every record and :data:`BATCH` where a record joins the pass before it."""
    recs[:, 0] |= LL
    for b in range(len(starts) - 1):
        reads: list = []
        writes: list = []
        size = 0
        for i in range(int(starts[b]), int(starts[b + 1])):
            word = int(recs[i, 0])
            js = tuple(j for j in range(MAX_CHAIN) if ll_source(word, j))
            r, w = _reads(recs[i], sources, js), [_writes(recs[i])]
            joins = (size and size < MAX_BATCH and wait_start[i] == wait_start[i + 1]
                     and not (int(recs[i - 1, 0]) & PUBLISH)
                     and not _overlap(r + w, writes) and not _overlap(w, reads))
            if joins:
                recs[i, 0] |= BATCH
                size += 1
                reads += r
                writes += w
            else:
                size, reads, writes = 1, r, w


__all__ = ["to_ll", "LL_MAX_BYTES", "LL_BUF"]
