"""Device programs: a lowered :class:`~kernels.program.ops.Program` as the flat arrays the
interpreter kernel (``interpreter.cu``) and its NumPy emulator read.

The work of a call is split into *channels*: every op is cut into the same number of
contiguous pieces (cut points depend only on the op's length, so two ops of the same slot are
cut alike), and piece ``i`` of every op belongs to channel ``i``.  A dependency between two
ops then only ever links their pieces of the same channel (the lowering's dependencies join
ops on one slot, and one slot is always one region of one length).  Large pieces are cut once
more into *slices*, so a rank can work on slice 0 of the next step while its peer still
writes slice 1 (NCCL's pipelining).

Thread block ``b`` runs, in order, the records of one (rank, channel): the pieces of the ops
that write that rank (ops run on the rank they write), sorted as the lowering emitted them,
which is a topological order.  A dependency on a record of another block becomes a *wait*:
(block, record index); after record ``j`` a block publishes ``epoch * stride + j + 1`` in its
flag, so flags only grow and are never reset between calls.

Arrays (all C-contiguous NumPy, copied to the GPU once per program):

``records`` int64 ``(R, 8)``
    ``kind, dst_slot, dst_off, src_slot, src_off, acc_slot, acc_off, count`` (offsets and
    counts in elements); ``kind`` is one of :data:`KINDS`, plus :data:`PUBLISH` where another
    block waits for this record (a block's flag only grows, so publishing a later record also
    releases the earlier ones).
``block_start`` int32 ``(B + 1,)``
    records of block ``b`` are ``block_start[b]:block_start[b + 1]``.
``wait_start`` int32 ``(R + 1,)`` and ``waits`` int32 ``(W, 2)``
    record ``i`` waits, before it starts, for every ``(block, index)`` in
    ``waits[wait_start[i]:wait_start[i + 1]]``: block's flag >= ``epoch * stride + index + 1``.
``slots``
    ``(rank, buffer name)`` of each slot; the launcher turns it into a table of base pointers.

>>> from synth.ir.schedule import Schedule, Step, Transfer
>>> from kernels.program.lowering import lower
>>> s = Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),))
>>> dp = build_device_program(lower(s, 1000, "float32"), channels=2)
>>> dp.num_blocks, dp.records.shape, dp.block_rank.tolist()
(4, (8, 8), [0, 0, 1, 1])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels.program.ops import Op, Program, Region
from topo_probe.errors import InvalidArgument

#: record kinds: copy, reduce (acc op src), the three floating-avg reduces that pre-multiply
#: acc, src or both by 1/n (NCCL's PreMulSum), and integer avg's final division
KINDS = {"copy": 0, "reduce": 1, "reduce_premul_acc": 2, "reduce_premul_src": 3, "reduce_premul_both": 4,
         "scale": 5}
#: bit of ``kind``: after this record the block publishes its flag (someone waits for it)
PUBLISH = 16
FIELDS = ("kind", "dst_slot", "dst_off", "src_slot", "src_off", "acc_slot", "acc_off", "count")
#: bytes of one 16-byte vector access: piece boundaries are rounded to whole vectors
VECTOR_BYTES = 16
#: pieces at least this large (bytes) are cut into slices of about this size
SLICE_BYTES = 256 << 10


@dataclass(frozen=True)
class DeviceProgram:
    """See module docstring.  ``block_rank[b]`` / ``block_channel[b]`` say whose records block
    ``b`` runs; ``stride`` is one more than the most records any block has."""

    records: np.ndarray
    block_start: np.ndarray
    wait_start: np.ndarray
    waits: np.ndarray
    slots: tuple[tuple[int, str], ...]
    block_rank: np.ndarray
    block_channel: np.ndarray
    channels: int
    stride: int
    ranks: int
    dtype: np.dtype
    op: str

    @property
    def num_blocks(self) -> int:
        return len(self.block_start) - 1

    @property
    def num_records(self) -> int:
        return len(self.records)

    def device_blocks(self, device_of: list[int], device: int) -> tuple[int, int]:
        """(first block, number of blocks) run by ``device`` (blocks were numbered by device)."""
        mine = np.nonzero(np.array(device_of)[self.block_rank] == device)[0]
        if mine.size and mine[-1] - mine[0] + 1 != mine.size:
            raise InvalidArgument(f"blocks of GPU {device} are not consecutive; build with device_of")
        return (int(mine[0]), int(mine.size)) if mine.size else (0, 0)

    def block_records(self, b: int) -> range:
        return range(int(self.block_start[b]), int(self.block_start[b + 1]))


def piece_bounds(length: int, pieces: int, itemsize: int) -> list[int]:
    """Cut points of ``length`` elements into ``pieces`` parts, each boundary on a whole
    16-byte vector; a function of ``length`` alone, so equal-length ops are cut alike.

    >>> piece_bounds(10, 3, 4), piece_bounds(2, 4, 4)
    ([0, 4, 8, 10], [0, 2, 2, 2, 2])
    """
    v = max(1, VECTOR_BYTES // itemsize)
    out = [0]
    for i in range(1, pieces):
        cut = -(-length * i // pieces)
        out.append(min(length, -(-cut // v) * v))
    out.append(length)
    return out


def choose_channels(program: Program, max_blocks: int, *, min_piece_bytes: int = 32 << 10) -> int:
    """Channels for ``program``: enough that the largest op's pieces are about
    ``min_piece_bytes`` or more, at most ``max_blocks`` blocks in all (one per writing rank and
    channel), at least 1."""
    item = program.dtype.itemsize
    largest = max((o.dst.size for o in program.ops()), default=0) * item
    writers = len({o.rank for o in program.ops()}) or 1
    want = max(1, largest // min_piece_bytes)
    return int(max(1, min(want, max_blocks // writers, 64)))


def _slices(piece_bytes: int) -> int:
    return max(1, -(-piece_bytes // SLICE_BYTES)) if piece_bytes >= 2 * SLICE_BYTES else 1


def _kind(op: Op) -> int:
    if op.kind != "reduce":
        return KINDS[op.kind]
    a, s = op.premul
    return KINDS[{(False, False): "reduce", (True, False): "reduce_premul_acc", (False, True): "reduce_premul_src",
                  (True, True): "reduce_premul_both"}[(a, s)]]


def build_device_program(program: Program, channels: int = 1, *, slices: int | None = None,
                         device_of: list[int] | None = None) -> DeviceProgram:
    """Lay ``program`` out for the interpreter kernel in ``channels`` channels (see module
    docstring); ``slices`` forces the slices per piece (default: by piece size).  With
    ``device_of`` (rank -> GPU) the blocks of each GPU are numbered consecutively, so one
    launch per GPU runs a contiguous range of blocks (:meth:`DeviceProgram.device_blocks`)."""
    if channels < 1:
        raise InvalidArgument(f"channels must be >= 1, got {channels}")
    item = program.dtype.itemsize
    slots: dict[tuple[int, str], int] = {}
    for r, sizes in enumerate(program.sizes):
        for name in sorted(sizes):
            slots[(r, name)] = len(slots)
    ops = list(program.ops())
    by_id = {o.id: o for o in ops}
    ranks = sorted({o.rank for o in ops})
    per_block: dict[tuple[int, int], list] = {(r, c): [] for r in ranks for c in range(channels)}
    where: dict[tuple[int, int, int], tuple[tuple[int, int], int]] = {}   # (op, channel, slice) -> block, index
    for o in ops:
        bounds = piece_bounds(o.dst.size, channels, item)
        for c in range(channels):
            a, b = bounds[c], bounds[c + 1]
            if a == b:
                continue
            k = slices if slices is not None else _slices((b - a) * item)
            cuts = piece_bounds(b - a, k, item)
            for s in range(k):
                lo, hi = a + cuts[s], a + cuts[s + 1]
                if lo == hi:
                    continue
                lst = per_block[(o.rank, c)]
                where[(o.id, c, s)] = ((o.rank, c), len(lst))
                lst.append((o, c, s, lo, hi))
    dev = device_of or [0] * program.ranks
    blocks = sorted((key for key in per_block if per_block[key]), key=lambda k: (dev[k[0]], k[0], k[1]))
    block_id = {key: i for i, key in enumerate(blocks)}
    records, waits, wait_start, block_start = [], [], [0], [0]
    for key in blocks:
        for o, c, s, lo, hi in per_block[key]:
            records.append(_record(o, lo, hi, slots))
            seen = set()
            for d in o.deps:
                for dep in _dep_records(by_id[d], o, c, s, where):
                    if dep[0] == key:
                        continue                  # same block: program order already waits
                    w = (block_id[dep[0]], dep[1])
                    if w not in seen:
                        seen.add(w)
                        waits.append(w)
            wait_start.append(len(waits))
        block_start.append(len(records))
    most = max((len(per_block[k]) for k in blocks), default=0)
    recs = np.array(records, np.int64).reshape(-1, len(FIELDS))
    starts = np.array(block_start, np.int64)
    for wb, wj in waits:                       # only records someone waits for publish a flag
        recs[starts[wb] + wj, 0] |= PUBLISH
    return DeviceProgram(
        records=recs,
        block_start=np.array(block_start, np.int32), wait_start=np.array(wait_start, np.int32),
        waits=np.array(waits, np.int32).reshape(-1, 2),
        slots=tuple(slots), block_rank=np.array([k[0] for k in blocks], np.int32),
        block_channel=np.array([k[1] for k in blocks], np.int32), channels=channels, stride=most + 1,
        ranks=program.ranks, dtype=program.dtype, op=program.op)


def _dep_records(dep: Op, o: Op, c: int, s: int, where: dict) -> list:
    """Records of ``dep`` that piece (c, s) of ``o`` waits for: the same piece when both ops
    have one length (always, for the lowering's slot dependencies), else all of them."""
    if dep.dst.size == o.dst.size:
        hit = where.get((dep.id, c, s))
        return [] if hit is None else [hit]
    return [v for (i, _, _), v in where.items() if i == dep.id]


def _record(o: Op, lo: int, hi: int, slots: dict) -> list[int]:
    def at(reg: Region | None) -> tuple[int, int]:
        return (-1, 0) if reg is None else (slots[(reg.rank, reg.buf)], reg.start + lo)
    d, s, a = at(o.dst), at(o.src), at(o.acc)
    return [_kind(o), d[0], d[1], s[0], s[1], a[0], a[1], hi - lo]


def check_waits_match_dependencies(dp: DeviceProgram) -> None:
    """Raise ``AssertionError`` if a wait points forward in its own block or past the end of
    another (a malformed program; used by tests and in debug runs)."""
    for b in range(dp.num_blocks):
        for i in dp.block_records(b):
            for wb, wj in dp.waits[dp.wait_start[i]:dp.wait_start[i + 1]]:
                assert wb != b, f"record {i} of block {b} waits on its own block"
                assert 0 <= wj < dp.block_start[wb + 1] - dp.block_start[wb], f"record {i}: wait past block {wb}"


__all__ = ["DeviceProgram", "build_device_program", "choose_channels", "piece_bounds", "KINDS", "FIELDS", "PUBLISH",
           "check_waits_match_dependencies"]
