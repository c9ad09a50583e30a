"""The order in which a schedule's reductions are summed, and whether every rank gets the same bits.

Floating addition is commutative (``a + b`` and ``b + a`` are the same bits) but not
associative, so an all-reduce leaves the same bits on every rank only where every rank's final
value of a chunk is the same *expression*: the same tree of binary reductions over the ranks'
contributions, up to swapping the two operands of a node.  A ring or tree all-reduce reduces each
chunk once and then copies it: every rank holds one expression.  A one-shot all-reduce reduces
every chunk on every rank; its ranks agree only where they sum their peers in one order.

:func:`reduce_order` is the rule every executor follows (the lowering,
:mod:`kernels.program.lowering`, emits its ops by it, so the host, device-program, MPI and torch
paths all do): several reductions into one (rank, chunk) within one step are summed left to
right in rank order, the destination's own value at its own rank's position.  A one-shot
all-reduce then computes ``((x_0 + x_1) + x_2) + ...`` on every rank.  A step that also copies
into that (rank, chunk) keeps its transfers' order.  :func:`rank_order_groups` says which of a
step's (rank, chunk)s sum in rank order, and in which order; the reference executor, the lowering
and :func:`final_expressions` all take it from there.

:func:`final_expressions` replays a schedule by that rule and :func:`inconsistent_chunks` lists
the chunks whose ranks end with different expressions (a bulk replay over arrays of ids answers first,
:func:`_surely_consistent`); :func:`same_bits_warning` says it in one line (``simulate --schedule``,
``sweep --algo``, an ``MPICommunicator``'s ``algo``; ``synthesize`` records it as ``same_bits``, handing the check
the step columns its verification read: :mod:`synth.ir.step_columns`).  Only a floating
sum, avg, premul_sum or product can differ in its bits; integers and min/max are exact.

>>> from synth.ir.schedule import Schedule, Step, Transfer
>>> reduce_order(2, [3, 0, 1])
(0, 1, 2, 3)
>>> one_shot = Schedule("allreduce", 3, 1, (Step(1, tuple(Transfer(k, r, d, "reduce") for k in range(3)
...     for d in range(3) for r in range(3) if r != d)),))
>>> state, ex = final_expressions(one_shot)
>>> [ex.text(state[(r, 0)]) for r in range(3)]
['((x0 + x1) + x2)', '((x0 + x1) + x2)', '((x0 + x1) + x2)']
>>> inconsistent_chunks(one_shot)
[]
"""

from __future__ import annotations

from operator import attrgetter
from typing import Iterable, Sequence

import numpy as np

from synth.ir.schedule import Schedule
from synth.ir.step_columns import StepColumns, read_columns
from topo_probe.errors import InvalidArgument

_PRE, _POST = attrgetter("pre"), attrgetter("post")

def reduce_order(dst: int, sources: Iterable[int]) -> tuple[int, ...]:
    """The ranks whose values one step sums into rank ``dst``, in the order they are summed:
    ``sources`` (the sending ranks) in rank order with ``dst``'s own value at its own rank's
    position.  The sum is the left fold over this order."""
    return tuple(sorted({*sources, dst}))


def rank_order_groups(step) -> dict[tuple[int, int], tuple[int | None, ...]]:
    """``{(dst, chunk): terms}`` for each (rank, chunk) that two or more reduces and no copy feed
    in ``step`` (a :class:`synth.ir.schedule.Step`): the indices into ``step.transfers`` of its
    terms in :func:`reduce_order`, None at ``dst``'s own value.  Every other (rank, chunk) a step
    writes (one transfer, or a copy among them) is absent: it combines in the transfers' order.

    >>> from synth.ir.schedule import Step, Transfer
    >>> rank_order_groups(Step(1, (Transfer(0, 2, 1, "reduce"), Transfer(0, 0, 1, "reduce"),
    ...                            Transfer(0, 1, 2, "reduce"), Transfer(0, 0, 2))))
    {(1, 0): (1, None, 0)}
    """
    groups: dict[tuple[int, int], list[int]] = {}
    for i, tr in enumerate(step.transfers):
        groups.setdefault((tr.dst, tr.chunk), []).append(i)
    out = {}
    for (d, k), idxs in groups.items():
        if len(idxs) > 1 and all(step.transfers[i].op == "reduce" for i in idxs):
            by_src = {step.transfers[i].src: i for i in idxs}
            out[(d, k)] = tuple(by_src[r] if r != d else None for r in reduce_order(d, by_src))
    return out


class Expressions:
    """Interned reduction trees: a leaf per rank, a node per unordered pair (commutativity), so
    two values are the same expression exactly when their ids are equal."""

    def __init__(self) -> None:
        self._ids: dict[tuple, int] = {}
        self._keys: list[tuple] = []

    def _intern(self, key: tuple) -> int:
        got = self._ids.get(key)
        if got is None:
            got = self._ids[key] = len(self._keys)
            self._keys.append(key)
        return got

    def leaf(self, rank: int) -> int:
        return self._intern(("x", rank))

    def node(self, a: int, b: int) -> int:
        """``a + b``, the same id as ``b + a``; its text keeps the operands' first-seen order."""
        return self._intern(("+", a, b) if ("+", b, a) not in self._ids else ("+", b, a))

    def fold(self, values: Sequence[int]) -> int:
        acc = values[0]
        for v in values[1:]:
            acc = self.node(acc, v)
        return acc

    def text(self, e: int) -> str:
        """The expression as text, e.g. ``((x0 + x1) + x2)`` (operands of a node in first-seen order)."""
        key = self._keys[e]
        if key[0] == "x":
            return f"x{key[1]}"
        return f"({self.text(key[1])} + {self.text(key[2])})"


def final_expressions(schedule: Schedule) -> tuple[dict, Expressions]:
    """``({(rank, chunk): expression id}, expressions)`` of every value a combining ``schedule`` leaves
    after its last step, replayed by :func:`reduce_order` (module docstring).  Assumes a schedule
    the verifier passed (a sender holds what it sends)."""
    ex = Expressions()
    state: dict[tuple[int, int], int] = {}
    for c in schedule.spec.chunks():
        for r in c.pre:
            state[(r, c.id)] = ex.leaf(r)
    for step in schedule.steps:
        ranked = rank_order_groups(step)
        new = {}
        for (d, k), terms in ranked.items():
            new[(d, k)] = ex.fold([state[(d, k)] if i is None else state[(step.transfers[i].src, k)]
                                   for i in terms])
        for tr in step.transfers:            # the rest in the transfers' own order
            d, k = tr.dst, tr.chunk
            if (d, k) in ranked:
                continue
            v = state[(tr.src, k)]
            new[(d, k)] = ex.node(new.get((d, k), state.get((d, k))), v) if tr.op == "reduce" else v
        state.update(new)
    return state, ex


def _node_ids(a: np.ndarray, b: np.ndarray, next_id: int) -> tuple[np.ndarray, int]:
    """Ids of the nodes ``a[i] + b[i]`` (operands unordered), equal where the operand pairs are equal, numbered from
    ``next_id``; and the next free id.  Ids are given per call, so one expression made by two calls gets two ids."""
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    key = lo * next_id + hi
    ordered = np.sort(key)
    if (ordered[1:] != ordered[:-1]).all():            # every pair differs (a ring's step): no need for the inverse
        return np.arange(next_id, next_id + len(key)), next_id + len(key)
    uniq, inverse = np.unique(key, return_inverse=True)
    return next_id + inverse.reshape(-1), next_id + len(uniq)


def _slots(chunks, ranks_of, nchunks: int) -> tuple[np.ndarray, np.ndarray]:
    """``(slots, lengths)``: ``rank * nchunks + chunk`` of each chunk's ``ranks_of`` (``pre`` or ``post``) ranks,
    chunk after chunk, and how many each chunk has; and those ranks.  (Chunks share their ``pre``/``post`` tuples,
    every rank's in an all-reduce: each distinct tuple becomes an array once.)"""
    groups = list(map(ranks_of, chunks))
    arrays: dict[int, np.ndarray] = {}               # id of a tuple `groups` holds -> its ranks
    for g in groups:
        if id(g) not in arrays:
            arrays[id(g)] = np.array(g, dtype=np.int64).reshape(-1)
    ranks = np.concatenate([arrays[id(g)] for g in groups]) if groups else np.zeros(0, dtype=np.int64)
    lengths = np.fromiter(map(len, groups), dtype=np.int64, count=len(groups))
    ids = np.repeat(np.fromiter((c.id for c in chunks), dtype=np.int64, count=len(chunks)), lengths)
    return ranks * nchunks + ids, lengths, ranks


def _surely_consistent(schedule: Schedule, columns: Sequence[StepColumns | None] | None = None) -> bool:
    """True only where every post rank of every chunk provably ends with one expression (False: maybe not).
    A bulk replay over NumPy arrays of ids (:func:`_node_ids`; each step's transfers as ``columns`` has them, else
    read now, :mod:`synth.ir.step_columns`): equal ids are equal expressions, so True is exact,
    while False (ids differ, or a step mixes copies and reduces into one (rank, chunk)) leaves the answer to
    :func:`final_expressions`, whose trees cost several times as much on a big schedule."""
    columns = _step_columns(schedule, columns)
    spec = schedule.spec
    chunks = spec.chunks()
    nchunks = max((c.id for c in chunks), default=-1) + 1
    state = np.full(spec.ranks * nchunks, -1, dtype=np.int64)
    pre, _, pre_ranks = _slots(chunks, _PRE, nchunks)
    state[pre] = pre_ranks                                       # leaf x_r
    next_id = spec.ranks
    stamp = np.zeros(len(state), dtype=np.int64)                # which transfer last wrote each slot
    for step, cols in zip(schedule.steps, columns):
        if not step.transfers:
            continue
        if cols is None:
            cols = read_columns(step.transfers)
        if cols is None:                         # not integers: left to final_expressions
            return False
        next_id = _replay_step(state, stamp, cols, nchunks, next_id)
        if next_id is None:
            return False
    post, lengths, _ = _slots(chunks, _POST, nchunks)
    values = state[post]
    held = lengths[lengths > 0]                                  # chunks with post ranks (a combining one: all)
    firsts = np.repeat(values[np.cumsum(held) - held], held)
    return bool((values == firsts).all())


def _replay_step(state: np.ndarray, stamp: np.ndarray, cols, nchunks: int, next_id: int) -> int | None:
    """Write one step's values (ids) into ``state``; the next free id, or None where a copy meets another write
    into one (rank, chunk) (summed in the transfers' order: left to :func:`final_expressions`).  ``stamp``: scratch
    as long as ``state``."""
    k, src, dst, reduce = cols
    slot, read = dst * nchunks + k, state[src * nchunks + k]
    order = np.arange(len(slot))
    stamp[slot] = order
    if (stamp[slot] == order).all():                             # one write per (rank, chunk): most steps
        if reduce.all():
            state[slot], next_id = _node_ids(state[slot], read, next_id)
        elif reduce.any():                                       # (read: a copy, as fancy indexing gives)
            read[reduce], next_id = _node_ids(state[slot[reduce]], read[reduce], next_id)
            state[slot] = read
        else:
            state[slot] = read
        return next_id
    uniq, counts = np.unique(slot, return_counts=True)
    multi = counts[np.searchsorted(uniq, slot)] > 1
    if (multi & ~reduce).any():                                  # a copy among several writes
        return None
    new = read.copy()
    one = reduce & ~multi
    if one.any():
        new[one], next_id = _node_ids(state[slot[one]], read[one], next_id)
    # rank order: fold sorted(sources + destination)
    next_id = _fold_in_rank_order(state, dst[multi], k[multi], src[multi], uniq[counts > 1], nchunks, next_id)
    state[slot[~multi]] = new[~multi]
    return next_id


def _fold_in_rank_order(state: np.ndarray, dst: np.ndarray, k: np.ndarray, src: np.ndarray, groups: np.ndarray,
                        nchunks: int, next_id: int) -> int:
    """Write into ``state`` the (rank, chunk)s ``groups`` (slots) that several reduces (``dst``, ``k``, ``src``) feed
    in one step, each the left fold of its ranks' values in rank order, the destination's own among them
    (:func:`reduce_order`); returns the next free id."""
    g_dst, g_k = groups // nchunks, groups % nchunks
    t_dst, t_k, t_rank = np.concatenate([dst, g_dst]), np.concatenate([k, g_k]), np.concatenate([src, g_dst])
    order = np.lexsort((t_rank, t_dst * nchunks + t_k))
    t_slot = (t_dst * nchunks + t_k)[order]
    t_val = state[t_rank[order] * nchunks + t_k[order]]
    starts = np.flatnonzero(np.r_[True, t_slot[1:] != t_slot[:-1]])
    lengths = np.diff(np.r_[starts, len(t_slot)])
    acc = t_val[starts]
    for j in range(1, int(lengths.max())):
        live = lengths > j
        acc[live], next_id = _node_ids(acc[live], t_val[starts[live] + j], next_id)
    state[t_slot[starts]] = acc
    return next_id


def _step_columns(schedule: Schedule, columns) -> Sequence[StepColumns | None]:
    """``columns`` (one per step: a :class:`StepColumns` as long as its transfers, or None), or Nones."""
    steps = schedule.steps
    if columns is None:
        return [None] * len(steps)
    if len(columns) != len(steps):
        raise InvalidArgument(f"same-bits check: columns for {len(columns)} steps, the schedule has {len(steps)}")
    for i, (step, cols) in enumerate(zip(steps, columns)):
        if cols is not None and len(cols.chunk) != len(step.transfers):
            raise InvalidArgument(f"same-bits check: step {i}'s columns hold {len(cols.chunk)} transfers, the step "
                                  f"{len(step.transfers)}")
    return columns


def inconsistent_chunks(schedule: Schedule, columns: Sequence[StepColumns | None] | None = None
                        ) -> list[tuple[int, dict[str, tuple[int, ...]]]]:
    """``[(chunk, {expression text: ranks})]`` for each chunk of a combining ``schedule`` whose
    post ranks end with different reduction expressions (so other bits for a floating sum, avg, premul_sum or product);
    empty where every rank ends with the same expression of each chunk.  A bulk replay answers first where it can
    (:func:`_surely_consistent`); the expression trees are built only where it cannot.  ``columns``: per step of
    ``schedule``, its transfers as arrays already read (:class:`synth.ir.step_columns.StepColumns`, from
    :meth:`~synth.ir.step_columns.KeptColumns.take` after a verification) or None; the rest are read here."""
    if not schedule.spec.combining or _surely_consistent(schedule, columns):
        return []
    return _expression_check(schedule)


def _expression_check(schedule: Schedule) -> list[tuple[int, dict[str, tuple[int, ...]]]]:
    """:func:`inconsistent_chunks` by :func:`final_expressions` alone."""
    state, ex = final_expressions(schedule)
    out = []
    for c in schedule.spec.chunks():
        by: dict[int, list[int]] = {}
        for r in c.post:
            if (r, c.id) in state:
                by.setdefault(state[(r, c.id)], []).append(r)
        if len(by) > 1:
            out.append((c.id, {ex.text(e): tuple(rs) for e, rs in by.items()}))
    return out


def _and(items: Sequence) -> str:
    """``0``, ``0 and 3``, ``0, 3 and 5``."""
    words = [str(x) for x in items]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def same_bits_warning(schedule: Schedule, label: str) -> str | None:
    """One line naming where ``schedule`` (called ``label``, e.g. its file name) can leave ranks with different
    bits, or None where every rank gets the same bits: the first inconsistent chunk's ranks (one per expression)
    and the chunks (the first 8, then a count).

    >>> from synth.ir.schedule import Step, Transfer
    >>> s = Schedule("allreduce", 3, 1, (    # rank 2 sums x0, x1 into x2; rank 1 sums x2 into x1, then x0
    ...     Step(1, tuple(Transfer(k, r, d, "reduce") for k in range(3) for r, d in ((0, 2), (1, 2), (2, 1)))),
    ...     Step(1, tuple(t for k in range(3) for t in (Transfer(k, 0, 1, "reduce"), Transfer(k, 2, 0))))))
    >>> same_bits_warning(s, "mine.json")
    'mine.json: ranks 0 and 1 may differ in the last bits of chunks 0, 1 and 2 (float sums in different orders); \
integers, min and max are exact'
    """
    bad = inconsistent_chunks(schedule)
    if not bad:
        return None
    ranks = sorted(min(rs) for rs in bad[0][1].values())
    ids = [k for k, _ in bad]
    chunks = f"chunk {ids[0]}" if len(ids) == 1 else f"chunks {_and(ids)}" if len(ids) <= 8 else \
        f"chunks {', '.join(map(str, ids[:8]))}, ... ({len(ids)} chunks)"
    return (f"{label}: ranks {_and(ranks)} may differ in the last bits of {chunks} (float sums in different orders); "
            "integers, min and max are exact")


__all__ = ["reduce_order", "rank_order_groups", "final_expressions", "inconsistent_chunks", "same_bits_warning",
           "Expressions"]
