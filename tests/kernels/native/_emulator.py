"""Test double of the GPU: a NumPy emulator of the interpreter kernel: it runs the exact arrays of a
:class:`~kernels.native.device_program.DeviceProgram` thread block by thread block, in a
random interleaving, with the kernel's flag protocol.

What a GPU could do and the emulator therefore does:

* any runnable block may go next (a block is runnable when the flags its next record waits
  for have reached ``epoch * stride + index + 1``);
* a record may be cut into parts with other blocks' work in between (threads of one block
  do not finish together);
* flags persist across calls (epochs), as the kernel's do.

It checks, besides the values (compared by the tests with NumPy): no two records of
different blocks that are in flight at once touch the same elements where one of them
writes (:class:`RaceDetected`), and that some block can always move
(:class:`DeadlockDetected`, naming the blocks and what they wait for).

>>> import numpy as np
>>> from synth.ir.schedule import Schedule, Step, Transfer
>>> from kernels.program.lowering import lower
>>> from kernels.native.device_program import build_device_program
>>> s = Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),))
>>> dp = build_device_program(lower(s, 3, "int32"), channels=2)
>>> bufs = {(0, "input"): np.array([1, 2, 3], np.int32), (1, "input"): np.array([4, 5, 6], np.int32),
...         (0, "output"): np.zeros(6, np.int32), (1, "output"): np.zeros(6, np.int32)}
>>> Emulator(dp).run(bufs, seed=1); bufs[(1, "output")].tolist()
[1, 2, 3, 4, 5, 6]
"""

from __future__ import annotations

import random
from typing import Mapping

import numpy as np

from kernels.backends.device import DeviceLayer
from kernels.backends.kernel_twins import PreMulSum, postdiv_with, reduce_copy_with
from kernels.native.device_program import TILE_BYTES, DeviceProgram, build_device_program, record_runs
from kernels.native.ll import LL_BUF
from kernels.native.record_format import (BATCH, KIND_MASK, KINDS, LL, LL_LINE_BYTES, PREMUL, PREMUL_ACC, PUBLISH,
                                          ll_source, ll_units, src_premultiplied)


class DeadlockDetected(Exception):
    """No block of the emulated kernel can move, and some have records left."""


class RaceDetected(Exception):
    """Two records in flight at once touch the same elements and one of them writes."""




class Emulator:
    """Runs one device program call after call (flags kept between calls)."""

    def __init__(self, dp: DeviceProgram, *, torn: bool = True):
        self.dp = dp
        self.flags = [0] * dp.num_blocks
        # the program's arrays as Python ints, read once (NumPy scalars made the scheduling loop slow)
        self._recs = dp.records.tolist()
        self._words = [rec[0] for rec in self._recs]
        self._block_start = dp.block_start.tolist()
        self._wait_start = dp.wait_start.tolist()
        self._waits = [tuple(w) for w in dp.waits.tolist()]
        self._touched: dict[int, tuple] = {}          # record -> _touched(record), which depends on the program only
        self._ll_in: dict[tuple, list] = {}           # (kind word, src slot, src offset) -> _ll_inputs
        # _ll_fresh answers kept while they hold: a line's flag words are only ever set to the run's
        # epoch (_land), so a fresh record stays fresh in its run unless a record writes into LL lines
        # (_apply; none does in a well-formed program); a stale one is asked again after any landing
        self._ll_slots = {i for i, (_, name) in enumerate(dp.slots) if name == LL_BUF}
        self._fresh: set[int] = set()
        self._stale: dict[int, int] = {}               # record -> self._landings when last found stale
        self._landings = 0
        self.epoch = 0
        #: LL lines of each LL slot (uint32 words ``data, flag, data, flag`` per line), kept across
        #: calls as the GPU's are; ``torn``: each 8-byte half of a store lands on its own, some late
        self.lines = {i: np.zeros(dp.ll_bytes[r] // 4, np.uint32) for i, (r, name) in enumerate(dp.slots)
                      if name == LL_BUF}
        self.torn, self.pending = torn, []

    def run(self, buffers: Mapping[tuple[int, str], np.ndarray], *, seed: int = 0, split: bool = True) -> None:
        """One call on ``buffers`` ((rank, buffer name) -> flat array, for every slot but the LL
        lines); ``split`` cuts Simple records into parts run between other blocks' work.  The
        records of an LL pass are all in flight at once and run in any order, each when the LL
        lines it reads are fresh."""
        dp, recs, rng = self.dp, self._recs, random.Random(seed)
        self.epoch += 1
        self._fresh.clear()
        self._stale.clear()
        arrays = [self.lines.get(i) if name == LL_BUF else buffers[(r, name)] for i, (r, name) in enumerate(dp.slots)]
        nxt = self._block_start[:-1]
        left = [0] * dp.num_blocks                    # elements of the current record still to do
        inflight: dict[tuple[int, int], tuple] = {}  # (block, record) -> regions it touches
        passes: dict[int, list[int]] = {}             # block -> LL records of its open pass not yet run
        todo = set(b for b in range(dp.num_blocks) if nxt[b] < self._block_start[b + 1])
        while todo:
            moves = [(b, i) for b in sorted(todo) for i in passes.get(b, [])
                     if self._ll_ready(i)]
            moves += [(b, None) for b in sorted(todo) if not passes.get(b) and (
                (b, nxt[b]) in inflight or self._waits_met(nxt[b], self._pass_end(b, nxt[b])))]
            if not moves:
                if self.pending:
                    self._land(len(self.pending))
                    continue
                raise DeadlockDetected(self._deadlock_message(todo, nxt, passes))
            self._land(rng.randint(0, len(self.pending)))
            b, i = rng.choice(moves)
            if i is not None:                         # one record of an open LL pass, whole
                self._apply(recs[i], arrays, 0, recs[i][7])
                self._ll_store(recs[i], arrays, rng)
                del inflight[(b, i)]
                passes[b].remove(i)
                if not passes[b]:
                    self._finish(b, nxt[b] - 1, todo, nxt, step=False)
                continue
            i = nxt[b]
            rec = recs[i]
            if rec[0] & LL:
                members = list(range(i, self._pass_end(b, i)))
                for m in members:
                    touched = self._touched_by(m)
                    self._check_race(b, m, touched, inflight)
                    inflight[(b, m)] = touched
                passes[b], nxt[b] = members, members[-1] + 1
                continue
            if (b, i) not in inflight:
                touched = self._touched_by(i)
                self._check_race(b, i, touched, inflight)
                inflight[(b, i)] = touched
                left[b] = rec[7]
            part = rng.randint(1, left[b]) if split else left[b]
            done = rec[7] - left[b]
            for off, n in record_runs(rec[7], rec[8], rec[9], done, done + part):
                self._apply(rec, arrays, off, off + n)
            left[b] -= part
            if left[b] == 0:
                del inflight[(b, i)]
                self._finish(b, i, todo, nxt, step=True)
        self._land(len(self.pending))

    def _finish(self, b: int, i: int, todo: set, nxt: list, step: bool) -> None:
        """Record ``i`` of block ``b`` (the last of a pass) is done: publish, move on."""
        if self._words[i] & PUBLISH:
            self.flags[b] = self.epoch * self.dp.stride + (i - self._block_start[b]) + 1
        if step:
            nxt[b] += 1
        if nxt[b] == self._block_start[b + 1]:
            todo.discard(b)

    def _pass_end(self, b: int, i: int) -> int:
        words, end = self._words, self._block_start[b + 1]
        j = i + 1
        if words[i] & LL:
            while j < end and words[j] & BATCH:
                j += 1
        return j

    def _touched_by(self, i: int) -> tuple:
        """:func:`_touched` of record ``i``, worked out once per program."""
        if i not in self._touched:
            self._touched[i] = _touched(self._recs[i], self.dp.sources)
        return self._touched[i]

    # ---------------------------------------------------------------- LL lines
    def _ll_inputs(self, rec: np.ndarray) -> list[tuple[int, int, int]]:
        """(source position, LL slot, first line) of each LL input of a record (worked out once per
        kind word and sources: nothing else of the record or the run changes it)."""
        key = (int(rec[0]), int(rec[3]), int(rec[4]))
        if key not in self._ll_in:
            self._ll_in[key] = self._ll_inputs_of(rec)
        return self._ll_in[key]

    def _ll_inputs_of(self, rec: np.ndarray) -> list[tuple[int, int, int]]:
        word, item = int(rec[0]), self.dp.dtype.itemsize
        rows = (self.dp.sources[int(rec[3]):int(rec[3]) + int(rec[4])] if word & KIND_MASK == KINDS["reduce_chain"]
                else [rec[3:5]])
        return [(j, int(slot), int(off) * item // LL_LINE_BYTES) for j, (slot, off) in enumerate(rows)
                if ll_source(word, j)]

    def _ll_ready(self, i: int) -> bool:
        """:meth:`_ll_fresh` of record ``i``, asked again only when its answer may have changed."""
        if i in self._fresh:
            return True
        if self._stale.get(i) == self._landings:
            return False
        if self._ll_fresh(self._recs[i]):
            self._fresh.add(i)
            return True
        self._stale[i] = self._landings
        return False

    def _ll_fresh(self, rec: np.ndarray) -> bool:
        units = ll_units(int(rec[7]), self.dp.dtype.itemsize)
        ep = np.uint32(self.epoch & 0xFFFFFFFF)
        for _, slot, line in self._ll_inputs(rec):
            flags = self.lines[slot][4 * line + 1:4 * (line + units):2]     # words 1 and 3 of each line
            if not (flags == ep).all():
                return False
        return True

    def _ll_data(self, rec: np.ndarray, j: int) -> np.ndarray | None:
        """Source ``j`` of an LL record as read from its lines (None: read from memory)."""
        for jj, slot, line in self._ll_inputs(rec):
            if jj == j:
                n, dt = int(rec[7]), self.dp.dtype
                words = self.lines[slot][4 * line:4 * (line + ll_units(n, dt.itemsize))].reshape(-1, 4)
                return np.ascontiguousarray(words[:, [0, 2]]).reshape(-1).view(dt)[:n].copy()
        return None

    def _ll_store(self, rec: np.ndarray, arrays: list, rng: random.Random) -> None:
        """A record's result into each of its LL regions, as 8-byte halves ``(data, flag)``."""
        n, dt = int(rec[7]), self.dp.dtype
        data = np.zeros(ll_units(n, dt.itemsize) * 2, np.uint32)
        data.view(np.uint8)[:n * dt.itemsize] = arrays[int(rec[1])][int(rec[2]):int(rec[2]) + n].view(np.uint8)
        for slot, off in self.dp.ll_targets[int(rec[10]):int(rec[10]) + int(rec[11])]:
            first = int(off) * dt.itemsize // 4
            self.pending += [(int(slot), first + 2 * h, int(data[h])) for h in range(len(data))]
        if self.torn:
            rng.shuffle(self.pending)
        else:
            self._land(len(self.pending))

    def _land(self, k: int) -> None:
        """The first ``k`` held-back halves land."""
        self._landings += k > 0
        for slot, word, value in self.pending[:k]:
            self.lines[slot][word:word + 2] = (value, self.epoch & 0xFFFFFFFF)
        self.pending = self.pending[k:]

    def _waits_met(self, i: int, j: int | None = None) -> bool:
        flags, first = self.flags, self.epoch * self.dp.stride + 1      # a flag must reach first + index
        for wb, wj in self._waits[self._wait_start[i]:self._wait_start[j or i + 1]]:
            if flags[wb] < first + wj:
                return False
        return True

    def _deadlock_message(self, todo: set, nxt: list, passes: dict) -> str:
        dp, parts = self.dp, []
        for b in sorted(todo)[:4]:
            if passes.get(b):
                parts.append(f"block {b} (rank {dp.block_rank[b]}) waits for the LL lines of records {passes[b]}")
                continue
            i = nxt[b]
            want = [(int(wb), int(wj)) for wb, wj in dp.waits[dp.wait_start[i]:dp.wait_start[i + 1]]
                    if self.flags[wb] < self.epoch * dp.stride + wj + 1]
            parts.append(f"block {b} (rank {dp.block_rank[b]}, channel {dp.block_channel[b]}) record "
                         f"{i - dp.block_start[b]} waits for {want}")
        return f"deadlock: {len(todo)} block(s) stuck: " + "; ".join(parts)

    def _check_race(self, b: int, i: int, touched, inflight: dict) -> None:
        for (ob, oi), other in inflight.items():
            if ob != b and _conflict(touched, other):
                raise RaceDetected(f"records {i} (block {b}) and {oi} (block {ob}) run at once on the same "
                                   f"elements and one writes")

    def _apply(self, rec: np.ndarray, arrays: list, lo: int, hi: int) -> None:
        """Memory elements ``lo:hi`` (offsets from the record's first element) of one record."""
        kind, ds, do, ss, so, as_, ao = (int(x) for x in rec[:7])
        word, kind = kind, kind & KIND_MASK
        if ds in self._ll_slots:                         # LL lines written as memory: ask afresh
            self._landings += 1
            self._fresh.clear()
        dst = arrays[ds][do + lo:do + hi]
        base = "sum" if self.dp.op == "avg" else self.dp.op
        if kind == KINDS["reduce_chain"]:
            acc = arrays[as_][ao + lo:ao + hi]
            for i in range(so):                          # src_off holds the number of sources
                slot, off = (int(x) for x in self.dp.sources[ss + i])
                pre = (bool(word & PREMUL_ACC) and i == 0, src_premultiplied(word, i))
                binop = PreMulSum(self.dp.ranks, *pre) if any(pre) else base
                ll = self._ll_data(rec, i) if word & LL else None
                reduce_copy_with(np, dst, acc if i == 0 else dst,
                                 arrays[slot][off + lo:off + hi] if ll is None else ll[lo:hi], binop)
            return
        ll = self._ll_data(rec, 0) if word & LL else None
        src = None if ss < 0 else arrays[ss][so + lo:so + hi] if ll is None else ll[lo:hi]
        if kind == KINDS["copy"]:
            dst[...] = src
        elif kind == KINDS["scale"]:
            postdiv_with(np, dst, self.dp.ranks)
        else:
            acc = arrays[as_][ao + lo:ao + hi]
            pre = PREMUL.get(kind)
            binop = PreMulSum(self.dp.ranks, *pre) if pre else base
            reduce_copy_with(np, dst, acc, src, binop)


def _touched(rec: np.ndarray, sources: np.ndarray) -> tuple:
    """((slot, lo, hi, writes) ...) of a record: each of its tiles (one run when contiguous)."""
    kind, ds, do, ss, so, as_, ao, n, tile, stride = (int(x) for x in rec[:10])
    bases = [(ds, do, True)]
    if kind & KIND_MASK == KINDS["reduce_chain"]:
        bases += [(int(a), int(b), False) for a, b in sources[ss:ss + so]]
    elif ss >= 0:
        bases.append((ss, so, False))
    if as_ >= 0:
        bases.append((as_, ao, False))
    runs = record_runs(n, tile, stride, 0, n)
    return tuple((slot, base + off, base + off + k, writes) for slot, base, writes in bases for off, k in runs)


def _conflict(a, b) -> bool:
    return any(sa == sb and lo_a < hi_b and lo_b < hi_a and (wa or wb)
               for sa, lo_a, hi_a, wa in a for sb, lo_b, hi_b, wb in b)


__all__ = ["Emulator", "DeadlockDetected", "RaceDetected"]


def check_waits_match_dependencies(dp: DeviceProgram) -> None:
    """Raise ``AssertionError`` if a wait points forward in its own block or past the end of
    another (a malformed program; used by tests and in debug runs)."""
    for b in range(dp.num_blocks):
        for i in dp.block_records(b):
            for wb, wj in dp.waits[dp.wait_start[i]:dp.wait_start[i + 1]]:
                assert wb != b, f"record {i} of block {b} waits on its own block"
                assert 0 <= wj < dp.block_start[wb + 1] - dp.block_start[wb], f"record {i}: wait past block {wb}"


class EmulatedNativeLayer(DeviceLayer):
    """A :class:`kernels.backends.device.DeviceLayer` that runs each program as the native
    executor would (device program, channels, slices, tiles, protocol) on the emulator; ``channels``
    None draws 1-4 per call, ``protocol`` None Simple or LL, and the tile size is drawn too (16, 48 or 64 bytes deal even the small
    test buffers' ops to the channels in tiles; the default leaves them contiguous).  Out-of-place
    programs run twice, so the second call checks the epochs."""

    name = "native-emulated"

    def __init__(self, seed: int = 0, channels: int | None = None, slices: int | None = None,
                 protocol: str | None = None):
        self.rng, self.channels, self.slices, self.protocol = random.Random(seed), channels, slices, protocol
        self.runs = 0

    def allocate(self, rank, nelems, dtype):
        return np.empty(nelems, np.dtype(dtype))

    def copy(self, dst, src, stream):
        raise AssertionError("the native layer runs whole programs")

    reduce_copy = scale = record_event = wait_event = copy

    def synchronize(self):
        pass

    def execute(self, program, buffers):
        ch = self.channels or self.rng.randint(1, 4)
        dp = build_device_program(program, ch, slices=self.slices or self.rng.choice([None, 1, 2, 3]),
                                  fuse=self.rng.random() < 0.8, tile_bytes=self.rng.choice([TILE_BYTES, 16, 48, 64]),
                                  protocol=self.protocol or self.rng.choice(["simple", "ll"]))
        check_waits_match_dependencies(dp)
        bufs = {(r, name): arr for r, d in enumerate(buffers.bufs) for name, arr in d.items()}
        em = Emulator(dp)
        for _ in range(1 if program.inplace else 2):
            em.run(bufs, seed=self.rng.randrange(1 << 30))
            self.runs += 1
