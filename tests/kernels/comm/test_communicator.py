"""Communicator: every collective against NumPy, plan selection by size, validation errors."""

from __future__ import annotations

import json
import types
import warnings

import numpy as np
import pytest

import synth.ir.verifier
from kernels.comm.communicator import Communicator, nccl_bytes
from synth.baselines import baseline
from synth.ir.fabric import build_fabric
from synth.plan.size_plan import Plan, PlanEntry
from topo_probe.errors import InvalidArgument, ScheduleInvalid, TopologyError
from topo_probe.machines.generators import fully_connected

pytestmark = pytest.mark.filterwarnings("ignore:Communicator")

COUNTS = (1, 7, 1001)
OPS = ("sum", "prod", "max", "min", "avg")
DTYPES = (np.int32, np.float32, np.float64)
NP_OPS = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}
_COMMS: dict[str, Communicator] = {}


def get_comm(topo: str) -> Communicator:
    if topo not in _COMMS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _COMMS[topo] = Communicator(4, plan=False) if topo == "full4" else \
                Communicator(8, topology=topo, plan=False)
    return _COMMS[topo]


def data(n: int, count: int, dtype, op: str, salt: int = 0, blocks: int = 1) -> list[np.ndarray]:
    """Small integers (exact in every dtype and for every op; prod stays in {+-1, +-2} ** n)."""
    rng = np.random.default_rng(count * 31 + salt)
    lo, hi = (-2, 3) if op == "prod" else (-9, 10)
    out = []
    for _ in range(n):
        x = rng.integers(lo, hi, blocks * count)
        if op == "prod":
            x[x == 0] = 1
        out.append(x.astype(dtype))
    return out


def reduce_ref(xs: list[np.ndarray], op: str) -> np.ndarray:
    stack = np.stack(xs).astype(np.float64)
    if op == "avg":
        r = stack.sum(axis=0) / len(xs)
        if np.issubdtype(xs[0].dtype, np.integer):
            r = np.trunc(r)  # NCCL's integer avg: sum / n, rounded toward zero
        return r.astype(xs[0].dtype)
    return NP_OPS[op](stack, axis=0).astype(xs[0].dtype)


def empty(n: int, size: int, dtype) -> list[np.ndarray]:
    return [np.full(size, 99, dtype) for _ in range(n)]


TOPOS = ("full4", "dgx1-v100")


@pytest.mark.parametrize("topo", TOPOS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_reduce_reduce_scatter(topo, dtype):
    comm = get_comm(topo)
    n = comm.size
    for count in COUNTS:
        for op in OPS:
            xs = data(n, count, dtype, op)
            want = reduce_ref(xs, op)
            ys = empty(n, count, dtype)
            comm.all_reduce(xs, ys, op=op)
            inplace = [x.copy() for x in xs]
            comm.all_reduce(inplace, inplace, op=op)
            for r in range(n):
                np.testing.assert_array_equal(ys[r], want, err_msg=f"allreduce {op} count {count} rank {r}")
                np.testing.assert_array_equal(inplace[r], want, err_msg=f"in-place allreduce {op} {count}")
            xs = data(n, count, dtype, op, blocks=n)
            want = reduce_ref(xs, op)
            ys = empty(n, count, dtype)
            comm.reduce_scatter(xs, ys, op=op)
            inplace = [x.copy() for x in xs]
            comm.reduce_scatter(inplace, inplace, op=op)
            for r in range(n):
                blk = want[r * count:(r + 1) * count]
                np.testing.assert_array_equal(ys[r], blk, err_msg=f"reducescatter {op} {count} rank {r}")
                np.testing.assert_array_equal(inplace[r][r * count:(r + 1) * count], blk)


@pytest.mark.parametrize("topo", TOPOS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_every_root(topo, dtype):
    comm = get_comm(topo)
    n = comm.size
    for count in COUNTS:
        for op in OPS:
            xs = data(n, count, dtype, op, salt=5)
            want = reduce_ref(xs, op)
            for root in range(n):
                ys = empty(n, count, dtype)
                comm.reduce(xs, ys, root=root, op=op)
                np.testing.assert_array_equal(ys[root], want, err_msg=f"reduce {op} {count} root {root}")
                inplace = [x.copy() for x in xs]
                comm.reduce(inplace, inplace, root=root, op=op)
                np.testing.assert_array_equal(inplace[root], want)
            outs = [None] * n
            outs[n - 1] = np.empty(count, dtype)
            comm.reduce(xs, outs, root=n - 1, op=op)
            np.testing.assert_array_equal(outs[n - 1], want)


@pytest.mark.parametrize("topo", TOPOS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_copy_collectives(topo, dtype):
    comm = get_comm(topo)
    n = comm.size
    for count in COUNTS:
        xs = data(n, count, dtype, "sum", salt=1)
        ys = empty(n, n * count, dtype)
        comm.all_gather(xs, ys)
        bufs = empty(n, n * count, dtype)
        for r in range(n):
            bufs[r][r * count:(r + 1) * count] = xs[r]
        comm.all_gather(bufs, bufs)
        aliased = empty(n, n * count, dtype)
        for r in range(n):
            aliased[r][r * count:(r + 1) * count] = xs[r]
        comm.all_gather([a[r * count:(r + 1) * count] for r, a in enumerate(aliased)], aliased)
        for r in range(n):
            for got in (ys[r], bufs[r], aliased[r]):
                np.testing.assert_array_equal(got, np.concatenate(xs), err_msg=f"allgather {count} rank {r}")
        a2a = data(n, count, dtype, "sum", salt=2, blocks=n)
        ys = empty(n, n * count, dtype)
        comm.all_to_all(a2a, ys)
        inplace = [a.copy() for a in a2a]
        comm.all_to_all(inplace, inplace)
        for d in range(n):
            want = np.concatenate([a2a[s][d * count:(d + 1) * count] for s in range(n)])
            np.testing.assert_array_equal(ys[d], want, err_msg=f"alltoall {count} rank {d}")
            np.testing.assert_array_equal(inplace[d], want)


@pytest.mark.parametrize("topo", TOPOS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rooted_copy_collectives_every_root(topo, dtype):
    comm = get_comm(topo)
    n = comm.size
    for count in COUNTS:
        xs = data(n, count, dtype, "sum", salt=3)
        big = data(n, count, dtype, "sum", salt=4, blocks=n)
        for root in range(n):
            bufs = [x.copy() for x in xs]
            comm.broadcast(bufs, root=root)
            for r in range(n):
                np.testing.assert_array_equal(bufs[r], xs[root], err_msg=f"broadcast {count} root {root}")
            outs = [None] * n
            outs[root] = np.empty(n * count, dtype)
            comm.gather(xs, outs, root=root)
            np.testing.assert_array_equal(outs[root], np.concatenate(xs), err_msg=f"gather root {root}")
            ins = [None] * n
            ins[root] = big[root]
            ys = empty(n, count, dtype)
            comm.scatter(ins, ys, root=root)
            for r in range(n):
                np.testing.assert_array_equal(ys[r], big[root][r * count:(r + 1) * count],
                                              err_msg=f"scatter {count} root {root} rank {r}")
        # in-place gather / scatter (NCCL aliasing through one buffer per rank)
        root = n // 2
        bufs = empty(n, n * count, dtype)
        for r in range(n):
            bufs[r][r * count:(r + 1) * count] = xs[r]
        comm.gather(bufs, bufs, root=root)
        np.testing.assert_array_equal(bufs[root], np.concatenate(xs))
        bufs = [b.copy() for b in big]
        comm.scatter(bufs, bufs, root=root)
        for r in range(n):
            np.testing.assert_array_equal(bufs[r][r * count:(r + 1) * count], big[root][r * count:(r + 1) * count])


def test_multidimensional_arrays_and_explicit_count():
    comm = get_comm("full4")
    xs = [np.full((2, 3), r, np.float32) for r in range(4)]
    ys = [np.zeros((4, 2, 3), np.float32) for _ in range(4)]
    comm.all_gather(xs, ys)
    np.testing.assert_array_equal(ys[2][3], np.full((2, 3), 3.0))
    ys = [np.zeros(20, np.float32) for _ in range(4)]
    comm.all_gather(xs, ys, count=2)  # only the first 2 elements of each input
    np.testing.assert_array_equal(ys[0][:8], [0, 0, 1, 1, 2, 2, 3, 3])
    np.testing.assert_array_equal(ys[0][8:], 0)


def test_mixed_and_overlapping_buffers_are_made_safe():
    comm = get_comm("full4")
    xs = data(4, 7, np.float64, "sum", salt=9)
    want = reduce_ref(xs, "sum")
    bufs = [x.copy() for x in xs]
    ys = [bufs[0], np.empty(7), bufs[2], np.empty(7)]  # ranks 0 and 2 in place, 1 and 3 not
    comm.all_reduce(bufs, ys)
    for y in ys:
        np.testing.assert_array_equal(y, want)
    big = [np.concatenate([x, [0.0]]) for x in xs]  # input = big[:7], output = big[1:]: overlap
    comm.all_reduce([b[:7] for b in big], [b[1:] for b in big])
    for b in big:
        np.testing.assert_array_equal(b[1:], want)


def test_rooted_unused_buffers_are_ignored_like_nccl():
    comm = get_comm("full4")
    xs = data(4, 5, np.int32, "sum", salt=11)
    junk = [np.full(3, -1, np.int32) for _ in range(4)]  # wrong size, but off the root: ignored
    outs = list(junk)
    outs[1] = np.empty(5, np.int32)
    comm.reduce(xs, outs, root=1)
    np.testing.assert_array_equal(outs[1], reduce_ref(xs, "sum"))
    assert all(np.all(j == -1) for r, j in enumerate(junk) if r != 1)
    # in place at the root only: gather's root input is block root of its output
    root, count = 2, 5
    ins = [x.copy() for x in xs]
    ins[root] = np.zeros(4 * count, np.int32)
    ins[root][root * count:(root + 1) * count] = xs[root]
    outs = [None] * 4
    outs[root] = ins[root]
    comm.gather(ins, outs, root=root)
    np.testing.assert_array_equal(outs[root], np.concatenate(xs))
    big = np.arange(4 * count, dtype=np.int32)
    ins = [None] * 4
    ins[root] = big
    outs = [np.empty(count, np.int32) for _ in range(4)]
    outs[root] = big
    comm.scatter(ins, outs, root=root)
    for r in range(4):
        np.testing.assert_array_equal((outs[r] if r != root else big[r * count:(r + 1) * count]),
                                      np.arange(r * count, (r + 1) * count))


def test_single_rank_and_reference_backend():
    one = Communicator(1)
    x = np.arange(3.0)
    y = np.empty(3)
    one.all_reduce([x], [y], op="avg")
    np.testing.assert_array_equal(y, x)
    one.all_gather([x], [y])
    np.testing.assert_array_equal(y, x)
    ref = Communicator(4, backend="reference", plan=False)
    xs = data(4, 7, np.float32, "max")
    ys = empty(4, 7, np.float32)
    ref.all_reduce(xs, ys, op="max")
    np.testing.assert_array_equal(ys[3], reduce_ref(xs, "max"))


def test_zero_count_is_a_no_op():
    comm = get_comm("full4")
    xs = [np.empty(0, np.float32) for _ in range(4)]
    assert comm.all_reduce(xs, xs) is xs


# ------------------------------------------------------------------ plan selection
def write_plan(tmp_path, topo, entries) -> Plan:
    fab = build_fabric(topo)
    out = []
    for k, (coll, root, lo, hi, algo, chunks) in enumerate(entries):
        sched = baseline(algo, fab, coll, root=root, chunks=chunks)
        sched.save(tmp_path / "schedules" / f"{k}-{algo}.json")
        out.append(PlanEntry(sched.collective, lo, hi, f"schedules/{k}-{algo}.json", root))
    plan = Plan(topo.name, topo.fingerprint(), out)
    plan.save(tmp_path / "plan.json")
    return plan


def test_plan_selects_schedule_by_size_and_root(tmp_path):
    topo = fully_connected(4)
    write_plan(tmp_path, topo, [("allreduce", None, 0, 4096, "ring", 1),
                                ("allreduce", None, 4096, None, "ring", 3),
                                ("allgather", None, 0, 1024, "direct", 1),
                                ("broadcast", 2, 0, None, "tree", 2)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        comm = Communicator(4, plan=str(tmp_path / "plan.json"))
        assert comm.schedule_for("allreduce", 4095).chunks_per_rank == 1
        assert comm.schedule_for("allreduce", 4096).chunks_per_rank == 3
        # nccl-tests size of allgather = n * count * itemsize: 4 * 63 * 4 = 1008 < 1024 <= 4 * 64 * 4
        xs = [np.full(63, r, np.float32) for r in range(4)]
        ys = [np.empty(4 * 63, np.float32) for _ in range(4)]
        comm.all_gather(xs, ys)
        assert nccl_bytes("allgather", 63, 4, 4) == 1008
        assert comm.schedule_for("allgather", 1008).meta.get("baseline") == "direct"
        np.testing.assert_array_equal(ys[1], np.repeat(np.arange(4.0), 63))
        assert comm.schedule_for("broadcast", 10, root=2).meta.get("baseline") == "tree"
        assert not caught, [str(w.message) for w in caught]
        # larger allgather and other roots have no entry: baseline, said once per collective
        for count in (64, 65, 1000):
            xs = [np.full(count, r, np.float32) for r in range(4)]
            comm.all_gather(xs, [np.empty(4 * count, np.float32) for _ in range(4)])
        bufs = [np.full(3, r, np.int32) for r in range(4)]
        comm.broadcast(bufs, root=0)
        comm.broadcast(bufs, root=1)
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 2, msgs
    # fully_connected(4): one step of all-pairs transfers beats the 3-step ring in the cost model
    # (1 KB allgather: 12 µs vs 21 µs)
    assert "allgather" in msgs[0] and "baseline 'direct'" in msgs[0]
    assert "broadcast" in msgs[1]


def test_fallback_baseline_follows_the_size():
    """dgx1-v100 has no plan here: 1 KB allreduce runs the tree (a short chain of hops), 1 GB the
    NVLink rings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        comm = Communicator(8, topology="dgx1-v100", plan=False)
        small, large = comm.schedule_for("allreduce", 1 << 10), comm.schedule_for("allreduce", 1 << 30)
        assert comm.schedule_for("allreduce", 1 << 10) is small
    assert (small.meta["baseline"], large.meta["baseline"]) == ("tree", "ring")
    assert small.num_steps < large.num_steps
    # no plan at all: one warning for the communicator, naming the first call's baseline
    assert len(caught) == 1 and "no plan for 'dgx1-v100'" in str(caught[0].message)
    assert "first: allreduce of 1024 bytes, baseline 'tree'" in str(caught[0].message)


def test_auto_plan_lookup_and_fingerprint(tmp_path, monkeypatch):
    topo = fully_connected(4)
    write_plan(tmp_path / "full4", topo, [("allreduce", None, 0, None, "ring", 2)])
    monkeypatch.setenv("TOPOCOLL_RESULTS", str(tmp_path))
    comm = Communicator(4)
    assert comm.plan is not None and comm.schedule_for("allreduce", 8).chunks_per_rank == 2
    other = fully_connected(4, bandwidth_gbps=50.0)  # same name, other fingerprint
    with pytest.warns(UserWarning, match="plan made for another topology"):
        assert Communicator(4, topology=other, plan="auto").plan is None
    with pytest.raises(TopologyError, match="does not match"):
        Communicator(4, topology=other, plan=tmp_path / "full4" / "plan.json")
    assert Communicator(4, plan=False).plan is None


def test_schedules_cached_and_verified_once(tmp_path, monkeypatch):
    calls = []
    real = synth.ir.verifier.check
    monkeypatch.setattr(synth.ir.verifier, "check", lambda s, f=None: calls.append(s.name) or real(s, f))
    comm = Communicator(4, plan=False)
    xs = [np.ones(5, np.float64) for _ in range(4)]
    for _ in range(3):
        comm.all_reduce(xs, [np.empty(5) for _ in range(4)])
    assert len(calls) == 1
    assert comm.schedule_for("allreduce", 10 ** 6) is comm.schedule_for("allreduce", 10 ** 9)   # both 'direct'


def test_invalid_plan_schedule_is_rejected_before_use(tmp_path):
    topo = fully_connected(4)
    plan = write_plan(tmp_path, topo, [("allreduce", None, 0, None, "ring", 1)])
    path = tmp_path / plan.entries[0].schedule
    doc = json.loads(path.read_text())
    doc["steps"] = doc["steps"][:-1]  # drop the last step: postcondition fails
    path.write_text(json.dumps(doc))
    with pytest.raises(ScheduleInvalid, match=r"plan\.json: entries\[0\]\.schedule .*postcondition"):
        Communicator(4, plan=tmp_path / "plan.json")     # refused when built, before any call (issue 37)


# ------------------------------------------------------------------ validation
def test_mismatches_name_the_rank():
    comm = get_comm("full4")
    xs = [np.ones(5, np.float32) for _ in range(4)]
    ys = [np.empty(5, np.float32) for _ in range(4)]
    bad = list(xs)
    bad[3] = np.ones(5, np.float64)
    with pytest.raises(ValueError, match="rank 3: dtype float64 differs from rank 0's float32"):
        comm.all_reduce(bad, ys)
    bad[3] = np.ones(6, np.float32)
    with pytest.raises(ValueError, match=r"rank 3: shape \(6,\) differs from rank 0's \(5,\)"):
        comm.all_reduce(bad, ys)
    with pytest.raises(ValueError, match="has 3 arrays, the communicator has 4 ranks"):
        comm.all_reduce(xs[:3], ys)
    with pytest.raises(ValueError, match="out_arrays rank 0 has 5 elements, needs at least 20"):
        comm.all_gather(xs, ys)
    with pytest.raises(ValueError, match="rank 0: out dtype int32 differs from in dtype float32"):
        comm.all_reduce(xs, [np.empty(5, np.int32) for _ in range(4)])
    with pytest.raises(ValueError, match="not C-contiguous"):
        comm.all_reduce(xs, [np.empty(10, np.float32)[::2] for _ in range(4)])
    with pytest.raises(ValueError, match="root 4 is not a rank"):
        comm.broadcast(xs, root=4)
    with pytest.raises(InvalidArgument, match=r"^all_reduce: op must be one of sum, prod, max, min, avg; got 'mean'$"):
        comm.all_reduce(xs, ys, op="mean")
    with pytest.raises(ValueError, match="not a multiple of 4 ranks"):
        comm.all_to_all([np.ones(6) for _ in range(4)], [np.ones(6) for _ in range(4)])
    with pytest.raises(ValueError, match="gather: out_arrays rank 1 is None but rank 1 needs"):
        comm.gather(xs, [None] * 4, root=1)
    with pytest.raises(ValueError, match="topology 'dgx1-v100' has 8 GPUs but 4 ranks"):
        Communicator(4, topology="dgx1-v100")


def test_send_recv_pairs_up_fifo():
    comm = get_comm("full4")
    a, b = np.arange(4.0), np.arange(4.0) + 10
    x, y = np.zeros(4), np.zeros(4)
    comm.send(a, 2, rank=0)
    comm.send(b, 2, rank=0)
    assert comm.pending() == [("send", 0, 2), ("send", 0, 2)]
    comm.recv(x, 0, rank=2)
    comm.recv(y, 0, rank=2)
    np.testing.assert_array_equal(x, a)
    np.testing.assert_array_equal(y, b)
    z = np.zeros(4)
    comm.recv(z, 3, rank=1)
    assert comm.pending() == [("recv", 3, 1)]
    comm.send(a * 2, 1, rank=3)
    np.testing.assert_array_equal(z, a * 2)
    assert comm.pending() == []
    comm.send_recv(1, 3, b, z)
    np.testing.assert_array_equal(z, b)
    with pytest.raises(ValueError, match="rank 3: dtype int32 differs from rank 1's float64"):
        comm.send_recv(1, 3, b, np.zeros(4, np.int32))
    with pytest.raises(ValueError, match="rank 3 receives 2 elements but rank 1 sends 4"):
        comm.send_recv(1, 3, b, np.zeros(2))


@pytest.mark.parametrize("backend", ["host", "reference"])
@pytest.mark.parametrize("dtype,big", [("float16", 60000.0), ("bfloat16", 3.0e38), ("float8_e4m3fn", 448.0)])
def test_half_precision_avg_of_large_values_does_not_overflow(backend, dtype, big):
    """NCCL's avg for floating types multiplies by 1/n before summing (ncclDevPreMulSum): 4 ranks
    x 60000 in float16 average to 60000 (summing first gave inf)."""
    import ml_dtypes  # noqa: F401  (registers the names)
    comm = Communicator(4, plan=False, backend=backend)
    xs = [np.full(100, big, dtype) for _ in range(4)]
    ys = [np.empty(100, dtype) for _ in range(4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        comm.all_reduce(xs, ys, op="avg")
    assert all(np.array_equal(y.astype(np.float64), np.full(100, float(np.asarray(big, dtype)))) for y in ys)


@pytest.mark.parametrize("bad, message", [
    (lambda: [[1.0, 2.0], [3.0, 4.0]], "all_reduce: rank 0: got a list, not an array"),
    (lambda: [np.zeros(2, bool)] * 2, "all_reduce: rank 0: dtype bool is not an NCCL type"),
    (lambda: [np.zeros(2, complex)] * 2, "all_reduce: rank 0: dtype complex128 is not an NCCL type"),
    (lambda: [np.zeros(2, object)] * 2, "all_reduce: rank 0: dtype object is not an NCCL type"),
    (lambda: [np.zeros(2, np.int16)] * 2, "dtype int16 is not an NCCL type"),
])
def test_non_arrays_and_non_nccl_types_are_refused_in_one_line(bad, message):
    from topo_probe.errors import BufferLayoutError
    comm = Communicator(2, plan=False)
    with pytest.raises(BufferLayoutError, match=message) as info:
        comm.all_reduce(bad(), [np.zeros(2)] * 2)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16",
                                   "float32", "float64", "float8_e4m3fn", "float8_e5m2"])
def test_every_nccl_type_is_accepted(dtype):
    import ml_dtypes  # noqa: F401
    comm = Communicator(3, plan=False)
    xs = [np.full(5, r + 1, dtype) for r in range(3)]
    ys = [np.empty(5, dtype) for _ in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        comm.all_reduce(xs, ys, op="sum")
    assert all(y.astype(np.float64).tolist() == [6.0] * 5 for y in ys)


class _OnGpu(np.ndarray):
    """A NumPy array that says which GPU holds it (CuPy's ``.device.id``)."""

    gpu = 0

    def __array_finalize__(self, obj):
        self.gpu = getattr(obj, "gpu", 0)

    @property
    def device(self):
        return types.SimpleNamespace(id=self.gpu)


def _on(a, gpu):
    out = a.view(_OnGpu)
    out.gpu = gpu
    return out


@pytest.mark.parametrize("n,coll", [(4, "broadcast"), (8, "broadcast"), (8, "reduce")])
def test_ranks_sharing_one_gpu_run_direct_where_the_fallback_pipelines(monkeypatch, n, coll):
    """Without a plan the cost model picks a pipelined schedule (ring or tree) for a 16 MiB
    broadcast or reduce on a fully connected topology; with every buffer on one GPU the
    Communicator runs the direct schedule instead (same bytes, fewest dependent steps), and
    keeps the pipelined one when the buffers are on different GPUs."""
    comm = Communicator(n, plan=False, backend="cupy")
    ran = []
    monkeypatch.setattr(comm, "_nccl_why", lambda: "no NCCL in this test")
    monkeypatch.setattr(comm, "_run_native", lambda sched, sends, recvs, op, backend, **kw: ran.append(sched) or recvs)
    count = 1 << 22
    fallback = comm.selector.select(coll, 4 * count, 0)
    assert fallback.label in ("best:ring", "best:tree"), fallback.label
    for gpus, want in (([0] * n, "direct"), (list(range(n)), fallback.label.split(":")[1])):
        ran.clear()
        bufs = [_on(np.zeros(count, np.float32), g) for g in gpus]
        if coll == "broadcast":
            comm.broadcast(bufs, root=0)
        else:
            comm.reduce(bufs, [_on(np.zeros(count, np.float32), g) for g in gpus], root=0)
        assert [s.name for s in ran] == [comm.selector.select_baseline(want, coll, 0).schedule.name]
        assert comm.last_route.ran == f"best:{want}" and comm.last_route.planned == ""
        assert ("direct instead of ring or tree" in comm.last_route.reason) == (want == "direct")


def test_each_communicator_owns_its_layers_on_its_devices():
    """No process-wide executor layer shared between communicators: each makes its own at first
    use (on its devices), and leaves run_schedule's function-level layers alone."""
    import kernels.backends.executor as executor
    before = dict(executor._LAYERS)
    a, b = Communicator(2, plan=False), Communicator(2, plan=False)
    xs = [np.arange(3.0) + r for r in range(2)]
    for comm in (a, b):
        ys = [np.empty(3) for _ in range(2)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            comm.all_reduce(xs, ys)
        assert ys[1].tolist() == [1.0, 3.0, 5.0]
    assert a._layers["host"] is not b._layers["host"] and a._layer("host") is a._layers["host"]
    assert executor._LAYERS == before
    gpus = Communicator([1, 0], topology=fully_connected(2), plan=False, backend="cupy-ops")
    assert gpus._layer("cupy-ops").devices == [1, 0]          # made lazily: no GPU needed here
    with pytest.raises(InvalidArgument, match="p2p must be one of"):
        Communicator(2, plan=False, p2p="sometimes")._layer("host")


def test_the_plan_entrys_protocol_reaches_the_native_layer(tmp_path):
    """plan.json's per-entry protocol (``ll`` below 4 KiB here, ``simple`` above) is what the
    route carries and what the layer is asked to run; calls with no entry leave it to the layer."""
    from kernels.backends.host import HostLayer
    topo = fully_connected(4)
    plan = write_plan(tmp_path, topo, [("allreduce", None, 0, 4096, "direct", 1),
                                       ("allreduce", None, 4096, 1 << 20, "direct", 1)])
    import dataclasses
    plan.entries[0] = dataclasses.replace(plan.entries[0], protocol="ll")
    plan.save(tmp_path / "plan.json")

    class Recording(HostLayer):
        protocol = "plan"
        seen: list = []

        def bound(self, program, buffers, protocol=None):
            self.seen.append(protocol)
            return super().bound(program, buffers)

    layer = Recording()
    comm = Communicator(4, plan=str(tmp_path / "plan.json"), backend=layer)
    for count, want in ((64, "ll"), (4096, "simple"), (1 << 19, None)):
        xs = [np.full(count, r + 1, np.float32) for r in range(4)]
        ys = [np.empty(count, np.float32) for _ in range(4)]
        comm.all_reduce(xs, ys)
        np.testing.assert_array_equal(ys[2], np.full(count, 10.0, np.float32))
        assert comm.last_route.protocol == want, (count, comm.last_route)
        assert layer.seen[-1] == want


@pytest.mark.parametrize("topo", ["pcie-8gpu-2socket", "full8"])
def test_the_topology_reaches_the_layer_no_p2p_pairs_stage_through_the_host(monkeypatch, topo):
    """The Communicator hands its topology to its layer.  pcie-8gpu-2socket: ranks 0-3 and 4-7
    share a socket each and have no P2P across (the topology's fact: the fake CUDA runtime of
    ``tests/_fake_device.py`` allows every pair).  Rank r on GPU ``[0, 4, 1, 5, 2, 6, 3, 7][r]``:
    an all-gather through ``backend="cupy"`` copies GPU to GPU only between ranks of one socket
    (by rank, not by device id: GPUs 0 and 4 hold ranks 0 and 1) and stages the rest through
    pinned host memory; on a fully connected topology nothing stages.  Results against NumPy."""
    from _fake_device import FakeRuntime

    import kernels.backends.cupy_executor as cupy_executor
    from kernels.comm.machine import resolve_topology
    rt = FakeRuntime(8)
    monkeypatch.setattr(cupy_executor, "CupyRuntime", lambda: rt)
    devs = [0, 4, 1, 5, 2, 6, 3, 7]
    rank_of = {d: r for r, d in enumerate(devs)}
    topology = resolve_topology(topo if topo != "full8" else None, 8)
    comm = Communicator(devs, topology=topology, plan=False, backend="cupy")
    xs = [rt.to_device(d, np.full(5, r, np.float32)) for r, d in enumerate(devs)]
    ys = [rt.alloc(d, 40, np.float32) for d in devs]
    comm.all_gather(xs, ys)
    rt.synchronize()
    assert all(np.array_equal(rt.to_host(y), np.repeat(np.arange(8, dtype=np.float32), 5)) for y in ys)
    peer = [(rank_of[c[1]], rank_of[c[2]]) for c in rt.calls if c[0] == "copy_peer"]
    staged = rt.count("d2h")
    assert peer and rt.count("h2d") == staged
    if topo == "full8":
        assert staged == 0
    else:
        assert staged > 0 and all(a // 4 == b // 4 for a, b in peer), peer
        assert any(not topology.p2p(devs[a], devs[b]).supported for a, b in peer), \
            "some peer copy is between GPUs whose ids, read as the topology's indices, cross sockets"
