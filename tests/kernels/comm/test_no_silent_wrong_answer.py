"""Buffers and arguments that used to give silent wrong answers or generic exceptions: big-endian
float16/bfloat16, numpy.matrix and masked outputs, a strided input at its output's address, roots
and counts that are not integers, element types NCCL has no kernel for.  Each is refused in one
line (a TopocollError) or gives NumPy's answer; a property test draws byte orders, ndarray
subclasses and strided self-overlap."""

from __future__ import annotations


import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import Communicator, run_schedule
from synth import baseline, build_fabric
from topo_probe import get_preset, parse_generator_spec
from topo_probe.errors import BufferLayoutError, InvalidArgument, TopocollError

pytestmark = pytest.mark.filterwarnings("ignore:Communicator. no plan")


@pytest.fixture(scope="module")
def comm4():
    return Communicator(4, plan=False)


@pytest.mark.parametrize("dtype", [">f2", np.dtype(ml_dtypes.bfloat16).newbyteorder(">"), ">f4", ">i8"])
@pytest.mark.parametrize("call", ["reduce", "reduce_scatter", "all_reduce"])
def test_big_endian_refused(comm4, dtype, call):
    n = 70000                                       # from 64 KiB the reduce ran a chain that misread >f2
    xs = [np.full(4 * n, r + 1, dtype) for r in range(4)]
    ys = [np.zeros(n if call == "reduce_scatter" else 4 * n, dtype) for _ in range(4)]
    with pytest.raises(BufferLayoutError, match="non-native byte order"):
        if call == "reduce":
            comm4.reduce(xs, ys, root=3)
        else:
            getattr(comm4, call)(xs, ys)
    assert all((y == 0).all() for y in ys)          # refused before any byte moved


@pytest.mark.parametrize("make", [lambda a: np.asmatrix(a), lambda a: np.ma.masked_array(a)], ids=["matrix", "masked"])
@pytest.mark.parametrize("side", ["in", "out"])
def test_ndarray_subclasses_refused(comm4, make, side):
    xs = [np.full(8, r + 1.0) for r in range(4)]
    ys = [np.zeros(32) for _ in range(4)]
    if side == "in":
        xs = [make(x) for x in xs]
    else:
        ys = [make(y) for y in ys]
    with pytest.raises(BufferLayoutError, match="plain numpy.ndarray"):
        comm4.all_gather(xs, ys)


def test_memmap_is_a_plain_buffer(tmp_path, comm4):
    ys = [np.memmap(tmp_path / f"y{r}", np.float32, "w+", shape=(32,)) for r in range(4)]
    comm4.all_gather([np.full(8, r + 1, np.float32) for r in range(4)], ys)
    assert all((y == np.repeat(np.arange(1, 5), 8)).all() for y in ys)


def test_strided_input_at_the_outputs_address_is_not_in_place():
    buf = np.arange(4.0)
    Communicator(1, plan=False).all_reduce([buf[0:4:2]], [buf[0:2]])
    assert buf.tolist() == [0.0, 2.0, 2.0, 3.0]     # out = in = [0, 2]; was [0, 1]


@pytest.mark.parametrize("root", [1.5, "1", None, float("nan"), True, np.float64(1.0)])
def test_root_must_be_an_integer_rank(comm4, root):
    with pytest.raises(InvalidArgument, match="is not a rank"):
        comm4.broadcast([np.zeros(4) for _ in range(4)], root=root)
    assert comm4.broadcast([np.full(4, r, np.float32) for r in range(4)], root=np.int64(2))[0].tolist() == [2] * 4


@pytest.mark.parametrize("count", [float("nan"), float("inf"), 2.0, "2", -1])
def test_count_must_be_an_integer(comm4, count):
    with pytest.raises(InvalidArgument, match="count must be an integer"):
        comm4.all_gather([np.ones(2) for _ in range(4)], [np.zeros(8) for _ in range(4)], count=count)


@pytest.mark.parametrize("dtype", [object, np.complex64, np.longdouble, "datetime64[s]", "U4", "S4", bool, np.int16])
def test_run_schedule_refuses_types_nccl_cannot_move(dtype):
    ring = baseline("ring", build_fabric(get_preset("dgx1-v100")), "allreduce")
    xs = [np.zeros(8, dtype) for _ in range(8)]
    with pytest.raises(BufferLayoutError, match="is not an NCCL type"):
        run_schedule(ring, xs, [np.zeros(8, dtype) for _ in range(8)], backend="host")


_ORDERS = st.sampled_from(["=", ">", "<"])
_KINDS = st.sampled_from(["f2", "f4", "f8", "i4", "i8", "u1"])


@settings(max_examples=60, deadline=None)
@given(kind=_KINDS, order=_ORDERS, wrap=st.sampled_from(["plain", "matrix", "masked"]),
       step=st.integers(1, 3), offset=st.integers(0, 3), n=st.integers(1, 40))
def test_property_refused_or_numpy_answer(kind, order, wrap, step, offset, n):
    """all_reduce on 2 ranks with drawn byte order, subclass and a strided input that may start
    anywhere in its own output: a one-line TopocollError, or exactly NumPy's sum."""
    dtype = np.dtype(kind).newbyteorder(order)
    bufs = [(np.arange(offset + step * n + 4) % 7).astype(dtype) for _ in range(2)]
    xs = [b[offset:offset + step * n:step] for b in bufs]
    ys = [b[:n] for b in bufs]
    if wrap == "matrix":
        ys = [np.asmatrix(y) for y in ys]
    elif wrap == "masked":
        xs = [np.ma.masked_array(x) for x in xs]
    expect = (np.asarray(xs[0]).astype(np.float64) + np.asarray(xs[1]).astype(np.float64))
    try:
        Communicator(2, plan=False).all_reduce(xs, ys)
    except TopocollError as e:
        assert "\n" not in str(e)
        assert not dtype.isnative or wrap != "plain", e
        return
    assert dtype.isnative and wrap == "plain"
    got = np.asarray(ys[0]).astype(np.float64)
    if kind in ("f2", "f4", "f8"):
        np.testing.assert_allclose(got, expect, rtol=1e-3)
    else:
        np.testing.assert_array_equal(got, expect.astype(np.dtype(kind)).astype(np.float64))


# ---------------------------------------------------------------- found by the buffer-misuse campaign
@pytest.mark.parametrize("op", [["sum"], {"sum": 1}])
def test_an_unhashable_op_is_refused_in_one_line(comm4, op):
    with pytest.raises(InvalidArgument, match=r"^all_reduce: op must be one of sum, prod, max, min, avg; got "):
        comm4.all_reduce([np.ones(4) for _ in range(4)], [np.zeros(4) for _ in range(4)], op=op)


def test_a_dict_of_arrays_is_refused_in_one_line(comm4):
    with pytest.raises(BufferLayoutError, match="list with one array per rank, got dict"):
        comm4.all_gather({r: np.ones(2) for r in range(4)}, [np.zeros(8) for _ in range(4)])


@pytest.mark.parametrize("junk", ["a string", 3.5, [1.0, 2.0]])
def test_junk_where_a_rank_has_no_buffer_is_ignored(comm4, junk):
    """NCCL ignores the receive buffers of reduce's other ranks: anything there, NumPy's answer at the root."""
    ys = [junk, np.zeros(3), junk, junk]
    comm4.reduce([np.full(3, r + 1.0) for r in range(4)], ys, root=1)
    assert ys[1].tolist() == [10.0] * 3


@pytest.mark.parametrize("call", ["all_gather", "gather", "scatter"])
@pytest.mark.parametrize("junk", ["a string", 3.5, None])
def test_junk_passed_as_one_in_place_buffer_is_refused(comm4, call, junk):
    xs, ys = [np.zeros(8) for _ in range(4)], [np.zeros(8) for _ in range(4)]
    xs[0] = ys[0] = junk                                   # rank 0 (the root) "in place"
    with pytest.raises(BufferLayoutError):
        getattr(comm4, call)(xs, ys)


def test_a_repeat_notices_a_read_only_output_after_junk_in_an_ignored_slot():
    comm = Communicator(2, plan=False)
    xs, ys = ["junk", np.arange(4.0)], [np.zeros(2), np.zeros(2)]
    comm.scatter(xs, ys, root=1)
    assert ys[0].tolist() == [0.0, 1.0] and ys[1].tolist() == [2.0, 3.0]
    ys[0].flags.writeable = False
    with pytest.raises(BufferLayoutError, match="read-only"):
        comm.scatter(xs, ys, root=1)


@pytest.mark.parametrize("coll", ["reducescatter", "scatter"])
def test_a_read_only_input_written_in_place_is_refused(coll):
    """recvbuf = block r of a read-only sendbuf: NCCL's in-place layout would write the input."""
    n = 2
    bufs = [np.arange(4.0) + r for r in range(n)]
    ins = [b.view() for b in bufs]
    for a in ins:
        a.flags.writeable = False
    outs = [b[2 * r:2 * r + 2] for r, b in enumerate(bufs)]
    if coll == "scatter":
        ins = [ins[0], None]
    with pytest.raises(BufferLayoutError, match="read-only"):
        Communicator(n, plan=False).reduce_scatter(ins, outs) if coll == "reducescatter" else (
            Communicator(n, plan=False).scatter(ins, outs, root=0))
    with pytest.raises(BufferLayoutError, match="read-only"):
        run_schedule(baseline("direct", build_fabric(parse_generator_spec("full:2")), coll, **({"root": 0} if coll == "scatter"
                                                                                      else {})), ins, outs)
    assert [b.tolist() for b in bufs] == [[0.0, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]]


@pytest.mark.parametrize("wrap", [np.asmatrix, np.ma.masked_array], ids=["matrix", "masked"])
@pytest.mark.parametrize("backend", ["host", "reference"])
def test_run_schedule_refuses_matrix_and_masked_arrays(wrap, backend):
    ring = baseline("ring", build_fabric(parse_generator_spec("full:4")), "allreduce")
    xs = [wrap(np.ones(4)) for _ in range(4)]
    with pytest.raises(BufferLayoutError, match="numpy.ndarray"):
        run_schedule(ring, xs, [np.zeros(4) for _ in range(4)], backend=backend)


@pytest.mark.parametrize("make", [iter, lambda x: (a for a in x), lambda x: 7], ids=["iterator", "generator", "int"])
def test_run_schedule_refuses_what_is_not_one_entry_per_rank(make):
    ring = baseline("ring", build_fabric(parse_generator_spec("full:4")), "allreduce")
    with pytest.raises(BufferLayoutError, match="need one entry per rank"):
        run_schedule(ring, make([np.ones(4) for _ in range(4)]), [np.zeros(4) for _ in range(4)])
