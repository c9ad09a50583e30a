"""The reduce-copy and avg division every backend agrees with, written once with an array module.

:func:`reduce_copy_with` and :func:`postdiv_with` take the array module (``numpy``, ``cupy``
or a stand-in with the same functions), so the host backend, the CuPy runtime, the MPI
buffer layers and the test doubles share one definition of each op (see
:data:`UFUNC_NAMES`); the fused host kernels (:mod:`kernels.backends.host_reduce`) and the
native GPU kernel are checked against them bit for bit.  Integers wrap like C / NCCL;
floating ``avg`` is NCCL's PreMulSum (:class:`PreMulSum`), integer avg SumPostDiv.

Floating max / min follow one rule on every type and executor (:func:`float_minmax`, docs/guarantees.md):
a NaN operand is dropped as NCCL drops it (v2.28.9-1 src/device/reduce_kernel.h:397-436: ``fmaxf`` /
``fmax`` for float / double, ``__hmax`` / ``__hmin`` for half and bfloat16; NaN only when both operands
are), +0 ranks above -0 (``__hmax``'s rule, cuda_fp16.hpp; CUDA leaves ``fmaxf(+0, -0)`` open), and a
NaN result is :data:`NAN_BITS` of its width, whatever the operands' NaN bits.  NumPy's own ``fmax``
cannot serve alone: which zero ``fmax(+0, -0)`` gives varies with the type and the array's length, and
its scalar loop returns NaN for a signalling NaN against a number (NumPy 2.4, x86); on NumPy arrays
:func:`float_minmax` runs it and redoes only the NaN and zero results.

float8 (``float8_e4m3fn``, ``float8_e5m2``) reduces as NCCL does on sm_90 (v2.28.9-1
src/device/reduce_kernel.h:440-455, 619-645, 719-760; the same since v2.24.3-1): both operands
are widened to half, combined with ``__hadd`` / ``__hmul`` / ``__hmax`` / ``__hmin``, and the half
result is narrowed by the ``__nv_fp8_*(__half)`` constructor, which rounds to nearest even and
saturates (``__NV_SATFINITE``, CUDA 13.0 cuda_fp8.hpp ``__nv_cvt_double_to_fp8``): overflow and
+-inf become +-largest finite (448, 57344), NaN becomes 0x7f.  ``__hmax`` / ``__hmin`` return the
other operand when one is NaN and order +0 above -0 (cuda_fp16.hpp).  See :func:`f8_binop`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels.program.reduce_op import check_reduce_op

#: reduction op -> name of the ufunc that applies it (integer avg sums, then divides; floating
#: avg sums contributions pre-multiplied by 1/n, see :class:`PreMulSum`)
UFUNC_NAMES = {"sum": "add", "avg": "add", "prod": "multiply", "max": "fmax", "min": "fmin"}
#: the bit pattern of a NaN that floating max / min write (both operands NaN), by the type's width in
#: bytes: the positive NaN with every payload bit set (CUDA's ``CUDART_NAN_F`` is 0x7fffffff)
NAN_BITS = {2: 0x7FFF, 4: 0x7FFFFFFF, 8: 0x7FFFFFFFFFFFFFFF}
#: floating types (float8 aside) whose max / min is :func:`float_minmax`
FLOAT_TYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
#: avg's binary op where no operand is scaled (integer avg sums, then divides), checked once here
CHECKED_SUM = check_reduce_op("sum")

#: largest finite value of each float8 type: where ``__NV_SATFINITE`` clamps (cuda_fp8.hpp FP8_MAXNORM 0x7e / 0x7b)
F8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
#: the float8 bit pattern of a NaN result (the canonical half NaN 0x7fff narrowed by cuda_fp8.hpp)
F8_NAN_BITS = 0x7F


@dataclass(frozen=True)
class PreMulSum:
    """The binary op of a floating ``avg`` reduce (NCCL's ``ncclDevPreMulSum``):
    ``dst = (a * s if scale_a) + (b * s if scale_b)`` with ``s`` = :func:`avg_scalar` of ``n``,
    every product and the sum rounded in the element type."""

    n: int
    scale_a: bool
    scale_b: bool


def avg_scalar(dtype, n: int):
    """``1/n`` in ``dtype`` as NCCL computes it: ``float(1.0/n)`` rounded to the type for
    float16, bfloat16, float8 and float32, ``1.0/n`` for float64.

    >>> float(avg_scalar(np.float16, 3)), float(avg_scalar(np.float64, 3))
    (0.333251953125, 0.3333333333333333)
    """
    dt = np.dtype(dtype)
    if dt == np.float64:
        return np.float64(1.0 / n)
    return np.float32(1.0 / n).astype(dt)[()]


def is_f8(dtype) -> bool:
    """Whether ``dtype`` is one of NCCL's float8 types (ml_dtypes' float8_e4m3fn / float8_e5m2)."""
    return np.dtype(dtype).name in F8_MAX


def f8_from_half(xp, h, dtype):
    """float16 array -> float8 ``dtype`` as ``__nv_fp8_e4m3(__half)`` / ``__nv_fp8_e5m2(__half)``:
    round to nearest even, +-inf and overflow to +-largest finite, NaN to 0x7f.

    >>> import ml_dtypes     # registers the float8 names with NumPy
    >>> f8_from_half(np, np.array([896, -np.inf, 1.0], np.float16), ml_dtypes.float8_e4m3fn).tolist()
    [448.0, -448.0, 1.0]
    """
    dt = np.dtype(dtype)
    m = F8_MAX[dt.name]
    out = xp.clip(h, -m, m).astype(dt)      # values past m round to m anyway: clip first, then round
    bits = out.view(xp.uint8)
    bits[xp.isnan(h)] = F8_NAN_BITS
    return out


def float_minmax(xp, x, y, want_max: bool):
    """Floating max (``want_max``) or min of arrays of module ``xp`` (NumPy, CuPy or torch), the one rule
    every executor follows: the other operand when one is NaN (NCCL's ``fmaxf`` / ``__hmax``), +0 above
    -0, and where both are NaN the NaN of :data:`NAN_BITS` (so any operand order gives the same bits).

    >>> float_minmax(np, np.array([np.nan, 0.0, -0.0], np.float16), np.array([2, -0.0, 0.0], np.float16), True)
    array([2., 0., 0.], dtype=float16)
    >>> hex(float_minmax(np, np.array([-np.nan], np.float32), np.array([np.nan], np.float32), False).view(np.uint32)[0])
    '0x7fffffff'
    """
    if xp is np and _same_numpy(x, y):
        return _numpy_minmax(x, y, want_max, np.empty_like(x))
    return _minmax_select(xp, x, y, want_max)


def _numpy_minmax(x: np.ndarray, y: np.ndarray, want_max: bool, out: np.ndarray) -> np.ndarray:
    """:func:`float_minmax` of NumPy arrays written to ``out`` (overlapping neither), the same bits in
    about one ufunc pass: ``np.fmax`` / ``np.fmin`` return one operand's bits and drop a quiet NaN, so
    only NaN results (both operands NaN, or a signalling NaN, which C's fmax turns into NaN) and a zero of
    the wrong sign (which zero NumPy picks varies with the type and the array's length) are redone."""
    uint = f"u{out.itemsize}"
    bits, sign = out.view(uint), 1 << (8 * out.itemsize - 1)
    with np.errstate(invalid="ignore"):
        (np.fmax if want_max else np.fmin)(x, y, out=out)
        if not out.size:
            return out
        if np.isnan(np.max(out)):           # np.max propagates NaN: no mask unless some result is NaN
            at = np.nonzero(np.isnan(out))
            out[at] = _minmax_select(np, x[at], y[at], want_max)
    wrong, right = (sign, 0) if want_max else (0, sign)   # max: -0 against +0 is +0; min: +0 against -0 is -0
    suspect = bits == wrong
    if suspect.any():
        at = np.nonzero(suspect)
        fix = (x.view(uint)[at] == right) | (y.view(uint)[at] == right)
        bits[tuple(i[fix] for i in at)] = right
    return out


def _same_numpy(*arrays) -> bool:
    """Whether ``arrays`` are NumPy arrays of one shape (not 0-d) and one dtype: :func:`_numpy_minmax`'s inputs."""
    first = arrays[0]
    return all(isinstance(a, np.ndarray) and a.ndim and a.shape == first.shape and a.dtype == first.dtype
               for a in arrays)


def _minmax_select(xp, x, y, want_max: bool):
    """:func:`float_minmax` by element-wise selection, for any array module (no host sync on a GPU)."""
    with np.errstate(invalid="ignore"):     # comparisons with NaN are False, as meant
        pick_x = ((x > y) if want_max else (x < y)) | xp.isnan(y)
        zeros = (x == y) & (x == 0)
    pick_x = xp.where(zeros, xp.signbit(x) != want_max, pick_x)
    out = xp.where(pick_x, x, y)
    ints = {2: xp.int16, 4: xp.int32, 8: xp.int64}[x.itemsize]
    nan = xp.full_like(x, NAN_BITS[x.itemsize], dtype=ints).view(x.dtype)    # on x's device, x's shape (0-d too)
    return xp.where(xp.isnan(out), nan, out)


def f8_binop(xp, a, b, op: str):
    """``a (op) b`` for float8 arrays as NCCL computes it: in half, narrowed with saturation
    (op sum / avg / prod / max / min; the result has ``a``'s dtype)."""
    x, y = a.astype(np.float16), b.astype(np.float16)
    if op in ("max", "min"):
        h = float_minmax(xp, x, y, op == "max")
    else:
        with np.errstate(over="ignore", invalid="ignore"):      # half overflow is saturated below
            h = getattr(xp, UFUNC_NAMES[op])(x, y)
    return f8_from_half(xp, h, a.dtype)


def premul_scale(xp, v, n: int):
    """One contribution ``v`` times :func:`avg_scalar` of ``n`` in its own type, the operand step of NCCL's
    PreMulSum (:class:`PreMulSum`): a plain product rounded in the type, for float8 a product in half narrowed
    with saturation (:func:`f8_binop`; the scale itself narrowed once from float32, enqueue.cc:2295-2301).

    >>> premul_scale(np, np.array([3.0, 1.0], np.float16), 4).tolist()
    [0.75, 0.25]
    """
    s = avg_scalar(v.dtype, n)
    if is_f8(v.dtype):
        return f8_binop(xp, v, xp.broadcast_to(xp.full(1, s, dtype=v.dtype), v.shape), "prod")
    return v * s


def binop_for(premul: tuple[bool, bool], reduce_op: str, n: int):
    """The binary op of one reduce op: ``PreMulSum`` when it scales an operand (floating avg),
    else the collective's op name (sum for avg: a checked op, :data:`CHECKED_SUM`, so a caller that
    checked ``reduce_op`` hands on checked ops only)."""
    if premul[0] or premul[1]:
        return PreMulSum(n, premul[0], premul[1])
    return CHECKED_SUM if reduce_op == "avg" else reduce_op


def plain_ufunc(xp, dtype, binop):
    """The array-module ufunc computing ``binop`` on ``dtype`` exactly as :func:`reduce_copy_with`
    does (``ufunc(a, b, out=dst)``), or None where only :func:`reduce_copy_with` itself gives
    NCCL's answer: a :class:`PreMulSum`, float8 (in half, saturating), max / min of floating types
    (:func:`float_minmax`).  Bound call paths use it to skip the dispatch.

    >>> plain_ufunc(np, np.int32, "max") is np.fmax, plain_ufunc(np, np.float32, "max")
    (True, None)
    """
    if isinstance(binop, PreMulSum) or is_f8(dtype):
        return None
    if binop in ("max", "min") and np.dtype(dtype).name in FLOAT_TYPES:
        return None
    return getattr(xp, UFUNC_NAMES[binop])


def reduce_copy_with(xp, dst, a, b, op: str) -> None:
    """``dst[:] = a (op) b`` with array module ``xp`` (``dst`` may alias ``a``); ``op`` is an op
    name or a :class:`PreMulSum`.

    >>> d = np.zeros(2, np.int32)
    >>> reduce_copy_with(np, d, np.array([1, 5], np.int32), np.array([4, 2], np.int32), "max"); d
    array([4, 5], dtype=int32)
    >>> f = np.zeros(2, np.float32); x, y = np.array([np.nan, 1], np.float32), np.array([3, np.nan], np.float32)
    >>> reduce_copy_with(np, f, x, y, "max"); f                 # NaN dropped, as NCCL's fmaxf
    array([3., 1.], dtype=float32)
    >>> h = np.zeros(1, np.float16); x = np.array([60000], np.float16)
    >>> reduce_copy_with(np, h, x, x, PreMulSum(4, True, True)); h.tolist()   # 2 of 4 ranks: no overflow
    [30000.0]
    """
    if is_f8(dst.dtype):
        _reduce_copy_f8(xp, dst, a, b, op)
        return
    if isinstance(op, PreMulSum):
        xp.add(premul_scale(xp, a, op.n) if op.scale_a else a, premul_scale(xp, b, op.n) if op.scale_b else b, out=dst)
        return
    if op in ("max", "min") and dst.dtype.name in FLOAT_TYPES:
        if xp is np and _same_numpy(dst, a, b) and not (np.may_share_memory(dst, a) or np.may_share_memory(dst, b)):
            _numpy_minmax(a, b, op == "max", dst)       # straight into dst: no temporary, no copy
        else:
            dst[...] = float_minmax(xp, a, b, op == "max")
        return
    getattr(xp, UFUNC_NAMES[check_reduce_op(op)])(a, b, out=dst)


def _reduce_copy_f8(xp, dst, a, b, op) -> None:
    """:func:`reduce_copy_with` for float8: every product and sum through :func:`f8_binop`
    (PreMulSum's operands scaled by :func:`premul_scale`)."""
    if isinstance(op, PreMulSum):
        a = premul_scale(xp, a, op.n) if op.scale_a else a
        b = premul_scale(xp, b, op.n) if op.scale_b else b
        op = "sum"
    dst[...] = f8_binop(xp, a, b, check_reduce_op(op))


def postdiv_with(xp, x, n: int) -> None:
    """avg's final division in place with array module ``xp``: ``x / n`` for floats,
    truncation toward zero for integers (NCCL's ``FuncSumPostDiv``)."""
    if x.dtype.kind in "iu":
        q = xp.floor_divide(x, n)
        if x.dtype.kind == "i":
            q += ((x < 0) & (q * n != x)).astype(x.dtype)
        x[...] = q
    else:
        xp.divide(x, x.dtype.type(n), out=x)


def reduce_copy_host(dst: np.ndarray, a: np.ndarray, b: np.ndarray, op: str) -> None:
    """``dst[:] = a (op) b`` in place (``dst`` may alias ``a``); op sum/prod/max/min/avg(=sum).

    >>> d = np.zeros(3, np.int8); reduce_copy_host(d, np.array([1, 2, 100], np.int8), np.array([3, 4, 100], np.int8), "sum"); d
    array([  4,   6, -56], dtype=int8)
    """
    reduce_copy_with(np, dst, a, b, op)


def postdiv_host(x: np.ndarray, n: int) -> None:
    """avg's final division in place: ``x / n`` for floats, truncation toward zero for integers.

    >>> v = np.array([7, -7, 6], np.int32); postdiv_host(v, 2); v
    array([ 3, -3,  3], dtype=int32)
    """
    postdiv_with(np, x, n)
