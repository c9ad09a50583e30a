"""kernels.backends.cupy_runtime: the reduce and avg-division calls of CupyRuntime, run on the CPU with
a NumPy stand-in for CuPy (no GPU needed): right device entered, right stream used, results
equal to hand-computed values.  (Start-up without a GPU is covered by test_cupy_executor.)"""

from __future__ import annotations

import contextlib
import types

import numpy as np
import pytest

from kernels.backends.cupy_runtime import CupyRuntime


class _DevArray(np.ndarray):
    """A NumPy array that says it lives on GPU 1, as a CuPy array would."""

    device = types.SimpleNamespace(id=1)


class _PeerArray(np.ndarray):
    device = types.SimpleNamespace(id=0)


def _runtime():
    entered = []

    @contextlib.contextmanager
    def device(i):
        entered.append(("device", i))
        yield

    cp = types.SimpleNamespace(**{n: getattr(np, n) for n in ("add", "multiply", "fmax", "fmin",
                                                                "floor_divide", "divide")})
    cp.cuda = types.SimpleNamespace(Device=device)
    rt = CupyRuntime.__new__(CupyRuntime)      # skip the CuPy import of __init__
    rt.cp, rt.count = cp, 2
    return rt, entered


def _stream(log):
    @contextlib.contextmanager
    def stream():
        log.append("stream")
        yield
    return stream()


@pytest.mark.parametrize("op,want", [("sum", [5, -1, 12]), ("prod", [6, -2, 35]), ("max", [3, 1, 7]),
                                     ("min", [2, -2, 5])])
def test_reduce_on_the_destination_device(op, want):
    rt, entered = _runtime()
    dst = np.zeros(3, np.int64).view(_DevArray)
    a, b = np.array([2, -2, 5]).view(_DevArray), np.array([3, 1, 7]).view(_DevArray)
    rt.reduce(dst, a, b, op, _stream(entered))
    assert dst.tolist() == want and entered == [("device", 1), "stream"]
    peer = np.array([3, 1, 7]).view(_PeerArray)                 # b on GPU 0: same result, same device
    dst[:] = 0
    rt.reduce(dst, a, peer, op, _stream(entered))
    assert dst.tolist() == want and entered == [("device", 1), "stream"] * 2


def test_postdiv_truncates_integers_and_divides_floats_on_the_device():
    rt, entered = _runtime()
    x = np.array([7, -7, 6], np.int32).view(_DevArray)
    rt.postdiv(x, 2, _stream(entered))
    f = np.array([1.0, 3.0], np.float32).view(_DevArray)
    rt.postdiv(f, 4, _stream(entered))
    assert x.tolist() == [3, -3, 3] and f.tolist() == [0.25, 0.75]
    assert entered == [("device", 1), "stream"] * 2


# ---------------------------------------------------------------------------- streams and events
class _FakeCudaStreams:
    """CuPy's stream/event behaviour that matters on several GPUs: ``get_current_stream()`` is
    by default the ``Stream.null`` singleton (ptr 0, device_id -1), whose handle means the
    default stream of whichever GPU is current; an event belongs to the GPU current when it
    was created, and recording it on a stream of another GPU fails (cudaEventRecord)."""

    def __init__(self, ngpus: int = 2):
        self.current, self.log, self.dev_of_event, self.dev_of_stream = 0, [], {}, {}
        fake = self

        class Stream:
            def __init__(self, non_blocking=False, *, ptr=None, device_id=None):
                self.ptr = len(fake.dev_of_stream) + 100 if ptr is None else ptr
                self.device_id = fake.current if device_id is None else device_id
                if self.ptr:
                    fake.dev_of_stream[self.ptr] = self.device_id

            def wait_event(self, event):                     # as cupy.cuda.Stream.wait_event
                fake.rt.streamWaitEvent(self.ptr, event.ptr)

        class Event:
            def __init__(self, disable_timing=False):
                self.ptr = len(fake.dev_of_event) + 1
                fake.dev_of_event[self.ptr] = fake.current

            def record(self, stream=None):                   # as cupy.cuda.Event.record
                fake.rt.eventRecord(self.ptr, stream.ptr)

        @contextlib.contextmanager
        def device(i):
            if not 0 <= i < ngpus:
                raise ValueError(f"no GPU {i}")
            before, self.current = self.current, i
            try:
                yield
            finally:
                self.current = before

        null = Stream(ptr=0, device_id=-1)
        self.rt = types.SimpleNamespace(eventRecord=self._record, streamWaitEvent=self._wait)
        self.cuda = types.SimpleNamespace(Device=device, Stream=Stream, Event=Event, runtime=self.rt,
                                          get_current_stream=lambda: null)

    def _resolve(self, ptr: int) -> int:
        return self.current if ptr == 0 else self.dev_of_stream[ptr]

    def _record(self, event: int, stream: int) -> None:
        if self.dev_of_event[event] != self._resolve(stream):
            raise RuntimeError("cudaErrorInvalidResourceHandle: event and stream are on different GPUs")
        self.log.append(("record", self._resolve(stream)))

    def _wait(self, stream: int, event: int) -> None:
        self.log.append(("wait", self._resolve(stream), self.dev_of_event[event]))


def test_current_stream_of_another_gpu_is_recorded_and_waited_on_that_gpu():
    """The caller's GPU is 0; the collective's enter/exit record on and wait with GPU 1's
    current (default) stream: that must be GPU 1's stream, not GPU 0's."""
    fake = _FakeCudaStreams()
    rt = CupyRuntime.__new__(CupyRuntime)
    rt.cp, rt.rt, rt.count = types.SimpleNamespace(cuda=fake.cuda), fake.rt, 2
    cur1 = rt.current_stream(1)
    ev1 = rt.event(1)
    rt.record(ev1, cur1)                      # "enter" of a rank on GPU 1
    ev0 = rt.event(0)
    rt.wait(cur1, ev0)                        # "exit": GPU 1's current stream waits for GPU 0's work
    s1 = rt.stream(1)                         # a rank stream keeps working as before
    rt.record(rt.event(1), s1)
    rt.wait(s1, ev1)
    assert fake.log == [("record", 1), ("wait", 1, 0), ("record", 1), ("wait", 1, 1)]
    assert fake.current == 0                  # the caller's GPU is current again


def test_host_reduce_is_a_host_function_in_stream_order():
    """The staged path's host reduce is queued on the stream (``launch_host_func``), not run by
    the issuing thread; when the stream runs it, dst holds the chain's result (by hand)."""
    rt, entered = _runtime()
    queued = []
    stream = types.SimpleNamespace(launch_host_func=lambda fn, arg: queued.append((fn, arg)))
    a, b, c = (np.array(v, np.float32) for v in ([1, 2, 3], [10, 20, 30], [100, 200, 300]))
    dst = a                                   # in place over the first pinned area
    rt.host_reduce(dst, [a, b, c], ["sum", "sum"], stream)
    assert len(queued) == 1 and dst.tolist() == [1, 2, 3]       # nothing ran yet
    fn, arg = queued[0]
    fn(arg)                                   # the stream reaches it
    assert dst.tolist() == [111, 222, 333] and not entered
