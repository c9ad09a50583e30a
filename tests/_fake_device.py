"""A fake CUDA runtime for testing the CuPy backend without a GPU (a test double: no runtime
module imports it).

:class:`FakeRuntime` offers the methods of :class:`kernels.backends.cupy_runtime.CupyRuntime` on
NumPy arrays: every call is recorded in :attr:`FakeRuntime.calls`, data moves at once with
NumPy (so results can be checked), and the rules a real GPU would punish are checked:

* **ordering**: streams carry vector clocks; recording an event snapshots the stream's
  clock and waiting on it merges the snapshot.  A read of memory last written by another
  stream, or a write over memory another stream read or wrote, must be ordered after that
  access by an event wait, else :class:`FakeOrderingError`.  (Executing eagerly in call
  order then gives the same data as any order a GPU could pick.)
* **devices**: a peer copy or a kernel reading another GPU's memory needs peer access
  enabled for that pair (and enabled once only); plain copies and kernels stay on the
  stream's GPU; host <-> device copies go through pinned host memory; a host reduce
  (a host function in stream order) reads and writes pinned memory only.
* **host reads**: :meth:`FakeRuntime.to_host` checks that every write to the array is
  ordered before the host (a stream or device synchronize).

Arrays come from :meth:`FakeRuntime.to_device` / :meth:`FakeRuntime.alloc` (device memory)
and :meth:`FakeRuntime.alloc_pinned`; views of them work like device pointers.

>>> import numpy as np
>>> rt = FakeRuntime(2)
>>> a, b = rt.to_device(0, np.arange(4.0)), rt.alloc(1, 4, np.float64)
>>> s0, s1 = rt.stream(0), rt.stream(1)
>>> rt.enable_peer_access(1, 0)
>>> rt.copy_peer(b, a, s1)
>>> rt.synchronize(); rt.to_host(b).tolist()
[0.0, 1.0, 2.0, 3.0]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from kernels.backends.host_reduce import reduce_chain
from kernels.backends.kernel_twins import postdiv_host, reduce_copy_host


class FakeOrderingError(AssertionError):
    """The command stream would race or break a CUDA rule on a real GPU."""


class FakeCudaError(RuntimeError):
    """An error the fake's CUDA calls raise on purpose (e.g. a refused peer enable)."""


@dataclass(eq=False)
class FakeStream:
    id: int
    device: int
    clock: dict = field(default_factory=dict)


@dataclass(eq=False)
class FakeEvent:
    id: int
    device: int
    clock: dict | None = None


@dataclass
class _Alloc:
    start: int
    stop: int
    device: Any          # int GPU, or "pinned"
    array: np.ndarray
    accesses: list = field(default_factory=list)   # (start, stop, kind, stream id, tick)


class FakeRuntime:
    """Fake of :class:`kernels.backends.cupy_executor.CupyRuntime` (see module docstring).

    Parameters
    ----------
    devices : int
        Number of GPUs.
    can_access : callable (dev, peer) -> bool, optional
        ``canAccessPeer`` answers (default: every pair).
    fail_enable : iterable of (dev, peer)
        Pairs whose ``enable_peer_access`` raises :class:`FakeCudaError`.
    """

    def __init__(self, devices: int, can_access: Callable[[int, int], bool] | None = None,
                 fail_enable=()):
        self.devices = devices
        self._can = can_access or (lambda d, p: True)
        self.fail_enable = set(fail_enable)
        self.enabled: set[tuple[int, int]] = set()
        self.calls: list[tuple] = []
        self._allocs: list[_Alloc] = []
        self._streams: list[FakeStream] = []
        self._events = 0
        self.host_clock: dict = {}
        self.current = [self.stream(d) for d in range(devices)]
        self.calls.clear()

    # ------------------------------------------------------------------ memory
    def _register(self, arr: np.ndarray, device: Any) -> np.ndarray:
        ptr = arr.__array_interface__["data"][0]
        self._allocs.append(_Alloc(ptr, ptr + max(arr.nbytes, 1), device, arr))
        return arr

    def _find(self, arr: np.ndarray) -> tuple[_Alloc, int, int]:
        ptr = arr.__array_interface__["data"][0]
        end = ptr + arr.nbytes
        for a in self._allocs:
            if a.start <= ptr and end <= a.stop:
                return a, ptr, end
        raise FakeOrderingError(f"array at {ptr:#x} ({arr.nbytes} bytes) is not memory of this fake runtime")

    def to_device(self, dev: int, host: np.ndarray) -> np.ndarray:
        """A device copy of ``host`` on GPU ``dev`` (setup, not a tracked command)."""
        return self._register(np.array(host, copy=True).reshape(np.shape(host)), dev)

    def to_host(self, arr: np.ndarray) -> np.ndarray:
        """A host copy, after checking every write to it is ordered before the host."""
        alloc, a, b = self._find(arr)
        for s, e, kind, sid, tick in alloc.accesses:
            if kind == "w" and s < b and a < e and self.host_clock.get(sid, 0) < tick:
                raise FakeOrderingError(f"host reads memory written by stream {sid} (tick {tick}) "
                                        f"without synchronizing that stream")
        return np.array(arr, copy=True)

    def is_array(self, arr: Any) -> bool:
        if not isinstance(arr, np.ndarray):
            return False
        try:
            alloc, _, _ = self._find(arr)
        except FakeOrderingError:
            return False
        return alloc.device != "pinned"

    def device_of_array(self, arr: np.ndarray) -> Any:
        return self._find(arr)[0].device

    def device_count(self) -> int:
        return self.devices

    def alloc(self, dev: int, nelems: int, dtype) -> np.ndarray:
        self.calls.append(("alloc", dev, nelems))
        return self._register(np.empty(nelems, dtype), dev)

    def alloc_pinned(self, nbytes: int) -> np.ndarray:
        self.calls.append(("alloc_pinned", nbytes))
        return self._register(np.empty(nbytes, np.uint8), "pinned")

    # ------------------------------------------------------------------ peers
    def can_access_peer(self, dev: int, peer: int) -> bool:
        ok = bool(self._can(dev, peer))
        self.calls.append(("can_access_peer", dev, peer, ok))
        return ok

    def enable_peer_access(self, dev: int, peer: int) -> None:
        self.calls.append(("enable_peer_access", dev, peer))
        if (dev, peer) in self.enabled:
            raise FakeOrderingError(f"peer access GPU {dev} -> GPU {peer} enabled twice")
        if (dev, peer) in self.fail_enable or not self._can(dev, peer):
            raise FakeCudaError(f"cudaErrorPeerAccessUnsupported: GPU {dev} cannot map GPU {peer}")
        self.enabled.add((dev, peer))

    # ------------------------------------------------------------------ streams and events
    def stream(self, dev: int) -> FakeStream:
        s = FakeStream(len(self._streams), dev)
        self._streams.append(s)
        self.calls.append(("stream", dev, s.id))
        return s

    def current_stream(self, dev: int) -> FakeStream:
        return self.current[dev]

    def event(self, dev: int) -> FakeEvent:
        self._events += 1
        return FakeEvent(self._events, dev)

    def record(self, event: FakeEvent, stream: FakeStream) -> None:
        if event.device != stream.device:
            raise FakeOrderingError(f"event of GPU {event.device} recorded on a stream of GPU {stream.device}")
        event.clock = dict(stream.clock)
        self.calls.append(("record", stream.id, event.id))

    def wait(self, stream: FakeStream, event: FakeEvent) -> None:
        if event.clock is None:
            raise FakeOrderingError(f"stream {stream.id} waits on event {event.id} that was never recorded")
        for s, t in event.clock.items():
            stream.clock[s] = max(stream.clock.get(s, 0), t)
        self.calls.append(("wait", stream.id, event.id))

    def synchronize(self) -> None:
        self.calls.append(("synchronize",))
        for s in self._streams:
            for k, t in s.clock.items():
                self.host_clock[k] = max(self.host_clock.get(k, 0), t)

    def sync_stream(self, stream: FakeStream) -> None:
        """Host waits for ``stream`` (what ``cupy.ndarray.get()`` does on the current stream)."""
        self.calls.append(("sync_stream", stream.id))
        for k, t in stream.clock.items():
            self.host_clock[k] = max(self.host_clock.get(k, 0), t)

    # ------------------------------------------------------------------ checked accesses
    def _access(self, stream: FakeStream, reads: list, writes: list, what: str) -> None:
        stream.clock[stream.id] = stream.clock.get(stream.id, 0) + 1
        tick = stream.clock[stream.id]
        found = [(arr, self._find(arr), "r") for arr in reads] + [(arr, self._find(arr), "w") for arr in writes]
        for _, (alloc, a, b), kind in found:
            if a == b:
                continue
            for s, e, k2, sid, t2 in alloc.accesses:
                if not (s < b and a < e) or sid == stream.id:
                    continue
                if (kind == "w" or k2 == "w") and stream.clock.get(sid, 0) < t2:
                    raise FakeOrderingError(f"{what} on stream {stream.id}: {'writes' if kind == 'w' else 'reads'} "
                                            f"bytes {a - alloc.start}..{b - alloc.start} of a {alloc.device} buffer "
                                            f"that stream {sid} {'wrote' if k2 == 'w' else 'read'} (tick {t2}) "
                                            f"without an event wait")
        for _, (alloc, a, b), kind in found:
            alloc.accesses.append((a, b, kind, stream.id, tick))

    def _same_device(self, stream: FakeStream, arr: np.ndarray, what: str, peer_ok: bool = False) -> None:
        dev = self.device_of_array(arr)
        if dev == stream.device:
            return
        if peer_ok and dev != "pinned" and (stream.device, dev) in self.enabled:
            return
        raise FakeOrderingError(f"{what} on a stream of GPU {stream.device} touches memory of "
                                f"{'pinned host' if dev == 'pinned' else f'GPU {dev}'}"
                                f"{' without peer access' if peer_ok else ''}")

    def copy(self, dst, src, stream: FakeStream) -> None:
        self._same_device(stream, dst, "copy")
        self._same_device(stream, src, "copy")
        self._access(stream, [src], [dst], "copy")
        self.calls.append(("copy", stream.device, stream.id, dst.nbytes))
        np.copyto(dst, src)

    def copy_peer(self, dst, src, stream: FakeStream) -> None:
        sdev, ddev = self.device_of_array(src), self.device_of_array(dst)
        if sdev == ddev or "pinned" in (sdev, ddev):
            raise FakeOrderingError(f"peer copy between GPU {sdev} and GPU {ddev}")
        if (ddev, sdev) not in self.enabled:
            raise FakeOrderingError(f"peer copy GPU {sdev} -> GPU {ddev} without peer access enabled")
        self._same_device(stream, dst, "peer copy")
        self._access(stream, [src], [dst], "peer copy")
        self.calls.append(("copy_peer", ddev, sdev, stream.id, dst.nbytes))
        np.copyto(dst, src)

    def d2h(self, host, src, stream: FakeStream) -> None:
        if self.device_of_array(host) != "pinned":
            raise FakeOrderingError("device -> host copy into pageable (unregistered) memory")
        self._same_device(stream, src, "device -> host copy")
        self._access(stream, [src], [host], "device -> host copy")
        self.calls.append(("d2h", stream.device, stream.id, host.nbytes))
        np.copyto(host, src)

    def h2d(self, dst, host, stream: FakeStream) -> None:
        if self.device_of_array(host) != "pinned":
            raise FakeOrderingError("host -> device copy from pageable (unregistered) memory")
        self._same_device(stream, dst, "host -> device copy")
        self._access(stream, [host], [dst], "host -> device copy")
        self.calls.append(("h2d", stream.device, stream.id, dst.nbytes))
        np.copyto(dst, host)

    def reduce(self, dst, a, b, op: str, stream: FakeStream) -> None:
        self._same_device(stream, dst, "reduce kernel")
        self._same_device(stream, a, "reduce kernel")
        self._same_device(stream, b, "reduce kernel", peer_ok=True)
        self._access(stream, [a, b], [dst], "reduce kernel")
        self.calls.append(("reduce", stream.device, self.device_of_array(b), stream.id, dst.nbytes, op))
        reduce_copy_host(dst, a, b, op)

    def host_reduce(self, dst, srcs, binops, stream: FakeStream) -> None:
        """The host function of the staged path: an n-way reduce of pinned buffers, ordered on
        ``stream`` like a kernel (its reads must follow the d2h copies that filled them)."""
        for a in [dst, *srcs]:
            if self.device_of_array(a) != "pinned":
                raise FakeOrderingError(f"host reduce on a stream of GPU {stream.device} touches memory of "
                                        f"GPU {self.device_of_array(a)} (host functions read pinned memory only)")
        self._access(stream, list(srcs), [dst], "host reduce")
        self.calls.append(("host_reduce", stream.device, stream.id, len(srcs), dst.nbytes))
        reduce_chain(dst, list(srcs), list(binops), parallel=False)

    def postdiv(self, x, n: int, stream: FakeStream) -> None:
        self._same_device(stream, x, "postdiv kernel")
        self._access(stream, [x], [x], "postdiv kernel")
        self.calls.append(("postdiv", stream.device, stream.id, x.nbytes))
        postdiv_host(x, n)

    # ------------------------------------------------------------------ summaries
    def count(self, name: str) -> int:
        """How many calls named ``name`` were recorded."""
        return sum(1 for c in self.calls if c[0] == name)
