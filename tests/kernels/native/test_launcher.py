"""kernels.native.launcher without a GPU: CuPy replaced by tests/kernels/native/_fake_cupy.py,
whose stand-in kernel interprets exactly the arrays the launcher hands the real one (resolved
records with absolute addresses, resolved flag waits, epochs, status words).  Checked against
the host backend bit for bit: direct launches, graph capture and replay, bound calls, chains,
blocks longer than the kernel stages in shared memory, several GPUs, and timeouts."""

import contextlib

import numpy as np
import pytest
from _fake_cupy import DevArray, FakeCupy
from _schedules import alloc_buffers, direct, make_inputs, ring
from hypothesis import given, settings
from hypothesis import strategies as st

import kernels.native.launcher as launcher
from kernels.backends.executor import program_for, run_schedule
from synth.ir.collectives import ROOTED
from topo_probe.errors import ExecutionTimeout


@pytest.fixture
def fake(monkeypatch):
    cp = FakeCupy(seed=1, sms=132)
    monkeypatch.setattr(launcher, "_cupy", lambda: cp)
    monkeypatch.setattr(launcher, "_KERNELS", {})
    return cp


@contextlib.contextmanager
def fake_launcher(seed: int):
    """The launcher on a fresh CuPy stand-in of ``seed`` for the duration (hypothesis tests cannot
    take pytest's monkeypatch fixture per example)."""
    cp = FakeCupy(seed=seed)
    launcher._cupy, saved = (lambda: cp), launcher._cupy
    launcher._KERNELS.clear()
    try:
        yield cp
    finally:
        launcher._cupy = saved
        launcher._KERNELS.clear()


def _case(sched, count, dtype, op, seed=0):
    coll, n, root = sched.collective, sched.ranks, sched.root
    sends = make_inputs(coll, n, count, dtype, op, root, np.random.default_rng(seed))
    hs, hr = alloc_buffers(coll, n, count, sends, dtype, root, False)
    run_schedule(sched, hs, hr, op=op, backend="host")
    ds, dr = alloc_buffers(coll, n, count, sends, dtype, root, False, fill=3)
    prog = program_for(sched, count, np.dtype(dtype), op=op)
    user = [{"send": None if s is None else s.reshape(-1).view(DevArray),
             "recv": None if r is None else r.reshape(-1).view(DevArray)} for s, r in zip(ds, dr)]
    bufs = [{name: user[r][which] for name, which in prog.bindings[r].items()} for r in range(n)]
    return prog, bufs, dr, hr


def _same(got, want):
    for r, (g, w) in enumerate(zip(got, want)):
        if w is not None:
            assert np.array_equal(g.view(np.uint8), w.view(np.uint8)), f"rank {r} differs from the host backend"


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.data())
def test_launches_graphs_and_bound_calls_match_the_host_backend(data):
    coll = data.draw(st.sampled_from(["allreduce", "allgather", "reducescatter", "alltoall", "reduce", "broadcast"]))
    n = data.draw(st.integers(2, 8))
    root = data.draw(st.integers(0, n - 1)) if coll in ROOTED else None
    sched = ring(coll, n, data.draw(st.integers(1, 2))) if coll in ("allreduce", "allgather", "reducescatter") \
        and data.draw(st.booleans()) else direct(coll, n, data.draw(st.integers(1, 2)), root)
    dtype = data.draw(st.sampled_from(["float32", "float16", "int32", "bfloat16", "float8_e4m3fn", "float64"]))
    op = data.draw(st.sampled_from(["sum", "prod", "max", "min", "avg"]))
    count = data.draw(st.sampled_from([1, 5, 64, 301]))
    with fake_launcher(data.draw(st.integers(0, 99))):
        prog, bufs, got, want = _case(sched, count, dtype, op, seed=3)
        ctx = launcher.NativeContext(prog, [0] * n, channels=data.draw(st.integers(1, 3)),
                                     fuse=data.draw(st.booleans()),
                                     tile_bytes=data.draw(st.sampled_from([None, 16, 48, 32 << 10])))
        for _ in range(3):                      # launch, capture + replay, replay
            ctx.run(bufs)
        _same(got, want)
        ctx.bound(bufs)()
        _same(got, want)
        assert any(b["graphs"] for b in ctx._bindings.values()) or not prog.num_ops


def test_chains_and_long_blocks(fake):
    """An 8-rank direct all-reduce with fused chains, and a 40-rank ring whose blocks hold 78
    records (more than the kernel stages in shared memory)."""
    for sched, fuse in ((direct("allreduce", 8), True), (ring("allreduce", 40), False)):
        prog, bufs, got, want = _case(sched, 8 * 40 + 3, "float16", "avg")
        ctx = launcher.NativeContext(prog, [0] * sched.ranks, fuse=fuse)
        ctx.run(bufs)
        _same(got, want)
        if fuse:
            assert ctx.dp.num_records == 8 * 8


def test_ranks_on_several_gpus(fake):
    """Ranks on GPUs [1, 0, 1, 0]: one launch per GPU, blocks numbered by GPU, flags read
    across launches (the stand-in runs GPU 0's launch first, so GPU 0's blocks must not wait
    for GPU 1's: a direct all-gather has no waits)."""
    prog, bufs, got, want = _case(direct("allgather", 4), 33, "int64", "sum")
    ctx = launcher.NativeContext(prog, [1, 0, 1, 0])
    assert ctx.scope_sys and sorted(ctx._per_dev) == [0, 1]
    ctx.run(bufs)
    _same(got, want)
    assert fake.launches == 2


def test_a_stuck_wait_becomes_execution_timeout(fake):
    prog, bufs, got, want = _case(ring("allreduce", 3), 12, "float32", "sum")
    ctx = launcher.NativeContext(prog, [0, 0, 0], timeout_s=0.5)
    good = ctx._per_dev[0]["waits"]
    bad = good.copy()
    bad[1] = 10_000
    ctx._per_dev[0]["waits"] = bad
    ctx.run(bufs, graphs=False)
    with pytest.raises(ExecutionTimeout, match=r"rank \d \(channel 0\) waited over 0.5 s at record \d+ for rank \d"):
        ctx.run(bufs, graphs=False)           # the next call reports the stuck one, flags reset
    ctx._per_dev[0]["waits"] = good
    ctx.run(bufs, graphs=False)
    _same(got, want)


def test_more_blocks_than_the_gpu_holds_is_refused(fake):
    """All blocks must be resident (they wait on each other): 40 ranks on a GPU that holds 8
    blocks is a one-line refusal, not a hang."""
    from topo_probe.errors import DeviceUnavailable
    small = FakeCupy(sms=4)
    launcher._cupy, saved = (lambda: small), launcher._cupy
    try:
        prog, *_ = _case(ring("allreduce", 40), 40, "float32", "sum")
        with pytest.raises(DeviceUnavailable, match="GPU 0 would need 40 resident blocks, it holds 8"):
            launcher.NativeContext(prog, [0] * 40)
    finally:
        launcher._cupy = saved


def test_scratch_that_does_not_fit_on_the_gpu_is_refused(monkeypatch):
    """A 4-rank ring reduce-scatter of 8 Mi float32 per block keeps partials in scratch; with
    16 MiB free the context refuses in one line before allocating anything."""
    from topo_probe.errors import InvalidArgument
    small = FakeCupy(sms=132, free_bytes=16 << 20)
    monkeypatch.setattr(launcher, "_cupy", lambda: small)
    monkeypatch.setattr(launcher, "_KERNELS", {})
    prog = program_for(ring("reducescatter", 4), 8 << 20, np.float32)
    need = sum(s.get("scratch", 0) for s in prog.sizes) * 4
    assert need > 16 << 20
    with pytest.raises(InvalidArgument, match=r"reducescatter: the schedule's scratch on GPU 0 needs 256.0 MiB "
                                              r"of GPU memory; 16.0 MiB available"):
        launcher.NativeContext(prog, [0] * 4)


@pytest.mark.parametrize("coll", ["allgather", "gather", "scatter", "alltoall", "broadcast"])
@pytest.mark.parametrize("n,count,dtype", [(2, 1, "float32"), (3, 1001, "float16"), (5, 64, "int64")])
def test_copy_only_programs_on_one_gpu_run_as_copies(fake, monkeypatch, coll, n, count, dtype):
    """A direct gather / scatter / all-gather / all-to-all / broadcast with every rank on one GPU
    runs as device-to-device copies (no interpreter launch), captured into a graph from the
    second call, bit-identical to the host backend on every call; the chunks of one transfer
    are one copy (2 chunks per rank here; out of place every rank's own part is copied too:
    n x n copies per call for all-gather and all-to-all, n for the rooted ones)."""
    monkeypatch.setattr(launcher, "COPY_ROUTE_MIN_BYTES", 1)
    root = 1 if coll in ROOTED else None
    prog, bufs, got, want = _case(direct(coll, n, 2, root), count, dtype, "sum")
    ctx = launcher.NativeContext(prog, [0] * n)
    assert ctx.route == "memcpy"
    per_call = n * n if coll in ("allgather", "alltoall") else n
    for call in range(3):                    # launch, capture + replay, replay
        for g in got:
            if g is not None:
                g[...] = 0
        before = fake.copies
        ctx.run(bufs)
        _same(got, want)
        assert fake.copies - before == per_call, f"call {call}: {fake.copies - before} copies"
    assert fake.launches == 0 and ctx._bindings and all(b["graphs"] for b in ctx._bindings.values())


def test_the_copy_route_is_only_for_copy_only_programs_on_one_gpu(fake, monkeypatch):
    """Ops with dependencies (a ring all-gather), reduces, ranks on two GPUs or ops under the
    size bar keep the interpreter."""
    monkeypatch.setattr(launcher, "COPY_ROUTE_MIN_BYTES", 1)
    for sched, devs in ((ring("allgather", 3), [0, 0, 0]), (direct("allreduce", 3), [0, 0, 0]),
                        (direct("allgather", 2), [0, 1])):
        prog, bufs, got, want = _case(sched, 64, "float32", "sum")
        ctx = launcher.NativeContext(prog, devs)
        assert ctx.route == "interpreter", sched.collective
        ctx.run(bufs)
        _same(got, want)
    monkeypatch.setattr(launcher, "COPY_ROUTE_MIN_BYTES", 64 * 4 + 1)
    prog, *_ = _case(direct("gather", 3, 1, 0), 64, "float32", "sum")
    assert launcher.NativeContext(prog, [0, 0, 0]).route == "interpreter"
