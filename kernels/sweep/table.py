"""The executors' side of the sweep's table (:mod:`synth.sweep.entries`): the data every rank
sends and what NumPy says each rank must receive, per collective, like the init and check code of
nccl-tests' ``src/<collective>.cu`` files.

Data
----
Every rank's input is a deterministic function of ``(seed, rank, index)`` holding small
non-negative integers, chosen per reduction so that NumPy, any summation order and every data
type give bit-identical results: sums stay below the largest exactly representable integer of
the type, products are powers of two, and ``avg`` inputs are multiples of ``n`` so that the
average is an integer.

>>> from synth.sweep.entries import TABLE
>>> [a.size for a in inputs(TABLE["allgather"], 1, 2, "int32", "sum", 3)]     # one block of 2 per rank
[2, 2, 2]
>>> [a.size for a in inputs(TABLE["reducescatter"], 1, 2, "int32", "sum", 3)]  # n blocks of 2 per rank
[6, 6, 6]
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from kernels.program.reduce_op import check_reduce_op
from synth.formats.nccl_tests.conventions import is_float, numpy_dtype
from synth.sweep.entries import Entry

#: largest integer every value up to which the type holds exactly (2**mantissa bits for floats)
_EXACT = {"int8": 127, "uint8": 255, "int32": 2**31 - 1, "uint32": 2**32 - 1, "int64": 2**63 - 1,
          "uint64": 2**64 - 1, "half": 2**11, "float": 2**24, "double": 2**53, "bfloat16": 2**8}
#: machine epsilon of the float types (bfloat16: 8 significant bits)
_EPS = {"half": 2.0**-10, "bfloat16": 2.0**-7, "float": 2.0**-23, "double": 2.0**-52}
#: largest power-of-two exponent a float type holds (integers wrap, which is exact too)
_MAX_POW2 = {"half": 15, "bfloat16": 127, "float": 127, "double": 1023}


def _hash(seed: int, rank: int, index: np.ndarray) -> np.ndarray:
    """Well-mixed uint64 per element from (seed, rank, index) (splitmix64 finaliser)."""
    x = index.astype(np.uint64) + np.uint64(((seed * 0x9E3779B1) ^ (rank * 0x85EBCA77) ^ 0x2545F491)
                                            & 0xFFFFFFFFFFFFFFFF)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def init_data(seed: int, rank: int, count: int, dtype_name: str, op: str, n: int,
              offset: int = 0) -> np.ndarray:
    """Input of ``rank``: ``count`` values of elements ``offset ..`` (see module docstring).

    >>> init_data(1, 0, 6, "int8", "avg", 4).tolist()  # multiples of n
    [12, 8, 12, 12, 8, 4]
    >>> sorted(set(init_data(7, 3, 1000, "float", "prod", 8).tolist()))
    [1.0, 2.0]
    """
    out = np.empty(count, numpy_dtype(dtype_name))
    for lo in range(0, count, _INIT_BLOCK):        # bounded temporaries however large the buffer
        hi = min(count, lo + _INIT_BLOCK)
        out[lo:hi] = _values(seed, rank, offset + lo, offset + hi, dtype_name, op, n)
    return out


#: elements generated at a time by :func:`init_data`
_INIT_BLOCK = 1 << 20


def _values(seed: int, rank: int, lo: int, hi: int, dtype_name: str, op: str, n: int) -> np.ndarray:
    h = _hash(seed, rank, np.arange(lo, hi, dtype=np.uint64))
    limit = _EXACT[dtype_name]
    if op == "prod":
        twos = n if not is_float(dtype_name) else min(n, _MAX_POW2[dtype_name])
        return 1 + (h % np.uint64(2)).astype(np.int64) * (1 if rank < twos else 0)
    if op == "avg":
        bound = max(0, min(3, limit // (n * n)))
        return n * (h % np.uint64(bound + 1)).astype(np.int64)
    bound = max(0, min(3, limit // n))           # sum, max, min
    return (h % np.uint64(bound + 1)).astype(np.int64)


def reduce_arrays(arrays: list[np.ndarray], op: str, dtype_name: str, n: int) -> np.ndarray:
    """NumPy reduction of equal-length arrays with op (``avg`` = sum / n), result in their dtype.

    >>> reduce_arrays([np.array([2, 4], np.int32), np.array([6, 0], np.int32)], "avg", "int32", 2).tolist()
    [4, 2]
    """
    dt = numpy_dtype(dtype_name)
    ufunc = {"sum": np.add, "avg": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[
        check_reduce_op(op)]
    acc_dt = np.float64 if is_float(dtype_name) else dt
    acc = arrays[0].astype(acc_dt)                 # one accumulator, never a stack of every rank
    for a in arrays[1:]:
        ufunc(acc, a, out=acc, casting="unsafe")
    if op == "avg":
        if is_float(dtype_name):
            acc /= n
        else:
            acc //= acc.dtype.type(n)
    return acc.astype(dt, copy=False)


Expected = Callable[[list, int, int, "int | None", Callable], list]


def _blocks(a: np.ndarray, count: int, k: int) -> np.ndarray:
    return a[k * count:(k + 1) * count]


def _exp_allreduce(sends, count, n, root, red):
    r = red(sends)
    return [r] * n


def _exp_reducescatter(sends, count, n, root, red):
    r = red(sends)
    return [_blocks(r, count, k) for k in range(n)]


def _exp_reduce(sends, count, n, root, red):
    return [red(sends) if k == root else None for k in range(n)]


def _exp_allgather(sends, count, n, root, red):
    g = np.concatenate([s[:count] for s in sends])
    return [g] * n


def _exp_gather(sends, count, n, root, red):
    return [np.concatenate([s[:count] for s in sends]) if k == root else None for k in range(n)]


def _exp_broadcast(sends, count, n, root, red):
    return [sends[root]] * n


def _exp_scatter(sends, count, n, root, red):
    return [_blocks(sends[root], count, k) for k in range(n)]


def _exp_alltoall(sends, count, n, root, red):
    return [np.concatenate([_blocks(sends[s], count, d) for s in range(n)]) for d in range(n)]


#: the NumPy result per rank of each collective
EXPECTED: dict[str, Expected] = {
    "allreduce": _exp_allreduce, "allgather": _exp_allgather, "reducescatter": _exp_reducescatter,
    "broadcast": _exp_broadcast, "reduce": _exp_reduce, "gather": _exp_gather, "scatter": _exp_scatter,
    "alltoall": _exp_alltoall,
}


def inputs(e: Entry, seed: int, count: int, dtype_name: str, op: str, n: int) -> list[np.ndarray]:
    """Every rank's send buffer (input blocks of ``count``), seeded from (seed, rank, index)."""
    kin, _ = e.blocks(n)
    return [init_data(seed, r, kin * count, dtype_name, op, n) for r in range(n)]


def expected(e: Entry, sends: list[np.ndarray], count: int, dtype_name: str, op: str, n: int,
             root: int | None) -> list[np.ndarray | None]:
    """NumPy result per rank (None where the collective defines no output)."""
    def red(arrays):
        return reduce_arrays(arrays, op, dtype_name, n)
    return EXPECTED[e.name](sends, count, n, root, red)


def count_wrong(got: np.ndarray, want: np.ndarray, dtype_name: str, op: str, n: int) -> int:
    """Elements of ``got`` that differ from ``want`` (``avg`` on floats: within n ulps).

    >>> count_wrong(np.array([1, 2, 3], np.int32), np.array([1, 0, 3], np.int32), "int32", "sum", 2)
    1
    """
    got = np.asarray(got).reshape(-1)
    want = np.asarray(want).reshape(-1)
    if got.shape != want.shape:
        return int(max(got.size, want.size))
    wrong = 0
    for lo in range(0, got.size, _INIT_BLOCK):     # bounded temporaries however large the buffer
        g, w = got[lo:lo + _INIT_BLOCK], want[lo:lo + _INIT_BLOCK]
        if is_float(dtype_name):
            g, w = g.astype(np.float64), w.astype(np.float64)
        if op == "avg" and is_float(dtype_name):
            wrong += int(np.count_nonzero(~(np.abs(g - w) <= n * _EPS[dtype_name] * np.abs(w))))
        else:
            wrong += int(np.count_nonzero(g != w))
    return wrong
