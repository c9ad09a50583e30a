"""kernels.backends.cupy_executor on the fake runtime (tests/_fake_device.py): routes, events, fallbacks.

The fake runs the backend's real command stream with NumPy and fails on any race (a read or
write not ordered by an event wait after another stream's access), on peer access used
without being enabled, and on host reads not ordered after the writes.
"""

import sys
import types
import warnings

import numpy as np
import pytest
from _schedules import (
    ALL,
    alloc_buffers,
    baseline_schedule,
    check_result,
    direct,
    make_inputs,
    random_schedule,
    ring,
    topology,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernels.backends.cupy_executor as cb
from kernels.backends.cupy_executor import CupyLayer, CupyRuntime, plan_program, plan_routes
from kernels.backends.cupy_plan import host_chains
from kernels.backends.executor import program_for, run_schedule
from kernels.backends.reference import run_reference
from _fake_device import FakeOrderingError, FakeRuntime
from synth.ir.collectives import ROOTED
from topo_probe.errors import BufferLayoutError, DeviceUnavailable

PCIE = topology("pcie-8gpu-2socket")       # GPUs 0-3 and 4-7 peer-capable, across sockets not


def to_fake(rt, coll, n, count, sends, dtype, root, inplace, devices=None):
    """Host test buffers -> fake device buffers, keeping NCCL in-place aliasing."""
    sb, rb = alloc_buffers(coll, n, count, sends, dtype, root, inplace)
    devices = devices or list(range(n))
    dsb, drb = [None] * n, [None] * n
    for r in range(n):
        d = devices[r]
        if inplace and sb[r] is not None and rb[r] is not None:
            if coll in ("reducescatter", "scatter"):
                dsb[r] = rt.to_device(d, sb[r])
                drb[r] = dsb[r][r * count:(r + 1) * count]
            else:
                drb[r] = rt.to_device(d, rb[r])
                dsb[r] = drb[r][r * count:(r + 1) * count] if coll in ("allgather", "gather") else drb[r]
            continue
        dsb[r] = None if sb[r] is None else rt.to_device(d, sb[r])
        drb[r] = None if rb[r] is None else rt.to_device(d, rb[r])
    return dsb, drb


def run_fake(sched, layer, rt, count=7, dtype="float32", op="sum", inplace=False, devices=None, seed=0):
    n = sched.ranks
    sends = make_inputs(sched.collective, n, count, dtype, op, sched.root, np.random.default_rng(seed))
    dsb, drb = to_fake(rt, sched.collective, n, count, sends, dtype, sched.root, inplace, devices)
    before = [None if x is None else x.copy() for x in dsb]
    run_schedule(sched, dsb, drb, op=op, backend=layer)
    for d in sorted(set(devices or range(n))):
        rt.sync_stream(rt.current_stream(d))      # what cupy's .get() does on the current stream
    got = [None if x is None else rt.to_host(x) for x in drb]
    check_result(sched.collective, n, count, sends, got, op, sched.root, dtype)
    if not inplace:
        assert all(x is None or np.array_equal(x, y) for x, y in zip(dsb, before))
    return rt


def pcie_runtime(**kw):
    return FakeRuntime(8, can_access=lambda d, p: PCIE.p2p(p, d).supported, **kw)


@pytest.mark.parametrize("coll", ALL)
def test_peer_only_where_topology_allows_else_staged(coll):
    root = 5 if coll in ROOTED else None
    sched = baseline_schedule("pcie-8gpu-2socket", "ring", coll, root, 2)
    rt = pcie_runtime()
    run_fake(sched, CupyLayer("auto", topology=PCIE, runtime=rt), rt)
    peer = [c for c in rt.calls if c[0] == "copy_peer"] + [c for c in rt.calls if c[0] == "reduce" and c[1] != c[2]]
    assert peer, "a ring on this box crosses peer-capable pairs"
    assert all(PCIE.p2p(c[2], c[1]).supported for c in peer)
    routes = plan_routes(program_for(sched, 7, "float32"), list(range(8)),
                         lambda d, p: PCIE.p2p(p, d).supported)
    staged = [o for o in program_for(sched, 7, "float32").ops() if routes[o.id] == "staged"]
    assert staged and all(not PCIE.p2p(o.src.rank, o.rank).supported for o in staged)
    assert rt.count("d2h") == rt.count("h2d") == len(staged)
    enabled = [c[1:] for c in rt.calls if c[0] == "enable_peer_access"]
    assert len(enabled) == len(set(enabled)) and all(PCIE.p2p(p, d).supported for d, p in enabled)
    assert rt.count("synchronize") == 0          # no device-wide sync inside the collective


def test_all_peer_box_never_stages_and_enables_each_pair_once():
    rt = FakeRuntime(8)
    layer = CupyLayer(runtime=rt, topology=topology("dgx-a100"))
    sched = baseline_schedule("dgx-a100", "direct", "alltoall", None, 1)
    run_fake(sched, layer, rt)
    run_fake(sched, layer, rt, seed=1)            # second call: nothing enabled again
    assert rt.count("d2h") == rt.count("h2d") == 0
    assert rt.count("enable_peer_access") == 56


def test_p2p_never_always_stages():
    rt = FakeRuntime(4)
    run_fake(ring("allreduce", 4, 2), CupyLayer("never", runtime=rt), rt, count=16, op="avg")
    assert rt.count("copy_peer") == rt.count("enable_peer_access") == rt.count("can_access_peer") == 0
    assert all(c[1] == c[2] for c in rt.calls if c[0] == "reduce")
    assert rt.count("d2h") == rt.count("h2d") == 2 * 3 * 4 * 2


def test_enable_failure_falls_back_with_one_warning():
    rt = FakeRuntime(4, fail_enable={(1, 0), (2, 1)})
    layer = CupyLayer(runtime=rt)
    sched = ring("allgather", 4)
    with pytest.warns(RuntimeWarning, match=r"enabling peer access failed for GPU 1 -> GPU 0 .*GPU 2 -> GPU 1"):
        run_fake(sched, layer, rt)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_fake(sched, layer, rt, seed=2)        # remembered: no second warning, still right
    assert rt.count("enable_peer_access") == 4
    peer_pairs = {(c[1], c[2]) for c in rt.calls if c[0] == "copy_peer"}
    assert peer_pairs == {(3, 2), (0, 3)}
    assert {(c[1]) for c in rt.calls if c[0] == "h2d"} == {1, 2}


def test_dependent_steps_are_ordered_by_events():
    rt = FakeRuntime(4)
    run_fake(ring("allreduce", 4), CupyLayer(runtime=rt), rt, dtype="int64")
    waits = rt.count("wait")
    # ring allreduce: every op after the first step reads the left neighbour's fresh result
    assert waits >= 4 * (2 * 3 - 1)


def test_the_fake_catches_a_missing_event_wait(monkeypatch):
    real = cb.plan_program

    def no_waits(*a, **k):
        plan = real(*a, **k)
        plan.commands = [c for c in plan.commands if c.kind != "wait"]
        return plan

    monkeypatch.setattr(cb, "plan_program", no_waits)
    rt = FakeRuntime(3)
    with pytest.raises(FakeOrderingError, match="without an event wait"):
        run_fake(ring("allgather", 3), CupyLayer(runtime=rt), rt)


def test_the_fake_catches_host_reads_before_sync():
    rt = FakeRuntime(2)
    sends = [rt.to_device(r, np.full(2, float(r))) for r in range(2)]
    recvs = [rt.to_device(r, np.zeros(4)) for r in range(2)]
    run_schedule(ring("allgather", 2), sends, recvs, backend=CupyLayer(runtime=rt))
    with pytest.raises(FakeOrderingError, match="without synchronizing"):
        rt.to_host(recvs[0])
    rt.sync_stream(rt.current_stream(0))
    assert rt.to_host(recvs[0]).tolist() == [0.0, 0.0, 1.0, 1.0]


def test_ranks_sharing_a_gpu_copy_locally():
    rt = FakeRuntime(2)
    devs = [0, 0, 1, 1]
    run_fake(direct("allreduce", 4, 1), CupyLayer(runtime=rt, devices=devs), rt, devices=devs)
    assert rt.count("enable_peer_access") == 2 and rt.count("copy") > 0


def test_plan_waits_are_minimal_per_stream_pair():
    prog = program_for(ring("allgather", 4), 5, "float32")
    plan = plan_program(prog, [0, 1, 2, 3], lambda d, p: True)
    assert plan.waits == (3 - 1) * 4 and plan.pinned_elems == 0    # one wait per op after the first step
    staged = plan_program(prog, [0, 1, 2, 3], lambda d, p: False)
    # two halves (even / odd steps) of one step's staged bytes; local epilogue copies stay local
    assert staged.pinned_elems == 2 * 4 * 5
    assert {staged.routes[o.id] for o in prog.ops() if o.remote} == {"staged"}
    assert {staged.routes[o.id] for o in prog.ops() if not o.remote} == {"local"}


@settings(derandomize=True, deadline=None, database=None, max_examples=150,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_fake_gpu_matches_numpy_for_any_peer_matrix(data):
    coll = data.draw(st.sampled_from(ALL))
    n = data.draw(st.integers(1, 5))
    sched = random_schedule(coll, n, data.draw(st.integers(1, 3)), data.draw(st.integers(0, n - 1)),
                            data.draw(st.integers(0, 50)))
    matrix = data.draw(st.lists(st.booleans(), min_size=n * n, max_size=n * n))
    fails = set(data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=2)))
    rt = FakeRuntime(n, can_access=lambda d, p: matrix[d * n + p], fail_enable=fails)
    layer = CupyLayer(data.draw(st.sampled_from(["auto", "never"])), runtime=rt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        run_fake(sched, layer, rt, count=data.draw(st.integers(0, 9)),
                 dtype=data.draw(st.sampled_from(["float32", "int32", "float16", "bfloat16", "uint64", "int8"])),
                 op=data.draw(st.sampled_from(["sum", "max", "avg"])), inplace=data.draw(st.booleans()),
                 seed=data.draw(st.integers(0, 99)))


# ---------------------------------------------------------------------------- no GPU
def _fake_cupy(available=True, error=None):
    cuda = types.SimpleNamespace(is_available=lambda: available)

    def count():
        raise error

    cuda.runtime = types.SimpleNamespace(getDeviceCount=count)
    return types.SimpleNamespace(cuda=cuda)


def test_no_cupy_is_device_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)          # import cupy -> ImportError
    with pytest.raises(DeviceUnavailable, match="no usable GPU"):
        CupyRuntime()


@pytest.mark.parametrize("mod,match", [
    (_fake_cupy(available=False), "found no usable CUDA device"),
    (_fake_cupy(error=type("CUDARuntimeError", (RuntimeError,), {})("cudaErrorNoDevice")), "CUDARuntimeError"),
    (_fake_cupy(error=type("NVMLError_LibraryNotFound", (Exception,), {})()), "NVMLError_LibraryNotFound"),
])
def test_cupy_without_gpu_is_device_unavailable(monkeypatch, mod, match):
    monkeypatch.setitem(sys.modules, "cupy", mod)
    with pytest.raises(DeviceUnavailable, match=match):
        CupyRuntime()
    with pytest.raises(DeviceUnavailable):
        run_schedule(ring("allgather", 2), [np.zeros(1)] * 2, [np.zeros(2)] * 2, backend=CupyLayer())


@pytest.mark.gpu
def test_real_gpus_match_numpy():
    try:
        rt = CupyRuntime()
    except DeviceUnavailable as exc:
        pytest.skip(f"no GPU: {exc}")
    import cupy
    n = min(rt.device_count(), 4)
    devs = list(range(n)) if n > 1 else [0, 0, 0]
    sched = ring("allreduce", len(devs), 2)
    sends = make_inputs("allreduce", len(devs), 1000, "float32", "sum", None, np.random.default_rng(0))
    for p2p in ("auto", "never"):
        sb, rb = [], []
        for s, d in zip(sends, devs):
            with cupy.cuda.Device(d):
                sb.append(cupy.asarray(s))
                rb.append(cupy.empty_like(sb[-1]))
        run_schedule(sched, sb, rb, backend=CupyLayer(p2p, devices=devs))
        check_result("allreduce", len(devs), 1000, sends, [r.get() for r in rb], "sum", None, "float32")


@pytest.mark.parametrize("dtype,big", [("float16", 60000.0), ("bfloat16", 3.0e38)])
def test_half_precision_avg_of_large_values_does_not_overflow(dtype, big):
    """4 ranks x 60000 in float16: NCCL pre-multiplies by 1/4 (PreMulSum); summing first gave inf."""
    import ml_dtypes
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    sched = baseline_schedule("full4", "ring", "allreduce", None, 2)
    rt = FakeRuntime(4)
    sends = [np.full(64, big, dt) for _ in range(4)]
    dsb, drb = to_fake(rt, "allreduce", 4, 64, sends, dt, None, False, None)
    run_schedule(sched, dsb, drb, op="avg", backend=CupyLayer("auto", runtime=rt))
    for d in range(4):
        rt.sync_stream(rt.current_stream(d))
    for x in drb:
        assert np.array_equal(rt.to_host(x).astype(np.float64), np.full(64, float(np.asarray(big, dt))))


@pytest.mark.parametrize("coll", ALL)
def test_ranks_run_where_their_buffers_live_without_a_devices_list(coll):
    """No ``devices``: 4 ranks whose buffers live on GPUs [1, 1, 0, 1] of a 2-GPU box run there
    (scratch and streams too) and agree with NumPy; the plain default would have asked for
    GPUs 0-3 and refused (the one-GPU machine case: every rank on GPU 0)."""
    root = 2 if coll in ROOTED else None
    sched = baseline_schedule("full4", "ring", coll, root, 2)
    rt = FakeRuntime(2)
    run_fake(sched, CupyLayer("auto", runtime=rt), rt, devices=[1, 1, 0, 1])
    allocs = {c[1] for c in rt.calls if c[0] == "alloc"}
    assert allocs <= {0, 1}
    rt2 = FakeRuntime(1)
    run_fake(sched, CupyLayer("auto", runtime=rt2), rt2, devices=[0, 0, 0, 0])
    assert rt2.count("copy_peer") == 0 and rt2.count("enable_peer_access") == 0


def test_one_rank_with_buffers_on_two_gpus_is_refused():
    rt = FakeRuntime(2)
    sched = baseline_schedule("full4", "ring", "allreduce", None, 2)
    sends = [rt.to_device(d, np.ones(8, np.float32)) for d in (0, 1, 0, 1)]
    recvs = [rt.to_device(d, np.zeros(8, np.float32)) for d in (0, 0, 0, 1)]
    with pytest.raises(BufferLayoutError, match=r"rank 1: buffers live on GPUs \[0, 1\]"):
        run_schedule(sched, sends, recvs, backend=CupyLayer("auto", runtime=rt))


def test_events_are_reused_by_alternate_calls_and_results_stay_right():
    """The layer makes events in its first two calls only (two pools, alternate calls); later
    calls re-record them, and every call's result is still right under the fake's clocks."""
    rt = FakeRuntime(4)
    layer = CupyLayer("auto", runtime=rt)
    sched = baseline_schedule("full4", "ring", "allreduce", None, 2)
    made = []
    for seed in range(5):
        before = rt._events
        run_fake(sched, layer, rt, seed=seed)
        made.append(rt._events - before)
    assert made[0] > 0 and made[1] == made[0] and made[2:] == [0, 0, 0]
    recorded = [c[2] for c in rt.calls if c[0] == "record"]
    assert len(set(recorded)) == made[0] + made[1] < len(recorded)


def test_a_program_is_planned_once_per_gpu_layout(monkeypatch):
    """Planning was most of the layer's host time: the same program on the same GPUs is
    planned once (the result stays right), a new GPU layout is planned anew."""
    planned = []
    real = cb.plan_program
    monkeypatch.setattr(cb, "plan_program", lambda *a: planned.append(tuple(a[1])) or real(*a))
    rt = FakeRuntime(4)
    layer = CupyLayer("auto", runtime=rt)
    sched = baseline_schedule("full4", "ring", "allreduce", None, 2)
    for seed in range(3):
        run_fake(sched, layer, rt, seed=seed)
    run_fake(sched, layer, rt, devices=[1, 1, 0, 0])
    run_fake(sched, layer, rt, devices=[1, 1, 0, 0], seed=5)
    assert planned == [(0, 1, 2, 3), (1, 1, 0, 0)]


# ---------------------------------------------------------------------------- host staging of reduce chains
NO_P2P = lambda d, p: False     # noqa: E731 - every pair across PCIe root complexes: nothing peer-capable


def _reference_bits(sched, count, dtype, op, seed):
    """The reference executor's result (shares no code with the lowering), per rank."""
    n = sched.ranks
    sends = make_inputs(sched.collective, n, count, dtype, op, sched.root, np.random.default_rng(seed))
    sb, rb = alloc_buffers(sched.collective, n, count, sends, dtype, sched.root, False)
    return run_reference(sched, sb, rb, op=op)


def _chain_commands(rt):
    return [c for c in rt.calls if c[0] == "host_reduce"]


@pytest.mark.parametrize("coll", ALL)
@pytest.mark.parametrize("dtype,op", [("float32", "avg"), ("bfloat16", "sum"), ("int32", "max"), ("float16", "avg")])
def test_staged_chains_reduce_on_the_host_and_match_the_reference(coll, dtype, op):
    """P2P off everywhere: a rank reducing several staged sources in one step copies them into
    pinned memory on their owners' streams and reduces them on the host in one pass; results
    equal NumPy's and the reference executor's bit for bit."""
    root = 1 if coll in ROOTED else None
    sched = direct(coll, 4, 2, root=root)
    rt = FakeRuntime(4, can_access=NO_P2P)
    layer = CupyLayer("auto", runtime=rt)
    run_fake(sched, layer, rt, count=9, dtype=dtype, op=op, seed=3)
    plan = layer.plan(program_for(sched, 9, _schedules_dtype(dtype), op=op))
    chains = host_chains(program_for(sched, 9, _schedules_dtype(dtype), op=op), plan.routes, [0, 1, 2, 3])
    combining = coll in ("reducescatter", "allreduce", "reduce")
    assert (len(_chain_commands(rt)) > 0) == combining and len(_chain_commands(rt)) == plan.host_reduces
    assert plan.host_reduces == len(chains)
    assert all(c[3] == len(chains[i].ops) + 1 for c, i in zip(_chain_commands(rt), sorted(chains)))
    assert rt.count("reduce") == 0 if combining else True       # every reduce of direct() is in a chain
    staged_single = [o for o in program_for(sched, 9, _schedules_dtype(dtype), op=op).ops()
                     if plan.routes[o.id] == "staged" and all(o not in f.ops for f in chains.values())]
    assert rt.count("h2d") == len(staged_single) + len(chains)
    assert rt.count("d2h") == len(staged_single) + sum(len(f.ops) + 1 for f in chains.values())
    # bit for bit against the reference executor
    n = sched.ranks
    sends = make_inputs(coll, n, 9, dtype, op, root, np.random.default_rng(3))
    dsb, drb = to_fake(rt, coll, n, 9, sends, _schedules_dtype(dtype), root, False)
    run_schedule(sched, dsb, drb, op=op, backend=layer)
    for d in range(4):
        rt.sync_stream(rt.current_stream(d))
    want = _reference_bits(sched, 9, _schedules_dtype(dtype), op, 3)
    for got, w in zip(drb, want):
        if w is not None:
            assert np.array_equal(rt.to_host(got).view(np.uint8), w.view(np.uint8))


def _schedules_dtype(name):
    import ml_dtypes
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def test_chains_across_root_complexes_only_where_the_topology_says_so():
    """pcie-8gpu-2socket, ranks on GPUs [0, 4, 5, 6, 7]: rank 0's chain has only cross-socket
    sources (host-reduced); the other ranks' chains mix peer and staged sources (kept per op)."""
    devs = [0, 4, 5, 6, 7]
    sched = direct("allreduce", 5, 1)
    rt = pcie_runtime()
    layer = CupyLayer("auto", topology=PCIE, runtime=rt, devices=devs)
    run_fake(sched, layer, rt, count=10, dtype="float32", op="sum", devices=devs)
    assert [(c[1], c[3]) for c in _chain_commands(rt)] == [(0, 5)]    # on GPU 0: its own + 4 sources
    assert rt.count("copy_peer") > 0 and rt.count("reduce") > 0


def test_single_staged_reduces_keep_the_device_reduce_route():
    rt = FakeRuntime(4, can_access=NO_P2P)
    run_fake(ring("allreduce", 4), CupyLayer("auto", runtime=rt), rt, count=8)
    assert not _chain_commands(rt) and rt.count("reduce") == 4 * 3


def test_float8_chains_stay_on_the_device_route():
    import ml_dtypes
    prog = program_for(direct("allreduce", 4), 8, ml_dtypes.float8_e4m3fn)
    plan = plan_program(prog, [0, 1, 2, 3], NO_P2P)
    assert plan.host_reduces == 0 and any(c.kind == "reduce" for c in plan.commands)


def test_the_fake_catches_a_host_reduce_before_its_copies(monkeypatch):
    """Planted fault: drop the event waits just before each host reduce.  The fake must refuse
    (the host would read pinned memory a d2h copy may still be writing)."""
    real = cb.plan_program

    def early(*a, **k):
        plan = real(*a, **k)
        cmds = plan.commands
        drop = {i for i, c in enumerate(cmds) if c.kind == "wait" and any(
            d.kind == "host_reduce" and d.stream == c.stream for d in cmds[i + 1:i + 6])}
        assert drop
        plan.commands = [c for i, c in enumerate(cmds) if i not in drop]
        return plan

    monkeypatch.setattr(cb, "plan_program", early)
    rt = FakeRuntime(4, can_access=NO_P2P)
    with pytest.raises(FakeOrderingError, match="host reduce on stream .* without an event wait"):
        run_fake(direct("allreduce", 4), CupyLayer("auto", runtime=rt), rt)


def test_host_reduce_commands_wait_for_every_source_copy():
    """In the plan itself: each host reduce comes after a wait covering every d2h it reads."""
    prog = program_for(direct("reducescatter", 4, 2), 6, "float32")
    plan = plan_program(prog, [0, 1, 2, 3], NO_P2P)
    hr = [i for i, c in enumerate(plan.commands) if c.kind == "host_reduce"]
    assert len(hr) == 8
    for i in hr:
        c = plan.commands[i]
        copies = [d for d in plan.commands[:i] if d.kind == "d2h" and d.dst in c.srcs]
        assert len(copies) >= len(c.srcs) and {d.dst for d in copies} == set(c.srcs)
        assert c.dst == c.srcs[0] and len(set(c.srcs)) == len(c.srcs)
        assert plan.commands[i + 1].kind == "h2d" and plan.commands[i + 1].a == c.dst
