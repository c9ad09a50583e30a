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


# ---------------------------------------------------------------- NCCL or the CuPy executor
def test_nccl_wins_where_the_executor_host_time_alone_exceeds_it_and_loses_where_the_schedule_saves_more():
    """The rule of kernels.comm.nccl_choice at its two ends, with the model's own numbers:
    1 MiB all_reduce on a DGX H100: NCCL's modelled time is below the executor's host time
    alone; 1 GiB gather on a DGX-1 (NCCL's P2P reaches 3 of a GPU's 7 peers over PCIe, our ring
    rides the NVLinks): the schedule's modelled saving over NCCL exceeds the host time, so the
    executor keeps it."""
    from kernels.backends.executor import program_for
    from kernels.comm.nccl_choice import executor_host_us, nccl_beats_executor
    from synth.plan.versus_nccl import nccl_curve
    from topo_probe import get_preset

    sel = ScheduleSelector(get_preset("dgx-h100"), plan=False, warn_fallback=False)
    sched, _ = sel.chooser.best("allreduce", None, 1 << 20)
    ops = program_for(sched, (1 << 20) // 4, np.float32).num_ops
    assert nccl_curve(sel.topology, "allreduce", [1 << 20])["times"][0] < executor_host_us(ops, native=False)
    assert nccl_beats_executor(sel, "allreduce", 1 << 20, sched, ops, native=False)
    # the native executor's fixed cost (4 us + 1 us per op of the busiest rank) is a small
    # fraction of the op layer's (250 us + 35 us per op), hand-computed from the constants
    assert executor_host_us(ops, native=True) == 4.0 + ops and executor_host_us(ops, native=False) == 250 + 35 * ops

    sel = ScheduleSelector(get_preset("dgx1-v100"), plan=False, warn_fallback=False)
    sched, _ = sel.chooser.best("gather", 0, 1 << 30)
    ops = program_for(sched, (1 << 30) // 4 // 8, np.float32).num_ops
    nccl_us = nccl_curve(sel.topology, "gather", [1 << 30])["times"][0]
    assert nccl_us - 1.05 * sel.cost.schedule_time_us(sched, 1 << 30) > 1.05 * executor_host_us(ops, native=False)
    assert not nccl_beats_executor(sel, "gather", 1 << 30, sched, ops, native=False)
    assert not nccl_beats_executor(sel, "gather", 1 << 30, sched, ops, native=True)


@pytest.mark.filterwarnings("ignore:Communicator. no plan")
@pytest.mark.parametrize("nccl_wins", [True, False])
def test_communicator_on_gpus_asks_whether_nccl_beats_the_executor(monkeypatch, nccl_wins):
    """A range the plan gives a schedule, on (fake) GPUs where NCCL can run: the Communicator
    calls NCCL when NCCL beats the executor with its host time, else runs the schedule (right
    sum); it asks once per call shape."""
    import kernels.comm.nccl_choice as choice
    from kernels.backends.cupy_executor import CupyLayer
    from _fake_device import FakeRuntime

    asked, called = [], []
    monkeypatch.setattr(choice, "nccl_beats_executor", lambda *a, **kw: asked.append(a[1:3]) or nccl_wins)
    rt = FakeRuntime(4)
    comm = Communicator(4, topology=fully_connected(4), plan=False, backend=CupyLayer(runtime=rt))
    comm._nccl = types.SimpleNamespace(run=lambda name, s, r, count, **kw: called.append((name, count, kw)))
    xs = [rt.to_device(r, np.full(16, r + 1, np.float32)) for r in range(4)]
    ys = [rt.to_device(r, np.zeros(16, np.float32)) for r in range(4)]
    for _ in range(2):
        comm.all_reduce(xs, ys)
    assert asked == [("allreduce", 64)]
    if nccl_wins:
        assert called == [("allreduce", 16, {"op": "sum", "root": 0})] * 2
    else:
        for r in range(4):
            rt.sync_stream(rt.current_stream(r))
        assert called == [] and all(np.array_equal(rt.to_host(y), np.full(16, 10, np.float32)) for y in ys)


def test_native_cost_counts_the_busiest_blocks_records():
    """Hand-counted records of the busiest block, as the native executor runs them: one-shot
    all_reduce 1 per rank (its 56 per-chunk reduces join), direct 8 (a chain of seven reduces and
    seven copies), ring on 4 ranks 2(n-1) = 6 however large the buffer (no slicing counted)."""
    from _schedules import direct, ring

    from kernels.backends.executor import program_for
    from kernels.comm.nccl_choice import native_records
    from synth.baselines import baseline
    from synth.ir.fabric import build_fabric
    from topo_probe.machines.generators import fully_connected
    one = baseline("oneshot", build_fabric(fully_connected(8)), "allreduce")
    assert native_records(program_for(one, 256, np.float32)) == 1
    assert native_records(program_for(direct("allreduce", 8), 256, np.float32)) == 8
    assert native_records(program_for(ring("allreduce", 4), 1 << 22, np.float32)) == 6
