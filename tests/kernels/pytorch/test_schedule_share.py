"""run_share on threads: every rank's share of a verified schedule, ranks joined by an in-process
transport (queues per (source, destination, tag)), against the NumPy meaning of the collective;
and the op semantics (avg's pre-multiplied sum, integer avg's truncation) against the kernel
twins the other backends use."""

from __future__ import annotations

import queue
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kernels.backends.kernel_twins import PreMulSum, postdiv_host, reduce_copy_host  # noqa: E402
from kernels.pytorch.schedule_share import combine, postdiv, run_share  # noqa: E402
from synth import baseline, build_fabric  # noqa: E402
from topo_probe.machines.generators import fully_connected  # noqa: E402


class QueueTransport:
    """Messages between threads with no buffering at all: a send hands over the sender's own
    tensor (no copy) and is done only once its receiver has copied it out (``wait()`` blocks
    until then), so a send read in place whose region is written before it is done delivers
    wrong bytes, and an order that could wait in a circle times out (FIFO per tag)."""

    def __init__(self, boxes, rank: int) -> None:
        self.boxes, self.rank, self.sends = boxes, rank, []

    def _box(self, src, dst, tag):
        return self.boxes.setdefault((src, dst, tag), queue.Queue())

    def isend(self, tensor, peer, tag):
        taken = threading.Event()
        self._box(self.rank, peer, tag).put((tensor, tensor.clone(), taken))
        self.sends.append(_Taken(taken))
        return self.sends[-1]

    def recv(self, tensor, peer, tag):
        time.sleep(0.002)                       # the sender runs ahead meanwhile
        sent, as_sent, taken = self._box(peer, self.rank, tag).get(timeout=20)
        same = torch.equal(sent.view(torch.uint8), as_sent.view(torch.uint8))     # bits: NaN != NaN
        assert same, f"rank {peer} wrote message {tag}'s region before rank {self.rank} took it"
        tensor.copy_(sent)
        taken.set()

    def finish(self):
        for s in self.sends:
            s.wait()


class _Taken:
    def __init__(self, event) -> None:
        self.event = event

    def wait(self):
        assert self.event.wait(20), "a send was never received (the ranks wait on each other)"


REFERENCE = {"sum": lambda xs: np.sum(xs, axis=0), "max": lambda xs: np.max(xs, axis=0),
             "min": lambda xs: np.min(xs, axis=0), "prod": lambda xs: np.prod(xs, axis=0)}


def _run_all(sched, sends, recvs, count, op):
    boxes: dict = {}
    lock = threading.Lock()
    errors = []

    class Locked(QueueTransport):
        def _box(self, *key):
            with lock:
                return super()._box(*key)

    def one(r):
        try:
            run_share(sched, sends[r], recvs[r], count, op=op, rank=r, transport=Locked(boxes, r))
        except BaseException as e:   # noqa: BLE001  (reported below)
            errors.append(e)
    threads = [threading.Thread(target=one, args=(r,)) for r in range(sched.ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 5), algo=st.sampled_from(["ring", "direct", "tree", "oneshot", "rhd", "bruck"]),
       collective=st.sampled_from(["allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce"]),
       count=st.integers(1, 40), op=st.sampled_from(["sum", "max", "min", "prod"]), seed=st.integers(0, 99),
       inplace=st.booleans())
def test_every_rank_share_together_computes_the_collective(n, algo, collective, count, op, seed, inplace):
    """In place (all-reduce and broadcast, as the process group calls them) the sends read the
    tensor that later ops write: the transport above catches a write before the send is taken."""
    fabric = build_fabric(fully_connected(n))
    try:
        sched = baseline(algo, fabric, collective, root=0 if collective in ("broadcast", "reduce") else None)
    except Exception:       # noqa: BLE001  (the baseline does not build this collective)
        return
    if sched is None:
        return
    rng = np.random.default_rng(seed)
    blocks_in = n if collective in ("reducescatter", "alltoall") else 1
    blocks_out = n if collective in ("allgather", "alltoall") else 1
    xs = [rng.integers(-3, 4, blocks_in * count).astype(np.int64) for _ in range(n)]
    sends = [torch.from_numpy(x.copy()) for x in xs]
    recvs = [torch.zeros(blocks_out * count, dtype=torch.int64) for _ in range(n)]
    if inplace and collective in ("allreduce", "broadcast"):
        recvs = sends
    elif collective == "broadcast":
        sends = [sends[0]] + [None] * (n - 1)
    if collective == "reduce":
        recvs = [recvs[0]] + [None] * (n - 1)
    _run_all(sched, sends, recvs, count, op)
    red = REFERENCE[op](np.stack(xs))
    for r in range(n):
        if collective == "allreduce":
            want = red
        elif collective == "allgather":
            want = np.concatenate(xs)
        elif collective == "reducescatter":
            want = red[r * count:(r + 1) * count]
        elif collective == "alltoall":
            want = np.concatenate([xs[s][r * count:(r + 1) * count] for s in range(n)])
        elif collective == "broadcast":
            want = xs[0]
        else:
            if r:
                continue
            want = red
        np.testing.assert_array_equal(recvs[r].numpy(), want, err_msg=f"{algo} {collective} rank {r}")


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("binop", ["sum", "prod", "max", "min", PreMulSum(3, True, False), PreMulSum(4, True, True)])
def test_combine_matches_the_kernel_twins(dtype, binop):
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=257).astype(dtype), rng.normal(size=257).astype(dtype)
    want = np.empty_like(a)
    reduce_copy_host(want, a, b, binop)
    got = torch.empty(257, dtype=getattr(torch, np.dtype(dtype).name))
    combine(got, torch.from_numpy(a), torch.from_numpy(b), binop)
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", "float64", "int32"])
@pytest.mark.parametrize("op", ["max", "min"])
def test_combine_max_min_drop_nan_like_nccl(name, op):
    """NCCL's fmaxf / __hmax (reduce_kernel.h:397-436), not torch.maximum's NaN propagation: every
    pair of special values against the independent element reference."""
    import ml_dtypes
    from _minmax_reference import check_minmax, special_pairs
    if name == "int32":
        a, b = np.repeat(np.arange(-3, 4, dtype=np.int32), 7), np.tile(np.arange(-3, 4, dtype=np.int32), 7)
        got = torch.empty(a.size, dtype=torch.int32)
        combine(got, torch.from_numpy(a), torch.from_numpy(b), op)
        assert got.numpy().tolist() == (np.maximum if op == "max" else np.minimum)(a, b).tolist()
        return
    dt = np.dtype(getattr(ml_dtypes, name, None) or name)
    a, b = special_pairs(dt)
    tdt = getattr(torch, name)
    ta, tb = (torch.from_numpy(x.view(np.uint16)).view(tdt) if dt.itemsize == 2 else torch.from_numpy(x)
              for x in (a, b))
    got = torch.empty(a.size, dtype=tdt)
    combine(got, ta, tb, op)
    g = got.view(torch.int16).numpy().view(dt) if dt.itemsize == 2 else got.numpy()
    assert check_minmax(g, a, b, op, f"torch combine {name}") > a.size * 0.9


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float32])
def test_postdiv_matches_the_kernel_twin(dtype):
    x = np.array([7, -7, 6, -1, 0, 9], dtype=dtype)
    want = x.copy()
    postdiv_host(want, 4)
    got = torch.from_numpy(x.copy())
    postdiv(got, 4)
    np.testing.assert_array_equal(got.numpy(), want)


def _local_ops(algo: str, n: int, dtype, op: str):
    """Per rank ``(local copies, local reduces)`` of an in-place all-reduce's share (64 elements a block)."""
    from kernels.pytorch.schedule_share import rank_ops
    sched = baseline(algo, build_fabric(fully_connected(n)), "allreduce")
    plans = [rank_ops(sched, 64, dtype, op, r, inplace=True)[1] for r in range(n)]
    return [(sum(o.kind == "copy" for o, _ in p.local), sum(o.kind == "reduce" for o, _ in p.local)) for p in plans]


@pytest.mark.parametrize("n", [3, 4])
def test_exact_ops_skip_the_rank_order_copy_in_place(n):
    """An in-place direct all-reduce: rank d's block gets its n - 1 peers' messages.  Summed in
    rank order (floats: ((x0 + x1) + x2) + ...) a rank d >= 2 must keep its own value aside while
    the sum starts from rank 0's: the fold goes to scratch, its own value is one local reduce and
    the result one local copy home; ranks 0 and 1 start from their own value (2 ops per rank d >= 2,
    by hand).  Integers, and max / min of any dtype, give the same bits in any order: every rank
    reduces straight into its own block, no local op at all (before: int64 paid the float's 2)."""
    floats = _local_ops("direct", n, torch.float32, "sum")
    assert floats == [(0, 0), (0, 0)] + [(1, 1)] * (n - 2)
    for dtype, op in ((torch.int64, "sum"), (torch.uint8, "max"), (torch.int64, "prod"), (torch.int32, "avg"),
                      (torch.bool, "min"), (torch.float16, "max"), (torch.bfloat16, "min")):
        assert _local_ops("direct", n, dtype, op) == [(0, 0)] * n, (dtype, op)
    # max / min of any dtype: NaN dropped, +0 above -0 whatever the operand order (schedule_share._minmax)
    assert _local_ops("direct", n, torch.float32, "max") == [(0, 0)] * n
    # one-shot: every rank reduces into scratch (its own block is sent in the same step) and copies
    # home, in any order; in rank order a rank d >= 2 also adds its own value as a local reduce
    assert all(reduces == 0 for _, reduces in _local_ops("oneshot", n, torch.int64, "sum"))


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("algo,n", [("direct", 3), ("direct", 4), ("oneshot", 4), ("ring", 3)])
def test_max_min_give_the_same_bits_on_every_rank(name, algo, n):
    """max / min of signed zeros, NaN and infinities over every rank: every rank the same bits
    (before, a one-shot's float32 ranks differed in zeros' signs: torch.fmax(+0, -0) is +0,
    torch.fmax(-0, +0) is -0, and rank r folds fmax(x_r, x_0) where rank 0 folds fmax(x_0, x_r)),
    equal to the plain-Python NCCL rule folded over the ranks (_minmax_reference; +0 above -0, as
    ``__hmax``, also for float32, where CUDA leaves it open)."""
    import math

    import ml_dtypes
    from _minmax_reference import nccl_minmax
    sched = baseline(algo, build_fabric(fully_connected(n)), "allreduce")
    dt, tdt = np.dtype(getattr(ml_dtypes, name, None) or name), getattr(torch, name)
    vals = np.array([0.0, -0.0, math.nan, math.inf, -math.inf, 1.5, -1.5], np.float64)
    rng = np.random.default_rng(n)
    count = 24 * n                       # elements (an all-reduce buffer is one block)
    xs = [rng.choice(vals, count).astype(dt) for _ in range(n)]
    as_torch = (lambda x: torch.from_numpy(x.view(np.int16)).view(tdt)) if dt.itemsize == 2 else torch.from_numpy
    for op in ("max", "min"):
        bufs = [as_torch(x.copy()) for x in xs]
        _run_all(sched, bufs, bufs, count, op)
        bits = [b.view(torch.int16 if dt.itemsize == 2 else torch.int32).numpy() for b in bufs]
        for r in range(1, n):
            assert np.array_equal(bits[r], bits[0]), (op, r)
        got = bits[0].view(dt).astype(np.float64)
        for i in range(count):
            want = float(xs[0][i])
            for r in range(1, n):
                want = nccl_minmax(want, float(xs[r][i]), op == "max")
            ok = math.isnan(got[i]) if math.isnan(want) else (got[i] == want and
                                                                math.copysign(1, got[i]) == math.copysign(1, want))
            assert ok, (op, i, got[i], want)


@pytest.mark.parametrize("name,bits", [("float32", (0x7FC00000, -0x00400000, 0x7FC00001)),      # +NaN, -NaN, payload
                                       ("float16", (0x7E00, -0x0200, 0x7E01)),
                                       ("bfloat16", (0x7FC0, -0x0040, 0x7FC1))])
def test_max_min_of_nans_with_other_bits_agree_on_every_rank(name, bits):
    """max / min where every rank holds a NaN, each with other bits (a sign or a payload: x86
    makes -NaN of 0 * inf, ``float('nan')`` is +NaN): a one-shot's ranks each fold their own value
    first, and ``torch.fmax`` / ``__hmax``'s twin return one of two NaN operands depending on their
    order, so the ranks ended with different NaN bits where the rank order gave every rank the
    same fold.  Every rank must hold the same bits, a NaN (NCCL: NaN only when both operands are)."""
    n = 4
    sched = baseline("oneshot", build_fabric(fully_connected(n)), "allreduce")
    idt = torch.int16 if name != "float32" else torch.int32
    count = 8 * n
    for op in ("max", "min"):
        bufs = [torch.tensor([bits[(r + i) % len(bits)] for i in range(count)], dtype=idt).view(getattr(torch, name))
                for r in range(n)]
        _run_all(sched, bufs, bufs, count, op)
        for r in range(1, n):
            assert torch.equal(bufs[r].view(idt), bufs[0].view(idt)), (op, r, bufs[r].view(idt), bufs[0].view(idt))
        assert bool(torch.isnan(bufs[0].float()).all()), op


class _Counted(tuple):
    """A tuple that counts membership tests: how often the op rule ran."""

    asked = 0

    def __contains__(self, item):
        type(self).asked += 1
        return super().__contains__(item)


@pytest.mark.parametrize("op", ["max", "avg"])
def test_the_op_is_checked_once_per_run_share_call(monkeypatch, op):
    """Each rank's run_share call checks its op once, where the call enters, and hands the checked op down (the
    lowering, every combined piece, avg's sum).  Reference: 2 ranks x 2 calls = 4 checks, counted by hand, and the
    result by NumPy (avg on integers: the sum divided by 2, truncated toward zero).  Old: the op was checked again
    by the lowering and by combine on every reduced piece (and avg's plain 'sum' on every piece)."""
    import synth.ir.collectives as collectives
    import kernels.pytorch.schedule_share as share
    monkeypatch.setattr(collectives, "REDUCE_OPS", _Counted(collectives.REDUCE_OPS))
    monkeypatch.setattr(share, "_PLANS", {})                 # lowered afresh
    _Counted.asked = 0
    sched = baseline("ring", build_fabric(fully_connected(2)), "allreduce")
    xs = [np.arange(64, dtype=np.int64) * (3 - 7 * r) for r in range(2)]
    for _ in range(2):
        sends = [torch.from_numpy(x.copy()) for x in xs]
        recvs = [torch.zeros(64, dtype=torch.int64) for _ in range(2)]
        _run_all(sched, sends, recvs, 64, op)
    total = xs[0] + xs[1]
    want = np.maximum(xs[0], xs[1]) if op == "max" else np.trunc(total / 2).astype(np.int64)
    for r in range(2):
        np.testing.assert_array_equal(recvs[r].numpy(), want)
    assert _Counted.asked == 4, _Counted.asked
