"""The reduce-copy and avg division every backend agrees with, written once with an array module.

:func:`reduce_copy_with` and :func:`postdiv_with` take the array module (``numpy``, ``cupy``
or a stand-in with the same functions), so the host backend, the CuPy runtime, the MPI
buffer layers and the test doubles share one definition of each op (see
:data:`UFUNC_NAMES`); the fused host kernels (:mod:`kernels.backends.host_reduce`) and the
native GPU kernel are checked against them bit for bit.  Integers wrap like C / NCCL;
floating ``avg`` is NCCL's PreMulSum (:class:`PreMulSum`), integer avg SumPostDiv.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topo_probe.errors import InvalidArgument

#: reduction op -> name of the ufunc that applies it (integer avg sums, then divides; floating
#: avg sums contributions pre-multiplied by 1/n, see :class:`PreMulSum`)
UFUNC_NAMES = {"sum": "add", "avg": "add", "prod": "multiply", "max": "maximum", "min": "minimum"}


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


def binop_for(premul: tuple[bool, bool], reduce_op: str, n: int):
    """The binary op of one reduce op: ``PreMulSum`` when it scales an operand (floating avg),
    else the collective's op name (sum for avg)."""
    if premul[0] or premul[1]:
        return PreMulSum(n, premul[0], premul[1])
    return "sum" if reduce_op == "avg" else reduce_op


def reduce_copy_with(xp, dst, a, b, op: str) -> None:
    """``dst[:] = a (op) b`` with array module ``xp`` (``dst`` may alias ``a``); ``op`` is an op
    name or a :class:`PreMulSum`.

    >>> d = np.zeros(2, np.int32)
    >>> reduce_copy_with(np, d, np.array([1, 5], np.int32), np.array([4, 2], np.int32), "max"); d
    array([4, 5], dtype=int32)
    >>> h = np.zeros(1, np.float16); x = np.array([60000], np.float16)
    >>> reduce_copy_with(np, h, x, x, PreMulSum(4, True, True)); h.tolist()   # 2 of 4 ranks: no overflow
    [30000.0]
    """
    if isinstance(op, PreMulSum):
        s = avg_scalar(dst.dtype, op.n)
        xp.add(a * s if op.scale_a else a, b * s if op.scale_b else b, out=dst)
        return
    try:
        name = UFUNC_NAMES[op]
    except (KeyError, TypeError):
        raise InvalidArgument(f"reduce op must be one of sum, prod, max, min, avg; got {op!r}") from None
    getattr(xp, name)(a, b, out=dst)


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
