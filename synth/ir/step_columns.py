"""A step's transfers as NumPy columns, read once for the verifier and the same-bits check.

What a bulk pass over a big schedule spends most on is reading a Python object per transfer (a
1,024-rank ring all-reduce has 2 million).  :func:`read_columns` reads ``(chunk, src, dst,
is_reduce)`` of a step's transfers; the verifier's bulk replay (:mod:`synth.ir.step_replay`) and
the same-bits check (:func:`synth.ir.sum_order.inconsistent_chunks`) both read through it.

``synthesize`` verifies each schedule, then checks that its ranks sum in one order: the second
pass need not read the transfers again.  The run owns a :class:`KeptColumns` and lends it to its
fabric for the run (:func:`keeping_columns`); a verification on that fabric (a builder's
:func:`synth.ir.verifier.check`, which the pipeline's own check then finds already passed) leaves
there the columns it read of a combining schedule that passes, and the pipeline takes them
(:meth:`KeptColumns.take`) and hands them to the check.  A fabric lent none, and every other
caller of the check (``simulate --schedule``, ``sweep --algo``, an ``MPICommunicator``'s
``algo``), keeps nothing: the check reads the columns itself.
"""

from __future__ import annotations

from contextlib import contextmanager
from itertools import repeat
from operator import eq
from typing import TYPE_CHECKING, Iterator, NamedTuple, Sequence

from topo_probe.number_rules import is_int_type

if TYPE_CHECKING:
    import numpy as np

__all__ = ["StepColumns", "KeptColumns", "read_columns", "keeping_columns", "kept_columns"]

#: a KeptColumns holds at most this many transfers' columns at once (25 bytes each: about 200 MiB; each entry also
#: keeps its ``steps`` alive until taken, so a schedule a builder verified and dropped holds its Transfers, 64 bytes
#: each, until then or the end of the owner's block)
KEEP_TRANSFERS = 1 << 23


class StepColumns(NamedTuple):
    """A step's transfers as arrays, one entry per transfer in order: int64 ranks and chunks, bool ops."""

    chunk: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    is_reduce: np.ndarray


def read_columns(transfers) -> StepColumns | None:
    """The columns of ``transfers``; None unless every chunk and rank is an integer
    (:func:`topo_probe.number_rules.is_int`: not a bool, which NumPy would read as 1 beside ints) that fits int64
    (a float or a string, read as NumPy would convert it, could pass for another value) and every op is ``copy`` or
    ``reduce``."""
    import numpy as np                    # (the verifier imports this module; NumPy is loaded when a step is big)
    m = len(transfers)
    cols = [_int_column(np, c) for c in ([t.chunk for t in transfers], [t.src for t in transfers],
                                         [t.dst for t in transfers])]
    if any(c is None for c in cols):
        return None
    ops = [t.op for t in transfers]
    reduces = ops.count("reduce")
    if reduces + ops.count("copy") != m:
        return None
    is_reduce = np.full(m, bool(reduces)) if reduces in (0, m) else \
        np.fromiter(map(eq, ops, repeat("reduce")), dtype=bool, count=m)
    out = StepColumns(*(c.astype(np.int64, copy=False) for c in cols), is_reduce)
    for c in out:
        c.flags.writeable = False                  # handed from the verifier to sum_order: read only
    return out


def _int_column(np, values: list):
    """``values`` as an int64 array, or None unless each is an integer by :func:`is_int_type` that fits int64."""
    kinds = set(map(type, values))
    if kinds <= {int}:                                           # the usual case: Python ints, read without a scan
        try:
            return np.fromiter(values, np.int64, len(values))
        except OverflowError:
            return None
    if not all(map(is_int_type, kinds)):
        return None
    col = np.array(values)                                      # NumPy integers: uint64 past int64 is not kind "i"
    return col if col.dtype.kind == "i" else None


class KeptColumns:
    """Columns a verification read, per schedule (its ``steps`` tuple, held until taken), for the same-bits check
    of that very schedule: oldest first dropped past :data:`KEEP_TRANSFERS` transfers in all.  A ``synthesize``
    run owns one (:func:`keeping_columns`); nothing else keeps columns."""

    def __init__(self, limit: int = KEEP_TRANSFERS) -> None:
        self.limit = limit
        #: ``(steps, [StepColumns or None per step], transfers)``, oldest first (a few big schedules)
        self.entries: list[tuple[tuple, list, int]] = []
        self.transfers = 0

    def offer(self, steps: tuple, columns: Sequence[StepColumns | None]) -> None:
        """Keep ``columns`` (one per step of ``steps``, None where none were read) for :meth:`take`."""
        size = sum(len(c.chunk) for c in columns if c is not None)
        self.take(steps)
        if not size or size > self.limit:
            return
        while self.entries and self.transfers + size > self.limit:
            self.transfers -= self.entries.pop(0)[2]
        self.entries.append((steps, list(columns), size))
        self.transfers += size

    def take(self, steps: tuple) -> list[StepColumns | None] | None:
        """The columns offered for this very ``steps`` tuple (given up), or None."""
        for i, (held, columns, size) in enumerate(self.entries):
            if held is steps:
                del self.entries[i]
                self.transfers -= size
                return columns
        return None


_KIND = "step_columns"      # the fabric memo a run's KeptColumns is lent in


def kept_columns(fabric) -> KeptColumns | None:
    """The :class:`KeptColumns` lent to ``fabric`` (:func:`keeping_columns`), or None (also for no fabric)."""
    return None if fabric is None else fabric.memo(_KIND).get("kept")


@contextmanager
def keeping_columns(fabric) -> Iterator[KeptColumns]:
    """Lend ``fabric`` a :class:`KeptColumns` for the ``with`` block (the one already lent, inside another such
    block), and take it back, with anything not taken, at the end."""
    memo = fabric.memo(_KIND)
    lent = memo.get("kept")
    if lent is not None:
        yield lent
        return
    memo["kept"] = kept = KeptColumns()
    try:
        yield kept
    finally:
        memo.pop("kept", None)
