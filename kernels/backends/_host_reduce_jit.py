"""The Numba code of :mod:`kernels.backends.host_reduce` (imported by it on first use only).

A block function reduces elements ``[lo, hi)`` of every source and writes them to ``dst``:
the first two sources combine straight into a small accumulator, each further source
combines into it, the last one straight into ``dst`` (so a 2-way reduce is one loop).  The
drivers run the blocks over ``prange`` (``*_parallel``) or in a plain loop (``*_serial``).
``fastmath`` stays off: no reassociation, no fused multiply-add.  float16 / bfloat16 blocks
work in float32 and round to the 16-bit type after every op.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

BLOCK = 8192
#: sources per kernel call: the sources travel as one tuple of this many read-only views (one
#: Numba type, compiled once per dtype); unused places repeat the first source
MAX_SOURCES = 16


def as_tuple(arrays) -> tuple:
    """:data:`MAX_SOURCES` read-only views (one Numba type whether or not a source is writable)."""
    views = []
    for a in arrays:
        v = a.view()
        v.flags.writeable = False
        views.append(v)
    return tuple(views + [views[0]] * (MAX_SOURCES - len(views)))


@njit(cache=True, nogil=True)
def _combine(out, a, b, code, sa, sb, s, ge, m):
    """``out[j] = (a[j] (* s)) op (b[j] (* s))``; max / min as NCCL's fmaxf / __hmax: a NaN operand
    is dropped (NaN only when both are; :func:`kernels.backends.host_reduce.reduce_nway` then writes
    the one NaN of kernel_twins.NAN_BITS), ties keep ``b`` or, if ``ge`` (every floating type), the zero
    of the right sign (+0 above -0; min: -0 below +0)."""
    if code == 0 and sa and sb:
        for j in range(m):
            out[j] = a[j] * s + b[j] * s
    elif code == 0 and sa:
        for j in range(m):
            out[j] = a[j] * s + b[j]
    elif code == 0 and sb:
        for j in range(m):
            out[j] = a[j] + b[j] * s
    elif code == 0:
        for j in range(m):
            out[j] = a[j] + b[j]
    elif code == 1:
        for j in range(m):
            out[j] = a[j] * b[j]
    elif code == 2:
        for j in range(m):
            x, y = a[j], b[j]
            out[j] = x if (x > y or y != y or (ge and x == y and math.copysign(1.0, x) > 0)) else y
    else:
        for j in range(m):
            x, y = a[j], b[j]
            out[j] = x if (x < y or y != y or (ge and x == y and math.copysign(1.0, x) < 0)) else y


@njit(cache=True, nogil=True)
def _accumulate(acc, b, code, sb, s, ge, m):
    """``acc[j] = acc[j] op (b[j] (* s))`` (one array read and written: the loop vectorizes)."""
    if code == 0 and sb:
        for j in range(m):
            acc[j] += b[j] * s
    elif code == 0:
        for j in range(m):
            acc[j] += b[j]
    elif code == 1:
        for j in range(m):
            acc[j] *= b[j]
    elif code == 2:
        for j in range(m):
            x, y = acc[j], b[j]
            acc[j] = x if (x > y or y != y or (ge and x == y and math.copysign(1.0, x) > 0)) else y
    else:
        for j in range(m):
            x, y = acc[j], b[j]
            acc[j] = x if (x < y or y != y or (ge and x == y and math.copysign(1.0, x) < 0)) else y


# ---------------------------------------------------------------------- native types
@njit(cache=True, nogil=True)
def _native_block(dst, srcs, k, code, scale, s, lo, hi, acc):
    m = hi - lo
    d = dst[lo:hi]
    if k == 1:
        _combine(d, srcs[0][lo:hi], srcs[0][lo:hi], 3, False, False, s, False, m)   # min(x, x) = x
        if scale[0]:
            for j in range(m):
                d[j] = d[j] * s
        return
    _combine(d if k == 2 else acc, srcs[0][lo:hi], srcs[1][lo:hi], code, scale[0], scale[1], s, True, m)
    for i in range(2, k - 1):
        _accumulate(acc, srcs[i][lo:hi], code, scale[i], s, True, m)
    if k > 2:
        _combine(d, acc, srcs[k - 1][lo:hi], code, False, scale[k - 1], s, True, m)


@njit(cache=True, nogil=True, parallel=True)
def native_parallel(dst, srcs, k, code, scale, s):
    n = dst.size
    for b in prange((n + BLOCK - 1) // BLOCK):
        lo = b * BLOCK
        hi = min(n, lo + BLOCK)
        _native_block(dst, srcs, k, code, scale, s, lo, hi, np.empty(hi - lo, dst.dtype))


@njit(cache=True, nogil=True)
def native_serial(dst, srcs, k, code, scale, s):
    n = dst.size
    acc = np.empty(min(n, BLOCK), dst.dtype)
    for lo in range(0, n, BLOCK):
        _native_block(dst, srcs, k, code, scale, s, lo, min(n, lo + BLOCK), acc)


# ---------------------------------------------------------------------- float16 / bfloat16
@njit(cache=True, nogil=True)
def _encode(u, bf):
    """float32 bits -> float16 / bfloat16 bits, round to nearest even (NumPy / ml_dtypes rules)."""
    f = np.int64(u)
    if bf:
        if (f & 0x7FFFFFFF) > 0x7F800000:
            return 0xFFC0 if f >> 31 else 0x7FC0
        return (f + 0x7FFF + ((f >> 16) & 1)) >> 16
    sgn = (f >> 16) & 0x8000
    fexp = f & 0x7F800000
    if fexp >= 0x47800000:                  # overflow, inf, NaN
        sig = f & 0x7FFFFF
        if fexp == 0x7F800000 and sig != 0:
            return sgn | 0x7E00 | (sig >> 13)
        return sgn | 0x7C00
    if fexp <= 0x38000000:                  # subnormal half or zero
        if fexp < 0x33000000:
            return sgn
        e = fexp >> 23
        sig = (0x800000 + (f & 0x7FFFFF)) >> (113 - e)
        if (sig & 0x3FFF) != 0x1000 or (f & 0x7FF):
            sig += 0x1000
        return sgn | (sig >> 13)
    sig = f & 0x7FFFFF
    if (sig & 0x3FFF) != 0x1000:
        sig += 0x1000
    return sgn + (sig >> 13) + ((fexp - 0x38000000) >> 13)


@njit(cache=True, nogil=True)
def _round(v, vu, m, table, bf):
    """Round float32 ``v[:m]`` (bits ``vu``) to the 16-bit type's values, in place."""
    if bf:
        for j in range(m):
            u = vu[j]
            r = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
            vu[j] = u | np.uint32(0x400000) if (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000) else r
    else:
        for j in range(m):
            v[j] = table[_encode(vu[j], False)]


@njit(cache=True, nogil=True)
def _decode(x, out, outu, m, sc, s, table, bf):
    """``out[:m]`` = float32 values of the 16-bit ``x`` (times ``s``, rounded, if ``sc``)."""
    if bf:
        for j in range(m):
            outu[j] = np.uint32(x[j]) << np.uint32(16)
    else:
        for j in range(m):
            out[j] = table[x[j]]
    if sc:
        for j in range(m):
            out[j] = out[j] * s
        _round(out, outu, m, table, bf)


@njit(cache=True, nogil=True)
def _half_block(dst, srcs, k, code, scale, s, table, bf, ge, lo, hi, acc, tmp):
    m = hi - lo
    accu, tmpu = acc.view(np.uint32), tmp.view(np.uint32)
    _decode(srcs[0][lo:hi], acc, accu, m, scale[0], s, table, bf)
    for i in range(1, k):
        _decode(srcs[i][lo:hi], tmp, tmpu, m, scale[i], s, table, bf)
        _accumulate(acc, tmp, code, False, s, ge, m)
        if code < 2:                        # max / min pick an operand: nothing to round
            _round(acc, accu, m, table, bf)
    d = dst[lo:hi]
    if bf:
        for j in range(m):
            d[j] = accu[j] >> np.uint32(16)     # already a bfloat16 value (or NaN)
    else:
        for j in range(m):
            d[j] = _encode(accu[j], False)


@njit(cache=True, nogil=True, parallel=True)
def half_parallel(dst, srcs, k, code, scale, s, table, bf, ge):
    n = dst.size
    for b in prange((n + BLOCK - 1) // BLOCK):
        lo = b * BLOCK
        hi = min(n, lo + BLOCK)
        _half_block(dst, srcs, k, code, scale, s, table, bf, ge, lo, hi,
                    np.empty(hi - lo, np.float32), np.empty(hi - lo, np.float32))


@njit(cache=True, nogil=True)
def half_serial(dst, srcs, k, code, scale, s, table, bf, ge):
    n = dst.size
    acc = np.empty(min(n, BLOCK), np.float32)
    tmp = np.empty(min(n, BLOCK), np.float32)
    for lo in range(0, n, BLOCK):
        _half_block(dst, srcs, k, code, scale, s, table, bf, ge, lo, min(n, lo + BLOCK), acc, tmp)
