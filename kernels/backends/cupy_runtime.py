"""The CUDA runtime of the CuPy backend: the handful of calls :class:`kernels.backends.cupy_executor.CupyLayer`
makes, through CuPy (imported lazily, when a :class:`CupyRuntime` is created).

The tests' fake runtime (``tests/_fake_device.py``) offers the same methods on the CPU.
Creating a CupyRuntime without a usable GPU (no CuPy, no CUDA device, no driver or NVML)
raises :class:`~topo_probe.errors.DeviceUnavailable` with one line saying why.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import numpy as np

from kernels.backends.host_reduce import reduce_chain
from kernels.backends.kernel_twins import postdiv_with, reduce_copy_with
from topo_probe.errors import DeviceUnavailable


def _no_gpu(exc: BaseException) -> bool:
    name = type(exc).__name__
    return (isinstance(exc, (ImportError, OSError)) or name.startswith("NVMLError")
            or name in ("CUDARuntimeError", "CUDADriverError", "CompileException"))


class _DefaultStream(NamedTuple):
    """The default stream of one GPU.  CuPy's ``Stream.null`` / ``Stream.ptds`` singletons have
    ``device_id == -1``: their handle means "the default stream of the current device"."""

    ptr: int
    device_id: int


class EventPools:
    """CUDA events re-recorded call after call instead of made per op (each made event is a
    runtime call, and a destroy when collected).  Two pools serve alternate calls: the final
    events of the last call, which this call's streams wait on first, are never re-recorded by
    this call; the waits on any older event were all enqueued before this call began."""

    def __init__(self) -> None:
        self._pools: tuple[dict, dict] = ({}, {})
        self._calls = 0

    def for_call(self, runtime: Any):
        """``new_event(dev)`` for one call: the pool's next unused event of GPU ``dev``."""
        pool, taken = self._pools[self._calls % 2], {}
        self._calls += 1

        def new_event(dev: int) -> Any:
            evs, i = pool.setdefault(dev, []), taken.get(dev, 0)
            if i == len(evs):
                evs.append(runtime.event(dev))
            taken[dev] = i + 1
            return evs[i]
        return new_event


class CupyRuntime:
    """The handful of CUDA calls the layer needs, through CuPy (imported here, lazily)."""

    def __init__(self) -> None:
        try:
            import cupy
            if not cupy.cuda.is_available():
                raise DeviceUnavailable("backend 'cupy': CuPy found no usable CUDA device")
            self.count = cupy.cuda.runtime.getDeviceCount()
        except DeviceUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - classified below
            if _no_gpu(exc):
                raise DeviceUnavailable(f"backend 'cupy': no usable GPU ({type(exc).__name__}: {exc})") from None
            raise
        self.cp = cupy
        self.rt = cupy.cuda.runtime

    def device_count(self) -> int:
        return self.count

    def is_array(self, arr: Any) -> bool:
        return isinstance(arr, self.cp.ndarray)

    def device_of_array(self, arr: Any) -> int:
        return arr.device.id

    def can_access_peer(self, dev: int, peer: int) -> bool:
        return bool(self.rt.deviceCanAccessPeer(dev, peer))

    def enable_peer_access(self, dev: int, peer: int) -> None:
        with self.cp.cuda.Device(dev):
            try:
                self.rt.deviceEnablePeerAccess(peer)
            except self.rt.CUDARuntimeError as exc:
                if "AlreadyEnabled" not in str(exc):
                    raise

    def stream(self, dev: int):
        with self.cp.cuda.Device(dev):
            return self.cp.cuda.Stream(non_blocking=True)

    def current_stream(self, dev: int):
        with self.cp.cuda.Device(dev):
            s = self.cp.cuda.get_current_stream()
        return s if s.device_id >= 0 else _DefaultStream(s.ptr, dev)

    def event(self, dev: int):
        with self.cp.cuda.Device(dev):
            return self.cp.cuda.Event(disable_timing=True)

    # A default-stream handle (0) names the current GPU's stream, so that GPU is made current;
    # a stream of its own names its GPU already, and switching costs a runtime call or two per op.
    def record(self, event, stream) -> None:
        if stream.ptr:
            self.rt.eventRecord(event.ptr, stream.ptr)
            return
        with self.cp.cuda.Device(stream.device_id):
            self.rt.eventRecord(event.ptr, stream.ptr)

    def wait(self, stream, event) -> None:
        if stream.ptr:
            self.rt.streamWaitEvent(stream.ptr, event.ptr)
            return
        with self.cp.cuda.Device(stream.device_id):
            self.rt.streamWaitEvent(stream.ptr, event.ptr)

    def alloc(self, dev: int, nelems: int, dtype) -> Any:
        with self.cp.cuda.Device(dev):
            return self.cp.empty(nelems, dtype)

    def alloc_pinned(self, nbytes: int) -> np.ndarray:
        mem = self.cp.cuda.PinnedMemory(max(1, nbytes), self.rt.hostAllocPortable)
        ptr = self.cp.cuda.PinnedMemoryPointer(mem, 0)
        return np.frombuffer(ptr, np.uint8, nbytes)

    def _nbytes(self, a) -> int:
        return a.size * a.dtype.itemsize

    def copy(self, dst, src, stream) -> None:
        self.rt.memcpyAsync(dst.data.ptr, src.data.ptr, self._nbytes(dst), self.rt.memcpyDeviceToDevice, stream.ptr)

    def copy_peer(self, dst, src, stream) -> None:
        self.rt.memcpyPeerAsync(dst.data.ptr, dst.device.id, src.data.ptr, src.device.id, self._nbytes(dst),
                                stream.ptr)

    def d2h(self, host: np.ndarray, src, stream) -> None:
        self.rt.memcpyAsync(host.ctypes.data, src.data.ptr, self._nbytes(src), self.rt.memcpyDeviceToHost, stream.ptr)

    def h2d(self, dst, host: np.ndarray, stream) -> None:
        self.rt.memcpyAsync(dst.data.ptr, host.ctypes.data, self._nbytes(dst), self.rt.memcpyHostToDevice, stream.ptr)

    def reduce(self, dst, a, b, op: str, stream) -> None:
        dev = dst.device.id
        if a.device.id == dev and b.device.id == dev:
            with self.cp.cuda.Device(dev), stream:
                reduce_copy_with(self.cp, dst, a, b, op)
            return
        with self.cp.cuda.Device(dev), stream, warnings.catch_warnings():
            # b lives on a peer GPU (peer access enabled by the layer); CuPy may say so
            warnings.simplefilter("ignore", getattr(self.cp, "_util", warnings).__dict__.get(
                "PerformanceWarning", UserWarning))
            reduce_copy_with(self.cp, dst, a, b, op)

    def host_reduce(self, dst: np.ndarray, srcs: list, binops: list, stream) -> None:
        """The n-way reduce of pinned host buffers in stream order: a host function on ``stream``
        (it runs once the stream's earlier work and event waits are done; the stream's later work
        waits for it), so the issuing thread never blocks."""
        stream.launch_host_func(lambda _arg: reduce_chain(dst, srcs, binops), None)

    def postdiv(self, x, n: int, stream) -> None:
        with self.cp.cuda.Device(x.device.id), stream:
            postdiv_with(self.cp, x, n)

    def synchronize(self) -> None:
        for d in range(self.count):
            with self.cp.cuda.Device(d):
                self.cp.cuda.Device(d).synchronize()
