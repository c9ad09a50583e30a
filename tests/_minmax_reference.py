"""NCCL's floating max / min, element by element in plain Python (shares no code with kernels/).

From NCCL v2.28.9-1 src/device/reduce_kernel.h:397-436: float / double reduce with ``fmaxf`` /
``fminf`` / ``fmax`` / ``fmin``, half and bfloat16 with ``__hmax`` / ``__hmin`` (sm_80+; older GPUs
through ``fmaxf`` on float).  CUDA's math API (crt/math_functions.h, fmaxf): "If one argument is NaN,
returns the numeric argument", NaN when both are; it says nothing of ``max(+0, -0)``.  cuda_fp16.hpp /
cuda_bf16.hpp ``__hmax``: the same NaN rule and "hmax(+0.0, -0.0) = +0.0" (``__hmin``: -0.0).
"""

from __future__ import annotations

import math

import numpy as np

#: values whose every pair is checked (signed zeros, infinities, NaN, subnormals, extremes)
SPECIAL = (0.0, -0.0, 1.0, -1.0, 2.5, -2.5, math.inf, -math.inf, math.nan, -math.nan, 1e-45, -1e-45, 6e-8,
           65504.0, -65504.0, 3.0e38, -3.0e38, 1e300, -1e300)


def nccl_minmax(x: float, y: float, want_max: bool, zero_rule: bool):
    """NCCL's ``max`` (``want_max``) or ``min`` of two values; ``zero_rule``: the type follows
    ``__hmax`` on signed zeros (half, bfloat16).  None where the result is left open (float /
    double, +0 against -0)."""
    if math.isnan(x) and math.isnan(y):
        return math.nan
    if math.isnan(x) or math.isnan(y):
        return y if math.isnan(x) else x
    if x == y == 0.0 and math.copysign(1, x) != math.copysign(1, y):
        return (0.0 if want_max else -0.0) if zero_rule else None
    return max(x, y) if want_max else min(x, y)


def check_minmax(got: np.ndarray, a: np.ndarray, b: np.ndarray, op: str, what: str) -> int:
    """Assert ``got == a op b`` element by element as NCCL computes it (NaN as NaN, zero signs
    where specified); returns how many elements were checked."""
    half = np.dtype(a.dtype).name in ("float16", "bfloat16")
    checked = 0
    with np.errstate(invalid="ignore"):     # signalling NaNs among random bit patterns
        a64, b64, g64 = a.astype(np.float64), b.astype(np.float64), got.astype(np.float64)
    for i, (x, y, g) in enumerate(zip(a64, b64, g64)):
        want = nccl_minmax(float(x), float(y), op == "max", half)
        if want is None:
            continue
        checked += 1
        ok = math.isnan(g) if math.isnan(want) else (g == want and math.copysign(1, g) == math.copysign(1, want))
        assert ok, f"{what} {op}({x!r}, {y!r}) = {g!r}, NCCL gives {want!r} (element {i})"
    return checked


def special_pairs(dtype) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of :data:`SPECIAL` values in ``dtype`` (out-of-range ones saturate to +-inf or flush)."""
    with np.errstate(over="ignore", under="ignore"):
        v = np.array(SPECIAL, np.float64).astype(dtype)
    return np.repeat(v, v.size), np.tile(v, v.size)
