"""The ``Work`` a ``topocoll`` process group returns, and the one worker thread per group that
runs its ``async_op=True`` calls (and DDP's) in the order they were made, overlapped with the
caller; a call made with ``async_op=False`` runs on the caller's thread after them.

``Work.wait()`` waits for the call, raises its error (a :class:`~kernels.pytorch.errors.
TorchBackendError` is re-raised as it is), and on CUDA makes the caller's current stream wait
for the call's stream as ``ProcessGroupNCCL``'s ``WorkNCCL::wait`` does; ``get_future()`` is a
``torch.futures.Future`` completed with the call's output tensors (what DDP's comm hooks read).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from datetime import timedelta

import torch
import torch.distributed as dist


class TopocollWork(dist._Work):
    """A call submitted to a :class:`CallQueue` (module docstring)."""

    def __init__(self, result: list, stream=None) -> None:
        super().__init__()
        self._call: concurrent.futures.Future | None = None
        self._result, self._stream = result, stream
        self._event = torch.cuda.Event() if stream is not None else None
        self._future = torch.futures.Future()

    def _run(self, fn) -> None:
        """Run the call (on the worker thread); the torch future completes before the call's
        concurrent future does, so ``wait()`` then ``get_future().value()`` never races."""
        try:
            with contextlib.ExitStack() as ctx:
                if self._stream is not None:
                    ctx.enter_context(torch.cuda.device(self._stream.device))
                    ctx.enter_context(torch.cuda.stream(self._stream))
                fn()
                if self._event is not None:
                    self._event.record(self._stream)
        except BaseException as exc:
            self._future.set_exception(exc)
            raise
        self._future.set_result(self._result)

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        secs = timeout.total_seconds() if timeout else 0
        self._call.result(timeout=secs or None)      # raises the call's own error
        if self._event is not None:
            torch.cuda.current_stream(self._stream.device).wait_event(self._event)
        return True

    def is_completed(self) -> bool:
        return self._call.done()

    def is_success(self) -> bool:
        return self._call.done() and self._call.exception() is None

    def exception(self):
        return self._call.exception() if self._call.done() else None

    def get_future(self) -> torch.futures.Future:
        return self._future

    def result(self) -> list:
        return self._result


class CallQueue:
    """One worker thread that runs a group's calls in submission order; CUDA calls run on the
    caller's current stream (captured at submission) and record an event for ``wait()``."""

    def __init__(self, name: str) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._last: concurrent.futures.Future | None = None
        self._order = threading.Lock()      # calls from several threads (DDP's autograd thread) keep one order

    def submit(self, fn, result: list, device: torch.device | None = None, *, inline: bool = False) -> TopocollWork:
        """Queue ``fn``; ``inline`` (a call made with ``async_op=False``) runs it on the caller's
        thread once the calls before it are done: a thread hop per call costs more than the
        call where processes outnumber cores."""
        stream = torch.cuda.current_stream(device) if device is not None and device.type == "cuda" else None
        work = TopocollWork(result, stream)
        with self._order:
            if not inline:
                work._call = self._last = self._pool.submit(work._run, fn)
                return work
            if self._last is not None:
                concurrent.futures.wait([self._last])
                self._last = None
            work._call = concurrent.futures.Future()
            try:
                work._run(fn)
            except BaseException as exc:  # noqa: BLE001  (raised by wait(), as for a queued call)
                work._call.set_exception(exc)
            else:
                work._call.set_result(None)
        return work

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def done_work(result: list) -> TopocollWork:
    """A Work that is already complete (calls with nothing to move)."""
    work = TopocollWork(result)
    work._call = concurrent.futures.Future()
    work._call.set_result(None)
    work._future.set_result(result)
    return work


__all__ = ["TopocollWork", "CallQueue", "done_work"]
