"""The job of test_p2p.py, on each spawned rank: send/recv through the topocoll group against
gloo's delivery (the sender's tensor, rebuilt on the receiver from its seed) and the mismatches
(element count, dtype of the same byte size, a large drained message, outstanding irecvs, a
receive from any source, tags out of order): the receiver raises, every process lives, and the
next message arrives intact."""

from __future__ import annotations

from datetime import timedelta

from _torch_jobs import Recorder, bits_equal, ints

DTYPES = ("float32", "bfloat16", "int64", "uint8")
SIZES = (0, 1, 7, 1024, 300_000)


def _data(dtype: str, size: int, seed: int):
    return ints(dtype, (size,), seed, 0, 100)


def _expect_mismatch(rec: Recorder, name: str, fn, tensor, *texts: str) -> None:
    """``fn()`` raises the torch backend's mismatch (a TopocollError and a RuntimeError) naming
    ``texts``, and ``tensor`` is bit for bit as before."""
    from topo_probe.errors import TopocollError
    before = tensor.clone()
    try:
        fn()
        rec.check(name, False, "no error raised")
    except RuntimeError as e:
        ok = isinstance(e, TopocollError) and type(e).__name__ == "P2PMismatch" and all(t in str(e) for t in texts)
        rec.check(name, ok, f"{type(e).__name__}: {e}")
    rec.check(name + ":untouched", bits_equal(tensor, before), "the receiving tensor changed")


def _next_arrives(rec: Recorder, name: str, rank: int, src: int, dst: int, tag: int = 0) -> None:
    import torch
    import torch.distributed as dist
    if rank == src:
        dist.send(torch.arange(6, dtype=torch.int64) * 11, dst, tag=tag)
    elif rank == dst:
        got = torch.empty(6, dtype=torch.int64)
        dist.recv(got, src, tag=tag)
        rec.check(name + ":next", got.tolist() == [0, 11, 22, 33, 44, 55], str(got.tolist()))


def _matching(rec: Recorder, rank: int, n: int, gloo) -> None:
    """A ring of isend/irecv (batch_isend_irecv) per dtype and size, topocoll and gloo: equal bit
    for bit, both equal to the sender's tensor."""
    import torch.distributed as dist
    right, left = (rank + 1) % n, (rank - 1) % n
    for dtype in DTYPES:
        for size in SIZES:
            mine = _data(dtype, size, 1000 * rank + size)
            got, ref = mine.new_empty(size), mine.new_empty(size)
            for group, into in ((None, got), (gloo, ref)):
                reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, right, group=group, tag=2),
                                               dist.P2POp(dist.irecv, into, left, group=group, tag=2)])
                for r in reqs:
                    r.wait()
            want = _data(dtype, size, 1000 * left + size)
            rec.check("match:ring", bits_equal(got, want) and bits_equal(got, ref), f"{dtype} x {size}")


def _mismatches(rec: Recorder, rank: int, n: int) -> None:
    import torch
    import torch.distributed as dist
    cases = (("count", torch.ones(5), torch.empty(7), ("5 elements", "7 elements", "rank 0")),
             ("dtype", torch.ones(4), torch.zeros(4, dtype=torch.int32), ("float32", "int32")),
             ("large", torch.ones(1 << 20, dtype=torch.float64), torch.zeros(10, dtype=torch.float64),
              ("1048576 elements", "10 elements")))
    for name, sent, into, texts in cases:
        if rank == 0:
            dist.send(sent, 1)               # completes: the receiver drained it
            rec.check("mismatch:" + name + ":sender", True)
        elif rank == 1:
            _expect_mismatch(rec, "mismatch:" + name, lambda: dist.recv(into, 0), into, *texts)
        _next_arrives(rec, "mismatch:" + name, rank, 0, 1)


def _random_bits(dtype: str, count: int, seed: int):
    """``count`` elements of ``dtype`` of random bits (NaN payloads and all), rebuilt from ``seed``."""
    import torch
    t = getattr(torch, dtype)
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (count * t.itemsize,), generator=g, dtype=torch.uint8).view(t)


def _threshold_edges(rec: Recorder, rank: int) -> None:
    """Rank 0 to 1: 0, 1, T - 1, T and T + 1 elements (T: INLINE_BYTES of the dtype, the largest
    message carried with its header) of float32, bfloat16 and uint8, each bit for bit."""
    import torch
    import torch.distributed as dist

    from kernels.pytorch.checked_p2p import INLINE_BYTES
    for dtype in ("float32", "bfloat16", "uint8"):
        edge = INLINE_BYTES // getattr(torch, dtype).itemsize
        for count in (0, 1, edge - 1, edge, edge + 1):
            if rank == 0:
                dist.send(_random_bits(dtype, count, count), 1, tag=4)
            elif rank == 1:
                got = torch.full((count,), 3, dtype=getattr(torch, dtype))
                dist.recv(got, 0, tag=4)
                rec.check("edges:bits", bits_equal(got, _random_bits(dtype, count, count)), f"{dtype} x {count}")


def _edge_mismatches(rec: Recorder, rank: int) -> None:
    """Below (T / 4 float32, one message) and above (T / 4 + 1, two) the threshold: another count
    or another dtype of the same size raises P2PMismatch on the receiver with its tensor as it
    was; a receive on another tag does not take the message (it times out untouched, then the
    message arrives on its own tag); the next message arrives."""
    import torch
    import torch.distributed as dist

    from kernels.pytorch.checked_p2p import INLINE_BYTES
    from kernels.pytorch.dtypes import dtype_name
    for count in (INLINE_BYTES // 4, INLINE_BYTES // 4 + 1):
        sent = torch.arange(count, dtype=torch.float32)
        for name, into in (("count", torch.full((count - 1,), 9.0)), ("dtype", torch.full((count,), 9, dtype=torch.int32))):
            if rank == 0:
                dist.send(sent, 1)
            elif rank == 1:
                _expect_mismatch(rec, f"edgemismatch:{name}:{count}", lambda: dist.recv(into, 0), into,
                                 f"{count} elements of float32", f"{into.numel()} elements of {dtype_name(into.dtype)}")
        _tag_mismatch(rec, rank, sent)
        _next_arrives(rec, f"edgemismatch:{count}", rank, 0, 1)


def _tag_mismatch(rec: Recorder, rank: int, sent) -> None:
    import torch
    import torch.distributed as dist
    if rank == 0:
        dist.send(sent, 1, tag=8)
        dist.send(sent + 1, 1, tag=9)
    elif rank == 1:
        other, right = torch.full_like(sent, 9.0), torch.full_like(sent, 9.0)
        work = dist.irecv(other, 0, tag=9)
        try:
            work.wait(timedelta(seconds=0.5))
            rec.check("edgemismatch:tag", False, "a receive on tag 9 completed before tag 9 was sent")
        except RuntimeError:
            rec.check("edgemismatch:tag:untouched", bool(other.eq(9.0).all()), "the tag-9 tensor changed")
        dist.recv(right, 0, tag=8)
        work.wait()
        rec.check("edgemismatch:tag", bits_equal(right, sent) and bits_equal(other, sent + 1), f"{sent.numel()}")


def _outstanding(rec: Recorder, rank: int) -> None:
    """Two irecvs posted before either message: the first mismatches, the second is right; tags
    received in the other order than sent."""
    import torch
    import torch.distributed as dist
    if rank == 0:
        works = [dist.isend(torch.ones(3), 1), dist.isend(torch.full((2,), 7.0), 1),
                 dist.isend(torch.full((3,), 5.0), 1, tag=5), dist.isend(torch.full((4,), 6.0), 1, tag=6)]
        for w in works:
            w.wait()
    elif rank == 1:
        bad, good = torch.zeros(2), torch.zeros(2)
        w_bad, w_good = dist.irecv(bad, 0), dist.irecv(good, 0)
        t6, t5 = torch.zeros(4), torch.zeros(3)
        w6, w5 = dist.irecv(t6, 0, tag=6), dist.irecv(t5, 0, tag=5)
        _expect_mismatch(rec, "outstanding:first", w_bad.wait, bad, "3 elements", "2 elements")
        w_good.wait()
        w6.wait()
        w5.wait()
        rec.check("outstanding:second", good.tolist() == [7.0, 7.0], str(good.tolist()))
        rec.check("outstanding:tags", t6.tolist() == [6.0] * 4 and t5.tolist() == [5.0] * 3,
                  f"{t6.tolist()} {t5.tolist()}")


def _any_source(rec: Recorder, rank: int, n: int) -> None:
    """recv(src=None) returns each sender once with its data; a mismatch from any source names
    the sender and the next message still arrives."""
    import torch
    import torch.distributed as dist
    if rank == 0:
        seen = {}
        for _ in range(n - 1):
            t = torch.zeros(3, dtype=torch.int64)
            src = dist.recv(t)
            seen[src] = t.tolist()
        rec.check("anysource:all", seen == {r: [r] * 3 for r in range(1, n)}, str(seen))
    else:
        dist.send(torch.full((3,), rank, dtype=torch.int64), 0)
    dist.barrier()
    if rank == 0:
        into = torch.zeros(8)
        _expect_mismatch(rec, "anysource:mismatch", lambda: dist.recv(into), into, "rank 1", "9 elements")
    elif rank == 1:
        dist.send(torch.ones(9), 0)
    _next_arrives(rec, "anysource:mismatch", rank, 1, 0)


def p2p_job(rank: int, n: int, init: str) -> dict:
    import torch
    import torch.distributed as dist

    import kernels.pytorch  # noqa: F401
    dist.init_process_group("topocoll", init_method=init, rank=rank, world_size=n, timeout=timedelta(seconds=30))
    gloo = dist.new_group(backend="gloo")
    rec = Recorder()
    _matching(rec, rank, n, gloo)
    _mismatches(rec, rank, n)
    _threshold_edges(rec, rank)
    _edge_mismatches(rec, rank)
    _outstanding(rec, rank)
    _any_source(rec, rank, n)
    x = torch.full((5,), float(rank + 1))
    dist.all_reduce(x)                          # every process lives and is in step
    rec.check("alive:allreduce", x.tolist() == [n * (n + 1) / 2] * 5, str(x.tolist()))
    dist.destroy_process_group()
    return rec.out


def _group(rank: int, n: int, init: str, timeout_s: float = 10):
    """A topocoll group made directly (no init_process_group), on the job's rendezvous."""
    import torch.distributed as dist

    from kernels.pytorch.process_group import create
    host, port = init.removeprefix("tcp://").rsplit(":", 1)
    store = dist.TCPStore(host, int(port), n, rank == 0, timeout=timedelta(seconds=60))
    pg = create(store, rank, n, timedelta(seconds=timeout_s))
    pg._native_map = {}                       # torch has no backend config for a group it did not make
    return store, pg


def _future_then_waits(rec: Recorder, rank: int, pg, store) -> None:
    """A send's get_future returns before the receiver has posted its receive; the send's wait()
    then works twice (gloo's send Work completes one wait only: before, the second timed out)."""
    import time

    import torch
    if rank == 0:
        work = pg.send([torch.arange(4.0)], 1, 0)
        t0 = time.monotonic()
        fut = work.get_future()
        took = time.monotonic() - t0
        store.set("future:asked", "1")
        rec.check("robust:future:at-once", took < 0.5, f"get_future took {took:.2f} s")
        try:
            fut.wait()
            rec.check("robust:future:waits", work.wait() and work.wait(timedelta(seconds=5)), "wait() returned False")
        except RuntimeError as e:
            rec.check("robust:future:waits", False, f"{type(e).__name__}: {str(e)[:200]}")
    else:
        store.wait(["future:asked"])
        got = torch.zeros(4)
        pg.recv([got], 0, 0).wait()
        rec.check("robust:future:data", got.tolist() == [0.0, 1.0, 2.0, 3.0], str(got.tolist()))


def _beside_unchecked_gloo(rec: Recorder, rank: int, pg, _store) -> None:
    """A checked receive outstanding (CUDA tensors host-staged go this way) and then a receive on the
    group's gloo (a device the backend string gives to gloo), same peer and tag: each gets its own
    message (before, the gloo receive, posted first, took the checked message's payload)."""
    import torch
    if rank == 0:
        pg._p2p.send([torch.full((3,), 1.0)], 1, 0).wait()
        pg._gloo.send([torch.full((3,), 2.0)], 1, 0).wait()
    else:
        checked_t, plain_t = torch.zeros(3), torch.zeros(3)
        w_checked = pg._p2p.recv([checked_t], 0, 0)
        w_plain = pg._gloo.recv([plain_t], 0, 0)
        w_checked.wait()
        w_plain.wait()
        rec.check("robust:beside-gloo", checked_t.tolist() == [1.0] * 3 and plain_t.tolist() == [2.0] * 3,
                  f"checked {checked_t.tolist()}, gloo {plain_t.tolist()}")


def _receive_timeout(rec: Recorder, rank: int, pg, store) -> None:
    """recv(...).wait(timeout) before the message: a RuntimeError within about the timeout; the
    receive stays posted and takes the message when it comes."""
    import time

    import torch
    if rank == 1:
        got = torch.zeros(2)
        work = pg.recv([got], 0, 7)
        t0 = time.monotonic()
        try:
            work.wait(timedelta(seconds=0.3))
            rec.check("robust:timeout", False, "no error before the message was sent")
        except RuntimeError as e:
            rec.check("robust:timeout", time.monotonic() - t0 < 2.0, f"after {time.monotonic() - t0:.1f} s: {e}")
        except Exception as e:  # noqa: BLE001
            rec.check("robust:timeout", False, f"{type(e).__name__}, not a RuntimeError: {e}")
        store.set("timeout:waited", "1")
        work.wait()
        rec.check("robust:timeout:data", got.tolist() == [3.0, 3.0], str(got.tolist()))
    else:
        store.wait(["timeout:waited"])
        pg.send([torch.full((2,), 3.0)], 1, 7).wait()


def robust_job(rank: int, n: int, init: str) -> dict:
    """On 2 ranks, a topocoll group made directly: _future_then_waits, _beside_unchecked_gloo,
    _receive_timeout."""
    store, pg = _group(rank, n, init)
    rec = Recorder()
    for part in (_future_then_waits, _beside_unchecked_gloo, _receive_timeout):
        try:
            part(rec, rank, pg, store)
        except Exception as e:  # noqa: BLE001  (one part's failure is its check's, the next still runs)
            rec.check(f"robust:{part.__name__}", False, f"{type(e).__name__}: {str(e)[:300]}")
    store.set(f"robust:done{rank}", "1")     # rank 0 (the store's server) ends last
    if rank == 0:
        store.wait([f"robust:done{r}" for r in range(n)])
    pg.shutdown()
    return rec.out
