"""NCCL for the plan's ``nccl`` ranges: the CuPy NCCL bridge against a fake ``cupy.cuda.nccl``
(calls, pointers, counts, group brackets), and the fallback that runs where NCCL cannot."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

from kernels import Communicator
from kernels.comm.nccl_runtime import NcclRuntime, nccl_available
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


def test_no_gpu_here_means_not_available():
    assert nccl_available() is False


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
