"""kernels.backends.host.HostLayer: threaded, tiled execution with start-of-step read semantics."""

import threading

import numpy as np
import pytest
from _schedules import (DTYPES, OPS, alloc_buffers, check_result, direct, draw_schedule, make_inputs, persistent_run,
                        ring, run_case)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.backends.device import RankBuffers
from kernels.backends.executor import program_for, run_schedule
from kernels.backends.host import HostLayer
from synth.ir.schedule import Schedule, Step, Transfer
from topo_probe.errors import BufferLayoutError

SETTINGS = settings(derandomize=True, deadline=None, database=None, max_examples=500,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TILED = HostLayer(threads=3, tile_bytes=8, inline_bytes=0, slice_bytes=0)   # step-major, tiny tiles
SLICED = HostLayer(threads=3, slice_bytes=8)      # slice-major: columns of 8 bytes on the pool


@SETTINGS
@given(st.data())
def test_tiled_threaded_host_matches_numpy(data):
    sched, _ = draw_schedule(data, sources=("random", "random", "baseline", "hand"))
    count = data.draw(st.integers(0, 23), label="count")
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    op = data.draw(st.sampled_from(OPS), label="op")
    inplace = data.draw(st.booleans(), label="inplace")
    run_case(sched, count, dtype, op, inplace, [TILED, SLICED], data.draw(st.integers(0, 2**20), label="seed"))


def test_column_order_follows_chains_and_respects_every_dependency():
    p = program_for(ring("allreduce", 4), 8, "float32")
    order = HostLayer.column_order(p)
    assert sorted(o.id for o in order) == sorted(o.id for o in p.ops())
    pos = {o.id: i for i, o in enumerate(order)}
    assert all(pos[d] < pos[o.id] for o in order for d in o.deps)
    # ring allreduce: each chunk's 3 reduces and 3 copies run back to back, chunk by chunk
    chunks = [o.chunk for o in order]
    assert all(chunks[i:i + 6] == [chunks[i]] * 6 for i in range(0, len(chunks), 6))
    assert len(set(chunks)) == 4


def _threads_running(layer: HostLayer, method: str, count: int, seed: int) -> set[str]:
    """Run a 4-rank ring allreduce of ``count`` floats on ``layer`` (checked against NumPy);
    the names of the threads that ran ``layer.<method>``."""
    seen = set()
    real = getattr(layer, method)

    def spy(*a, **k):
        seen.add(threading.current_thread().name)
        return real(*a, **k)

    setattr(layer, method, spy)
    n = 4
    sends = make_inputs("allreduce", n, count, "float32", "sum", None, np.random.default_rng(seed))
    sb, rb = alloc_buffers("allreduce", n, count, sends, "float32", None, False)
    run_schedule(ring("allreduce", n, 2), sb, rb, backend=layer)
    check_result("allreduce", n, count, sends, rb, "sum", None, "float32")
    layer.close()
    return seen


def test_slice_major_runs_columns_on_the_pool_and_matches():
    # cells of ~50 KB: 13 columns of 4 KiB, the last ones ragged
    seen = _threads_running(HostLayer(threads=2, slice_bytes=1 << 12), "_run_op", 100_003, 7)
    assert any(name.startswith("topocoll-host") for name in seen)


def test_chains_group_only_dependent_ops():
    p = program_for(direct("reduce", 4, 2, root=0), 6, "float32")
    chains = HostLayer.chains(p.steps[0])
    # two chunks, each reduced from three ranks into rank 0: two chains of three ops
    assert sorted(len(c) for c in chains) == [3, 3]
    assert all([o.id for o in c] == sorted(o.id for o in c) for c in chains)
    assert len(HostLayer.chains(program_for(ring("allgather", 4), 6, "float32").steps[0])) == 4


def test_each_step_reads_the_state_at_its_start():
    """Two ranks swap-and-add in one step (in place): each must add the other's *old* value."""
    s = Schedule("allreduce", 2, 1, (Step(1, (Transfer(0, 0, 1, "reduce"), Transfer(0, 1, 0, "reduce"),
                                              Transfer(1, 0, 1, "reduce"), Transfer(1, 1, 0, "reduce"))),))
    for layer in (HostLayer(), TILED, SLICED):
        bufs = [np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])]
        run_schedule(s, bufs, bufs, backend=layer)
        assert bufs[0].tolist() == bufs[1].tolist() == [11.0, 22.0, 33.0]


def test_large_buffers_use_the_pool_and_match():
    layer = HostLayer(threads=2, tile_bytes=1 << 16, inline_bytes=1 << 10, slice_bytes=0)
    assert any(name.startswith("topocoll-host") for name in _threads_running(layer, "_run", 300_001, 5))


def test_host_layer_rejects_foreign_arrays():
    with pytest.raises(BufferLayoutError, match="numpy.ndarray for the host backend"):
        run_schedule(ring("allgather", 2), [[1.0], [2.0]], [np.zeros(2), np.zeros(2)], backend=HostLayer())


def test_bfloat16_through_the_host_backend():
    ml = pytest.importorskip("ml_dtypes")
    send = [np.array([1.5, -2.0, 3.25], ml.bfloat16), np.array([0.5, 2.0, 1.0], ml.bfloat16)]
    recv = [np.zeros(3, ml.bfloat16) for _ in range(2)]
    run_schedule(ring("allreduce", 2), send, recv, op="avg")
    assert recv[1].astype(np.float32).tolist() == [1.0, 0.0, 2.125]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("op", ["sum", "avg", "max", "prod"])
def test_reduce_chains_fuse_for_half_types_and_match_the_reference_bit_for_bit(monkeypatch, dtype, op):
    """8-rank direct all_reduce: each rank reduces 7 sources into its chunk in one step.  float16 and
    bfloat16 chains run as one n-way Numba reduce (float32 keeps the NumPy twins: no faster);
    every order gives the reference executor's bits."""
    import ml_dtypes

    from kernels.backends import host_reduce
    from kernels.backends.reference import run_reference
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    calls = []
    real = host_reduce.reduce_chain
    monkeypatch.setattr(host_reduce, "reduce_chain", lambda *a, **k: calls.append(len(a[1])) or real(*a, **k))
    sched, n, count = direct("allreduce", 8, 1), 8, 8 * 1001
    sends = make_inputs("allreduce", n, count, dt, op, None, np.random.default_rng(5))
    want = run_reference(sched, *alloc_buffers("allreduce", n, count, sends, dt, None, False), op=op)
    for layer in (HostLayer(threads=2, fuse_bytes=2, slice_bytes=0, inline_bytes=0),
                  HostLayer(threads=2, fuse_bytes=2, slice_bytes=256), HostLayer(fuse_bytes=0)):
        calls.clear()
        sb, rb = alloc_buffers("allreduce", n, count, sends, dt, None, False)
        run_schedule(sched, sb, rb, op=op, backend=layer)
        assert all(np.array_equal(g.view(np.uint8), w.view(np.uint8)) for g, w in zip(rb, want))
        fused = layer.fuse_bytes > 0 and dtype != "float32"
        assert bool(calls) == fused and all(k == 8 for k in calls)
        layer.close()


def test_short_pieces_keep_the_numpy_twins(monkeypatch):
    from kernels.backends import host_reduce
    calls = []
    monkeypatch.setattr(host_reduce, "reduce_chain", lambda *a, **k: calls.append(1))
    sends = make_inputs("allreduce", 4, 64, "float16", "sum", None, np.random.default_rng(0))
    sb, rb = alloc_buffers("allreduce", 4, 64, sends, "float16", None, False)
    run_schedule(direct("allreduce", 4), sb, rb, backend=HostLayer())       # 32-byte chunks < 64 KiB
    check_result("allreduce", 4, 64, sends, rb, "sum", None, "float16")
    assert not calls


@SETTINGS
@given(st.data())
def test_bound_launch_matches_execute_bit_for_bit_on_new_contents(data):
    """HostLayer.bound resolves each op's views and ufunc once; run on new contents of the same
    arrays it must give what execute gives, bit for bit, and the NumPy reference (in place too)."""
    sched, _ = draw_schedule(data, sources=("random", "baseline", "hand"))
    count = data.draw(st.integers(1, 23), label="count")
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    op = data.draw(st.sampled_from(OPS), label="op")
    inplace = data.draw(st.booleans(), label="inplace")
    n, coll, root = sched.ranks, sched.collective, sched.root
    layer = HostLayer(threads=1)
    prog = program_for(sched, count, np.dtype(dtype), inplace=inplace, op=op)
    first = make_inputs(coll, n, count, dtype, op, root, np.random.default_rng(0))
    sb, rb = alloc_buffers(coll, n, count, first, dtype, root, inplace, fill=77)
    user = [{"send": s, "recv": r} for s, r in zip(sb, rb)]
    bufs = RankBuffers([{k: user[r][w] for k, w in prog.bindings[r].items()} for r in range(n)])
    for r, d in enumerate(bufs.bufs):
        if "scratch" in prog.sizes[r]:
            d["scratch"] = np.zeros(prog.sizes[r]["scratch"], dtype)
    call = layer.bound(prog, bufs)
    assert call is not None, "a small program runs inline: it must bind"
    again = make_inputs(coll, n, count, dtype, op, root, np.random.default_rng(1))
    hostile = dtype.startswith(("float", "bfloat")) and data.draw(st.booleans(), label="hostile")
    if hostile:     # NaN (max / min drop it), inf, signed zeros; float8 overflow (largest finite doubled)
        big = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}.get(dtype, 2.5)
        pool = [big, -big, np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, big / 2]
        again = [None if v is None else np.array(data.draw(st.lists(st.sampled_from(pool), min_size=v.size,
                                                                    max_size=v.size), label="hostile values"),
                                                 np.float32).astype(dtype) for v in again]
    sb2, rb2 = alloc_buffers(coll, n, count, again, dtype, root, inplace, fill=77)
    for mine, theirs in ((rb, rb2), (sb, sb2)):  # the same arrays get the second call's contents
        for x, y in zip(mine, theirs):
            if x is not None:
                x[...] = y
    run_schedule(sched, sb2, rb2, op=op, backend=HostLayer(threads=1))
    call()
    if not hostile:         # the NumPy expectation knows nothing of saturation or NaN; execute is checked by hand below
        check_result(coll, n, count, again, rb, op, root, dtype)
    for r, (x, y) in enumerate(zip(rb, rb2)):
        assert x is None or np.array_equal(x.view(np.uint8), y.view(np.uint8)), f"rank {r} differs from execute"


def test_large_or_fused_programs_do_not_bind():
    """Programs execute would not run inline in the calling thread (slice-major, fused reduce
    chains of half types) get no bound launch: the repeated call takes the full path."""
    layer = HostLayer(threads=2)
    for count, dtype in ((1 << 20, "float32"), (1 << 16, "float16")):
        prog = program_for(direct("allreduce", 4), count, np.dtype(dtype))
        bufs = RankBuffers([{k: np.zeros(count, dtype) for k in prog.bindings[r]} for r in range(4)])
        assert layer.bound(prog, bufs) is None, (count, dtype)


@pytest.mark.parametrize("name, big", [("float8_e4m3fn", 448.0), ("float8_e5m2", 57344.0)])
def test_float8_allreduce_saturates_like_nccl(name, big):
    """Hand-computed, NCCL's fp8 semantics (reduce_kernel.h:440-455, v2.28.9-1): 4 ranks of the largest
    finite value sum to it (saturated, not NaN / inf), max of NaN and 1 is 1, and avg scales
    each contribution by 1/4 before the sum (4 x big/4 = big)."""
    import ml_dtypes
    dt = np.dtype(getattr(ml_dtypes, name))
    sends = [np.array([big, -big, np.nan if r == 0 else 1.0, 2.0], dt) for r in range(4)]
    want = {"sum": [big, -big, np.nan, 8.0], "max": [big, -big, 1.0, 2.0], "avg": [big, -big, np.nan, 2.0]}
    for op, expected in want.items():
        for runner in RUNNERS:
            hs, hr = alloc_buffers("allreduce", 4, 4, sends, dt, None, False)
            RUNNERS[runner](ring("allreduce", 4), hs, hr, op)
            for r in range(4):
                np.testing.assert_array_equal(hr[r].astype(np.float64), expected, err_msg=f"{runner} {op} rank {r}")
                assert all(b == 0x7F for b in hr[r].view(np.uint8)[np.isnan(hr[r])]), f"{runner} {op}: NaN is 0x7f"


def _bound_run(sched, sends, recvs, op):
    """Run ``sched`` through ``HostLayer().bound`` (what a repeated small call runs)."""
    n, count = sched.ranks, recvs[0].size
    prog = program_for(sched, count, sends[0].dtype, op=op)
    user = [{"send": s, "recv": r} for s, r in zip(sends, recvs)]
    bufs = RankBuffers([{k: user[r][w] for k, w in prog.bindings[r].items()} for r in range(n)])
    for r, d in enumerate(bufs.bufs):
        if "scratch" in prog.sizes[r]:
            d["scratch"] = np.zeros(prog.sizes[r]["scratch"], sends[0].dtype)
    call = HostLayer(threads=1).bound(prog, bufs)
    assert call is not None
    call()


def _reference_run(sched, sends, recvs, op):
    from kernels.backends.reference import run_reference
    run_reference(sched, sends, recvs, op=op)


RUNNERS = {"host": lambda sched, s, r, op: run_schedule(sched, s, r, op=op, backend="host"),
           "bound": _bound_run,             # the repeated small call's path (Communicator: layer.bound first)
           "mpi-bound": persistent_run,    # kernels.mpi.persistent's prepared reduces, one per received partial
           "reference": _reference_run}


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", "float64"])
def test_max_min_allreduce_drops_nan_like_nccl(name):
    """Hand-computed, NCCL's fmaxf / __hmax (reduce_kernel.h:397-436, v2.28.9-1): a NaN from one rank
    is dropped (max [NaN, 1, 1, 1] = 1), NaN stays only where every rank has it; half / bfloat16's
    max(+0, -0) is +0 and min -0 (float / double: CUDA leaves that sign open, not checked)."""
    import ml_dtypes
    dt = np.dtype(getattr(ml_dtypes, name, None) or name)
    sends = [np.array([np.nan if r == 0 else 1.0, 2.0 if r == 3 else np.nan, np.nan, -0.0 if r % 2 else 0.0], dt)
             for r in range(4)]
    want = {"max": [1.0, 2.0, np.nan, 0.0], "min": [1.0, 2.0, np.nan, -0.0]}
    half = name in ("float16", "bfloat16")
    for op, expected in want.items():
        for runner in RUNNERS:
            hs, hr = alloc_buffers("allreduce", 4, 4, sends, dt, None, False)
            RUNNERS[runner](ring("allreduce", 4), hs, hr, op)
            for r in range(4):
                got = hr[r].astype(np.float64)
                np.testing.assert_array_equal(got, expected, err_msg=f"{runner} {name} {op} rank {r}")
                assert not half or np.signbit(got[3]) == (op == "min"), f"{runner} {name} {op} rank {r}: zero sign"
