"""One small table entry per collective, like nccl-tests' ``src/<collective>.cu`` files.

An :class:`Entry` says how a sweep size maps to element counts, what the bus-bandwidth factor
is, how the input data is made and what NumPy says the result must be.  The shared driver
(:mod:`kernels.sweep.driver`) does everything else.

Sizes, counts, type names and bus-bandwidth factors are nccl-tests conventions
(:mod:`synth.formats.nccl_tests.conventions`).

Data
----
Every rank's input is a deterministic function of ``(seed, rank, index)`` holding small
non-negative integers, chosen per reduction so that NumPy, any summation order and every data
type give bit-identical results: sums stay below the largest exactly representable integer of
the type, products are powers of two, and ``avg`` inputs are multiples of ``n`` so that the
average is an integer.

>>> e = TABLE["allgather"]
>>> e.counts(1024, 4, 8)
Counts(count=32, send=32, recv=256, size=1024)
>>> round(e.busbw_factor(8), 3)
0.875
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from synth.formats.nccl_tests.conventions import (
    BUSBW_FACTOR,
    NCCL_NAMES,
    OP_NAMES,
    TEST_NAMES,
    Counts,
    block_counts,
    buffer_blocks,
    is_float,
    numpy_dtype,
)
from synth.ir.collectives import ROOTED, canonical
from topo_probe.errors import InvalidArgument

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
    ufunc = {"sum": np.add, "avg": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}.get(op)
    if ufunc is None:
        raise InvalidArgument(f"op {op!r} is not one of {', '.join(OP_NAMES)}")
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


@dataclass(frozen=True)
class Entry:
    """The sweep's view of one collective (see module docstring)."""

    name: str
    expected_fn: Expected

    @property
    def nccl_name(self) -> str:
        return NCCL_NAMES[self.name]

    @property
    def test_name(self) -> str:
        return TEST_NAMES[self.name]

    @property
    def rooted(self) -> bool:
        return self.name in ROOTED

    @property
    def reducing(self) -> bool:
        return self.name in ("allreduce", "reducescatter", "reduce")

    def blocks(self, n: int) -> tuple[int, int]:
        """(input blocks, output blocks) of each rank's buffers."""
        return buffer_blocks(self.name, n)

    def counts(self, size: int, itemsize: int, n: int) -> Counts:
        """Element counts for sweep size ``size`` bytes (:func:`synth.formats.nccl_tests.conventions.block_counts`)."""
        return block_counts(self.name, size, itemsize, n)

    def busbw_factor(self, n: int) -> float:
        return float(BUSBW_FACTOR[self.name](n))

    def bandwidths(self, size: int, time_us: float, n: int) -> tuple[float, float]:
        """(algbw, busbw) in GB/s (1e9 B/s) for ``size`` bytes in ``time_us``; 0 when time is 0.

        >>> [round(x, 2) for x in TABLE["allreduce"].bandwidths(4294967296, 32336.0, 8)]  # A100 log
        [132.82, 232.44]
        """
        algbw = size / (time_us * 1e3) if time_us > 0 else 0.0
        return algbw, algbw * self.busbw_factor(n)

    def inputs(self, seed: int, count: int, dtype_name: str, op: str, n: int) -> list[np.ndarray]:
        """Every rank's send buffer (input blocks of ``count``), seeded from (seed, rank, index)."""
        kin, _ = self.blocks(n)
        return [init_data(seed, r, kin * count, dtype_name, op, n) for r in range(n)]

    def expected(self, sends: list[np.ndarray], count: int, dtype_name: str, op: str, n: int,
                 root: int | None) -> list[np.ndarray | None]:
        """NumPy result per rank (None where the collective defines no output)."""
        def red(arrays):
            return reduce_arrays(arrays, op, dtype_name, n)
        return self.expected_fn(sends, count, n, root, red)


TABLE: dict[str, Entry] = {
    "allreduce": Entry("allreduce", _exp_allreduce),
    "allgather": Entry("allgather", _exp_allgather),
    "reducescatter": Entry("reducescatter", _exp_reducescatter),
    "broadcast": Entry("broadcast", _exp_broadcast),
    "reduce": Entry("reduce", _exp_reduce),
    "gather": Entry("gather", _exp_gather),
    "scatter": Entry("scatter", _exp_scatter),
    "alltoall": Entry("alltoall", _exp_alltoall),
}


def entry(collective: str) -> Entry:
    """The table entry for any accepted spelling (``all_reduce``, ``allreduce``...)."""
    return TABLE[canonical(collective)]


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
