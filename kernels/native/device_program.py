"""Device programs: a lowered :class:`~kernels.program.ops.Program` as the flat arrays the
interpreter kernel (``interpreter.cu``) and its NumPy emulator read.

The work of a call is split into *channels*: every op is cut into the same number of
contiguous pieces (cut points depend only on the op's length, so two ops of the same slot are
cut alike), and piece ``i`` of every op belongs to channel ``i``.  A dependency between two
ops then only ever links their pieces of the same channel (the lowering's dependencies join
ops on one slot, and one slot is always one region of one length).  Large pieces are cut once
more into *slices*, so a rank can work on slice 0 of the next step while its peer still
writes slice 1 (NCCL's pipelining).

Ops large enough that every channel gets at least two tiles of :data:`TILE_BYTES` are cut
differently: into tiles dealt to the channels in turn (tile ``g`` to channel ``g mod channels``,
NCCL's and a copy kernel's layout: the blocks of a GPU then stream through one compact window
of memory instead of as many distant pieces as there are blocks, which is up to 8 % faster on an
H100).  A record then holds whole tiles of its channel, ``tile`` elements each, ``tile_stride``
elements apart; :func:`record_runs` maps its elements to memory.  The layout is again a function
of the op's length alone.

Thread block ``b`` runs, in order, the records of one (rank, channel): the pieces of the ops
that write that rank (ops run on the rank they write), sorted as the lowering emitted them,
which is a topological order.  A dependency on a record of another block becomes a *wait*:
(block, record index); after record ``j`` a block publishes ``epoch * stride + j + 1`` in its
flag, so flags only grow and are never reset between calls.

Arrays (all C-contiguous NumPy, copied to the GPU once per program):

``records`` int64 ``(R, 12)``
    ``kind, dst_slot, dst_off, src_slot, src_off, acc_slot, acc_off, count, tile, tile_stride,
    ll_out_start, ll_out_count`` (offsets and counts in elements; ``tile`` 0: the record's
    elements are contiguous, else they are tiles of ``tile`` elements starting ``tile_stride``
    apart, the last one possibly shorter); ``kind`` is the kind word of
    :mod:`kernels.native.record_format`: one of :data:`KINDS`, plus :data:`PUBLISH` where another
    block waits for this record (a block's flag only grows, so publishing a later record also
    releases the earlier ones), plus the LL protocol's bits (:mod:`kernels.native.ll`), whose
    LL outputs are rows ``ll_targets[ll_out_start : ll_out_start + ll_out_count]``.
``sources`` int64 ``(S, 2)``
    (slot, offset) of the sources of ``reduce_chain`` records (:data:`KINDS`).
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
(4, (8, 12), [0, 0, 1, 1])
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from kernels.native.pieces import (SLICE_BYTES, TILE_BYTES, VECTOR_BYTES, channel_pieces, piece_bounds, record_runs,
                                   tile_elements)
from kernels.native.record_format import KIND_MASK, KINDS, MAX_CHAIN, PREMUL_ACC, PUBLISH, REC_WORDS, W_LL_OUT
from kernels.program.ops import Op, Program, Region
from topo_probe.errors import InvalidArgument

FIELDS = ("kind", "dst_slot", "dst_off", "src_slot", "src_off", "acc_slot", "acc_off", "count", "tile",
          "tile_stride", "ll_out_start", "ll_out_count")
#: most channels of one program (a GPU holds 2 blocks per SM of this kernel: 264 on an H100)
MAX_CHANNELS = 512


@dataclass(frozen=True)
class DeviceProgram:
    """See module docstring.  ``block_rank[b]`` / ``block_channel[b]`` say whose records block
    ``b`` runs; ``stride`` is one more than the most records any block has."""

    records: np.ndarray
    sources: np.ndarray
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
    #: LL protocol (:mod:`kernels.native.ll`): (slot, offset) of each LL region records write,
    #: bytes of LL lines per rank (slot ``(rank, "@ll")``), and "simple" or "ll"
    ll_targets: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 2), np.int64))
    ll_bytes: tuple[int, ...] = ()
    protocol: str = "simple"

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


def choose_channels(program: Program, max_blocks: int, *, min_piece_bytes: int = 32 << 10) -> int:
    """Channels for ``program``: enough that the largest op's pieces are about
    ``min_piece_bytes`` or more, at most ``max_blocks`` blocks in all (one per writing rank and
    channel), at most :data:`MAX_CHANNELS`, at least 1.  A collective with one writer (gather,
    a broadcast from 2 ranks) thus fills every SM the card holds blocks for, as a copy must to
    reach the copy engine's bandwidth."""
    item = program.dtype.itemsize
    largest = max((o.dst.size for o in program.ops()), default=0) * item
    writers = len({o.rank for o in program.ops()}) or 1
    want = max(1, largest // min_piece_bytes)
    return int(max(1, min(want, max_blocks // writers, MAX_CHANNELS)))


def _kind(op: Op) -> int:
    if op.kind != "reduce":
        return KINDS[op.kind]
    a, s = op.premul
    return KINDS[{(False, False): "reduce", (True, False): "reduce_premul_acc", (False, True): "reduce_premul_src",
                  (True, True): "reduce_premul_both"}[(a, s)]]


def build_device_program(program: Program, channels: int = 1, *, slices: int | None = None,
                         device_of: list[int] | None = None, fuse: bool = True,
                         tile_bytes: int | None = TILE_BYTES, protocol: str = "simple") -> DeviceProgram:
    """Lay ``program`` out for the interpreter kernel in ``channels`` channels (see module
    docstring); ``slices`` forces the slices per piece (default: by piece size).  With
    ``device_of`` (rank -> GPU) the blocks of each GPU are numbered consecutively, so one
    launch per GPU runs a contiguous range of blocks (:meth:`DeviceProgram.device_blocks`).
    ``fuse`` joins chains of reduces into one record (see :data:`MAX_CHAIN`); ``tile_bytes``
    the dealt layout's tile (None or 0: contiguous pieces only).  ``protocol="ll"`` lays the
    program out for the LL protocol (:mod:`kernels.native.ll`: contiguous pieces, one slice)."""
    _check_layout(channels, tile_bytes, protocol)
    if protocol == "ll":
        from kernels.native.ll import to_ll
        return to_ll(build_device_program(program, channels, slices=1, device_of=device_of, fuse=fuse,
                                          tile_bytes=None))
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
        for c in range(channels):
            for s, (lo, n, tile, stride) in enumerate(channel_pieces(o.dst.size, channels, c, item, slices,
                                                                      tile_bytes)):
                lst = per_block[(o.rank, c)]
                where[(o.id, c, s)] = ((o.rank, c), len(lst))
                lst.append((o, c, s, lo, n, tile, stride))
    dev = device_of or [0] * program.ranks
    blocks = sorted((key for key in per_block if per_block[key]), key=lambda k: (dev[k[0]], k[0], k[1]))
    block_id = {key: i for i, key in enumerate(blocks)}
    raw_waits: dict[tuple, list] = {}           # (block key, index) -> [(block key, index)] of other blocks
    for key in blocks:
        for j, (o, c, s, *_) in enumerate(per_block[key]):
            got = []
            for d in o.deps:
                for dep in _dep_records(by_id[d], o, c, s, where):
                    if dep[0] != key and dep not in got:   # same block: program order already waits
                        got.append(dep)
            raw_waits[(key, j)] = got
    referenced = {w for ws in raw_waits.values() for w in ws}
    groups = {key: _chains(per_block[key], key, referenced, fuse) for key in blocks}
    spans = {key: _coalesce(per_block[key], groups[key], key, referenced, raw_waits, slots, fuse) for key in blocks}
    new_index = {(key, j): g for key in blocks for g, (_, _, members) in enumerate(spans[key]) for j in members}
    records, sources, waits, wait_start, block_start = [], [], [], [0], [0]
    for key in blocks:
        for rec, rows, members in spans[key]:
            if rows:                                # a chain: its source rows go to the shared list
                rec = [rec[0], rec[1], rec[2], len(sources), len(rows), *rec[5:10]]
                sources.extend(rows)
            records.append(list(rec[:10]) + [0, 0])
            seen = []
            for j in members:
                for dep in raw_waits[(key, j)]:
                    w = (block_id[dep[0]], new_index[dep])
                    if w not in seen:
                        seen.append(w)
            waits.extend(seen)
            wait_start.append(len(waits))
        block_start.append(len(records))
    most = max((len(spans[k]) for k in blocks), default=0)
    most = max((len(groups[k]) for k in blocks), default=0)
    recs = np.array(records, np.int64).reshape(-1, len(FIELDS))
    starts = np.array(block_start, np.int64)
    for wb, wj in waits:                       # only records someone waits for publish a flag
        recs[starts[wb] + wj, 0] |= PUBLISH
    return DeviceProgram(
        records=recs, sources=np.array(sources, np.int64).reshape(-1, 2),
        block_start=np.array(block_start, np.int32), wait_start=np.array(wait_start, np.int32),
        waits=np.array(waits, np.int32).reshape(-1, 2),
        slots=tuple(slots), block_rank=np.array([k[0] for k in blocks], np.int32),
        block_channel=np.array([k[1] for k in blocks], np.int32), channels=channels, stride=most + 1,
        ranks=program.ranks, dtype=program.dtype, op=program.op)


def _check_layout(channels: int, tile_bytes: int | None, protocol: str) -> None:
    if protocol not in ("simple", "ll"):
        raise InvalidArgument(f"protocol must be 'simple' or 'll', got {protocol!r}")
    if channels < 1:
        raise InvalidArgument(f"channels must be >= 1, got {channels}")
    if tile_bytes and (tile_bytes < 0 or tile_bytes % VECTOR_BYTES):
        raise InvalidArgument(f"tile_bytes must be a positive multiple of {VECTOR_BYTES}, got {tile_bytes}")


def _dep_records(dep: Op, o: Op, c: int, s: int, where: dict) -> list:
    """Records of ``dep`` that piece (c, s) of ``o`` waits for: the same piece when both ops
    have one length (always, for the lowering's slot dependencies), else all of them."""
    if dep.dst.size == o.dst.size:
        hit = where.get((dep.id, c, s))
        return [] if hit is None else [hit]
    return [v for (i, _, _), v in where.items() if i == dep.id]


def _region(o: Op, which: str, lo: int) -> tuple | None:
    reg = getattr(o, which)
    return None if reg is None else (reg.rank, reg.buf, reg.start + lo)


def _chains(lst: list, key, referenced: set, fuse: bool) -> list[list[int]]:
    """Group a block's records into chains: record B joins the chain of the record A before it
    when both are reduces, B accumulates into A's destination (B.acc = B.dst = A.dst, same
    elements) and no other block waits for A (so only a chain's last record is ever waited for,
    and hoisting B's waits before A cannot close a cycle).  A copy may head a chain (the lowering's
    rank-order sum that starts with two peers): its source is then the chain's accumulator."""
    out: list[list[int]] = []
    for j, (o, c, s, lo, *shape) in enumerate(lst):
        if fuse and out and len(out[-1]) < MAX_CHAIN and o.kind == "reduce":
            i = out[-1][-1]
            a, _, _, alo, *ashape = lst[i]
            head_copy = a.kind == "copy" and len(out[-1]) == 1      # a rank-order sum's first peer
            if ((a.kind == "reduce" or head_copy) and (key, i) not in referenced and (alo, ashape) == (lo, shape)
                    and _region(o, "acc", lo) == _region(o, "dst", lo) == _region(a, "dst", alo)
                    and (head_copy or not o.premul[0])):
                out[-1].append(j)
                continue
        out.append([j])
    return out


def _coalesce(lst: list, groups: list, key, referenced: set, raw_waits: dict, slots: dict,
              fuse: bool) -> list[tuple[list[int], list, list[int]]]:
    """``(record, chain source rows, members)`` of a block: runs of consecutive groups joined
    into one record where each continues the last element for element (same kind, every
    region starting where the previous one ended: the per-chunk ops of one transfer pattern,
    as a one-shot all-reduce has).  A group joins only when it waits for nothing and nobody
    waits for the run so far (so no wait moves and no pipeline stage is delayed), and only
    where the joined record writes nothing it also reads at another position (program order
    inside the run is then not needed)."""
    out: list[tuple[list[int], list, list[int]]] = []
    open_run = False
    for members in groups:
        rows: list = []
        rec = _record([lst[j] for j in members], slots, rows)
        if (fuse and open_run and not any(raw_waits[(key, j)] for j in members)):
            joined = _joined(out[-1][0], out[-1][1], rec, rows)
            if joined is not None:
                out[-1] = (joined[0], joined[1], out[-1][2] + list(members))
                open_run = not any((key, j) in referenced for j in members)
                continue
        out.append((rec, rows, list(members)))
        open_run = not any((key, j) in referenced for j in members)
    return out


def _joined(a: list[int], a_rows: list, b: list[int], b_rows: list) -> tuple[list[int], list] | None:
    """Record ``a`` extended by ``b`` when ``b`` continues it (see :func:`_coalesce`), else None."""
    n = a[7]
    if a[8] or b[8] or a[0] != b[0] or len(a_rows) != len(b_rows) or (a[1], a[2] + n) != (b[1], b[2]):
        return None
    pairs = [(a[5], a[6], b[5], b[6])] + [(x[0], x[1], y[0], y[1]) for x, y in zip(a_rows, b_rows)]
    if not a_rows:
        pairs.append((a[3], a[4], b[3], b[4]))
    if any(sa != sb or (sa >= 0 and oa + n != ob) for sa, oa, sb, ob in pairs):
        return None
    total = n + b[7]
    for slot, off, _, _ in pairs:                # reads overlapping the write: only element-aligned
        if slot == a[1] and off != a[2] and off < a[2] + total and a[2] < off + total:
            return None
    return [*a[:7], total, 0, 0], list(a_rows)


def _record(members: list, slots: dict, sources: list) -> list[int]:
    """One record for a chain of pieces (a single op: its own kind)."""
    def at(reg: Region | None, lo: int) -> tuple[int, int]:
        return (-1, 0) if reg is None else (slots[(reg.rank, reg.buf)], reg.start + lo)
    o, _, _, lo, n, tile, stride = members[0]
    d, s, a = at(o.dst, lo), at(o.src, lo), at(o.acc, lo)
    if len(members) == 1:
        return [_kind(o), d[0], d[1], s[0], s[1], a[0], a[1], n, tile, stride]
    if o.kind == "copy":                       # a copy heads it: the copy's source is the accumulator
        a, members, o = s, members[1:], members[1][0]
    start, mask = len(sources), 0
    for i, (m, _, _, mlo, *_) in enumerate(members):
        sources.append(at(m.src, mlo))
        mask |= int(m.premul[1]) << i
    kind = KINDS["reduce_chain"] | (PREMUL_ACC if o.premul[0] else 0) | (len(members) << 8) | (mask << 16)
    return [kind, d[0], d[1], start, len(members), a[0], a[1], n, tile, stride]


def resolve_records(dp: DeviceProgram, slot_ptrs: np.ndarray, sources_addr: int) -> np.ndarray:
    """The records as the kernel reads them for one binding: uint64 rows ``dst, src, acc, count,
    kind word, tile word, LL outputs`` (:data:`REC_WORDS`; the tile word is ``tile | tile_stride
    << 32``, in elements) with absolute byte addresses (``slot_ptrs[slot] + offset * itemsize``);
    a chain's ``src`` is the address of its row in the resolved address list at ``sources_addr``
    (:func:`resolve_sources`), and so is the LL output word of a record with LL outputs (the
    address of its first LL region's entry); unused addresses 0.

    >>> from kernels.program.lowering import lower
    >>> from synth.ir.schedule import Schedule, Step, Transfer
    >>> dp = build_device_program(lower(Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1),
    ...     Transfer(1, 1, 0))),)), 4, "float32"))
    >>> [hex(int(x)) for x in resolve_records(dp, np.array([0x1000, 0x2000, 0x3000, 0x4000], np.uint64), 0)[1, :4]]
    ['0x2000', '0x1000', '0x0', '0x4']
    """
    rec = dp.records
    item = np.uint64(dp.dtype.itemsize)
    table = np.asarray(slot_ptrs, np.uint64)

    chain = (rec[:, 0] & KIND_MASK) == KINDS["reduce_chain"]

    def addr(slot_col: int, off_col: int, skip: np.ndarray | None = None) -> np.ndarray:
        slot = rec[:, slot_col].copy()
        if skip is not None:
            slot[skip] = -1                     # a chain's src columns hold its source rows
        out = table[np.maximum(slot, 0)] + rec[:, off_col].astype(np.uint64) * item
        return np.where(slot >= 0, out, np.uint64(0))
    src = np.where(chain, np.uint64(sources_addr) + rec[:, 3].astype(np.uint64) * np.uint64(8), addr(3, 4, chain))
    tiles = rec[:, 8].astype(np.uint64) | (rec[:, 9].astype(np.uint64) << np.uint64(32))
    outs = np.where(rec[:, 11] > 0, np.uint64(sources_addr) + (len(dp.sources) + rec[:, 10]).astype(np.uint64)
                    * np.uint64(8), np.uint64(0))
    words = [addr(1, 2), src, addr(5, 6), rec[:, 7].astype(np.uint64), rec[:, 0].astype(np.uint64), tiles, outs]
    assert len(words) == REC_WORDS and W_LL_OUT == REC_WORDS - 1
    return np.stack(words, axis=1).astype(np.uint64)


def resolve_sources(dp: DeviceProgram, slot_ptrs: np.ndarray) -> np.ndarray:
    """Absolute byte addresses of the chain sources, then of the LL regions records write
    (``dp.ll_targets``): the address list records point into (uint64, at least one entry)."""
    rows = np.concatenate([dp.sources.reshape(-1, 2), dp.ll_targets.reshape(-1, 2)])
    if not len(rows):
        return np.zeros(1, np.uint64)
    table = np.asarray(slot_ptrs, np.uint64)
    return table[rows[:, 0]] + rows[:, 1].astype(np.uint64) * np.uint64(dp.dtype.itemsize)


def resolve_waits(dp: DeviceProgram, flag_addr: np.ndarray) -> np.ndarray:
    """The waits as the kernel reads them: uint64 pairs (address of the awaited block's flag,
    record index), flattened; at least one pair."""
    if not len(dp.waits):
        return np.zeros(2, np.uint64)
    out = np.empty((len(dp.waits), 2), np.uint64)
    out[:, 0] = np.asarray(flag_addr, np.uint64)[dp.waits[:, 0]]
    out[:, 1] = dp.waits[:, 1]
    return out.reshape(-1)


__all__ = ["DeviceProgram", "build_device_program", "choose_channels", "piece_bounds", "channel_pieces", "tile_elements",
           "record_runs", "SLICE_BYTES", "VECTOR_BYTES", "TILE_BYTES", "KINDS", "FIELDS", "REC_WORDS", "PUBLISH",
           "PREMUL_ACC", "KIND_MASK", "MAX_CHAIN", "resolve_records", "resolve_sources", "resolve_waits"]
