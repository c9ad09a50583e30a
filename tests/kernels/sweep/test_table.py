"""kernels.sweep.table: seeded data and the NumPy reference (counts and busbw factors:
tests/synth/sweep/test_entries.py).

References are independent: hand-written layouts and exact integer arithmetic in Python ints.
"""


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.sweep.table import count_wrong, expected, init_data, reduce_arrays
from synth.formats.nccl_tests.conventions import DTYPE_NAMES, OP_NAMES, is_float, numpy_dtype
from synth.sweep.entries import TABLE


def test_init_data_is_a_function_of_seed_rank_index():
    a = init_data(3, 1, 50, "float", "sum", 4)
    assert np.array_equal(a, init_data(3, 1, 50, "float", "sum", 4))
    assert not np.array_equal(a, init_data(4, 1, 50, "float", "sum", 4))
    assert not np.array_equal(a, init_data(3, 2, 50, "float", "sum", 4))
    # element i depends on the index only, not on where the array starts
    assert np.array_equal(init_data(3, 1, 20, "float", "sum", 4, offset=30), a[30:50])


def _exact(values: list[list[int]], op: str, dtype_name: str, n: int) -> list[int]:
    """Python-int reduction, wrapped to the integer type like C."""
    out = []
    for col in zip(*values):
        if op == "sum":
            v = sum(col)
        elif op == "prod":
            v = 1
            for x in col:
                v *= x
        elif op == "max":
            v = max(col)
        elif op == "min":
            v = min(col)
        else:
            v = sum(col) // n
        if not is_float(dtype_name):
            bits = numpy_dtype(dtype_name).itemsize * 8
            v %= 1 << bits
            if numpy_dtype(dtype_name).kind == "i" and v >= 1 << (bits - 1):
                v -= 1 << bits
        out.append(v)
    return out


@settings(derandomize=True, max_examples=80, deadline=None)
@given(dtype_name=st.sampled_from(DTYPE_NAMES), op=st.sampled_from(OP_NAMES), n=st.integers(2, 16),
       seed=st.integers(0, 1000))
def test_reference_is_exact_integer_arithmetic(dtype_name, op, n, seed):
    ins = [init_data(seed, r, 64, dtype_name, op, n) for r in range(n)]
    ints = [[int(v) for v in a.astype(np.float64)] for a in ins]
    got = reduce_arrays(ins, op, dtype_name, n)
    assert got.dtype == numpy_dtype(dtype_name)
    assert [int(v) for v in got.astype(np.float64)] == _exact(ints, op, dtype_name, n)


@pytest.mark.parametrize("dtype_name", ["int8", "half", "bfloat16", "float"])
def test_data_tells_the_reductions_apart(dtype_name):
    n = 4
    for op in OP_NAMES:
        ins = [init_data(0, r, 512, dtype_name, op, n) for r in range(n)]
        want = reduce_arrays(ins, op, dtype_name, n)
        for other in OP_NAMES:
            if other != op:
                assert count_wrong(reduce_arrays(ins, other, dtype_name, n), want, dtype_name, op, n) > 0, other


def _distinct(n, count, blocks):
    return [np.arange(blocks * count, dtype=np.int64) + 1000 * r for r in range(n)]


def test_expected_layouts_by_hand():
    n, c = 3, 2
    s = _distinct(n, c, 1)
    ag = expected(TABLE["allgather"], s, c, "int64", "sum", n, None)
    assert ag[1].tolist() == [0, 1, 1000, 1001, 2000, 2001]
    g = expected(TABLE["gather"], s, c, "int64", "sum", n, 2)
    assert g[0] is None and g[1] is None and g[2].tolist() == ag[0].tolist()
    b = expected(TABLE["broadcast"], s, c, "int64", "sum", n, 1)
    assert [x.tolist() for x in b] == [[1000, 1001]] * 3
    r = expected(TABLE["reduce"], s, c, "int64", "max", n, 0)
    assert r[0].tolist() == [2000, 2001] and r[1] is None
    ar = expected(TABLE["allreduce"], s, c, "int64", "sum", n, None)
    assert ar[2].tolist() == [3000, 3003]
    s3 = _distinct(n, c, n)
    rs = expected(TABLE["reducescatter"], s3, c, "int64", "sum", n, None)
    assert rs[1].tolist() == [3000 + 3 * 2, 3000 + 3 * 3]
    sc = expected(TABLE["scatter"], s3, c, "int64", "sum", n, 2)
    assert sc[1].tolist() == [2002, 2003]
    a2a = expected(TABLE["alltoall"], s3, c, "int64", "sum", n, None)
    # block s of rank d's output is block d of rank s's input
    assert a2a[1].tolist() == [2, 3, 1002, 1003, 2002, 2003]


def test_count_wrong():
    w = np.array([1.0, 2.0, 3.0], np.float32)
    assert count_wrong(w, w, "float", "sum", 4) == 0
    assert count_wrong(np.array([1.0, 2.5, 3.0], np.float32), w, "float", "sum", 4) == 1
    # avg on floats tolerates rounding of n ulps (NCCL pre-multiplies by 1/n)
    assert count_wrong(w * np.float32(1 + 2**-23), w, "float", "avg", 4) == 0
    assert count_wrong(w * np.float32(1.01), w, "float", "avg", 4) == 3
    assert count_wrong(np.zeros(2, np.int8), np.zeros(3, np.int8), "int8", "sum", 2) == 3


def test_numpy_dtypes():
    assert [numpy_dtype(d).itemsize for d in DTYPE_NAMES] == [1, 1, 4, 4, 8, 8, 2, 4, 8, 2]
