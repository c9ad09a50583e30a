"""Test double of CuPy for the native launcher: host NumPy memory stands in for GPU memory
(same addresses on "host" and "device", as with UVA), and the interpreter kernel is replaced
by a NumPy interpreter of exactly what the launcher hands the real kernel: the resolved
records (absolute addresses), the resolved waits (flag addresses), the flag pointer table,
the epochs and the status words.  Blocks run in a random interleaving, a record at a time,
and a block only moves when the flags it waits for, read through their addresses, say so; a
state where no block can move is reported through the status words as the real kernel's
timeout would be.

Use: ``monkeypatch.setattr(kernels.native.launcher, "_cupy", lambda: FakeCupy(seed))``.
"""

from __future__ import annotations

import ctypes
import random
import re
import types

import ml_dtypes  # noqa: F401 - registers bfloat16 / float8 names with NumPy
import numpy as np

from kernels.backends.kernel_twins import PreMulSum, postdiv_with, reduce_copy_with
from kernels.native.device_program import record_runs
from kernels.native.record_format import (
    BATCH,
    LL_WAIT,
    PREMUL,
    KIND_MASK,
    KINDS,
    LL,
    PREMUL_ACC,
    PUBLISH,
    REC_WORDS,
    W_COUNT,
    W_KIND,
    W_SRC,
    chain_sources,
    decode_resolved,
    ll_outputs,
    ll_source,
    ll_units,
    src_premultiplied,
)
from kernels.native.source import DTYPE_CODES

_DT_NAMES = {code: name for name, code in DTYPE_CODES.items()}
_OPS = {0: "sum", 1: "prod", 2: "max", 3: "min"}


class DevArray(np.ndarray):
    """A NumPy array with CuPy's ``.data.ptr``."""

    @property
    def data(self):  # noqa: D401 - CuPy's MemoryPointer stand-in
        return types.SimpleNamespace(ptr=self.ctypes.data)


def _view(addr: int, count: int, dtype) -> np.ndarray:
    dt = np.dtype(dtype)
    if count == 0:
        return np.zeros(0, dt)
    buf = (ctypes.c_char * (count * dt.itemsize)).from_address(int(addr))
    return np.frombuffer(buf, dt)


class _Kernel:
    def __init__(self, fake, options):
        opts = dict(re.findall(r"-D(TC_\w+)=(\d+)", " ".join(options)))
        self.fake, self.dtype = fake, np.dtype(_DT_NAMES[int(opts["TC_DT"])])
        self.op = _OPS[int(opts["TC_OP"])]
        self.ptr = 0

    def __call__(self, grid, block, args, stream=None):
        self.fake.launches += 1
        (recs, block_start, wait_start, waits, wait_block, flag_ptrs, epochs, first, stride, nranks, avg,
         abort_addr, status_addr, _timeout) = args
        recs = np.asarray(recs).reshape(-1, REC_WORDS)
        waits = np.asarray(waits).reshape(-1, 2)
        first, stride, nranks = int(first), int(stride), int(nranks)
        blocks = list(range(first, first + grid[0]))
        nxt = {b: int(block_start[b]) for b in blocks}
        base = {b: (int(epochs[b]) + 1) * stride for b in blocks}
        ends = {b: int(block_start[b + 1]) for b in blocks}
        self.lines = LLStores(self.fake.rng)
        passes: dict[int, list[int]] = {}          # block -> records of its open LL pass not yet run
        status = _view(status_addr, 8, np.uint32)
        rng = self.fake.rng
        while True:
            live = [b for b in blocks if nxt[b] < ends[b] or passes.get(b)]
            if not live:
                break
            moves = []
            for b in live:
                if passes.get(b):
                    moves += [(b, i) for i in passes[b] if self._ll_ready(recs[i], base[b] // stride)]
                    continue
                i, j = nxt[b], self._pass_end(recs, nxt[b], ends[b])
                if self._ready(i, j, wait_start, waits, base[b]):
                    moves.append((b, None))
            if not moves:
                if self.lines.pending:
                    self.lines.flush_all()
                    continue
                b = live[0]                         # what the kernel's bounded wait reports
                i = passes[b][0] if passes.get(b) else nxt[b]
                w = int(wait_start[i])
                status[1:5] = ([b, i, LL_WAIT, 0] if passes.get(b)
                               else [b, i, int(wait_block[w]), int(waits[w, 1])])
                status[5] = status[0] = 1
                return
            self.lines.flush_some()
            b, i = rng.choice(moves)
            if i is None:
                i = nxt[b]
                j = self._pass_end(recs, i, ends[b])
                nxt[b] = j
                if int(recs[i, W_KIND]) & LL:
                    passes[b] = list(range(i, j))
                    continue
                self._run(recs[i], nranks, None)
                self._publish(recs, i, b, flag_ptrs, block_start, base)
                continue
            self._run(recs[i], nranks, base[b] // stride)
            passes[b].remove(i)
            if not passes[b]:
                self._publish(recs, nxt[b] - 1, b, flag_ptrs, block_start, base)
        self.lines.flush_all()
        for b in blocks:
            epochs[b] = base[b] // stride

    @staticmethod
    def _pass_end(recs, i, end) -> int:
        """One past the last record of the pass record ``i`` starts (``i + 1`` for Simple)."""
        j = i + 1
        if int(recs[i, W_KIND]) & LL:
            while j < end and int(recs[j, W_KIND]) & BATCH:
                j += 1
        return j

    @staticmethod
    def _publish(recs, i, b, flag_ptrs, block_start, base) -> None:
        if int(recs[i, W_KIND]) & PUBLISH:
            _view(int(flag_ptrs[b]), 1, np.uint64)[0] = base[b] + (i - int(block_start[b])) + 1

    @staticmethod
    def _ready(i, j, wait_start, waits, base) -> bool:
        for w in range(int(wait_start[i]), int(wait_start[j])):
            if _view(int(waits[w, 0]), 1, np.uint64)[0] < base + int(waits[w, 1]) + 1:
                return False
        return True

    def _ll_inputs(self, rec) -> list[tuple[int, int]]:
        """(source position, address of its LL lines) of an LL record's LL inputs."""
        word = int(rec[W_KIND])
        if word & KIND_MASK == KINDS["reduce_chain"]:
            at = _view(int(rec[W_SRC]), chain_sources(word), np.uint64)
            return [(j, int(at[j])) for j in range(chain_sources(word)) if ll_source(word, j)]
        return [(0, int(rec[W_SRC]))] if ll_source(word, 0) else []

    def _ll_ready(self, rec, epoch) -> bool:
        units = ll_units(int(rec[W_COUNT]), self.dtype.itemsize)
        return all(lines_fresh(_view(a, units * 4, np.uint32).reshape(-1, 4), epoch) for _, a in self._ll_inputs(rec))

    def _run(self, rec, n, epoch) -> None:
        """One resolved record, tile by tile (:func:`record_runs`); an LL record (``epoch`` given)
        reads its LL inputs from their lines and writes its result to its LL regions too."""
        r = decode_resolved(rec)
        dst_a, src_a, acc_a, count, word, outs = r.dst, r.src, r.acc, r.count, r.word, r.ll_out
        item = np.dtype(self.dtype).itemsize
        lines = {}
        if epoch is not None:
            units = ll_units(count, item)
            for j, a in self._ll_inputs(rec):
                got = _view(a, units * 4, np.uint32).reshape(-1, 4)
                assert lines_fresh(got, epoch), "an LL input was read before its lines were fresh"
                lines[j] = np.ascontiguousarray(got[:, [0, 2]]).reshape(-1).view(self.dtype)[:count].copy()
        for off, k in record_runs(count, r.tile, r.tile_stride, 0, count):
            shift = off * item
            chain = word & KIND_MASK == KINDS["reduce_chain"]
            self._run_tile(dst_a + shift, src_a if chain else src_a + shift, acc_a + shift, k, word,
                           n, shift, lines)
        if epoch is not None:
            data = np.zeros(ll_units(count, item) * 8, np.uint8)
            data[:count * item] = _view(dst_a, count, self.dtype).view(np.uint8)
            for t in range(ll_outputs(word)):
                self.lines.store(int(_view(outs, ll_outputs(word), np.uint64)[t]), data.view(np.uint32), epoch)

    def _run_tile(self, dst_a, src_a, acc_a, count, word, n, shift, lines) -> None:
        kind, dt = word & KIND_MASK, self.dtype
        dst = _view(dst_a, count, dt)
        base = self.op

        def src(j, addr):
            return lines[j] if j in lines else _view(addr, count, dt)
        if kind == KINDS["copy"]:
            dst[...] = src(0, src_a)
        elif kind == KINDS["scale"]:
            postdiv_with(np, dst, n)
        elif kind == KINDS["reduce_chain"]:
            nsrc = chain_sources(word)
            srcs = _view(src_a, nsrc, np.uint64)
            acc = _view(acc_a, count, dt).copy()
            for j in range(nsrc):
                pre = (bool(word & PREMUL_ACC) and j == 0, src_premultiplied(word, j))
                reduce_copy_with(np, dst, acc if j == 0 else dst, src(j, int(srcs[j]) + shift),
                                 PreMulSum(n, *pre) if any(pre) else base)
        else:
            pre = PREMUL.get(kind)
            reduce_copy_with(np, dst, _view(acc_a, count, dt).copy(), src(0, src_a),
                             PreMulSum(n, *pre) if pre else base)


def lines_fresh(lines: np.ndarray, epoch: int) -> bool:
    """Both flags of every LL line (uint32 rows ``data, flag, data, flag``) are ``epoch``."""
    ep = np.uint32(epoch & 0xFFFFFFFF)
    return bool((lines[:, 1] == ep).all() and (lines[:, 3] == ep).all())


class LLStores:
    """LL line stores as the hardware may land them: each 8-byte half (data, flag) on its own,
    some held back and landing later in any order (a reader then sees a torn line)."""

    def __init__(self, rng):
        self.rng, self.pending = rng, []

    def store(self, addr: int, words: np.ndarray, epoch: int) -> None:
        for k in range(len(words) // 2):
            for half in (0, 1):
                self.pending.append((addr + 16 * k + 8 * half, int(words[2 * k + half]), epoch & 0xFFFFFFFF))
        self.rng.shuffle(self.pending)
        self.flush_some()

    def flush_some(self) -> None:
        keep = []
        for item in self.pending:
            if self.rng.random() < 0.5:
                self._land(*item)
            else:
                keep.append(item)
        self.pending = keep

    def flush_all(self) -> None:
        for item in self.pending:
            self._land(*item)
        self.pending = []

    @staticmethod
    def _land(addr: int, data: int, flag: int) -> None:
        _view(addr, 2, np.uint32)[:] = (data, flag)


class _Graph:
    """A captured stream: its kernel launches and copies, replayed in order."""

    def __init__(self, calls):
        self.calls = calls

    def launch(self, stream=None):
        for call in self.calls:
            call()


class _Stream:
    id = 0                              # also the current device (cupy.cuda.Device())
    pci_bus_id = "0000:01:00.0"
    ptr = 0x5EED

    def __init__(self, fake, non_blocking=False):
        self.fake = fake
        self.capturing = None

    def synchronize(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def begin_capture(self):
        self.capturing = []
        self.fake.capture = self.capturing

    def end_capture(self):
        self.fake.capture = None
        return _Graph(self.capturing)


class FakeCupy:
    """The parts of ``cupy`` the launcher uses (see module docstring)."""

    int32, uint64 = np.int32, np.uint64

    def __init__(self, seed: int = 0, sms: int = 4, free_bytes: int = 1 << 40):
        self.rng = random.Random(seed)
        self.launches = 0
        #: device-to-device copies run (the launcher's memcpy route)
        self.copies = 0
        self.capture = None
        self._host = []
        #: every array made through this fake (a test's address_range can look them up)
        self.allocations: list[np.ndarray] = []
        fake = self

        class _Capturing(_Kernel):
            def __call__(self, grid, block, args, stream=None):
                if fake.capture is not None and isinstance(stream, _Stream):
                    fake.capture.append(lambda: _Kernel.__call__(self, grid, block, args))
                    return
                super().__call__(grid, block, args, stream)

        def host_alloc(nbytes, flags):
            buf = np.zeros(nbytes, np.uint8)
            self._host.append(buf)
            return buf.ctypes.data

        def memcpy_async(dst, src, nbytes, kind, stream_ptr):
            assert kind == 3 and stream_ptr == _Stream.ptr, "a device-to-device copy on a stream"

            def copy():
                self.copies += 1
                ctypes.memmove(int(dst), int(src), int(nbytes))
            if self.capture is not None:
                self.capture.append(copy)
            else:
                copy()

        runtime = types.SimpleNamespace(memcpyAsync=memcpy_async,
            getDeviceProperties=lambda d: {"multiProcessorCount": sms, "maxThreadsPerMultiProcessor": 2048},
            hostAlloc=host_alloc, freeHost=lambda p: None, getDevice=lambda: 0,
            deviceEnablePeerAccess=lambda p: None, deviceSynchronize=lambda: None,
            getDeviceCount=lambda: 2, memGetInfo=lambda: (free_bytes, 1 << 40))
        self.cuda = types.SimpleNamespace(
            runtime=runtime, Device=lambda d=0: _Stream(self),
            driver=types.SimpleNamespace(occupancyMaxActiveBlocksPerMultiprocessor=lambda f, t, s: 2),
            get_current_stream=lambda: _Stream(self), Stream=lambda non_blocking=False: _Stream(self, non_blocking))
        self.RawModule = lambda code, options: types.SimpleNamespace(
            get_function=lambda name: _Capturing(self, options))

    def _keep(self, arr):
        self.allocations.append(arr)
        return arr

    def asarray(self, x):
        return self._keep(np.array(x).view(DevArray))

    def zeros(self, n, dtype):
        return self._keep(np.zeros(n, dtype).view(DevArray))

    def empty(self, n, dtype):
        return self._keep(np.full(n * np.dtype(dtype).itemsize, 0x7F, np.uint8).view(dtype).view(DevArray))


def fake_cupy_route(mp, seed: int, device_of_array=lambda a: 0):
    """Put this stand-in under a Communicator's GPU path with ``mp`` (a pytest MonkeyPatch): the real
    ``CupyRuntime`` class over a :class:`FakeCupy` of 8 SMs, every array on GPU 0 (or where
    ``device_of_array`` says); returns the FakeCupy and the array type the path takes for CuPy's."""
    import kernels.backends.cupy_executor as cupy_executor
    import kernels.native.launcher as launcher
    from kernels.backends.cupy_runtime import CupyRuntime

    class CupyArray(DevArray):                 # what the call path knows a CuPy array by
        __module__ = "cupy._core.core"
        device = types.SimpleNamespace(id=0)
    cp = FakeCupy(seed=seed, sms=8)
    cp.ndarray = CupyArray
    rt = CupyRuntime.__new__(CupyRuntime)      # the real runtime class over the stand-in
    rt.cp, rt.rt, rt.count = cp, cp.cuda.runtime, 1
    rt.device_of_array = device_of_array
    mp.setattr(cupy_executor, "CupyRuntime", lambda: rt)
    mp.setattr(launcher, "_cupy", lambda: cp)
    mp.setattr(launcher, "_KERNELS", {})
    return cp, CupyArray
