"""kernels.sweep.backends: NCCL buffer aliasing, host timing and validation, cupy availability."""

import importlib.util

import numpy as np
import pytest

import kernels.backends.executor
from kernels.sweep.backends import CupyBackend, HostBackend, make_backend, make_buffers
from kernels.sweep.table import inputs
from synth.sweep.driver import Case, make_selector, schedule_at
from synth.sweep.entries import TABLE
from topo_probe.errors import DeviceUnavailable, InvalidArgument
from topo_probe.machines.generators import fully_connected

HAS_CUPY = importlib.util.find_spec("cupy") is not None


def _case(name, n=4, size=256, dtype="float", op="sum", root=None, inplace=False, check=1, algo="ring"):
    e = TABLE[name]
    if e.rooted and root is None:
        root = 0
    sched = schedule_at(make_selector(name, fully_connected(n), algo), name, -1 if root is None else root, 0)[0]
    counts = e.counts(size, 4 if dtype == "float" else 1, n)
    return Case(e, n, counts, dtype, op, root, inplace, sched, iters=2, warmup=1, check=check)


@pytest.mark.parametrize("name, kind", [("allgather", "in-out"), ("gather", "in-out"),
                                        ("reducescatter", "out-in"), ("scatter", "out-in"),
                                        ("allreduce", "same"), ("alltoall", "same"), ("broadcast", "same")])
def test_inplace_buffers_alias_like_nccl(name, kind):
    case = _case(name, inplace=True)
    c = case.counts.count
    sends, recvs, _ = make_buffers(case, 0)
    for r in range(4):
        s, d = sends[r], recvs[r]
        if kind == "same":
            assert s is d
        elif kind == "in-out":  # send is block r of recv
            assert np.shares_memory(s, d) and s.size == c
            assert s.__array_interface__["data"][0] == d.__array_interface__["data"][0] + r * c * 4
        else:  # recv is block r of send
            assert d.size == c
            assert d.__array_interface__["data"][0] == s.__array_interface__["data"][0] + r * c * 4


def test_out_of_place_buffers_hold_seeded_inputs():
    case = _case("alltoall")
    sends, recvs, want = make_buffers(case, 7)
    e = TABLE["alltoall"]
    ins = inputs(e, 7, case.counts.count, "float", "sum", 4)
    assert all(np.array_equal(s, i) for s, i in zip(sends, ins))
    assert all(not np.shares_memory(s, d) for s, d in zip(sends, recvs))
    assert all(d.size == 4 * case.counts.count and not d.any() for d in recvs)


@pytest.mark.parametrize("name", sorted(TABLE))
@pytest.mark.parametrize("inplace", [False, True])
def test_host_backend_validates_correct_results(name, inplace):
    t, wrong, _ = HostBackend().measure(_case(name, n=3, size=3 * 4 * 10, inplace=inplace, check=2))
    assert t > 0 and wrong == 0


def test_check_zero_means_not_validated():
    assert HostBackend().measure(_case("allreduce", check=0))[1] is None


def test_corrupted_executor_is_caught(monkeypatch):
    real = kernels.backends.executor.run_schedule

    def corrupt(schedule, sendbufs, recvbufs, **kw):
        out = real(schedule, sendbufs, recvbufs, **kw)
        recvbufs[-1][:3] += 1   # three wrong elements on the last rank
        return out

    monkeypatch.setattr(kernels.backends.executor, "run_schedule", corrupt)
    for inplace in (False, True):
        assert HostBackend().measure(_case("allreduce", inplace=inplace, check=3))[1] == 3


def test_wrong_op_in_executor_is_caught(monkeypatch):
    real = kernels.backends.executor.run_schedule
    monkeypatch.setattr(kernels.backends.executor, "run_schedule",
                        lambda s, a, b, op="sum", **kw: real(s, a, b, op="max", **kw))
    assert HostBackend().measure(_case("reducescatter", size=4 * 4 * 64))[1] > 0


def test_single_rank_is_a_local_copy():
    e = TABLE["allgather"]
    case = Case(e, 1, e.counts(64, 4, 1), "float", "sum", None, False, None, iters=1, warmup=0)
    assert HostBackend().measure(case)[1] == 0


def test_backend_registry():
    assert make_backend("host").name == "host"
    with pytest.raises(InvalidArgument, match="not one of host, cupy, sim"):
        make_backend("tpu")


@pytest.mark.skipif(HAS_CUPY, reason="CuPy is installed here")
def test_cupy_backend_unavailable_without_cupy():
    with pytest.raises(DeviceUnavailable, match="CuPy is not installed"):
        CupyBackend()


@pytest.mark.gpu
def test_cupy_backend_on_a_gpu():
    try:
        backend = CupyBackend()
    except DeviceUnavailable as e:
        pytest.skip(str(e))
    t, wrong, _ = backend.measure(_case("allreduce", n=2, size=1 << 16))
    assert t > 0 and wrong == 0


def test_host_sweep_memory_stays_within_10_percent_of_the_buffers_it_must_hold():
    """all_reduce, 4 ranks x 64 MiB out of place: send + receive buffers of every rank and one
    expected result must be held (576 MiB); the sweep's peak above the interpreter's stays under
    1.1x that (it was 2.6x: a stack of every rank in float64 and float64 copies to compare)."""
    import subprocess
    import sys
    code = """
import resource, numpy as np
from kernels.sweep.backends import HostBackend
from synth.sweep.driver import Case, make_selector, schedule_at
from synth.sweep.entries import entry
from topo_probe.machines.generators import fully_connected
e, n = entry("allreduce"), 4
c = e.counts(64 << 20, 4, n)
sched = schedule_at(make_selector("allreduce", fully_connected(n), "plan", plan=False), "allreduce", -1, c.size)[0]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
HostBackend().measure(Case(e, n, c, "float", "sum", None, False, sched, 1, 0, 1, 1))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    held = (2 * 4 + 1) * (64 << 20)
    assert int(res.stdout.split()[-1]) <= 1.1 * held


# nccl-tests' busbw factors at n = 1, by hand: 2(n-1)/n and (n-1)/n are 0; broadcast and reduce 1
ONE_RANK_FACTOR = {"allreduce": 0.0, "allgather": 0.0, "reducescatter": 0.0, "alltoall": 0.0, "gather": 0.0,
                   "scatter": 0.0, "broadcast": 1.0, "reduce": 1.0}


@pytest.mark.parametrize("name", sorted(ONE_RANK_FACTOR))
def test_one_rank_times_the_call_in_place_too_and_busbw_follows_nccl_tests(name):
    """In place nothing moves, but the call is made: its time is the call's cost (argument checks,
    several µs in Python), never a no-op's 0.1 µs (the 335,544 GB/s row of 32 MiB)."""
    from synth.formats.nccl_tests.conventions import BUSBW_FACTOR
    from synth.sweep.driver import SweepConfig, run_sweep
    assert BUSBW_FACTOR[name](1) == ONE_RANK_FACTOR[name]
    cfg = SweepConfig(name, nranks=1, minbytes=8, maxbytes=1 << 20, stepfactor=256, iters=5, warmup=1)
    rows = run_sweep(cfg, HostBackend(), None).rows
    divided = name in ("allgather", "reducescatter", "alltoall", "gather", "scatter")   # 2 floats & ~3 = 0
    assert [r.size for r in rows] == [0 if divided else 8, 2048, 1 << 19]
    for row in rows:
        for res in (row.out_of_place, row.in_place):
            assert res.wrong == 0
            assert res.time_us >= 1.0, (row.size, res)
            assert res.algbw == pytest.approx(row.size / (res.time_us * 1e3))
            assert res.busbw == pytest.approx(res.algbw * ONE_RANK_FACTOR[name])


def test_one_rank_in_place_call_runs_the_argument_checks(monkeypatch):
    """The timed one-rank call is the user's call: it goes through the same checks (a refusal there
    is a refusal of the sweep), not around them."""
    import kernels.comm.validation
    from topo_probe.errors import BufferLayoutError

    def refuse(*a, **k):
        raise BufferLayoutError("checked")
    monkeypatch.setattr(kernels.comm.validation, "prepare", refuse)
    e = TABLE["allreduce"]
    case = Case(e, 1, e.counts(64, 4, 1), "float", "sum", None, True, None, iters=1, warmup=0)
    with pytest.raises(BufferLayoutError, match="checked"):
        HostBackend().measure(case)


@pytest.mark.parametrize("name, busbw", [("broadcast", 1048576 / 6600), ("allreduce", 0.0)])
def test_one_rank_sim_is_the_models_cost_of_a_call(name, busbw):
    """By hand: 1 MiB in the model's 6.6 µs call (NCCL's Ring/LL base latency) is 158.9 GB/s algbw;
    busbw is that for broadcast (factor 1) and 0 for all_reduce (2(n-1)/n = 0)."""
    from synth.sweep.driver import SweepConfig, run_sweep
    from synth.sweep.sim_backend import SimBackend
    cfg = SweepConfig(name, nranks=1, minbytes=1 << 20, maxbytes=1 << 20)
    (row,) = run_sweep(cfg, SimBackend(None), None).rows
    for res in (row.out_of_place, row.in_place):
        assert res.time_us == 6.6
        assert res.algbw == pytest.approx(158.875)
        assert res.busbw == pytest.approx(busbw)
