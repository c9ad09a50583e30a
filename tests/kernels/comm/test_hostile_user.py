"""The Communicator used by a hostile caller (one process, one array per rank): ``close()`` and any call
after it; NumPy scalars as counts and roots, Fortran-ordered, negative-stride and 0-d inputs, op spellings
(strings, NumPy strings, str enums, NCCL's integer op codes), roots out of range, in a property test whose
reference is NumPy: each call gives NumPy's answer or is refused in one line (a TopocollError) before any
byte of an output moves.  reduce_scatter's ``count`` is NCCL's recvcount: a larger input holds
``n * count`` used elements, the rest ignored (nccl.h v2.28.9, ncclReduceScatter: "sendbuff should have
a size of at least nranks*recvcount elements")."""

from __future__ import annotations

import enum

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import Communicator
from topo_probe.errors import InvalidArgument, TopocollError

pytestmark = pytest.mark.filterwarnings("ignore:Communicator. no plan")

NUMPY_OP = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


class Op(str, enum.Enum):
    SUM = "sum"
    MAX = "max"


# ---------------------------------------------------------------------- close()
def test_every_call_after_close_is_refused_in_one_line_naming_it():
    comm = Communicator(4, plan=False)
    xs = [np.full(6, r, np.float32) for r in range(4)]
    ys = [np.zeros(6, np.float32) for _ in range(4)]
    comm.all_reduce(xs, ys)
    comm.all_reduce(xs, ys)                            # bound: the next identical call would replay
    host = comm._layers["host"]
    comm.recv(np.zeros(2), 0, rank=1)
    comm.close()
    comm.close()                                       # idempotent
    assert comm.pending() == [] and getattr(host, "_pool", None) is None
    calls = {
        "all_reduce": lambda: comm.all_reduce(xs, ys),
        "all_gather": lambda: comm.all_gather(xs, [np.zeros(24, np.float32) for _ in range(4)]),
        "reduce_scatter": lambda: comm.reduce_scatter(xs, [np.zeros(1, np.float32) for _ in range(4)], count=1),
        "broadcast": lambda: comm.broadcast(ys, root=1),
        "reduce": lambda: comm.reduce(xs, ys, root=0),
        "gather": lambda: comm.gather(xs, [np.zeros(24, np.float32)] + [None] * 3),
        "scatter": lambda: comm.scatter([np.zeros(24, np.float32)] + [None] * 3, ys),
        "all_to_all": lambda: comm.all_to_all([np.zeros(8, np.float32)] * 4,
                                              [np.zeros(8, np.float32) for _ in range(4)]),
        "send": lambda: comm.send(np.ones(2), 1, rank=0),
        "recv": lambda: comm.recv(np.zeros(2), 0, rank=1),
        "send_recv": lambda: comm.send_recv(0, 1, np.ones(2), np.zeros(2)),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidArgument, match=rf"^{name}: this Communicator was closed \(.*\); make a new one$"):
            call()
    assert all((y == 6).all() for y in ys)             # untouched since the close (0+1+2+3 before it)


# ---------------------------------------------------------------------- property: hostile arguments
def _layout(a: np.ndarray, how: str) -> np.ndarray:
    """``a`` (1-D, its values in C order) as the caller passes it: C, Fortran 2-D, reversed view, 0-d."""
    if how == "fortran" and a.size % 2 == 0 and a.size:
        return np.asfortranarray(a.reshape(a.size // 2, 2).T.copy().T)     # same C-order values, F layout
    if how == "reversed":
        return a[::-1].copy()[::-1]                                       # a negative-stride view of a's values
    if how == "zero-d" and a.size == 1:
        return a.reshape(())
    return a


@st.composite
def _calls(draw):
    n = draw(st.integers(2, 4))
    dtype = draw(st.sampled_from([np.float64, np.float32, np.int32]))
    call = draw(st.sampled_from(["all_reduce", "reduce", "reduce_scatter"]))
    count = draw(st.integers(1, 4))
    extra = draw(st.integers(0, 3)) if call == "reduce_scatter" else 0        # NCCL: elements past n*count unused
    size = n * count + extra if call == "reduce_scatter" else count
    values = [np.asarray(draw(st.lists(st.integers(0, 3), min_size=size, max_size=size)), dtype) for _ in range(n)]
    how = draw(st.sampled_from(["c", "fortran", "reversed", "zero-d"]))
    op = draw(st.sampled_from(["sum", "prod", "max", "min", np.str_("max"), Op.SUM, "SUM", "mean", 0, None]))
    scalar = draw(st.sampled_from([int, np.int64, np.int32, np.uint8, np.int8]))
    root = draw(st.sampled_from([0, n - 1, n, -1, True, 1.0]))
    root = scalar(root) if isinstance(root, int) and not isinstance(root, bool) and 0 <= root < 128 else root
    return n, dtype, call, count, scalar(count), values, how, op, root


@settings(max_examples=300, deadline=None)
@given(args=_calls())
def test_hostile_arguments_give_numpys_answer_or_one_line(args):
    n, dtype, call, count, count_arg, values, how, op, root = args
    comm = Communicator(n, plan=False)
    xs = [_layout(v.copy(), how) for v in values]
    outs = [np.full(count, -7, dtype) for _ in range(n)]
    valid_op = isinstance(op, str) and str(op.value if isinstance(op, enum.Enum) else op) in NUMPY_OP
    valid_root = (not isinstance(root, (bool, float))) and 0 <= int(root) < n
    try:
        if call == "all_reduce":
            comm.all_reduce(xs, outs, op=op)
        elif call == "reduce":
            comm.reduce(xs, outs, root=root, op=op)
        else:
            comm.reduce_scatter(xs, outs, count=count_arg, op=op)
    except TopocollError as err:
        line = str(err)
        assert "\n" not in line and line.startswith(f"{call}: "), line     # the method's name, as called
        assert not valid_op or (call == "reduce" and not valid_root), (args, line)
        assert all((o == -7).all() for o in outs), "an output moved before the refusal"
        return
    assert valid_op and (call != "reduce" or valid_root), f"accepted: {args}"
    ufunc = NUMPY_OP[str(op.value if isinstance(op, enum.Enum) else op)]
    total = values[0].copy()
    for v in values[1:]:
        total = ufunc(total, v)
    for r, o in enumerate(outs):
        if call == "all_reduce":
            want = total
        elif call == "reduce":
            want = total if r == int(root) else np.full(count, -7, dtype)
        else:
            want = total[r * count:(r + 1) * count]      # the first n*count input elements, NCCL's recvcount
        np.testing.assert_array_equal(o, want, err_msg=f"rank {r}: {args}")


def test_route_after_close_does_not_start_nccl_again(monkeypatch):
    """``route`` still answers after ``close()``; where the plan says nccl it must not open NCCL
    communicators again for the closed Communicator (nothing would destroy them): it says why."""
    import kernels.comm.nccl_runtime as nccl_runtime
    from synth.plan.size_plan import Plan, PlanEntry
    from topo_probe.machines.generators import fully_connected
    topo = fully_connected(4)
    comm = Communicator(4, topology=topo, plan=Plan(topo.name, topo.fingerprint(),
                                                   [PlanEntry("allreduce", 0, None, "nccl")]))
    started = []
    monkeypatch.setattr(nccl_runtime, "nccl_runtime_or_reason", lambda devices: started.append(devices) or (None, "x"))
    comm.close()
    route = comm.route("allreduce", 1024)
    assert started == [] and "closed" in route.reason, (started, route)


@pytest.mark.parametrize("name", ["all_gather", "reduce_scatter"])
def test_a_narrow_numpy_integer_count_does_not_wrap(name):
    """``count=np.int8(4)`` of float64 on 4 ranks: count x itemsize x ranks in int8 wraps to -128
    (hypothesis found it: "nbytes must be >= 0, got np.int8(-128)"); the call equals NumPy."""
    comm = Communicator(4, plan=False)
    xs = [np.arange(16, dtype=np.float64) + 100 * r for r in range(4)]
    if name == "all_gather":
        ins, outs = [x[:4].copy() for x in xs], [np.zeros(16) for _ in range(4)]
        comm.all_gather(ins, outs, count=np.int8(4))
        want = [np.concatenate(ins)] * 4
    else:
        ins, outs = xs, [np.zeros(4) for _ in range(4)]
        comm.reduce_scatter(ins, outs, count=np.int8(4))
        want = [sum(ins)[4 * r:4 * r + 4] for r in range(4)]
    for got, w in zip(outs, want):
        np.testing.assert_array_equal(got, w)
