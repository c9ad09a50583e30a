"""Test helpers for the same-bits check (``synth.ir.sum_order``): hand-built all-reduces whose ranks sum a chunk in
different orders, and a brute-force float32 replay in NumPy that says which bits each rank really ends with.
Not a test module (no ``test_`` prefix)."""

from __future__ import annotations

import numpy as np

from synth.ir.schedule import Schedule, Step, Transfer


def two_trees() -> Schedule:
    """4 ranks, each chunk: rank 3 sums its peers in one step, ((x0 + x1) + x2) + x3; rank 1 sums ranks 2 and 3 in
    step 1, ((x1 + x2) + x3), then rank 0 in step 2; ranks 0 and 2 copy rank 3's.  By hand: rank 1 differs from
    ranks 0, 2, 3 in every chunk.  4 rounds a step (4 chunks on a link), so it verifies on a 4-GPU full mesh."""
    s1, s2 = [], []
    for k in range(4):
        s1 += [Transfer(k, r, 3, "reduce") for r in (2, 0, 1)] + [Transfer(k, r, 1, "reduce") for r in (3, 2)]
        s2 += [Transfer(k, 0, 1, "reduce"), Transfer(k, 3, 0), Transfer(k, 3, 2)]
    return Schedule("allreduce", 4, 1, (Step(4, tuple(s1)), Step(4, tuple(s2))), name="two_trees")


def three_ranks() -> Schedule:
    """3 ranks, each chunk: rank 2 sums x0 and x1 into its own, ((x0 + x1) + x2); rank 1 sums x2 into its own in
    the same step, then x0 (still rank 0's input) in the next: ((x1 + x2) + x0); rank 0 copies rank 2's.
    By hand: rank 1 differs from ranks 0 and 2 in chunks 0, 1 and 2."""
    s1 = [Transfer(k, r, d, "reduce") for k in range(3) for r, d in ((0, 2), (1, 2), (2, 1))]
    s2 = [t for k in range(3) for t in (Transfer(k, 0, 1, "reduce"), Transfer(k, 2, 0))]
    return Schedule("allreduce", 3, 1, (Step(3, tuple(s1)), Step(3, tuple(s2))), name="three_ranks")


def float32_replay(schedule: Schedule, inputs: np.ndarray) -> np.ndarray:
    """What every rank holds after an all-reduce ``schedule`` of ``inputs`` (ranks x elements, float32): each step
    reads the values before it; several reduces into one (rank, chunk) in a step add up the values of the ranks
    involved in ascending rank order, the receiver's own among them (docs/guarantees.md), one reduce adds the
    sender's value to the receiver's (commutative, so the operand order does not matter), a copy overwrites."""
    n, nchunks = schedule.ranks, schedule.ranks * schedule.chunks_per_rank
    held = {(r, k): part.copy() for r in range(n) for k, part in enumerate(np.array_split(inputs[r], nchunks))}
    for step in schedule.steps:
        writes: dict[tuple[int, int], list] = {}
        for t in step.transfers:
            writes.setdefault((t.dst, t.chunk), []).append(t)
        new = {}
        for (d, k), ts in writes.items():
            if len(ts) > 1 and all(t.op == "reduce" for t in ts):
                ranks = sorted({d, *(t.src for t in ts)})
                acc = held[(ranks[0], k)].copy()
                for r in ranks[1:]:
                    acc = (acc + held[(r, k)]).astype(np.float32)
                new[(d, k)] = acc
            else:
                acc = held.get((d, k))
                for t in ts:
                    acc = (acc + held[(t.src, k)]).astype(np.float32) if t.op == "reduce" else held[(t.src, k)].copy()
                new[(d, k)] = acc
        held.update(new)
    return np.stack([np.concatenate([held[(r, k)] for k in range(nchunks)]) for r in range(n)])


def wide_inputs(n: int, count: int, seed: int = 0) -> np.ndarray:
    """Random float32 inputs over six decades, so a sum's rounding depends on its order."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, count)) * 10.0 ** rng.uniform(-3, 3, (n, count))).astype(np.float32)


def two_trees_twin() -> Schedule:
    """:func:`two_trees` with rank 1 copying rank 3's sum in step 2 instead of adding rank 0's input to its partial:
    the same steps, rounds, links per step and records per rank, but every rank ends with (((x0 + x1) + x2) + x3)."""
    s = two_trees()
    step2 = tuple(Transfer(t.chunk, 3, 1) if t.dst == 1 else t for t in s.steps[1].transfers)
    return s.with_(steps=(s.steps[0], Step(s.steps[1].rounds, step2)), name="two_trees_twin")
