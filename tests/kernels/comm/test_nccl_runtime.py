"""NCCL for the plan's ``nccl`` ranges: the CuPy NCCL bridge against a fake ``cupy.cuda.nccl``
(calls, pointers, counts, group brackets), and the fallback that runs where NCCL cannot."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

from kernels import Communicator
from kernels.comm.nccl_runtime import NCCL_CALLS, NcclRuntime, nccl_available, nccl_runtime_or_none
from synth.plan.selector import ScheduleSelector
from synth.plan.size_plan import Plan, PlanEntry
from topo_probe.errors import InvalidArgument
from topo_probe.machines.generators import fully_connected


class _Buf:
    def __init__(self, ptr, dtype="float32"):
        self.data = types.SimpleNamespace(ptr=ptr)
        self.dtype = np.dtype(dtype)


def _fake_nccl(log):
    class Comm:
        def __init__(self, dev):
            self.dev = dev

        def __getattr__(self, name):
            return lambda *a: log.append((name, self.dev, a))

    mod = types.SimpleNamespace(NCCL_SUM=0, NCCL_PROD=1, NCCL_MAX=2, NCCL_MIN=3, NCCL_AVG=4, NCCL_FLOAT32=7,
                                NCCL_FLOAT16=6, NCCL_INT32=2, NCCL_INT8=0, NCCL_UINT8=1, NCCL_UINT32=3,
                                NCCL_INT64=4, NCCL_UINT64=5, NCCL_FLOAT64=8, NCCL_BFLOAT16=9)
    mod.groupStart = lambda: log.append(("groupStart",))
    mod.groupEnd = lambda: log.append(("groupEnd",))
    mod.NcclCommunicator = types.SimpleNamespace(initAll=lambda devs: [Comm(d) for d in devs])
    return mod


def test_one_call_per_rank_inside_a_group():
    log = []
    rt = NcclRuntime([0, 1, 2], nccl=_fake_nccl(log))
    sends = [_Buf(100 + r) for r in range(3)]
    recvs = [_Buf(200 + r) for r in range(3)]
    rt.run("allreduce", sends, recvs, 5, op="max")
    assert log[0] == ("groupStart",) and log[-1] == ("groupEnd",)
    assert [(c[0], c[1], c[2][:5]) for c in log[1:-1]] == [("allReduce", r, (100 + r, 200 + r, 5, 7, 2))
                                                           for r in range(3)]
    log.clear()
    rt.run("broadcast", sends, recvs, 4, root=1)
    assert [c[2][4] for c in log[1:-1]] == [1, 1, 1]                    # the root goes to every rank


def test_unsupported_dtype_and_collective_are_refused():
    rt = NcclRuntime([0, 1], nccl=_fake_nccl([]))
    with pytest.raises(InvalidArgument, match="datatype"):
        rt.run("allreduce", [_Buf(1, "complex64")] * 2, [_Buf(2, "complex64")] * 2, 3)
    with pytest.raises(InvalidArgument, match="alltoall"):
        rt.run("alltoall", [_Buf(1)] * 2, [_Buf(2)] * 2, 3)


def test_no_cupy_here_means_not_available():
    try:
        import cupy  # noqa: F401
    except ImportError:
        assert nccl_available() is False
    else:
        pytest.skip("CuPy is installed here: the real-GPU tests below check NCCL")


def test_nccl_is_not_started_where_it_cannot_run():
    """Two ranks on one GPU, or a device past the GPUs there: no initAll, None and one warning;
    NCCL's own start failing is caught the same way; a good device list gets a runtime."""
    log = []
    fake = _fake_nccl(log)
    with pytest.warns(RuntimeWarning, match=r"ranks share a GPU \(devices \[0, 0, 1\]\)"):
        assert nccl_runtime_or_none([0, 0, 1], nccl=fake, device_count=2) is None
    with pytest.warns(RuntimeWarning, match=r"not all among the 2 GPUs"):
        assert nccl_runtime_or_none([0, 2], nccl=fake, device_count=2) is None
    assert log == []

    def refuse(devs):
        raise RuntimeError("NCCL_ERROR_INVALID_USAGE")
    broken = types.SimpleNamespace(**{**vars(fake), "NcclCommunicator": types.SimpleNamespace(initAll=refuse)})
    with pytest.warns(RuntimeWarning, match="NCCL did not start .RuntimeError: NCCL_ERROR_INVALID_USAGE"):
        assert nccl_runtime_or_none([0, 1], nccl=broken, device_count=2) is None
    rt = nccl_runtime_or_none([1, 0], nccl=fake, device_count=2)
    assert isinstance(rt, NcclRuntime) and [c.dev for c in rt.comms] == [1, 0]


def _plan_with_nccl(folder, topo):
    folder.mkdir(parents=True)
    Plan(topo.name, topo.fingerprint(), [PlanEntry("allreduce", 0, None, "nccl")]).save(folder / "plan.json")
    return folder / "plan.json"


def test_selector_marks_nccl_entries_with_the_best_baseline_as_fallback(tmp_path):
    topo = fully_connected(4)
    sel = ScheduleSelector(topo, plan=_plan_with_nccl(tmp_path / "p", topo))
    c = sel.select("allreduce", 1 << 20)
    assert c.nccl and c.label == "plan:nccl" and c.schedule.meta["baseline"] == sel.chooser.best(
        "allreduce", None, 1 << 20)[1]
    assert json.loads((tmp_path / "p" / "plan.json").read_text())["entries"][0]["schedule"] == "nccl"


def test_communicator_on_the_host_runs_the_fallback_correctly(tmp_path):
    topo = fully_connected(4)
    comm = Communicator(4, topology=topo, plan=_plan_with_nccl(tmp_path / "p", topo))
    xs = [np.arange(10, dtype=np.float32) * (r + 1) for r in range(4)]
    ys = [np.empty(10, np.float32) for _ in range(4)]
    comm.all_reduce(xs, ys)
    want = np.arange(10, dtype=np.float32) * 10
    assert all(np.array_equal(y, want) for y in ys)


# ---------------------------------------------------------------- on a real GPU (skipped without)
def _gpus():
    if not nccl_available():
        pytest.skip("no GPU with NCCL through CuPy here")
    import cupy
    return cupy, cupy.cuda.runtime.getDeviceCount()


@pytest.mark.gpu
@pytest.mark.parametrize("collective", NCCL_CALLS)
@pytest.mark.parametrize("dtype,op", [("float32", "sum"), ("float16", "avg"), ("int32", "max"), ("float64", "min")])
def test_real_nccl_matches_numpy(collective, dtype, op):
    """NCCL through CuPy, one rank per GPU (up to 4), every single-call collective against NumPy
    (the executor tests' inputs and expectations): pointers, counts, datatype and op constants
    reach NCCL as meant."""
    from _schedules import alloc_buffers, check_result, make_inputs
    cupy, ndev = _gpus()
    n, count = min(ndev, 4), 1003
    root = n - 1 if collective in ("broadcast", "reduce") else None
    op = op if collective in ("allreduce", "reducescatter", "reduce") else "sum"
    xs = make_inputs(collective, n, count, dtype, op, root, np.random.default_rng(7))
    host_sends, host_recvs = alloc_buffers(collective, n, count, xs, dtype, root, inplace=False, fill=-99)
    sends, recvs = [], []
    for r in range(n):
        with cupy.cuda.Device(r):
            sends.append(None if host_sends[r] is None else cupy.asarray(host_sends[r]))
            recvs.append(None if host_recvs[r] is None else cupy.asarray(host_recvs[r]))
    NcclRuntime(list(range(n))).run(collective, sends, recvs, count, op=op, root=root or 0)
    for r in range(n):
        cupy.cuda.Device(r).synchronize()
    check_result(collective, n, count, xs, [None if y is None else y.get() for y in recvs], op, root, dtype)


@pytest.mark.gpu
def test_real_communicator_with_ranks_sharing_a_gpu_runs_the_fallback(tmp_path):
    """NCCL refuses two ranks on one GPU: the Communicator warns once and its plan's nccl range
    runs the fastest schedule, with the right sum."""
    cupy, _ = _gpus()
    topo = fully_connected(3)
    comm = Communicator([0, 0, 0], topology=topo, plan=_plan_with_nccl(tmp_path / "p", topo))
    xs = [cupy.arange(10, dtype=cupy.float32) * (r + 1) for r in range(3)]
    ys = [cupy.empty(10, cupy.float32) for _ in range(3)]
    with pytest.warns(RuntimeWarning, match="ranks share a GPU"):
        comm.all_reduce(xs, ys)
    cupy.cuda.Device(0).synchronize()
    assert comm._nccl is False
    assert all(np.array_equal(y.get(), np.arange(10, dtype=np.float32) * 6) for y in ys)


@pytest.mark.gpu
def test_real_communicator_calls_nccl_for_its_nccl_range(tmp_path):
    cupy, ndev = _gpus()
    if ndev < 2:
        pytest.skip(f"{ndev} GPU here: a Communicator of one rank never calls NCCL")
    topo = fully_connected(ndev)
    comm = Communicator(list(range(ndev)), topology=topo, plan=_plan_with_nccl(tmp_path / "p", topo))
    xs, ys = [], []
    for r in range(ndev):
        with cupy.cuda.Device(r):
            xs.append(cupy.arange(10, dtype=cupy.float32) * (r + 1))
            ys.append(cupy.empty(10, cupy.float32))
    comm.all_reduce(xs, ys)
    for r in range(ndev):
        cupy.cuda.Device(r).synchronize()
    assert isinstance(comm._nccl, NcclRuntime)
    want = np.arange(10, dtype=np.float32) * sum(range(1, ndev + 1))
    assert all(np.array_equal(y.get(), want) for y in ys)


# ---------------------------------------------------------------- the plan decides, the call looks up
def _two_range_plan(folder, topo, sched_file):
    """allreduce: our schedule below 1 MiB, NCCL (fallback: the same schedule) from 1 MiB."""
    folder.mkdir(parents=True, exist_ok=True)
    Plan(topo.name, topo.fingerprint(),
         [PlanEntry("allreduce", 0, 1 << 20, sched_file), PlanEntry("allreduce", 1 << 20, None, "nccl",
                                                                    fallback=sched_file)]).save(folder / "plan.json")
    return folder / "plan.json"


@pytest.mark.parametrize("count,want", [(16, "schedule"), (1 << 18, "nccl")])
def test_communicator_on_gpus_runs_what_the_plan_says_without_a_model(tmp_path, monkeypatch, count, want):
    """On (fake) GPUs where NCCL can run, the Communicator runs the plan entry's choice: the
    schedule below 1 MiB (right sum, whatever a model of NCCL would say: building one fails the
    test), NCCL from 1 MiB; ``last_route`` names the plan file, the range and what ran."""
    import synth.plan.versus_nccl as versus
    from _fake_device import FakeRuntime
    from _schedules import direct
    from kernels.backends.cupy_executor import CupyLayer
    from synth.formats.schedule_file import save_schedule

    monkeypatch.setattr(versus, "nccl_curve", lambda *a, **kw: pytest.fail("a model of NCCL was built per call"))
    topo = fully_connected(4)
    (tmp_path / "p").mkdir()
    save_schedule(direct("allreduce", 4), tmp_path / "p" / "ar.json")
    plan = _two_range_plan(tmp_path / "p", topo, "ar.json")
    rt, called = FakeRuntime(4), []
    comm = Communicator(4, topology=topo, plan=plan, backend=CupyLayer(runtime=rt))
    comm._nccl = types.SimpleNamespace(run=lambda name, s, r, n, **kw: called.append((name, n)))
    xs = [rt.to_device(r, np.full(count, r + 1, np.float32)) for r in range(4)]
    ys = [rt.to_device(r, np.zeros(count, np.float32)) for r in range(4)]
    comm.all_reduce(xs, ys)
    route = comm.last_route
    assert route.plan == str(plan) and route.as_planned
    if want == "nccl":
        assert called == [("allreduce", count)] and route.ran == route.planned == "nccl"
        assert route.range == (1 << 20, None) and route.layer == "nccl" and comm.last_schedule is None
    else:
        for r in range(4):
            rt.sync_stream(rt.current_stream(r))
        assert called == [] and all(np.array_equal(rt.to_host(y), np.full(count, 10, np.float32)) for y in ys)
        assert route.ran == route.planned == "ar.json" and route.range == (0, 1 << 20) and route.layer == "cupy-ops"


@pytest.mark.parametrize("why,collective,dtype", [
    ("NCCL did not start", "allreduce", "float32"),
    ("no datatype for float8_e4m3fn", "allreduce", "float8_e4m3fn"),
])
def test_nccl_range_where_nccl_cannot_run_runs_the_fallback_and_says_why(tmp_path, why, collective, dtype):
    """The fallback rule: the plan's nccl range runs the entry's fallback schedule where NCCL
    did not start, or has no datatype for the arrays; the sum is right and the route says why."""
    import ml_dtypes  # noqa: F401 - registers float8_e4m3fn with NumPy
    from _fake_device import FakeRuntime
    from _schedules import direct
    from kernels.backends.cupy_executor import CupyLayer
    from synth.formats.schedule_file import save_schedule

    topo = fully_connected(4)
    (tmp_path / "p").mkdir()
    save_schedule(direct("allreduce", 4), tmp_path / "p" / "ar.json")
    plan = _two_range_plan(tmp_path / "p", topo, "ar.json")
    rt = FakeRuntime(4)
    comm = Communicator(4, topology=topo, plan=plan, backend=CupyLayer(runtime=rt))
    if why == "NCCL did not start":
        comm._nccl, comm._nccl_reason = False, "NCCL did not start (RuntimeError: test)"
    else:
        comm._nccl = types.SimpleNamespace(run=lambda *a, **kw: pytest.fail("NCCL ran a float8 call"))
    count = (1 << 20) // np.dtype(dtype).itemsize          # 1 MiB: the nccl range
    xs = [rt.to_device(r, np.full(count, r + 1, dtype)) for r in range(4)]
    ys = [rt.to_device(r, np.zeros(count, dtype)) for r in range(4)]
    comm.all_reduce(xs, ys)
    for r in range(4):
        rt.sync_stream(rt.current_stream(r))
    assert all(np.array_equal(rt.to_host(y), np.full(count, 10, dtype)) for y in ys)
    route = comm.last_route
    assert route.planned == "nccl" and route.ran == "ar.json" and why in route.reason and not route.as_planned


def test_busiest_rank_records_on_the_schedule_track_the_native_executors_count():
    """The plan's count of the busiest rank's records (synth.plan.decision, on the schedule)
    against the native executor's own (its device program, one channel, no slices), on hand-
    counted cases: one-shot all_reduce 1 per rank (its 56 per-chunk reduces join), direct 8 (a
    chain of seven reduces, seven copies), ring on 4 ranks 2(n-1) = 6; allgather direct 8 (seven
    copies and the own block)."""
    from _schedules import direct, ring

    from kernels.backends.executor import program_for
    from kernels.native.device_program import build_device_program
    from synth.baselines import baseline
    from synth.ir.fabric import build_fabric
    from synth.plan.decision import busiest_rank_records

    def native(sched, count):
        dp = build_device_program(program_for(sched, count, np.float32), 1, slices=1)
        return int(max(dp.block_start[b + 1] - dp.block_start[b] for b in range(dp.num_blocks)))

    one = baseline("oneshot", build_fabric(fully_connected(8)), "allreduce")
    for sched, count, want in ((one, 256, 1), (direct("allreduce", 8), 256, 8), (ring("allreduce", 4), 1 << 22, 6),
                               (direct("allgather", 8), 256, 8)):
        assert native(sched, count) == want
        assert busiest_rank_records(sched) == want


def test_the_plans_record_count_never_exceeds_the_native_executors_on_the_committed_schedules():
    """Over every schedule file the committed plans run, the plan's count (on the schedule) is at
    most the native executor's own count and equal on the one-step schedules (the count the
    decision adds is a lower bound of the executor's: a later step's chunk runs that the device
    program splits further, a SAT schedule's scratch copies, are not counted; 64 Ki elements: no
    chunk is empty)."""
    from _paths import ROOT

    from kernels.backends.executor import program_for
    from kernels.native import device_program
    from synth.formats.schedule_file import load_schedule
    from synth.plan import decision

    assert decision.MAX_CHAIN == device_program.MAX_CHAIN
    files = sorted({p.parent / e["schedule"] for p in ROOT.glob("results/*/plan.json")
                    for e in json.loads(p.read_text())["entries"] if e["schedule"] != "nccl"})
    assert len(files) >= 40
    for f in files:
        sched = load_schedule(f)
        dp = device_program.build_device_program(program_for(sched, 1 << 16, np.float32), 1, slices=1)
        native = int(max(dp.block_start[b + 1] - dp.block_start[b] for b in range(dp.num_blocks)))
        ours = decision.busiest_rank_records(sched)
        assert ours <= native, f"{f}: {ours} > {native}"
        if len(sched.steps) == 1:
            assert ours == native, f"{f}: {ours} != {native}"
