"""CallQueue and TopocollWork without processes: calls run in submission order whether queued
or inline, wait() raises the call's own error (past its timeout PeerGone, a RuntimeError as
gloo's), the future completes with the outputs."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

from kernels.pytorch.errors import CollectiveMismatch, PeerGone  # noqa: E402
from kernels.pytorch.work import CallQueue  # noqa: E402
from topo_probe.errors import TopocollError  # noqa: E402


def test_queued_and_inline_calls_run_in_the_order_they_were_made():
    q, order = CallQueue("t"), []
    slow = q.submit(lambda: (time.sleep(0.2), order.append("queued")), [])
    inline = q.submit(lambda: order.append("inline"), [], inline=True)   # waits for the queued one
    assert order == ["queued", "inline"] and slow.is_completed() and inline.is_completed()
    q.shutdown()


def test_wait_raises_the_calls_error_and_the_future_carries_it():
    q = CallQueue("t")

    def fail():
        raise CollectiveMismatch("allreduce: ranks disagree")
    work = q.submit(fail, [])
    with pytest.raises(CollectiveMismatch, match="ranks disagree"):
        work.wait()
    assert not work.is_success() and isinstance(work.exception(), CollectiveMismatch)
    with pytest.raises(RuntimeError):
        work.get_future().wait()
    q.shutdown()


def test_the_future_completes_with_the_output_tensors():
    q = CallQueue("t")
    t = torch.zeros(3)
    work = q.submit(lambda: t.add_(2), [t])
    work.wait()
    assert work.get_future().value()[0] is t and t.tolist() == [2.0, 2.0, 2.0]
    q.shutdown()


def test_wait_past_its_timeout_raises_peer_gone_a_runtime_error_and_the_call_runs_on():
    """gloo's Work.wait(timeout) raises RuntimeError("Operation timed out!"); ours a one-line
    PeerGone (a TopocollError and a RuntimeError), not concurrent.futures.TimeoutError."""
    q, gate, t = CallQueue("t"), threading.Event(), torch.zeros(2)
    work = q.submit(lambda: (gate.wait(10), t.add_(1)), [t])
    started = time.monotonic()
    with pytest.raises(PeerGone, match=r"^Work.wait: the call did not complete within 0.2 s") as caught:
        work.wait(timedelta(seconds=0.2))
    assert 0.15 < time.monotonic() - started < 5
    assert isinstance(caught.value, RuntimeError) and isinstance(caught.value, TopocollError)
    assert "\n" not in str(caught.value) and not work.is_completed()
    gate.set()                                       # the call was not cancelled: it ends, wait() then returns
    assert work.wait() and t.tolist() == [1.0, 1.0]
    q.shutdown()


def test_a_queued_calls_warning_points_at_the_line_that_queued_it_not_at_the_worker_thread():
    """A call queued for the worker thread (``async_op=True``, DDP's start-up all-gather) that warns (the
    selector's "no plan"): the warning names this file and the ``submit`` line, read from this frame
    (``inspect``), as the same call made inline does.  The call is ``warn_user`` itself (a ``partial``: no frame of
this file on the worker's stack, as a selector's).  Before: concurrent/futures/thread.py, line 58."""
    import functools
    import inspect
    import warnings

    from synth.plan.user_warning import warn_user
    q, seen = CallQueue("t"), []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for inline in (False, True):
            seen.append(inspect.currentframe().f_lineno + 1)
            q.submit(functools.partial(warn_user, "no plan for 'full2'"), [], inline=inline).wait()   # no frame here
    q.shutdown()
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, n) for n in seen], [w.filename for w in caught]
