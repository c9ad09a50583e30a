"""topocoll's floating max / min, element by element in plain Python (shares no code with kernels/).

The rule (docs/guarantees.md, *max and min*), NCCL's where NCCL fixes one: a NaN operand is dropped and
the result is NaN only when both operands are (NCCL v2.28.9-1 src/device/reduce_kernel.h:397-436 reduces
float / double with ``fmaxf`` / ``fminf`` / ``fmax`` / ``fmin`` and half / bfloat16 with ``__hmax`` /
``__hmin``; CUDA's math API, crt/math_functions.h: "If one argument is NaN, returns the numeric
argument").  Where CUDA leaves the answer open, one choice for every type: +0 ranks above -0 (cuda_fp16.hpp
``__hmax``: "hmax(+0.0, -0.0) = +0.0", IEEE 754-2019 maximumNumber), and a NaN result is the positive NaN
with every payload bit set (0x7fff, 0x7fffffff, 0x7fffffffffffffff: CUDA's ``CUDART_NAN_F``), whatever the
operands' NaN bits.  So max / min give the same bits in any operand order.
"""

from __future__ import annotations

import math

import numpy as np

#: values whose every pair is checked (signed zeros, infinities, NaN, subnormals, extremes)
SPECIAL = (0.0, -0.0, 1.0, -1.0, 2.5, -2.5, math.inf, -math.inf, math.nan, -math.nan, 1e-45, -1e-45, 6e-8,
           65504.0, -65504.0, 3.0e38, -3.0e38, 1e300, -1e300)
#: the bits of a NaN result, by the type's width in bytes
NAN_BITS = {2: 0x7FFF, 4: 0x7FFFFFFF, 8: 0x7FFFFFFFFFFFFFFF}
_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def nccl_minmax(x: float, y: float, want_max: bool):
    """``max`` (``want_max``) or ``min`` of two values by the rule above (a NaN result as ``math.nan``)."""
    if math.isnan(x) and math.isnan(y):
        return math.nan
    if math.isnan(x) or math.isnan(y):
        return y if math.isnan(x) else x
    if x == y == 0.0 and math.copysign(1, x) != math.copysign(1, y):
        return 0.0 if want_max else -0.0
    return max(x, y) if want_max else min(x, y)


def minmax_bits(a: np.ndarray, b: np.ndarray, op: str) -> np.ndarray:
    """The bit patterns of ``a op b`` by the rule, one element at a time: the chosen operand's own
    bits (a NaN dropped keeps the other's payload), :data:`NAN_BITS` where both are NaN."""
    width = np.dtype(a.dtype).itemsize
    ua, ub = a.view(_UINT[width]), b.view(_UINT[width])
    with np.errstate(invalid="ignore"):
        fa, fb = a.astype(np.float64), b.astype(np.float64)
    out = np.empty(a.size, _UINT[width])
    for i in range(a.size):
        x, y = float(fa[i]), float(fb[i])
        want = nccl_minmax(x, y, op == "max")
        if math.isnan(want):
            out[i] = NAN_BITS[width]
        elif x == y and math.copysign(1, x) == math.copysign(1, y):
            out[i] = ua[i]              # equal values of one sign have one bit pattern
        else:
            pick_a = (not math.isnan(x)) and x == want and math.copysign(1, x) == math.copysign(1, want)
            out[i] = ua[i] if pick_a else ub[i]
    return out


def check_minmax(got: np.ndarray, a: np.ndarray, b: np.ndarray, op: str, what: str) -> int:
    """Assert ``got`` has exactly the bits of ``a op b`` by the rule, element by element; returns how
    many elements were checked (all of them)."""
    width = np.dtype(a.dtype).itemsize
    want, have = minmax_bits(a, b, op), np.ascontiguousarray(got).view(_UINT[width])
    bad = np.nonzero(want != have)[0]
    if bad.size:
        i = int(bad[0])
        raise AssertionError(f"{what} {op}({int(a.view(_UINT[width])[i]):#x}, {int(b.view(_UINT[width])[i]):#x}) "
                             f"= {int(have[i]):#x}, the rule gives {int(want[i]):#x} (element {i}, "
                             f"{bad.size} of {a.size} wrong)")
    return a.size


def special_pairs(dtype) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of :data:`SPECIAL` values in ``dtype`` (out-of-range ones saturate to +-inf or flush),
    plus NaNs with payloads and signs (signalling ones among them) against each other and against numbers."""
    with np.errstate(over="ignore", under="ignore"):
        v = np.array(SPECIAL, np.float64).astype(dtype)
    u = _UINT[np.dtype(dtype).itemsize]
    nans = [_nan(dtype, payload, neg) for payload in (1, 2, 5) for neg in (False, True)]
    nans = np.array(nans + [_nan(dtype, 1, neg, quiet=False) for neg in (False, True)], u).view(dtype)
    v = np.concatenate([v, nans])
    return np.repeat(v, v.size), np.tile(v, v.size)


def _nan(dtype, payload: int, negative: bool, quiet: bool = True) -> int:
    """The bits of a NaN of ``dtype`` (quiet, or signalling: the top mantissa bit clear) with low payload
    bits ``payload`` (non-zero) and the sign bit if ``negative``."""
    width = np.dtype(dtype).itemsize
    mant = {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52}[np.dtype(dtype).name]
    exp_all = ((1 << (width * 8 - 1)) - 1) ^ ((1 << mant) - 1)
    return (1 << (width * 8 - 1) if negative else 0) | exp_all | (quiet << (mant - 1)) | payload
