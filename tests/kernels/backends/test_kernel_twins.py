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

from kernels.backends.kernel_twins import (PreMulSum, float_minmax, postdiv_host, postdiv_with, premul_scale,
                                          reduce_copy_host, reduce_copy_with)
from topo_probe.errors import InvalidArgument


def _recording_xp():
    """A stand-in array module: NumPy's functions, each call logged by name."""
    calls = []

    def wrap(name):
        def fn(*args, **kwargs):
            calls.append(name)
            return getattr(np, name)(*args, **kwargs)
        return fn
    names = ("add", "multiply", "fmax", "fmin", "floor_divide", "divide")
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


# ------------------------------------------------------------------ float8: NCCL's half + saturation
F8_OPS = ("sum", "prod", "max", "min")


@pytest.fixture(scope="module")
def f8_tables():
    from _f8_reference import table
    return {(name, op): table(name, op) for name in ("float8_e4m3fn", "float8_e5m2") for op in F8_OPS}


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("op", F8_OPS)
def test_float8_twin_matches_the_brute_force_nccl_reference(f8_tables, name, op):
    """All 256 x 256 pairs of bit patterns, bit for bit (NaN results are 0x7f)."""
    import ml_dtypes
    dt = np.dtype(getattr(ml_dtypes, name))
    a = np.repeat(np.arange(256, dtype=np.uint8), 256).view(dt)
    b = np.tile(np.arange(256, dtype=np.uint8), 256).view(dt)
    d = np.zeros(256 * 256, dt)
    reduce_copy_host(d, a, b, op)
    want = f8_tables[(name, op)].reshape(-1)
    bad = np.flatnonzero(d.view(np.uint8) != want)
    assert bad.size == 0, (f"{name} {op}: {bad.size} pairs differ, first a=0x{bad[0] // 256:02x} "
                           f"b=0x{bad[0] % 256:02x}: got 0x{d.view(np.uint8)[bad[0]]:02x}, want 0x{want[bad[0]]:02x}")


@pytest.mark.parametrize("name, big, sat", [("float8_e4m3fn", 448.0, 0x7E), ("float8_e5m2", 57344.0, 0x7B)])
def test_float8_overflow_saturates_as_nccl_does(name, big, sat):
    """Hand cases from cuda_fp8.hpp's __NV_SATFINITE: 448 + 448 is 448 in e4m3 (not NaN), 57344 * 2 is
    57344 in e5m2 (not inf), and a PreMulSum avg of 4 ranks scales by 1/4 in half."""
    import ml_dtypes
    dt = np.dtype(getattr(ml_dtypes, name))
    x = np.array([big, -big], dt)
    for op in ("sum", "prod"):
        d = np.zeros(2, dt)
        reduce_copy_host(d, x, np.array([big, big], dt), op)
        assert d.view(np.uint8).tolist() == [sat, (sat | 0x80) if op == "prod" else 0], (op, d.tolist())
    d = np.zeros(2, dt)
    reduce_copy_host(d, x, x, PreMulSum(4, True, True))
    assert d.tolist() == [big / 2, -big / 2]


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("n", [2, 3, 5, 8, 1000])
def test_float8_avg_premulsum_matches_the_reference(f8_tables, name, n):
    """PreMulSum of every pair: ``fp8(half(a)*half(s)) + fp8(half(b)*half(s))`` with ``s`` = 1/n narrowed
    from float32 with saturation (NCCL v2.28.9-1 enqueue.cc:2295-2301, reduce_kernel.h:719-760)."""
    import ml_dtypes
    from _f8_reference import narrow
    dt = np.dtype(getattr(ml_dtypes, name))
    s = narrow(name, float(np.float32(1.0 / n)))
    prod, add = f8_tables[(name, "prod")], f8_tables[(name, "sum")]
    codes = np.arange(256)
    want = add[prod[codes, s][:, None], prod[codes, s][None, :]].reshape(-1)
    a = np.repeat(np.arange(256, dtype=np.uint8), 256).view(dt)
    b = np.tile(np.arange(256, dtype=np.uint8), 256).view(dt)
    for scale_a, scale_b in ((True, True), (True, False)):
        d = np.zeros(256 * 256, dt)
        reduce_copy_host(d, a, b, PreMulSum(n, scale_a, scale_b))
        w = want if scale_b else add[prod[codes, s][:, None], codes[None, :]].reshape(-1)
        assert np.array_equal(d.view(np.uint8), w), f"{name} avg of {n}: {np.sum(d.view(np.uint8) != w)} pairs differ"


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("n", [2, 3, 7, 1000])
def test_premul_scale_of_float8_is_the_brute_force_product_by_one_over_n(f8_tables, name, n):
    """The one PreMulSum operand step (which the reference executor shares): every float8 code times 1/n
    (narrowed from float32 with saturation) equals the brute-force half-and-saturate product table."""
    import ml_dtypes
    from _f8_reference import narrow
    dt = np.dtype(getattr(ml_dtypes, name))
    s = narrow(name, float(np.float32(1.0 / n)))
    got = premul_scale(np, np.arange(256, dtype=np.uint8).view(dt), n)
    assert got.dtype == dt
    assert np.array_equal(got.view(np.uint8), f8_tables[(name, "prod")][np.arange(256), s])


@pytest.mark.parametrize("name", ["float16", "float32", "float64"])
def test_premul_scale_of_wider_floats_rounds_the_exact_product_once(name):
    """Non-float8 types: float(v) * float(1/n in the type) in float64 (exact for float16 and float32
    operands), rounded once to the type: NCCL's ``x * scalar`` in the element type."""
    rng = np.random.default_rng(5)
    v = rng.standard_normal(500).astype(name) * 100
    for n in (3, 7, 10):
        s = np.float64(1.0 / n) if name == "float64" else float(np.float32(1.0 / n).astype(name))
        want = np.array([float(x) * s for x in v]).astype(name) if name != "float64" else v * s
        assert np.array_equal(premul_scale(np, v, n), want), (name, n)


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("op", ["max", "min"])
def test_float_max_min_drop_nan_like_nccl(name, op):
    """NCCL's fmaxf / __hmax (reduce_kernel.h:397-436): every pair of special values and random bit
    patterns against the independent element reference; plain_ufunc (the bound paths) agrees bit for bit."""
    import ml_dtypes
    from _minmax_reference import check_minmax, special_pairs

    from kernels.backends.kernel_twins import plain_ufunc
    dt = np.dtype(getattr(ml_dtypes, name, None) or name)
    a, b = special_pairs(dt)
    bits = np.random.default_rng(3).integers(0, 256, (2, 2048 * dt.itemsize), dtype=np.uint8)
    a, b = np.concatenate([a, bits[0].view(dt)]), np.concatenate([b, bits[1].view(dt)])
    d = np.empty_like(a)
    reduce_copy_with(np, d, a, b, op)
    assert check_minmax(d, a, b, op, f"twin {name}") > a.size * 0.9
    for alias in ("a", "b"):            # dst is an operand: the path through a temporary
        d = (a if alias == "a" else b).copy()
        reduce_copy_with(np, d, d if alias == "a" else a, d if alias == "b" else b, op)
        check_minmax(d, a, b, op, f"twin {name}, dst is {alias}")
    k = special_pairs(dt)[0].size       # one pair per call: NumPy's scalar loop (C's fmax quiets a signalling NaN)
    d = np.empty_like(a[:k])
    for i in range(k):
        reduce_copy_with(np, d[i:i + 1], a[i:i + 1], b[i:i + 1], op)
    check_minmax(d, a[:k], b[:k], op, f"twin {name}, one pair per call")
    uf = plain_ufunc(np, dt, op)
    if uf is not None:
        with np.errstate(invalid="ignore"):
            p = uf(a, b)
        assert np.array_equal(p.view(np.uint8), d.view(np.uint8)), f"plain_ufunc {name} {op} differs from the twin"
    hand = {"max": [3.0, 1.0, 2.0], "min": [3.0, 1.0, -2.0]}[op]       # NaN vs 3, 1 vs NaN, 2 vs -2
    reduce_copy_with(np, d[:3], np.array([np.nan, 1, 2], dt), np.array([3, np.nan, -2], dt), op)
    assert d[:3].astype(np.float64).tolist() == hand


@pytest.mark.parametrize("module", ["numpy", "torch"])
def test_float_minmax_keeps_a_0d_operands_shape(module):
    """0-d operands stay 0-d (the NaN used to be built from a 1-element slice: torch's combine then raised
    'output with shape [] doesn't match the broadcast shape [1]'); the value follows the rule: NaN dropped."""
    xp = pytest.importorskip(module)
    mk = np.array if module == "numpy" else xp.tensor
    out = float_minmax(xp, mk(float("nan"), dtype=xp.float32), mk(2.0, dtype=xp.float32), True)
    assert tuple(out.shape) == () and float(out) == 2.0
    both = float_minmax(xp, mk(float("nan"), dtype=xp.float32), mk(-float("nan"), dtype=xp.float32), False)
    assert tuple(both.shape) == () and np.asarray(both).view(np.uint32) == 0x7FFFFFFF
