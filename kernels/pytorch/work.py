"""The ``Work`` a ``topocoll`` process group returns, and the one worker thread per group that
runs its ``async_op=True`` calls (and DDP's) in the order they were made, overlapped with the
caller; a call made with ``async_op=False`` runs on the caller's thread after them.

``Work.wait()`` waits for the call, raises its error (a :class:`~kernels.pytorch.errors.
TorchBackendError` is re-raised as it is; past ``wait(timeout)``, ``PeerGone``), and on CUDA
makes the caller's current stream wait for the call's stream as ``ProcessGroupNCCL``'s
``WorkNCCL::wait`` does; ``get_future()`` is a ``torch.futures.Future`` completed with the call's
output tensors (what DDP's comm hooks read).
"""

from __future__ import annotations

import concurrent.futures
import threading
from datetime import timedelta

import torch
import torch.distributed as dist

from kernels.pytorch.errors import PeerGone
from synth.plan.user_warning import user_location, warnings_from


class TopocollWork(dist._Work):
    """A call submitted to a :class:`CallQueue` (module docstring).  A call that runs on the
    caller's thread is done when its Work is returned: its torch future is then made only if
    ``get_future()`` asks for it."""

    def __init__(self, result: list, stream=None, *, ran_inline: bool = False) -> None:
        super().__init__()
        self._call: concurrent.futures.Future | _Finished | None = None
        self._result, self._stream = result, stream
        self._event = torch.cuda.Event() if stream is not None else None
        self._future = None if ran_inline else torch.futures.Future()

    def _run(self, fn) -> None:
        """Run the call (on the worker thread); the torch future completes before the call's
        concurrent future does, so ``wait()`` then ``get_future().value()`` never races."""
        try:
            if self._stream is None:
                fn()
            else:
                with torch.cuda.device(self._stream.device), torch.cuda.stream(self._stream):
                    fn()
                    self._event.record(self._stream)
        except BaseException as exc:
            if self._future is not None:
                self._future.set_exception(exc)
            raise
        if self._future is not None:
            self._future.set_result(self._result)

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        """Wait for the call (``timeout`` 0: until it ends) and raise its own error; past
        ``timeout``, :class:`~kernels.pytorch.errors.PeerGone`, a RuntimeError as gloo's
        ("Operation timed out!", torch 2.13) and checked_p2p's Work raise, while the call runs on."""
        secs = timeout.total_seconds() if timeout else 0
        try:
            self._call.result(timeout=secs or None)      # raises the call's own error
        except concurrent.futures.TimeoutError:
            raise PeerGone(f"Work.wait: the call did not complete within {secs:g} s (it still runs; "
                           "a peer may not have made it)") from None
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
        if self._future is None:                     # a call that ran inline: done already
            self._future = torch.futures.Future()
            error = self._call.exception()
            if error is not None:
                self._future.set_exception(error)
            else:
                self._future.set_result(self._result)
        return self._future

    def result(self) -> list:
        return self._result


class _Finished:
    """What :class:`TopocollWork` reads of a call that ran on the caller's thread (the part of a
    ``concurrent.futures.Future`` it uses, without its lock and condition)."""

    __slots__ = ("_error",)

    def __init__(self, error: BaseException | None = None) -> None:
        self._error = error

    def result(self, timeout=None) -> None:
        if self._error is not None:
            raise self._error

    def done(self) -> bool:
        return True

    def exception(self, timeout=None):
        return self._error


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
        work = TopocollWork(result, stream, ran_inline=inline)
        with self._order:
            if not inline:         # its warnings point at the user's line that queued it, not at the thread's
                work._call = self._last = self._pool.submit(_run_from, user_location(), work, fn)
                return work
            if self._last is not None:
                concurrent.futures.wait([self._last])
                self._last = None
            try:
                work._run(fn)
            except BaseException as exc:  # noqa: BLE001  (raised by wait(), as for a queued call)
                work._call = _Finished(exc)
            else:
                work._call = _Finished()
        return work

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _run_from(where: tuple, work: TopocollWork, fn) -> None:
    """``work._run(fn)`` on the worker thread, its warnings pointing at ``where``
    (:func:`synth.plan.user_warning.user_location`, taken on the caller's thread)."""
    with warnings_from(where):
        work._run(fn)


def done_work(result: list) -> TopocollWork:
    """A Work that is already complete (calls with nothing to move)."""
    work = TopocollWork(result, ran_inline=True)
    work._call = _Finished()
    return work


__all__ = ["TopocollWork", "CallQueue", "done_work"]
