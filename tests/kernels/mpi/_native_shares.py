"""Test double of the GPU side of one-process-per-GPU native runs (kernels.mpi.native): a share
backend over NumPy memory in ``multiprocessing.shared_memory`` and a NumPy interpreter of exactly
what a process's launch reads (its resolved records with absolute addresses, its resolved waits
on flag addresses, its epochs).

Shared memory is an honest stand-in for CUDA IPC: a peer's block opened by name is mapped anew,
at another address, as ``cudaIpcOpenMemHandle`` maps a peer's allocation; a wrong base or offset
reads other bytes.  Each :class:`ShmShareBackend` is one "process": it opens its peers' blocks
itself, so in one Python process several backends see the same bytes at different addresses.

:class:`ShareKernel` runs one launch: ``run_now`` backends run it to the end at once, spinning
on flags another OS process sets (mpirun tests, with a deadline that reports through the status
words as the kernel does); otherwise launches wait in :attr:`ShmShareBackend.pending` and
:func:`run_interleaved` runs the launches of every "process" in one random interleaving,
records cut into parts, and raises the emulator's DeadlockDetected when no block can move.
"""

from __future__ import annotations

import ctypes
import random
import sys
import time
from pathlib import Path

import ml_dtypes  # noqa: F401 - bfloat16 / float8 names
import numpy as np

from kernels.backends.kernel_twins import PreMulSum, postdiv_with, reduce_copy_with
from kernels.mpi.ipc import SharedMemoryIpc
from kernels.native.device_program import REC_WORDS, record_runs
from kernels.native.record_format import (BATCH, KIND_MASK, KINDS, LL, LL_WAIT, PREMUL, PREMUL_ACC, PUBLISH, W_KIND,
                                          W_SRC, chain_sources, decode_resolved, ll_outputs, ll_source, ll_units,
                                          src_premultiplied)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))
from _emulator import DeadlockDetected, RaceDetected, _conflict, _touched  # noqa: E402
from _fake_cupy import LLStores, lines_fresh  # noqa: E402

#: blocks made by this Python process (their tracker registration is the maker's to drop)
_MADE_HERE: set[str] = set()


def _view(addr: int, count: int, dtype) -> np.ndarray:
    dt = np.dtype(dtype)
    if count <= 0:
        return np.zeros(0, dt)
    return np.frombuffer((ctypes.c_char * (count * dt.itemsize)).from_address(int(addr)), dt)


def address(arr: np.ndarray) -> int:
    return int(arr.__array_interface__["data"][0])


class ShmShareBackend:
    """One process's memory and launches (see module docstring)."""

    name = "shm-emulated"

    def __init__(self, seed: int = 0, *, run_now: bool = True, timeout_s: float = 20.0, split: bool = True) -> None:
        self.ipc = SharedMemoryIpc()
        self.rng = random.Random(seed)
        self.run_now, self.timeout_s, self.split = run_now, timeout_s, split
        self.pending: list[ShareKernel] = []
        #: launches to leave out (a process whose kernel never runs: its peers' waits time out)
        self.skip_launches = 0
        self._opened: dict[int, object] = {}
        self.opens = self.closes = self.launches = 0

    def identity(self) -> dict:
        return {}

    def can_map(self, peers) -> bool:
        return True

    def capacity(self) -> int:
        return 64

    def empty(self, n: int, dtype) -> np.ndarray:
        arr = self.ipc.empty(max(1, n), dtype)[:n]
        _MADE_HERE.add(self.ipc._blocks[-1][2]._name)
        return arr

    def flags(self, n: int) -> np.ndarray:
        f = self.empty(n, np.uint64)
        f[:] = 0
        return f

    address = staticmethod(address)

    def export(self, arr, what: str) -> dict:
        d = self.ipc.export(arr, what)
        return {"handle": d["name"], "offset": d["offset"], "nbytes": d["nbytes"]}

    def open(self, handle: str) -> int:
        from multiprocessing import resource_tracker, shared_memory
        shm = shared_memory.SharedMemory(name=handle)
        if shm._name not in _MADE_HERE:      # another OS process made it and will unlink it
            try:
                resource_tracker.unregister(shm._name, "shared_memory")
            except Exception:  # noqa: BLE001 - tracker internals differ between versions
                pass
        view = np.frombuffer(shm.buf, np.uint8)
        base = address(view)
        del view
        self._opened[base] = shm
        self.opens += 1
        return base

    def close(self, base: int) -> None:
        shm = self._opened.pop(base)
        self.closes += 1
        try:
            shm.close()
        except BufferError:      # a view still alive (a test holding one): leave the mapping
            pass

    def upload(self, host: np.ndarray):
        arr = np.ascontiguousarray(host).copy()
        return arr, address(arr)

    def prepare(self, share) -> dict:
        return {"epochs": np.zeros(share.dp.num_blocks, np.uint64), "status": np.zeros(5, np.int64)}

    def launch(self, share, b: dict, *, graph: bool) -> None:
        self.launches += 1
        if self.skip_launches:
            self.skip_launches -= 1
            return
        kernel = ShareKernel(share, b, self.rng, self.split)
        if self.run_now:
            kernel.run_to_end(self.timeout_s)
        else:
            self.pending.append(kernel)

    def synchronize(self) -> None:
        pass

    @staticmethod
    def status(share) -> list[int]:
        return [int(x) for x in share.state["status"]]

    def release(self) -> None:
        """Close every mapping and unlink the blocks this backend made."""
        for shm in self._opened.values():
            try:
                shm.close()
            except BufferError:
                pass
        self._opened = {}
        self.ipc.close()


class ShareKernel:
    """One launch of a share: its blocks, run record by record over absolute addresses.  Under
    the LL protocol the records of a pass are all in flight and run in any order, each (whole)
    once its LL inputs' lines are fresh, and its LL outputs are stored as 8-byte halves that land
    late and in any order (:class:`LLStores`), in a peer's region through this process's mapping."""

    def __init__(self, share, b: dict, rng: random.Random, split: bool) -> None:
        dp = share.dp
        self.share, self.rng, self.split = share, rng, split
        self.recs = b["records"].reshape(-1, REC_WORDS)
        self.waits = share.waits.reshape(-1, 2)
        self.flag_addrs = share.flag_addrs
        self.epochs, self.status = share.state["epochs"], share.state["status"]
        self.blocks = list(range(share.first, share.first + share.blocks))
        self.nxt = {b_: int(dp.block_start[b_]) for b_ in self.blocks}
        self.base = {b_: (int(self.epochs[b_]) + 1) * dp.stride for b_ in self.blocks}
        self.left: dict[int, int] = {}
        self.passes: dict[int, list[int]] = {}       # block -> LL records of its open pass not yet run
        self.lines = LLStores(rng)
        self.dp = dp

    def live(self) -> list[int]:
        return [b for b in self.blocks if self.nxt[b] < self.dp.block_start[b + 1] or self.passes.get(b)]

    def _pass_end(self, i: int, b: int) -> int:
        j, end = i + 1, int(self.dp.block_start[b + 1])
        if int(self.recs[i, W_KIND]) & LL:
            while j < end and int(self.recs[j, W_KIND]) & BATCH:
                j += 1
        return j

    def ready(self, b: int) -> bool:
        if b in self.left:
            return True
        if self.passes.get(b):
            return any(self._ll_ready(i, b) for i in self.passes[b])
        i, dp = self.nxt[b], self.dp
        return all(_view(int(a), 1, np.uint64)[0] >= self.base[b] + int(j) + 1
                   for a, j in self.waits[dp.wait_start[i]:dp.wait_start[self._pass_end(i, b)]])

    def step(self, b: int) -> None:
        """Run part of block ``b``'s next record (all of it when not splitting); under LL, open a
        pass or run one ready record of it."""
        if self.passes.get(b):
            i = self.rng.choice([i for i in self.passes[b] if self._ll_ready(i, b)])
            self._run_ll(i, b)
            self.passes[b].remove(i)
            if not self.passes[b]:
                self._done(self.nxt[b] - 1, b)
            return
        i = self.nxt[b]
        if int(self.recs[i, W_KIND]) & LL:
            self.nxt[b] = self._pass_end(i, b)
            self.passes[b] = list(range(i, self.nxt[b]))
            return
        count = int(self.recs[i, 3])
        left = self.left.pop(b, count)
        part = self.rng.randint(1, left) if self.split and left > 1 else left
        done = count - left
        run_record(self.recs[i], self.dp, done, done + part)
        if part < left:
            self.left[b] = left - part
            return
        self.nxt[b] += 1
        self._done(i, b)

    def _done(self, i: int, b: int) -> None:
        """Record ``i`` (the last of its pass) is done: publish its flag, end the block's call."""
        if int(self.recs[i, W_KIND]) & PUBLISH:
            _view(int(self.flag_addrs[b]), 1, np.uint64)[0] = self.base[b] + (i - int(self.dp.block_start[b])) + 1
        if self.nxt[b] == self.dp.block_start[b + 1] and not self.passes.get(b):
            self.epochs[b] = self.base[b] // self.dp.stride

    # ------------------------------------------------------------------ LL lines
    def _ll_inputs(self, i: int) -> list[tuple[int, int]]:
        """(source position, address of its LL lines) of record ``i``'s LL inputs."""
        word = int(self.recs[i, W_KIND])
        if word & KIND_MASK == KINDS["reduce_chain"]:
            at = _view(int(self.recs[i, W_SRC]), chain_sources(word), np.uint64)
            return [(j, int(at[j])) for j in range(chain_sources(word)) if ll_source(word, j)]
        return [(0, int(self.recs[i, W_SRC]))] if ll_source(word, 0) else []

    def _ll_ready(self, i: int, b: int) -> bool:
        units = ll_units(int(self.recs[i, 3]), np.dtype(self.dp.dtype).itemsize)
        return all(lines_fresh(_view(a, units * 4, np.uint32).reshape(-1, 4), self.base[b] // self.dp.stride)
                   for _, a in self._ll_inputs(i))

    def _run_ll(self, i: int, b: int) -> None:
        """Record ``i`` whole, its LL inputs read from their lines (the record runs on a copy whose
        source addresses point at the data the lines carried), its result stored as lines."""
        rec, dt, epoch = self.recs[i].copy(), np.dtype(self.dp.dtype), self.base[b] // self.dp.stride
        count, word, keep = int(rec[3]), int(rec[W_KIND]), []
        chain = word & KIND_MASK == KINDS["reduce_chain"]
        srcs = _view(int(rec[W_SRC]), chain_sources(word), np.uint64).copy() if chain else None
        for j, a in self._ll_inputs(i):
            got = _view(a, ll_units(count, dt.itemsize) * 4, np.uint32).reshape(-1, 4)
            keep.append(np.ascontiguousarray(got[:, [0, 2]]).reshape(-1).view(dt)[:count].copy())
            if chain:
                srcs[j] = address(keep[-1])
            else:
                rec[W_SRC] = address(keep[-1])
        if chain:
            rec[W_SRC] = address(srcs)
        run_record(rec, self.dp, 0, count)
        r = decode_resolved(rec)
        data = np.zeros(ll_units(count, dt.itemsize) * 8, np.uint8)
        data[:count * dt.itemsize] = _view(r.dst, count, dt).view(np.uint8)
        for t in range(ll_outputs(word)):
            self.lines.store(int(_view(r.ll_out, ll_outputs(word), np.uint64)[t]), data.view(np.uint32), epoch)

    def stuck(self, b: int) -> tuple[int, int, int, int]:
        """(block, record, awaited block, its index) of ``b``'s first unmet wait (an LL line:
        awaited block ``LL_WAIT``)."""
        if self.passes.get(b):
            return b, self.passes[b][0], LL_WAIT, 0
        i, dp = self.nxt[b], self.dp
        for w in range(int(dp.wait_start[i]), int(dp.wait_start[i + 1])):
            a, j = self.waits[w]
            if _view(int(a), 1, np.uint64)[0] < self.base[b] + int(j) + 1:
                return b, i, int(dp.waits[w, 0]), int(j)
        return b, i, -1, -1

    def run_to_end(self, timeout_s: float) -> None:
        """Run every block, waiting on flags other processes set; past ``timeout_s`` without
        progress, write the status words as the kernel's bounded wait does."""
        last = time.monotonic()
        while True:
            live = self.live()
            if not live:
                self.lines.flush_all()
                return
            ready = [b for b in live if self.ready(b)]
            if ready:
                self.lines.flush_some()
                self.step(self.rng.choice(ready))
                last = time.monotonic()
            elif self.lines.pending:
                self.lines.flush_all()
            elif time.monotonic() - last > timeout_s:
                self.status[1:5] = self.stuck(live[0])
                self.status[0] = 1
                return
            else:
                time.sleep(0.0002)


def run_interleaved(kernels: list[ShareKernel], rng: random.Random) -> None:
    """Run the launches of several "processes" in one random interleaving (see module docstring).
    Like the emulator, raise RaceDetected when a record starts while a record of another block,
    of any process, is part done on the same elements and one of them writes (the program's
    slots and offsets say which elements: the same on every process)."""
    inflight: dict[tuple, tuple] = {}
    while True:
        live = [(k, b) for k in kernels for b in k.live()]
        if not live:
            for k in kernels:
                k.lines.flush_all()
            return
        ready = [(k, b) for k, b in live if k.ready(b)]
        if not ready and any(k.lines.pending for k in kernels):
            for k in kernels:
                k.lines.flush_all()
            continue
        if not ready:
            parts = [f"rank {k.share.rank} block {b} record {i - int(k.dp.block_start[b])} waits for block {wb}'s "
                     f"record {wj}" for k, b0 in live[:4] for b, i, wb, wj in [k.stuck(b0)]]
            raise DeadlockDetected(f"deadlock: {len(live)} block(s) stuck: " + "; ".join(parts))
        k, b = rng.choice(ready)
        for other in kernels:
            other.lines.flush_some()
        if k.dp.protocol == "ll":                 # whole records, in passes of records that touch nothing in common
            k.step(b)
            continue
        key = (k.share.rank, b)
        if b not in k.left:                       # a record starts
            i = k.nxt[b]
            touched = _touched(k.dp.records[i], k.dp.sources)
            for other, (oi, theirs) in inflight.items():
                if other != key and _conflict(touched, theirs):
                    raise RaceDetected(f"rank {k.share.rank} record {i} (block {b}) and rank {other[0]} record {oi} "
                                       f"(block {other[1]}) run at once on the same elements and one writes")
            inflight[key] = (i, touched)
        k.step(b)
        if b not in k.left:                       # ... and is done
            inflight.pop(key, None)


def run_record(rec: np.ndarray, dp, lo: int, hi: int) -> None:
    """Elements ``lo:hi`` of one resolved record (dst, src, acc, count, kind word, tile word) of
    ``dp``, tile by tile."""
    r = decode_resolved(rec)
    for off, n in record_runs(r.count, r.tile, r.tile_stride, lo, hi):
        _run_span(rec, dp, off, off + n)


def _run_span(rec: np.ndarray, dp, lo: int, hi: int) -> None:
    """Memory elements ``lo:hi`` (offsets from the record's first element) of one resolved record."""
    r = decode_resolved(rec)
    dst_a, src_a, acc_a, word = r.dst, r.src, r.acc, r.word
    kind, dt, n = r.kind, np.dtype(dp.dtype), dp.ranks
    item = dt.itemsize
    span = hi - lo
    dst = _view(dst_a + lo * item, span, dt)
    base = "sum" if dp.op == "avg" else dp.op
    if kind == KINDS["copy"]:
        dst[...] = _view(src_a + lo * item, span, dt)
    elif kind == KINDS["scale"]:
        postdiv_with(np, dst, n)
    elif kind == KINDS["reduce_chain"]:
        srcs = _view(src_a, (word >> 8) & 255, np.uint64)
        acc = _view(acc_a + lo * item, span, dt).copy()
        for j, s in enumerate(srcs):
            pre = (bool(word & PREMUL_ACC) and j == 0, src_premultiplied(word, j))
            reduce_copy_with(np, dst, acc if j == 0 else dst, _view(int(s) + lo * item, span, dt),
                             PreMulSum(n, *pre) if any(pre) else base)
    else:
        pre = PREMUL.get(kind)
        reduce_copy_with(np, dst, _view(acc_a + lo * item, span, dt).copy(), _view(src_a + lo * item, span, dt),
                         PreMulSum(n, *pre) if pre else base)


__all__ = ["ShmShareBackend", "ShareKernel", "run_interleaved", "run_record", "address", "DeadlockDetected",
           "RaceDetected"]
