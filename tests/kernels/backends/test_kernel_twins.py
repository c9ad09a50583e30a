"""kernels.backends.kernel_twins: the array-module-generic reduce-copy and avg division (shared by the
host twins, the MPI wires and the CuPy runtime) use only the module they are given and match
NCCL's rules (integers wrap, avg truncates toward zero), checked with Python integers."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.backends.kernel_twins import postdiv_host, postdiv_with, reduce_copy_host, reduce_copy_with
from topo_probe.errors import InvalidArgument


def _recording_xp():
    """A stand-in array module: NumPy's functions, each call logged by name."""
    calls = []

    def wrap(name):
        def fn(*args, **kwargs):
            calls.append(name)
            return getattr(np, name)(*args, **kwargs)
        return fn
    names = ("add", "multiply", "maximum", "minimum", "floor_divide", "divide")
    return types.SimpleNamespace(**{n: wrap(n) for n in names}), calls


PY_OPS = {"sum": lambda a, b: a + b, "avg": lambda a, b: a + b, "prod": lambda a, b: a * b,
          "max": max, "min": min}


@settings(derandomize=True, max_examples=60, deadline=None)
@given(op=st.sampled_from(sorted(PY_OPS)),
       vals=st.lists(st.tuples(st.integers(-128, 127), st.integers(-128, 127)), min_size=1, max_size=8))
def test_reduce_copy_with_uses_the_given_module_and_wraps_like_c(op, vals):
    xp, calls = _recording_xp()
    a = np.array([v[0] for v in vals], np.int8)
    b = np.array([v[1] for v in vals], np.int8)
    dst = np.zeros_like(a)
    reduce_copy_with(xp, dst, a, b, op)
    want = [((PY_OPS[op](x, y) + 128) % 256) - 128 for x, y in vals]   # int8 wrap-around
    assert dst.tolist() == want and len(calls) == 1


@settings(derandomize=True, max_examples=60, deadline=None)
@given(vals=st.lists(st.integers(-10**6, 10**6), min_size=1, max_size=8), n=st.integers(1, 9))
def test_postdiv_with_truncates_toward_zero_through_the_given_module(vals, n):
    xp, calls = _recording_xp()
    x = np.array(vals, np.int32)
    postdiv_with(xp, x, n)
    assert x.tolist() == [int(math.copysign(abs(v) // n, v)) for v in vals]
    assert calls == ["floor_divide"]


def test_postdiv_with_divides_floats_through_the_given_module():
    xp, calls = _recording_xp()
    x = np.array([1.0, -3.0, 0.5], np.float32)
    postdiv_with(xp, x, 4)
    assert x.tolist() == [0.25, -0.75, 0.125] and calls == ["divide"]


def test_unknown_op_is_unsupported():
    with pytest.raises(InvalidArgument, match="got 'xor'"):
        reduce_copy_with(np, np.zeros(1), np.zeros(1), np.zeros(1), "xor")


def test_postdiv_twin_truncates_toward_zero_like_c():
    x = np.array([7, -7, 5, -5, 0, -1, 1, 2**40 + 3, -(2**40) - 3], np.int64)
    got = x.copy()
    postdiv_host(got, 3)
    assert got.tolist() == [int(math.trunc(v / 3)) if abs(v) < 2**40 else (v // 3 if v > 0 else -((-v) // 3))
                            for v in x.tolist()]
    u = np.array([255, 7, 2], np.uint8)
    postdiv_host(u, 2)
    assert u.tolist() == [127, 3, 1]
    f = np.array([1.0, -3.0], np.float16)
    postdiv_host(f, 3)
    assert f.tolist() == [float(np.float16(1 / 3)), -1.0]


def test_reduce_twin_wraps_integers_like_c():
    d = np.empty(2, np.uint8)
    reduce_copy_host(d, np.array([200, 3], np.uint8), np.array([100, 5], np.uint8), "sum")
    assert d.tolist() == [44, 8]
    reduce_copy_host(d, np.array([200, 3], np.uint8), np.array([2, 5], np.uint8), "prod")
    assert d.tolist() == [144, 15]
