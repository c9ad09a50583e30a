"""One small table entry per collective, like nccl-tests' ``src/<collective>.cu`` files: how a
sweep size maps to element counts and what the bus-bandwidth factor is.

Sizes, counts, type names and bus-bandwidth factors are nccl-tests conventions
(:mod:`synth.formats.nccl_tests.conventions`).  The data each rank sends and the NumPy result it
must get are the executors' side (:mod:`kernels.sweep.table`); the shared driver
(:mod:`synth.sweep.driver`) does everything else.

>>> e = TABLE["allgather"]
>>> e.counts(1024, 4, 8)
Counts(count=32, send=32, recv=256, size=1024)
>>> round(e.busbw_factor(8), 3)
0.875
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.formats.nccl_tests.conventions import (
    BUSBW_FACTOR,
    NCCL_NAMES,
    TEST_NAMES,
    Counts,
    block_counts,
    buffer_blocks,
)
from synth.ir.collectives import ROOTED, canonical


@dataclass(frozen=True)
class Entry:
    """The sweep's view of one collective (see module docstring)."""

    name: str

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


TABLE: dict[str, Entry] = {name: Entry(name) for name in (
    "allreduce", "allgather", "reducescatter", "broadcast", "reduce", "gather", "scatter", "alltoall")}


def entry(collective: str) -> Entry:
    """The table entry for any accepted spelling (``all_reduce``, ``allreduce``...)."""
    return TABLE[canonical(collective)]


__all__ = ["TABLE", "Entry", "entry"]
