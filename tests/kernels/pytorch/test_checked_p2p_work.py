"""kernels/pytorch/checked_p2p.py without processes: a send's Work over gloo sends that complete one
wait only (as gloo's SendWork: a second wait times out) gives a future without blocking and can be
waited for any number of times; ``wait(timeout)`` ends within the timeout with a RuntimeError; a
header failure on a (peer, tag) makes later receives from it raise at once, naming the first
failure, and a repeated sequence number raises at once; ``TOPOCOLL_P2P_CHECK`` picks the group."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")


class _GlooSend:
    """A gloo send Work: completes once ``arrived`` is set; its first wait succeeds, a second one
    (gloo's SendWork after a completed wait) blocks until its timeout and raises, as gloo does."""

    def __init__(self) -> None:
        self.arrived, self.waits = threading.Event(), 0

    def wait(self, timeout: timedelta | None = None) -> bool:
        self.waits += 1
        secs = timeout.total_seconds() if timeout else 3.0
        if self.waits > 1 or not self.arrived.wait(secs):
            time.sleep(0 if self.waits == 1 else secs)
            raise RuntimeError(f"Timed out waiting {secs * 1000:g}ms for send operation to complete")
        return True

    def is_completed(self) -> bool:
        return self.arrived.is_set()


def _send_work(n: int = 2):
    from kernels.pytorch.checked_p2p import P2PWork
    sends = [_GlooSend() for _ in range(n)]
    return P2PWork([torch.ones(3)], "send to rank 1 (tag 0) on rank 0", sends=sends), sends


def test_get_future_does_not_block_and_wait_works_any_number_of_times():
    work, sends = _send_work()
    t0 = time.monotonic()
    fut = work.get_future()
    assert time.monotonic() - t0 < 0.5 and not fut.done()       # the receiver has not posted yet
    for s in sends:
        s.arrived.set()
    assert fut.wait()[0].tolist() == [1.0, 1.0, 1.0]
    t0 = time.monotonic()
    assert work.wait() and work.wait() and work.wait(timedelta(seconds=1))
    assert time.monotonic() - t0 < 0.5 and all(s.waits == 1 for s in sends) and work.is_success()


def test_a_send_s_wait_timeout_is_a_runtime_error_within_the_timeout_and_kept():
    work, sends = _send_work()
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="Timed out waiting 200ms"):
        work.wait(timedelta(seconds=0.2))
    assert time.monotonic() - t0 < 1.0
    with pytest.raises(RuntimeError, match="Timed out"):      # the outcome is kept, gloo is not waited again
        work.wait()
    assert sends[0].waits == 1 and not work.is_success()


def test_a_receive_s_wait_timeout_is_a_runtime_error_within_the_timeout():
    from kernels.pytorch.checked_p2p import P2PWork
    from kernels.pytorch.errors import PeerGone
    work = P2PWork([torch.zeros(2)], "recv from rank 0 (tag 4) on rank 1")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"recv from rank 0 \(tag 4\) on rank 1: not complete within 0.2 s") as e:
        work.wait(timedelta(seconds=0.2))
    assert time.monotonic() - t0 < 1.0 and isinstance(e.value, PeerGone)
    work.done.set_result(None)
    assert work.wait(timedelta(seconds=0.2)) and work.wait()


class _Done:
    def wait(self, timeout=None):
        return True

    def _source_rank(self) -> int:
        return 0


class _Groups:
    """Headers and payloads of a receiver: records the receives posted."""

    def __init__(self) -> None:
        self.posted = []

    def recv(self, tensors, src, tag):
        self.posted.append((tensors[0].numel(), src, tag))
        return _Done()


def _receiver(timeout_s: float):
    from kernels.pytorch.checked_p2p import CheckedP2P
    return CheckedP2P(_Groups(), _Groups(), 1, timeout_s=timeout_s)


def _finish(p2p, words, tensor, tag: int = 3):
    from kernels.pytorch.checked_p2p import P2PWork
    work = P2PWork([tensor], "recv")
    p2p._finish(work, tensor, torch.tensor(words, dtype=torch.int64), _Done(), 0, tag)
    return work


@pytest.mark.parametrize("first", ["magic", "scratch", "turn"])
def test_a_failed_header_breaks_its_peer_and_tag_and_later_receives_raise_at_once(first):
    from kernels.pytorch.checked_p2p import _MAGIC
    from kernels.pytorch.dtypes import any_dtype_code
    from kernels.pytorch.errors import PeerGone
    p2p = _receiver(timeout_s=0.3 if first == "turn" else 30.0)
    f32, f64 = any_dtype_code(torch.float32), any_dtype_code(torch.float64)
    words = {"magic": [0x1234, 0, 2, f32], "scratch": [_MAGIC, 0, 2**62, f64], "turn": [_MAGIC, 5, 2, f32]}[first]
    with pytest.raises(PeerGone) as e:
        _finish(p2p, words, torch.zeros(2)).wait()
    first_line = str(e.value)
    t0 = time.monotonic()
    with pytest.raises(PeerGone) as later:          # the sender's next message: would wait for message 0
        _finish(p2p, [_MAGIC, 1, 2, any_dtype_code(torch.float32)], torch.zeros(2)).wait()
    text = str(later.value)
    assert time.monotonic() - t0 < 0.2 and "\n" not in text
    assert "rank 0 (tag 3)" in text and first_line in text and "did not arrive" not in text
    posted = list(p2p.headers.posted)
    with pytest.raises(PeerGone, match="out of step since an earlier receive failed"):
        p2p.recv([torch.zeros(2)], 0, tag=3).wait(timedelta(seconds=5))
    assert p2p.headers.posted == posted                          # nothing posted for it
    assert _finish(p2p, [_MAGIC, 0, 2, any_dtype_code(torch.float32)], torch.zeros(2), tag=4).wait()   # other tag


def test_a_header_whose_sequence_number_was_received_already_raises_at_once():
    from kernels.pytorch.checked_p2p import _MAGIC
    from kernels.pytorch.dtypes import any_dtype_code
    from kernels.pytorch.errors import PeerGone
    p2p = _receiver(timeout_s=30.0)
    assert _finish(p2p, [_MAGIC, 0, 2, any_dtype_code(torch.float32)], torch.zeros(2)).wait()
    t0 = time.monotonic()
    with pytest.raises(PeerGone, match=r"message 0 arrived again"):
        _finish(p2p, [_MAGIC, 0, 2, any_dtype_code(torch.float32)], torch.zeros(2)).wait()
    assert time.monotonic() - t0 < 0.2 and p2p.payload.posted == [(2, 0, 3)]


@pytest.mark.parametrize("value", ["", "1", "0", "yes"])
def test_topocoll_p2p_check_picks_the_group(monkeypatch, value):
    from kernels.pytorch.checked_p2p import CheckedP2P, make_p2p
    from kernels.pytorch.errors import TorchBackendError
    monkeypatch.delenv("TOPOCOLL_P2P_CHECK", raising=False)
    if value:
        monkeypatch.setenv("TOPOCOLL_P2P_CHECK", value)
    import torch.distributed as dist
    gloo = object()
    if value == "yes":
        with pytest.raises(TorchBackendError, match=r"TOPOCOLL_P2P_CHECK='yes': expected 0 .* or 1"):
            make_p2p(dist.HashStore(), 0, 1, timedelta(seconds=5), gloo)
        return
    p2p = make_p2p(dist.HashStore(), 0, 1, timedelta(seconds=5), gloo)
    if value == "0":
        assert p2p is gloo
    else:
        assert isinstance(p2p, CheckedP2P) and p2p.payload is not gloo and p2p.headers is not p2p.payload


def test_a_receive_runs_once_on_whichever_thread_comes_first():
    from kernels.pytorch.checked_p2p import P2PWork
    runs = []
    work = P2PWork([torch.zeros(1)], "recv")
    work._job = lambda: (runs.append(threading.get_ident()), work.done.set_result(None))
    assert work.wait() and work.wait()
    work._run_job()                                            # the helper, late: nothing to do
    assert runs == [threading.get_ident()]


def test_helpers_run_every_blocked_job_at_once_and_reuse_idle_threads():
    """Jobs that each wait for the last one (receives whose headers come in reverse) all run: a
    thread per job outstanding, none bounded; afterwards sequential jobs reuse the idle threads."""
    from kernels.pytorch.checked_p2p import _Helpers
    helpers, n = _Helpers("test", idle_s=5.0), 6
    gates = [threading.Event() for _ in range(n)]
    done, names = [], set()

    def job(k):
        names.add(threading.get_ident())
        assert gates[k].wait(5.0)
        done.append(k)
        if k:
            gates[k - 1].set()
    for k in range(n):
        helpers.submit(job, k)
    gates[n - 1].set()
    deadline = time.monotonic() + 5
    while len(done) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert done == list(range(n - 1, -1, -1)) and len(names) == n
    before = threading.active_count()
    for _ in range(20):
        ev = threading.Event()
        helpers.submit(ev.set)
        assert ev.wait(5.0)
    assert threading.active_count() <= before
