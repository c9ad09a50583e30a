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
from kernels.native.device_program import REC_WORDS, record_runs
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
        status = _view(status_addr, 8, np.uint32)
        rng = self.fake.rng
        while True:
            live = [b for b in blocks if nxt[b] < block_start[b + 1]]
            if not live:
                break
            ready = [b for b in live if self._ready(nxt[b], wait_start, waits, base[b])]
            if not ready:                           # what the kernel's bounded wait reports
                b = live[0]
                i = nxt[b]
                w = int(wait_start[i])
                status[1:5] = [b, i, int(wait_block[w]), int(waits[w, 1])]
                status[5] = status[0] = 1
                return
            b = rng.choice(ready)
            i = nxt[b]
            self._run(recs[i], nranks)
            if int(recs[i, 4]) & 16:
                _view(int(flag_ptrs[b]), 1, np.uint64)[0] = base[b] + (i - int(block_start[b])) + 1
            nxt[b] += 1
        for b in blocks:
            epochs[b] = base[b] // stride

    @staticmethod
    def _ready(i, wait_start, waits, base) -> bool:
        for w in range(int(wait_start[i]), int(wait_start[i + 1])):
            if _view(int(waits[w, 0]), 1, np.uint64)[0] < base + int(waits[w, 1]) + 1:
                return False
        return True

    def _run(self, rec, n) -> None:
        """One resolved record, tile by tile (:func:`record_runs`)."""
        dst_a, src_a, acc_a, count, word, tiles = (int(x) for x in rec)
        item = np.dtype(self.dtype).itemsize
        for off, k in record_runs(count, tiles & 0xFFFFFFFF, tiles >> 32, 0, count):
            shift = off * item
            self._run_tile(dst_a + shift, src_a + shift if word & 15 != 6 else src_a, acc_a + shift, k, word, n,
                          shift)

    def _run_tile(self, dst_a, src_a, acc_a, count, word, n, shift) -> None:
        kind, dt = word & 15, self.dtype
        dst = _view(dst_a, count, dt)
        base = self.op
        if kind == 0:
            dst[...] = _view(src_a, count, dt)
        elif kind == 5:
            postdiv_with(np, dst, n)
        elif kind == 6:
            nsrc = (word >> 8) & 255
            srcs = _view(src_a, nsrc, np.uint64)
            acc = _view(acc_a, count, dt).copy()
            for j in range(nsrc):
                pre = (bool(word & 32) and j == 0, bool(word >> (16 + j) & 1))
                reduce_copy_with(np, dst, acc if j == 0 else dst, _view(int(srcs[j]) + shift, count, dt),
                                 PreMulSum(n, *pre) if any(pre) else base)
        else:
            pre = {2: (True, False), 3: (False, True), 4: (True, True)}.get(kind)
            reduce_copy_with(np, dst, _view(acc_a, count, dt).copy(), _view(src_a, count, dt),
                             PreMulSum(n, *pre) if pre else base)


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
