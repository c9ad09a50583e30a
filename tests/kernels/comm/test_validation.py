"""kernels.comm.validation: list checks name call/argument/rank, NCCL in-place layouts are kept
as views (no copy), other overlaps and mixed in-place ranks are copied (NumPy references)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.comm.validation import check_list, prepare


def test_out_of_place_views_cut_to_count():
    ins = [np.arange(10.0) + 100 * r for r in range(3)]
    outs = [np.zeros((2, 15)) for _ in range(3)]
    sends, recvs = prepare("all_gather", "allgather", ins, outs, 4, size=3)
    # all_gather: 1 input block of count, n output blocks; views, not copies
    assert [s.tolist() for s in sends] == [[0, 1, 2, 3], [100, 101, 102, 103], [200, 201, 202, 203]]
    assert all(d.size == 12 and np.shares_memory(d, o) for d, o in zip(recvs, outs))
    assert all(np.shares_memory(s, i) for s, i in zip(sends, ins))


def test_nccl_in_place_layouts_are_views():
    n, c = 4, 3
    # reduce_scatter in place: the output is block r of rank r's input
    bufs = [np.arange(n * c, dtype=np.float32) for _ in range(n)]
    outs = [b[r * c:(r + 1) * c] for r, b in enumerate(bufs)]
    sends, recvs = prepare("reduce_scatter", "reducescatter", bufs, outs, c, size=n)
    assert all(s is not None and np.shares_memory(s, b) for s, b in zip(sends, bufs))
    # one buffer passed as in and out: all_reduce reads and writes the same memory
    same = [np.ones(5) for _ in range(n)]
    sends, recvs = prepare("all_reduce", "allreduce", same, same, 5, size=n)
    assert all(np.shares_memory(s, d) for s, d in zip(sends, recvs))


def test_other_overlaps_and_mixed_in_place_ranks_are_copied():
    n = 2
    base = [np.arange(8.0) for _ in range(n)]
    ins = [b[1:5] for b in base]                 # overlaps the output, not NCCL's layout
    outs = [b[0:4] for b in base]
    sends, _ = prepare("all_reduce", "allreduce", ins, outs, 4, size=n)
    assert not any(np.shares_memory(s, b) for s, b in zip(sends, base))
    assert [s.tolist() for s in sends] == [[1, 2, 3, 4]] * 2
    # rank 0 in place, rank 1 not: the executor needs all or none, so rank 0's input is copied
    a = np.ones(3)
    sends, recvs = prepare("all_reduce", "allreduce", [a, np.ones(3)], [a, np.zeros(3)], 3, size=n)
    assert not np.shares_memory(sends[0], recvs[0])


def test_rooted_unused_ranks_become_none():
    ins = [np.ones(4) for _ in range(3)]
    outs = [None, np.zeros(4), "ignored"]
    sends, recvs = prepare("reduce", "reduce", ins, outs, 4, 1, out_need={1}, size=3)
    assert recvs[0] is None and recvs[2] is None and recvs[1] is not None


@pytest.mark.parametrize("call, msg", [
    (lambda: check_list("f", "in_arrays", np.ones(3), {0}, [False], size=1),
     r"^f: in_arrays must be a list with one array per rank, got ndarray$"),
    (lambda: check_list("f", "in_arrays", [np.ones(3)] * 2, {0, 1}, [False] * 2, size=3),
     r"^f: in_arrays has 2 arrays, the communicator has 3 ranks$"),
    (lambda: check_list("f", "out_arrays", [np.ones(3), None], {0, 1}, [False] * 2, size=2),
     r"^f: out_arrays rank 1 is None but rank 1 needs a buffer$"),
    (lambda: check_list("f", "in_arrays", [np.ones(3), np.ones(3, np.int32)], {0, 1}, [False] * 2, size=2),
     r"^f: in_arrays rank 1: dtype int32 differs from rank 0's float64$"),
    (lambda: check_list("f", "in_arrays", [np.ones(3), np.ones(4)], {0, 1}, [False] * 2, size=2),
     r"^f: in_arrays rank 1: shape \(4,\) differs from rank 0's \(3,\)$"),
    (lambda: check_list("f", "in_arrays", [np.ones(3), [1, 2]], {0, 1}, [False] * 2, size=2),
     r"^f: in_arrays: rank 1: got a list, not an array \(NumPy or CuPy\)$"),
    (lambda: prepare("g", "allreduce", [np.ones(3)] * 2, [np.ones(3)] * 2, 2.5, size=2),
     r"^g: count must be an integer >= 0, got 2.5$"),
    (lambda: prepare("g", "allgather", [np.ones(3)] * 2, [np.ones(5), np.ones(5)], 3, size=2),
     r"^g: out_arrays rank 0 has 5 elements, needs at least 6$"),
    (lambda: prepare("g", "allreduce", [np.ones(4)] * 2, [np.ones((2, 4))[:, ::2]] * 2, 4, size=2),
     r"^g: out_arrays rank 0 is not C-contiguous"),
])
def test_errors_are_one_line_naming_call_argument_rank(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


@settings(derandomize=True, max_examples=60, deadline=None)
@given(n=st.integers(1, 4), count=st.integers(0, 5), shift=st.integers(-6, 6), inplace=st.booleans())
def test_sends_always_hold_the_input_values(n, count, shift, inplace):
    """Whatever the overlap, what ``prepare`` hands the executor equals the caller's input
    (reference: a copy taken before the call) and recvs write into the caller's outputs."""
    base = [np.arange(40.0) + 1000 * r for r in range(n)]
    if inplace:
        ins = outs = [b[10:10 + count] for b in base]
    else:
        ins = [b[10 + shift:10 + shift + count] for b in base]
        outs = [b[10:10 + count] for b in base]
    want = [x.copy() for x in ins]
    sends, recvs = prepare("all_reduce", "allreduce", ins, outs, count, size=n)
    assert [s.tolist() for s in sends] == [w.tolist() for w in want]
    assert all(d.size == count and (count == 0 or np.shares_memory(d, o)) for d, o in zip(recvs, outs))


class _CupyOn0(np.ndarray):
    """Stand-in of a CuPy array on GPU 0 (CuPy's module name and ``.device.id``, NumPy memory)."""

    __module__ = "cupy._core.core"
    device = type("Dev", (), {"id": 0})()


class _CupyOn1(_CupyOn0):
    __module__ = "cupy._core.core"
    device = type("Dev", (), {"id": 1})()


@pytest.mark.parametrize("call", ["all_reduce", "all_gather", "reduce"])
@pytest.mark.parametrize("ins_on, outs_on, where", [
    (None, _CupyOn0, "out_arrays on cuda:0 but in_arrays on cpu"),
    (_CupyOn0, None, "out_arrays on cpu but in_arrays on cuda:0"),
    (_CupyOn0, _CupyOn1, "out_arrays on cuda:1 but in_arrays on cuda:0"),
])
def test_a_ranks_input_and_output_on_different_devices_are_refused(call, ins_on, outs_on, where):
    """NCCL's rank is one device: its send and receive buffers live there.  Old: NumPy inputs with
    CuPy outputs ran the host layer and wrote the GPU arrays through NumPy; CuPy inputs went to the
    GPU layer (here, without CuPy: DeviceUnavailable; with the CuPy stand-in of
    tests/kernels/native/_fake_cupy.py: AttributeError, 'memoryview' has no 'ptr', on the NumPy
    outputs).  Now one line naming the rank, before any byte moves (the outputs keep their values)."""
    import warnings

    from kernels.comm.communicator import Communicator
    from topo_probe.errors import BufferLayoutError

    on = lambda a, cls: a if cls is None else a.view(cls)  # noqa: E731
    n, root = 4, 2
    xs = [on(np.full(3, r, np.float32), ins_on) for r in range(n)]
    ys = [on(np.full(3 * (n if call == "all_gather" else 1), -1, np.float32), outs_on) for _ in range(n)]
    if call == "reduce":
        ys = [y if r == root else None for r, y in enumerate(ys)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        comm = Communicator(n, plan=False)
        with pytest.raises(BufferLayoutError, match=rf"^{call}: rank {root if call == 'reduce' else 0}: {where}; "):
            getattr(comm, call)(xs, ys, **({"root": root} if call == "reduce" else {}))
    assert all(np.asarray(y).tolist() == [-1.0] * y.size for y in ys if y is not None)


@pytest.mark.parametrize("arg, msg", [
    ("4", "expected a rank count (int >= 1) or a list of CUDA device ids, got '4'"),   # old: 1 rank on GPU 4
    (True, "expected a rank count (int >= 1) or a list of CUDA device ids, got True"),  # old: 1 rank
    (2.0, "expected a rank count (int >= 1) or a list of CUDA device ids, got 2.0"),    # old: TypeError
    (None, "expected a rank count (int >= 1) or a list of CUDA device ids, got None"),  # old: TypeError
    ({0: 1}, "expected a rank count (int >= 1) or a list of CUDA device ids, got {0: 1}"),  # old: 1 rank
    (0, "expected a rank count (int >= 1) or a list of CUDA device ids, got 0"),
    ([0.5, 1], "device id 0.5 is not a CUDA device (an integer >= 0)"),   # old: GPUs [0, 1]
    ([True, False], "device id True is not a CUDA device (an integer >= 0)"),   # old: GPUs [1, 0]
    ([-1, 0], "device id -1 is not a CUDA device (an integer >= 0)"),     # old: accepted
    ([0, None], "device id None is not a CUDA device (an integer >= 0)"),   # old: TypeError
])
def test_communicator_takes_a_rank_count_or_device_ids_only(arg, msg):
    """cupyx.distributed's ``NCCLBackend(n_devices, rank)`` and ``cupy.cuda.nccl`` take integers;
    anything else is refused in one line instead of being read through ``int()`` or iteration."""
    from kernels.comm.communicator import Communicator
    from topo_probe.errors import InvalidArgument
    with pytest.raises(InvalidArgument, match=f"^Communicator: {re.escape(msg)}$"):
        Communicator(arg, plan=False)


@pytest.mark.parametrize("arg, ranks, devices", [(3, 3, None), (np.int64(2), 2, None), ([1, 0], 2, [1, 0]),
                                                 ((0, 0, 0), 3, [0, 0, 0]), (np.array([2, 3]), 2, [2, 3])])
def test_communicator_accepts_counts_and_device_lists(arg, ranks, devices):
    from kernels.comm.communicator import Communicator
    from topo_probe.machines.generators import fully_connected
    topo = fully_connected(ranks)          # given, so that no GPU is probed
    comm = Communicator(arg, topology=topo, plan=False)
    assert (comm.size, comm.devices) == (ranks, devices)


@pytest.mark.parametrize("call, ins, outs, role", [
    ("gather", 3, 4, "in_arrays has 3 arrays"), ("scatter", 4, 3, "out_arrays has 3 arrays"),
    ("gather", 5, 4, "in_arrays has 5 arrays"),
])
def test_rooted_calls_with_a_list_of_another_length_are_refused_in_one_line(call, ins, outs, role):
    """Root 3 of 4 ranks, one list a rank short (or long): old, IndexError from the in-place probe
    (``in_arrays[root]``); now the list check's one line, outputs untouched."""
    import warnings

    from kernels.comm.communicator import Communicator
    from topo_probe.errors import BufferLayoutError
    big = 2 * 4
    xs = [np.ones(big if call == "scatter" else 2, np.float32) for _ in range(ins)]
    ys = [np.full(2 if call == "scatter" else big, -1, np.float32) for _ in range(outs)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(BufferLayoutError, match=f"^{call}: {role}, the communicator has 4 ranks$"):
            getattr(Communicator(4, plan=False), call)(xs, ys, root=3)
    assert all((y == -1).all() for y in ys)


def test_communicator_takes_a_range_of_device_ids():
    """``devices_or_nranks : int or sequence of int`` (Communicator's docstring): ``range(2)`` is a
    sequence of ints, GPUs 0 and 1, as ``list(range(2))``; the branch's check took only lists, tuples
    and 1-D arrays and refused it (before it, any iterable of ints was read)."""
    from kernels.comm.communicator import Communicator
    from topo_probe.machines.generators import fully_connected
    comm = Communicator(range(1, 3), topology=fully_connected(2), plan=False)
    assert (comm.size, comm.devices) == (2, [1, 2])
