"""The native executor on a real GPU (marked ``gpu``; skipped without CuPy and a device):
ranks sharing the card, every collective, NCCL dtypes and ops, in-place, repeated calls
(graph replay), bit-identical to the host backend (the NumPy twins) and within the NumPy
expectation's bounds; a wait that cannot be met ends in ExecutionTimeout, not a hang."""

import numpy as np
import pytest
from _schedules import ALL, DTYPES, OPS, alloc_buffers, check_result, direct, make_inputs, ring

from synth.ir.collectives import ROOTED

cp = pytest.importorskip("cupy")
try:
    _N_GPUS = cp.cuda.runtime.getDeviceCount()
except Exception:  # noqa: BLE001 - no driver
    _N_GPUS = 0
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_N_GPUS == 0, reason="needs a CUDA GPU")]


def _run(sched, count, dt, op, inplace, layer, seed=0, repeats=1):
    from kernels.backends.executor import run_schedule
    coll, n, root = sched.collective, sched.ranks, sched.root
    sends = make_inputs(coll, n, count, dt, op, root, np.random.default_rng(seed))
    sb, rb = alloc_buffers(coll, n, count, sends, dt, root, inplace, fill=77)
    host_s, host_r = alloc_buffers(coll, n, count, sends, dt, root, inplace, fill=77)
    run_schedule(sched, host_s, host_r, op=op, backend="host")
    gs = [None if x is None else cp.asarray(x) for x in sb]
    gr = [None if x is None else cp.asarray(x) for x in rb]
    if inplace:                                   # keep NCCL's aliasing on the GPU copies
        gs, gr = _alias(coll, n, count, gs, gr)
    for _ in range(repeats):
        if inplace and repeats > 1:
            raise AssertionError("repeat only out-of-place")
        run_schedule(sched, gs, gr, op=op, backend=layer)
    got = [None if x is None else cp.asnumpy(x) for x in gr]
    check_result(coll, n, count, sends, got, op, root, dt)
    for r in range(n):
        if host_r[r] is not None:
            assert np.array_equal(got[r].view(np.uint8), host_r[r].view(np.uint8)), f"rank {r}: not bit-identical"


def _alias(coll, n, count, gs, gr):
    outs, ins = [], []
    for r in range(n):
        s, d = gs[r], gr[r]
        if s is not None and d is not None:
            if coll in ("allgather", "gather"):
                s = d[r * count:(r + 1) * count]
            elif coll in ("reducescatter", "scatter"):
                d = s[r * count:(r + 1) * count]
            else:
                s = d
        ins.append(s)
        outs.append(d)
    return ins, outs


@pytest.fixture(scope="module")
def layer():
    from kernels.native.layer import NativeLayer
    return NativeLayer()


@pytest.mark.parametrize("coll", ALL)
@pytest.mark.parametrize("n", [2, 3, 8])
def test_every_collective_float32_sum(layer, coll, n):
    root = 1 if coll in ROOTED else None
    for sched in ([ring(coll, n, 2)] if coll in ("allreduce", "allgather", "reducescatter") else []) + \
            [direct(coll, n, 2, root)]:
        for count in (1, 37, 4096 + 3):
            _run(sched, count, "float32", "sum", False, layer)


@pytest.mark.parametrize("dt", [d for d in DTYPES if d not in ("bfloat16", "float8_e4m3fn", "float8_e5m2")])
@pytest.mark.parametrize("op", OPS)
def test_dtypes_and_ops_bit_identical_to_the_twins(layer, dt, op):
    _run(ring("allreduce", 4, 1), 1000 + 5, dt, op, False, layer, seed=3)


@pytest.mark.parametrize("coll", ALL)
def test_in_place(layer, coll):
    root = 0 if coll in ROOTED else None
    _run(direct(coll, 4, 1, root), 257, "int64", "sum", True, layer)


def test_repeated_calls_replay_a_graph_and_stay_right(layer):
    from kernels.native.layer import NativeLayer
    mine = NativeLayer()
    _run(ring("allreduce", 8, 1), 256, "float32", "sum", False, mine, repeats=5)
    (ctx,) = mine._contexts.values()
    assert any(b["graphs"] for b in ctx._bindings.values()), "no graph was captured"


@pytest.mark.parametrize("tile_bytes", [16, 48])
@pytest.mark.parametrize("coll", ALL)
def test_small_tiles_deal_every_collective_exactly(coll, tile_bytes):
    """Tiles of 16 or 48 bytes deal even small ops to the channels in turn, so the kernel's tile
    loop (chains included: a direct all-reduce fuses its reduces) runs on every collective,
    out of place and in place, with uneven counts; bit-identical to the host backend."""
    from kernels.native.layer import NativeLayer
    mine = NativeLayer(tile_bytes=tile_bytes, channels=3)
    root = 1 if coll in ROOTED else None
    for sched in ([ring(coll, 3, 1)] if coll in ("allreduce", "allgather", "reducescatter") else []) + \
            [direct(coll, 3, 1, root)]:
        for count, dt in ((4099, "float32"), (1003, "float16"), (517, "int64")):
            _run(sched, count, dt, "sum", False, mine)
        _run(sched, 2051, "float32", "sum", True, mine)
    assert any(int(r[8]) for ctx in mine._contexts.values() for r in ctx.dp.records), "no record was tiled"


@pytest.mark.parametrize("coll", ["allgather", "gather", "scatter", "alltoall", "broadcast"])
def test_copy_only_programs_run_as_copies(coll, monkeypatch):
    """The memcpy route (copy-only programs on one GPU) on the card: launched, captured and
    replayed, bit-identical to the host backend."""
    import kernels.native.launcher as launcher
    from kernels.native.layer import NativeLayer
    monkeypatch.setattr(launcher, "COPY_ROUTE_MIN_BYTES", 1)
    mine = NativeLayer()
    root = 1 if coll in ROOTED else None
    for count in (37, 4096 + 3):
        _run(direct(coll, 3, 2, root), count, "float32", "sum", False, mine, repeats=3)
    assert {ctx.route for ctx in mine._contexts.values()} == {"memcpy"}


def test_large_message_many_channels(layer):
    _run(ring("allreduce", 4, 1), (64 << 20) // 4 + 7, "float32", "sum", False, layer)


def test_bfloat16_and_float8_through_the_native_layer():
    """CuPy has no bfloat16/float8 arrays: run the device program on uint views and compare
    with the host backend bit for bit."""
    import ml_dtypes
    from kernels.backends.device import RankBuffers
    from kernels.backends.executor import program_for
    from kernels.native.launcher import NativeContext
    for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        dt = np.dtype(getattr(ml_dtypes, name))
        for op in OPS:
            sched = ring("allreduce", 3, 1)
            count = 515
            sends = make_inputs("allreduce", 3, count, dt, op, None, np.random.default_rng(1))
            hs, hr = alloc_buffers("allreduce", 3, count, sends, dt, None, False)
            from kernels.backends.executor import run_schedule
            run_schedule(sched, hs, hr, op=op, backend="host")
            prog = program_for(sched, count, dt, op=op)
            view = np.uint16 if dt.itemsize == 2 else np.uint8
            bufs = [{"input": cp.asarray(sends[r].view(view)), "output": cp.zeros(count, view)} for r in range(3)]
            ctx = NativeContext(prog, [0, 0, 0])
            ctx.run(RankBuffers(bufs).bufs)
            for r in range(3):
                got = cp.asnumpy(bufs[r]["output"])
                assert np.array_equal(got, hr[r].view(view)), f"{name} {op} rank {r}: differs from the twin"


def test_a_wait_that_is_never_met_raises_execution_timeout():
    from kernels.backends.executor import program_for
    from kernels.native.launcher import NativeContext
    from topo_probe.errors import ExecutionTimeout
    prog = program_for(ring("allreduce", 3, 1), 64, np.float32)
    ctx = NativeContext(prog, [0, 0, 0], timeout_s=0.2)
    good = ctx._per_dev[0]["waits"]
    bad = good.copy()
    bad[1] = 10_000                        # the first wait: a record index no block reaches
    ctx._per_dev[0]["waits"] = bad
    bufs = [{"input": cp.ones(64, cp.float32), "output": cp.zeros(64, cp.float32)} for _ in range(3)]
    ctx.run(bufs, graphs=False)
    cp.cuda.runtime.deviceSynchronize()
    with pytest.raises(ExecutionTimeout, match=r"rank \d .*waited over 0.2 s"):
        ctx.check()
    ctx._per_dev[0]["waits"] = good
    ctx.run(bufs, graphs=False)           # the context works again after the reset
    assert float(bufs[0]["output"][0]) == 3.0


def test_communicator_repeats_bind_once_and_stay_right():
    from kernels import Communicator
    comm = Communicator(4, plan=False)
    xs = [cp.full(1024, r + 1, cp.float32) for r in range(4)]
    ys = [cp.empty(1024, cp.float32) for _ in range(4)]
    for _ in range(4):
        comm.all_reduce(xs, ys)
    assert comm._bound, "the repeated call was not bound"
    xs[2][...] = 100
    comm.all_reduce(xs, ys)                      # same arrays, new contents: the graph reads them
    assert all(float(y[0]) == 1 + 2 + 100 + 4 for y in ys)


def test_blocks_longer_than_shared_memory_holds(layer):
    """A 40-rank ring: 78 records per block, more than the kernel stages in shared memory, so
    records and waits are read from global memory."""
    _run(ring("allreduce", 40, 1), 40 * 16 + 3, "float32", "sum", False, layer)


@pytest.mark.parametrize("op", ["sum", "avg", "max"])
def test_fused_reduce_chains(op):
    """Direct all-reduce on 8 ranks: each rank's seven reduces run as one chain record."""
    from kernels.native.layer import NativeLayer
    fused = NativeLayer(fuse=True)
    _run(direct("allreduce", 8, 1), 8 * 1000 + 5, "float16", op, False, fused, seed=2)
    _run(direct("allreduce", 8, 1), 8 * 64, "float32", op, False, fused, seed=4)
    (ctx, *_) = fused._contexts.values()
    assert ctx.dp.num_records < 8 * 14


@pytest.mark.parametrize("coll", ALL)
def test_every_collective_unfused(coll):
    """The record-per-op path (``fuse=False``) stays right on every collective."""
    from kernels.native.layer import NativeLayer
    plain = NativeLayer(fuse=False)
    root = 1 if coll in ROOTED else None
    _run(direct(coll, 5, 2, root), 4096 + 3, "float32", "sum", False, plain)


@pytest.mark.parametrize("inplace", [False, True])
def test_one_shot_allreduce(inplace):
    """One-shot all-reduce on 8 ranks: out of place one record per rank and no wait, in place
    through the lowering's scratch; bit-identical to the host backend."""
    from kernels.native.layer import NativeLayer
    from synth.baselines import baseline
    from synth.ir.fabric import build_fabric
    from topo_probe.machines.generators import fully_connected
    sched = baseline("oneshot", build_fabric(fully_connected(8)), "allreduce")
    lay = NativeLayer()
    for count, dt in ((256, "float32"), (8 * 1000 + 5, "bfloat16"), (3, "int32")):
        _run(sched, count, dt, "sum", inplace, lay, seed=count)
    if not inplace:
        assert all(ctx.dp.num_records == 8 and len(ctx.dp.waits) == 0 for ctx in lay._contexts.values())


# ---------------------------------------------------------------- the LL protocol
@pytest.fixture(scope="module")
def ll_layer():
    from kernels.native.layer import NativeLayer
    return NativeLayer(protocol="ll")


@pytest.mark.parametrize("coll", ALL)
@pytest.mark.parametrize("n", [2, 3, 8])
def test_ll_every_collective(ll_layer, coll, n):
    """LL lines and passes on the card: every collective, ring and direct, uneven counts; bit-identical
    to the host backend (``_run``), out of place and in place."""
    root = 1 if coll in ROOTED else None
    for sched in ([ring(coll, n, 2)] if coll in ("allreduce", "allgather", "reducescatter") else []) + \
            [direct(coll, n, 2, root)]:
        for count in (1, 37, 4096 + 3):
            _run(sched, count, "float32", "sum", False, ll_layer)
        _run(sched, 301, "int64", "sum", True, ll_layer)
    assert all(ctx.dp.protocol == "ll" for ctx in ll_layer._contexts.values())


@pytest.mark.parametrize("dt", ["float16", "float64", "int8", "uint64", "int32"])
@pytest.mark.parametrize("op", OPS)
def test_ll_dtypes_and_ops(ll_layer, dt, op):
    _run(direct("allreduce", 4, 1), 1000 + 5, dt, op, False, ll_layer, seed=5)
    _run(ring("allreduce", 3, 1), 333, dt, op, False, ll_layer, seed=6)


def test_ll_repeated_calls_replay_a_graph_with_fresh_lines():
    """Graph replays of an LL program with new contents each call: a line of an earlier call
    taken for fresh would give the earlier call's sum."""
    from kernels import Communicator
    from kernels.native.layer import NativeLayer
    from synth.baselines import baseline
    from synth.ir.fabric import build_fabric
    from topo_probe.machines.generators import fully_connected
    layer = NativeLayer(protocol="ll")
    comm = Communicator(8, plan=False, backend=layer)
    xs = [cp.full(4096, r + 1, cp.float32) for r in range(8)]
    ys = [cp.empty(4096, cp.float32) for _ in range(8)]
    for k in range(20):
        for r in range(8):
            xs[r][...] = r + 1 + k
        comm.all_reduce(xs, ys)
        assert all(float(cp.asnumpy(y).min()) == float(cp.asnumpy(y).max()) == 36 + 8 * k for y in ys), k
    assert any(b["graphs"] for ctx in layer._contexts.values() for b in ctx._bindings.values())
    sched = baseline("direct", build_fabric(fully_connected(8)), "allreduce")
    _run(sched, 8 * 512, "float32", "sum", False, layer, repeats=6)


def test_ll_line_that_never_arrives_raises_execution_timeout():
    import dataclasses
    from kernels.backends.executor import program_for
    from kernels.native.launcher import NativeContext
    from topo_probe.errors import ExecutionTimeout
    prog = program_for(direct("allreduce", 3, 1), 3 * 64, np.float32)
    ctx = NativeContext(prog, [0, 0, 0], timeout_s=0.2, protocol="ll")
    good = ctx.dp
    recs = good.records.copy()
    recs[:, 0] &= ~(0xFF << 32)                 # no record writes its LL lines
    ctx.dp = dataclasses.replace(good, records=recs)
    bufs = [{"input": cp.ones(3 * 64, cp.float32), "output": cp.zeros(3 * 64, cp.float32)} for _ in range(3)]
    ctx.run(bufs, graphs=False)
    cp.cuda.runtime.deviceSynchronize()
    with pytest.raises(ExecutionTimeout, match="an LL line"):
        ctx.check()
    ctx.dp = good
    ctx._bindings.clear()
    ctx.run(bufs, graphs=False)
    assert float(bufs[0]["output"][0]) == 3.0
