"""kernels/pytorch/fused.py and the header round of agreement.py / sockets.py: a small CPU
all_reduce on 2 and 4 spawned ranks sends one message per peer, its data in the header's
message, and equals gloo bit for bit; a mismatch found in that round raises the same one-line
error on every rank and leaves every rank's tensor as it was (``_fused_jobs.fused_job``).  Without
processes: a peer's header that says another number of data bytes than came with it, or a
message larger than any header round, is a message out of step (PeerGone), and nothing of it
reaches the receiver's tensors; the one-round ops equal run_share's bit for bit; run_share's
temporary buffers are kept per thread for the next call and dropped after an error."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

from _torch_dist import shared_part  # noqa: E402

fused_results = shared_part("fused")


def test_a_small_all_reduce_sends_one_message_per_peer_and_equals_gloo(fused_results):
    from _torch_dist import checked, merged
    n, results = fused_results
    assert checked(results, "fused") >= n * 16 * 2
    for name in ("fused:messages", "fused:equal", "fused:large_takes_two_rounds"):
        assert not merged(results, name)


@pytest.mark.parametrize("case", ["count", "too_large", "header_alone", "bad_tensor"])
def test_a_mismatch_in_the_one_round_raises_the_same_line_everywhere_and_touches_nothing(fused_results, case):
    from _torch_dist import merged
    n, results = fused_results
    name = "fused:" + case
    assert all(name in res and name + ":untouched" in res for res in results)
    assert not merged(results, name)                      # the error, with its text, on every rank
    assert not merged(results, name + ":untouched")       # no rank's tensor changed
    assert not merged(results, name + ":in_step")         # and the next call is right
    lines = {res["__messages__"][name] for res in results}
    assert len(lines) == (2 if case == "bad_tensor" else 1), lines  # the failing rank's own line names its tensor


def _pair():
    from _socket_pair import socket_pair
    return socket_pair()


@pytest.mark.parametrize("said,sent", [(8, 4), (0, 4), (8, 0)])
def test_a_header_whose_data_has_another_length_is_out_of_step(said, sent):
    """Rank 0 sends a header saying ``said`` bytes follow, then ``sent`` bytes: rank 1's round
    raises PeerGone naming rank 0 and both numbers."""
    from kernels.pytorch.agreement import Header, agree_with_data
    from kernels.pytorch.errors import PeerGone
    from kernels.pytorch.sockets import TAG_HEADER
    a, b = _pair()
    header = Header("allreduce", 1, 2, op="sum", data_bytes=said)
    a._send_parts(1, TAG_HEADER, [header.row(2), *([bytes(range(sent))] if sent else [])]).wait()
    mine = Header("allreduce", 1, 2, op="sum", data_bytes=8)
    data = torch.arange(2, dtype=torch.float32)
    with pytest.raises(PeerGone, match=f"rank 0's call header says {said} bytes of data follow it, {sent} came"):
        agree_with_data(b, mine, 2, 1, data=memoryview(data.numpy()).cast("B"))
    assert data.tolist() == [0.0, 1.0]
    a.close()
    b.close()


def test_a_message_larger_than_any_header_round_is_out_of_step():
    from kernels.pytorch.agreement import DATA_BYTES_MAX, Header, agree_with_data
    from kernels.pytorch.errors import PeerGone
    from kernels.pytorch.sockets import TAG_HEADER
    a, b = _pair()
    row = Header("allreduce", 1, 2, op="sum").row(2)
    w = a._send_parts(1, TAG_HEADER, [row, bytes(DATA_BYTES_MAX + 8)])
    with pytest.raises(PeerGone, match=f"message 1 of {len(row) + DATA_BYTES_MAX + 8} bytes where a call header"):
        agree_with_data(b, Header("allreduce", 1, 2, op="sum"), 2, 1)
    b.close()
    try:                     # the sender ends either way: its bytes all left, or the reset of a peer
        w.wait(5)            # that closed with them unread (a race the kernel decides)
    except PeerGone:
        pass
    assert w.done.is_set()
    a.close()


def test_agreeing_headers_with_data_hand_back_each_peers_bytes_and_no_error():
    from kernels.pytorch.agreement import Header, agree_with_data
    a, b = _pair()
    got = [None, None]

    def side(mesh, rank):
        x = torch.full((4,), float(rank + 1))
        h = Header("allreduce", 1, 4, op="sum", data_bytes=16)
        got[rank] = agree_with_data(mesh, h, 2, rank, data=memoryview(x.numpy()).cast("B"))
    threads = [threading.Thread(target=side, args=(m, r)) for r, m in enumerate((a, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for rank in (0, 1):
        rows, extra = got[rank]
        assert extra[rank] is None and len(rows) == 2
        assert torch.frombuffer(extra[1 - rank], dtype=torch.float32).tolist() == [2.0 - rank] * 4
    a.close()
    b.close()


class _MemoryTransport:
    """run_share's transport between threads of one process: a message is kept under (source,
    destination, tag) until its receiver takes it."""

    def __init__(self, box: dict, cond: threading.Condition, rank: int) -> None:
        self.box, self.cond, self.rank = box, cond, rank

    def isend(self, tensor, peer: int, tag: int):
        with self.cond:                       # FIFO per (source, destination, tag), as a socket is
            self.box.setdefault((self.rank, peer, tag), []).append(tensor.clone())
            self.cond.notify_all()
        done = threading.Event()              # the copy is taken: the send is done
        done.set()
        return done

    def recv(self, tensor, peer: int, tag: int) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.box.get((peer, self.rank, tag)), timeout=20)
            tensor.copy_(self.box[(peer, self.rank, tag)].pop(0))

    def finish(self) -> None:
        pass


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int64"])
@pytest.mark.parametrize("op", ["sum", "avg", "max", "prod"])
def test_one_round_equals_the_schedule_run_message_by_message_bit_for_bit(n, dtype, op, monkeypatch):
    """OneRound on the peers' whole buffers against run_share exchanging the schedule's own
    messages between threads, on random values (where summation order shows in the bits)."""
    monkeypatch.setenv("TOPOCOLL_RESULTS", "/nonexistent-topocoll-results")
    import warnings

    from kernels.pytorch.fused import OneRound
    from kernels.pytorch.plan_choice import choose, make_selector
    from kernels.pytorch.schedule_share import run_share
    dt = getattr(torch, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        selector = make_selector(n)
    for count in (1, 7, 1000):
        g = torch.Generator().manual_seed(count * n)
        if dt.is_floating_point:
            xs = [(torch.randn(count, generator=g) * 3).to(dt) for _ in range(n)]
        else:
            xs = [torch.randint(-50, 50, (count,), generator=g, dtype=dt) for _ in range(n)]
        route = choose(selector, "allreduce", count, xs[0].element_size(), no_nccl="CPU tensors")
        assert len(route.schedule.steps) == 1
        ref = [x.clone() for x in xs]
        box, cond = {}, threading.Condition()
        threads = [threading.Thread(target=run_share, args=(route.schedule, ref[r], ref[r], count),
                                    kwargs=dict(op=op, rank=r, transport=_MemoryTransport(box, cond, r)))
                   for r in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        for r in range(n):
            ours = xs[r].clone()
            OneRound(route.schedule, count, dt, op, r).run(ours, [None if p == r else xs[p] for p in range(n)])
            assert torch.equal(ours.view(torch.uint8), ref[r].view(torch.uint8)), (r, count)


def test_run_shares_temporary_buffers_are_kept_per_thread_and_forgotten_after_an_error(monkeypatch):
    """A thread's second call of one shape reuses the first call's buffers (the same memory) and
    still gives the right sums; a call that fails keeps none for the next."""
    monkeypatch.setenv("TOPOCOLL_RESULTS", "/nonexistent-topocoll-results")
    import warnings

    from kernels.pytorch.plan_choice import choose, make_selector
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        schedule = choose(make_selector(2), "allreduce", 1 << 16, 4, no_nccl="CPU tensors").schedule
    box, cond = {}, threading.Condition()
    pools = []
    for round_ in range(2):
        xs = [torch.full((1 << 16,), float(r + 1 + round_)) for r in range(2)]
        threads = []
        for r in range(2):
            def job(r=r, xs=xs):
                from kernels.pytorch.schedule_share import _Temps, run_share
                for _ in range(2):                         # the same thread, twice
                    run_share(schedule, xs[r], xs[r], xs[r].numel(), op="sum", rank=r,
                              transport=_MemoryTransport(box, cond, r))
                    pools.append((r, [t.data_ptr() for t in _Temps._kept.pool]))
            threads.append(threading.Thread(target=job))
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        # two all-reduces: (1 + 2) * 2 in the first round, (2 + 3) * 2 in the second
        assert all(bool((x == (3 + 2 * round_) * 2).all()) for x in xs)
    by_rank = {r: [p for q, p in pools if q == r] for r in (0, 1)}
    for r in (0, 1):
        assert by_rank[r][0] and by_rank[r][0] == by_rank[r][1]          # reused within a thread

    class Zeros(_MemoryTransport):                                      # a peer that sends zeros
        def recv(self, tensor, peer, tag):
            tensor.zero_()

    class Failing(_MemoryTransport):
        def recv(self, tensor, peer, tag):
            raise RuntimeError("peer gone")

    def failing_job():
        from kernels.pytorch.schedule_share import _Temps, run_share
        x = torch.ones(1 << 16)
        run_share(schedule, x, x, x.numel(), op="sum", rank=0, transport=Zeros({}, threading.Condition(), 0))
        failed.append(len(_Temps._kept.pool))
        with pytest.raises(RuntimeError, match="peer gone"):
            run_share(schedule, x, x, x.numel(), op="sum", rank=0, transport=Failing({}, threading.Condition(), 0))
        failed.append(getattr(_Temps._kept, "pool", "unset"))
    failed = []
    t = threading.Thread(target=failing_job)
    t.start()
    t.join(30)
    assert failed[0] > 0 and failed[1:] == [None]                        # kept, then none after the error


@pytest.mark.parametrize("op", ["max", "avg"])
def test_a_one_round_program_checks_its_op_once_not_on_each_run(monkeypatch, op):
    """OneRound (kept per call shape by fused_route) checks its op once, when it is made, and every run takes the
    checked ops as they are.  Reference: 1 check for 3 runs, counted by hand; the result by NumPy (avg on integers:
    the sum halved, truncated toward zero).  Old: combine checked a plain op name on every reduce of every run
    (4 checks here for max)."""
    import numpy as np

    import synth.ir.collectives as collectives
    from kernels.pytorch.fused import OneRound
    from synth import baseline, build_fabric
    from topo_probe.machines.generators import fully_connected

    class Counted(tuple):
        asked = 0

        def __contains__(self, item):
            type(self).asked += 1
            return super().__contains__(item)
    monkeypatch.setattr(collectives, "REDUCE_OPS", Counted(collectives.REDUCE_OPS))
    sched = baseline("oneshot", build_fabric(fully_connected(2)), "allreduce")
    mine, peer = np.arange(16, dtype=np.int64) * 3 - 20, np.arange(16, dtype=np.int64) * -5 + 7
    program = OneRound(sched, 16, torch.int64, op, 0)
    for _ in range(3):
        ours = torch.from_numpy(mine.copy())
        program.run(ours, [None, torch.from_numpy(peer.copy())])
        want = np.maximum(mine, peer) if op == "max" else np.trunc((mine + peer) / 2).astype(np.int64)
        np.testing.assert_array_equal(ours.numpy(), want)
    assert Counted.asked == 1, Counted.asked
