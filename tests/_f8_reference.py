"""Brute-force float8 reduce reference, written from CUDA's and NCCL's semantics, sharing no code with
kernels/: every (a, b) pair of 8-bit patterns, widened to half, combined in NumPy float16 (one
correctly rounded IEEE op, as ``__hadd`` / ``__hmul``), narrowed by a nearest-finite-value search.

Semantics, from NCCL v2.28.9-1 src/device/reduce_kernel.h:440-455 (fp8 through half on sm_90),
719-760 (PreMulSum: ``fp8(__hmul(half(x), half(s)))``), src/enqueue.cc:2295-2301 (``s`` =
``__nv_cvt_float_to_fp8(float(1.0/n), __NV_SATFINITE)``) and CUDA 13.0 cuda_fp8.hpp
``__nv_cvt_double_to_fp8`` / cuda_fp16.hpp ``__hmax`` / ``__hmin``:

* narrowing rounds to the nearest finite value, ties to the even code; past the largest finite
  value (448 e4m3, 57344 e5m2), +-inf included, it saturates; the sign is kept (-0 stays -0);
* a NaN result is the canonical half NaN, narrowed to 0x7f;
* max / min return the other operand when one is NaN (NaN when both), and +0 > -0.
"""

from __future__ import annotations

import numpy as np

#: (exponent bits, mantissa bits, bias) of each float8 type
FORMATS = {"float8_e4m3fn": (4, 3, 7), "float8_e5m2": (5, 2, 15)}


def decode(name: str, code: int) -> float:
    """The value of one 8-bit pattern (e4m3fn: S.1111.111 is NaN, no infinity; e5m2: IEEE-like)."""
    e_bits, m_bits, bias = FORMATS[name]
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> m_bits) & ((1 << e_bits) - 1), code & ((1 << m_bits) - 1)
    if name == "float8_e4m3fn" and e == 15 and m == 7:
        return float("nan")
    if name == "float8_e5m2" and e == 31:
        return sign * float("inf") if m == 0 else float("nan")
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - m_bits)
    return sign * (1 + m / (1 << m_bits)) * 2.0 ** (e - bias)


def narrow(name: str, h: float) -> int:
    """float16 value -> 8-bit pattern: nearest finite value (ties to the even code), saturating."""
    if h != h:
        return 0x7F
    sign = 0x80 if np.signbit(h) else 0
    a = min(abs(h), 2.0 ** 20)         # +-inf: the largest finite value is the nearest (distances stay exact)
    best, best_d = 0, None
    for code in range(0x80):
        v = decode(name, code)
        if v != v or v == float("inf"):
            continue
        d = abs(v - a)
        if best_d is None or d < best_d or (d == best_d and code % 2 == 0):
            best, best_d = code, d
    return sign | best


def hmaxmin(x: np.float16, y: np.float16, want_max: bool) -> np.float16:
    """cuda_fp16.hpp's host ``__hmax`` / ``__hmin``."""
    pick = (x >= y) if want_max else (x <= y)
    r = x if (pick or y != y) else y
    if r != r:
        return np.float16("nan")
    if x == y:
        rx, ry = int(np.array(x).view(np.uint16)), int(np.array(y).view(np.uint16))
        return (y if rx > ry else x) if want_max else (x if rx > ry else y)
    return r


def table(name: str, op: str) -> np.ndarray:
    """uint8 (256, 256): the float8 pattern of ``a (op) b`` (op sum, prod, max, min) for every
    pattern a (rows) and b (columns)."""
    halves = [np.float16(decode(name, c)) for c in range(256)]
    cache: dict = {}
    out = np.zeros((256, 256), np.uint8)
    with np.errstate(over="ignore", invalid="ignore"):
        for i, x in enumerate(halves):
            for j, y in enumerate(halves):
                if op == "sum":
                    h = x + y
                elif op == "prod":
                    h = x * y
                else:
                    h = hmaxmin(x, y, op == "max")
                key = np.array(h).view(np.uint16).item()
                if key not in cache:
                    cache[key] = narrow(name, float(h))
                out[i, j] = cache[key]
    return out
