"""kernels.backends.binding: the one binding step.  Each buffer is checked exactly once per call
on every path (counted through ``binding.CHECKS``), and the one in-place rule refuses strided
views that span exactly NCCL's in-place bytes (a reversed view of the output has the output's
address range but not its element order: taking it for in place was a silent wrong answer)."""

import warnings

import numpy as np
import pytest
from _schedules import direct, ring

from kernels.backends import binding
from kernels.backends.binding import bind_call, inplace_rank
from kernels.backends.executor import run_schedule
from kernels.comm.communicator import Communicator
from synth.ir.collectives import CollectiveSpec
from topo_probe.errors import BufferLayoutError

pytestmark = pytest.mark.filterwarnings("ignore:Communicator. no plan")


@pytest.fixture
def checks(monkeypatch):
    seen: list[str] = []
    monkeypatch.setattr(binding, "CHECKS", seen)
    return seen


def _comm(n):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Communicator(n, plan=False)


def _once(seen, expected):
    assert sorted(seen) == sorted(expected), f"checked {sorted(seen)}, want each of {sorted(expected)} once"


def test_communicator_checks_each_buffer_once(checks):
    n = 8
    comm = _comm(n)
    xs = [np.full(256, r, np.float32) for r in range(n)]
    ys = [np.empty(256, np.float32) for _ in range(n)]
    comm.all_reduce(xs, ys)
    assert all(np.array_equal(y, np.full(256, sum(range(n)), np.float32)) for y in ys)
    # rank 0's input is checked where its size gives the count (_size), the rest by their lists
    _once(checks, ["all_reduce: rank 0"] + [f"all_reduce: in_arrays: rank {r}" for r in range(1, n)]
          + [f"all_reduce: out_arrays: rank {r}" for r in range(n)])


def test_in_place_and_rooted_calls_check_each_buffer_once(checks):
    n = 4
    comm = _comm(n)
    bufs = [np.arange(6, dtype=np.int32) + r for r in range(n)]
    comm.all_reduce(bufs, bufs)                        # one array per rank, passed twice
    assert bufs[0].tolist() == [6 + 4 * k for k in range(6)]
    _once(checks, ["all_reduce: rank 0"] + [f"all_reduce: in_arrays: rank {r}" for r in range(1, n)])
    checks.clear()
    xs = [np.ones(3, np.float64) for _ in range(n)]
    out = [None, np.zeros(3), None, None]
    comm.reduce(xs, out, root=1)
    assert out[1].tolist() == [4.0] * 3
    _once(checks, ["reduce: rank 0"] + [f"reduce: in_arrays: rank {r}" for r in range(1, n)]
          + ["reduce: out_arrays: rank 1"])
    checks.clear()
    gathered = [np.zeros(4 * 3) for _ in range(n)]
    comm.all_gather(xs, gathered)                      # count from the first input (checked by _size)
    _once(checks, ["all_gather: rank 0"] + [f"all_gather: in_arrays: rank {r}" for r in range(1, n)]
          + [f"all_gather: out_arrays: rank {r}" for r in range(n)])


def test_run_schedule_checks_each_buffer_once(checks):
    n = 3
    sends = [np.full(4, r, np.float32) for r in range(n)]
    recvs = [np.zeros(4, np.float32) for _ in range(n)]
    run_schedule(ring("allreduce", n), sends, recvs)
    assert recvs[2].tolist() == [3.0] * 4
    _once(checks, [f"allreduce: rank {r}: {role}" for r in range(n) for role in ("sendbuf", "recvbuf")])


def test_a_repeated_identical_call_checks_nothing(checks):
    comm = _comm(4)
    xs = [np.ones(8, np.float32) for _ in range(4)]
    ys = [np.empty(8, np.float32) for _ in range(4)]
    comm.all_reduce(xs, ys)
    checks.clear()
    comm.all_reduce(xs, ys)
    assert checks == [] and ys[0].tolist() == [4.0] * 8


@pytest.mark.parametrize("name", ["allreduce", "allgather"])
def test_a_reversed_view_is_not_in_place(name):
    """Block r of the output, read backwards, spans exactly the in-place bytes."""
    spec, r, count = CollectiveSpec(name, 4, 1), 1, 5
    out = np.arange(4 * count if name == "allgather" else count, dtype=np.float32)
    block = out[r * count:(r + 1) * count] if name == "allgather" else out
    assert inplace_rank(spec, r, block, out, count)
    with pytest.raises(BufferLayoutError, match="a strided buffer is never in place"):
        inplace_rank(spec, r, block[::-1], out, count)


def test_communicator_copies_a_reversed_view_and_answers_right():
    n = 4
    comm = _comm(n)
    ys = [np.arange(6, dtype=np.float64) + 10 * r for r in range(n)]
    xs = [y[::-1] for y in ys]                          # the output's own bytes, backwards
    want = sum(x.copy() for x in xs)
    comm.all_reduce(xs, ys)
    assert all(np.array_equal(y, want) for y in ys)


def test_bind_call_for_one_rank_of_many():
    """The MPI communicator binds only its rank's buffers: count and in-place from them alone."""
    spec = CollectiveSpec("allgather", 4, 1)
    out = np.zeros(12, np.int64)
    call = bind_call(spec, [None, out[3:6], None, None], [None, out, None, None], checked=True, ranks=(1,))
    assert (call.count, call.inplace, call.sends[0], call.recvs[1].size) == (3, True, None, 12)
    with pytest.raises(BufferLayoutError, match="rank 1: sendbuf and recvbuf overlap but not as NCCL's in-place"):
        bind_call(spec, [None, out[4:7], None, None], [None, out, None, None], ranks=(1,))


def test_bind_call_for_one_rank_checks_its_layout():
    """ranks=(me,) still refuses a read-only output (check_buffer_layout on the bound rank; the others are None)."""
    spec = CollectiveSpec("allgather", 4, 1)
    out = np.zeros(12, np.int64)
    out.flags.writeable = False
    with pytest.raises(BufferLayoutError, match="^allgather: rank 1's recvbuf is read-only$"):
        bind_call(spec, [None, np.zeros(3, np.int64), None, None], [None, out, None, None], checked=True, ranks=(1,))


def test_direct_schedule_binding_agrees_with_numpy():
    sends = [np.arange(5, dtype=np.int32) * (r + 1) for r in range(3)]
    recvs = [np.zeros(5, np.int32) for _ in range(3)]
    run_schedule(direct("allreduce", 3), sends, recvs, op="max")
    assert all(np.array_equal(r, np.max(sends, axis=0)) for r in recvs)


def test_each_device_is_checked_once_per_call_on_the_native_path(checks, monkeypatch):
    """CuPy arrays of 4 ranks sharing GPU 0 through ``Communicator(devices=[0] * 4)`` and the
    native layer (CuPy and its CUDA runtime replaced by the CPU stand-in of
    ``tests/kernels/native/_fake_cupy.py``, whose kernel interprets the launch): every buffer's
    GPU is checked once, by the binding step, and the layer asks the runtime for no array's GPU
    again; an array on another GPU is refused in one line naming the rank."""
    import sys
    import types
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))
    from _fake_cupy import fake_cupy_route

    asked = []
    cp, CupyArray = fake_cupy_route(monkeypatch, seed=2, device_of_array=lambda a: asked.append(a) or 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        comm = Communicator([0] * 4, topology=fully_connected_4(), plan=False)
    for call in range(2):                      # new arrays each call: each is bound anew
        xs = [np.full(16, r + call, np.float32).view(CupyArray) for r in range(4)]
        ys = [np.zeros(16, np.float32).view(CupyArray) for _ in range(4)]
        checks.clear()
        comm.all_reduce(xs, ys)
        assert all(np.array_equal(y, np.full(16, 6 + 4 * call, np.float32)) for y in ys)
        assert comm.last_route.layer == "native" and cp.launches == call + 1
        devices = [c for c in checks if c.endswith(": device")]
        _once(devices, ["all_reduce: rank 0: device"]
              + [f"all_reduce: in_arrays: rank {r}: device" for r in range(1, 4)]
              + [f"all_reduce: out_arrays: rank {r}: device" for r in range(4)])
        assert asked == [], "the layer checked a device again"

    class OtherGpu(CupyArray):
        __module__ = "cupy._core.core"
        device = types.SimpleNamespace(id=1)
    xs[2] = xs[2].view(OtherGpu)
    for r in (0, 2):                           # rank 0's input is the one whose size gives the count
        wrong = list(xs)
        wrong[r] = xs[r].view(OtherGpu)
        with pytest.raises(BufferLayoutError, match=rf"^all_reduce: (in_arrays: )?rank {r}: device cuda:1 is not its "
                                                    rf"rank's cuda:0$"):
            comm.all_reduce(wrong, ys)


def fully_connected_4():
    from topo_probe.machines.generators import fully_connected
    return fully_connected(4)
