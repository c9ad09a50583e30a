"""Happens-before among the steps of a replayed MSCCL program, and data races on buffer places.

A step happens before another when a chain of the runtime's own orderings leads from one to the
other: program order inside a threadblock, a ``(depid, deps)`` wait on the step whose flag
released it, a message from its send to its receive.  Two accesses to one place of which one
writes race unless one happens before the other; the runtime could then run them either way.

Most orderings a compiler writes are local to a GPU (program order and dependencies), so each
threadblock keeps a vector clock over its GPU's threadblocks (the latest step of each known to
happen before its current step), merged at every dependency: a local query is one lookup.  Only
when that says "unordered" does a query search backwards through message edges as well.
Replay times never decrease along an ordering (a successor starts no earlier than its
predecessor), so the search skips steps that start before the step it looks for.  The total
search work is capped (:data:`MAX_VISITS`); beyond it the remaining accesses count as ordered,
so hostile input cannot make the check slow.
"""

from __future__ import annotations

Origin = tuple[int, int, int]
#: total search steps over one replay
MAX_VISITS = 3_000_000
#: most vector-clock entries kept (sum over GPUs of threadblocks squared)
MAX_CLOCK_CELLS = 4_000_000


class Slot:
    """A buffer place: its value, when the last write lands, who wrote it, who read it since."""

    __slots__ = ("landed", "readers", "value", "writer")

    def __init__(self, value, landed: int, writer: Origin | None) -> None:
        self.value, self.landed, self.writer = value, landed, writer
        self.readers: dict[int, Origin] = {}


class HappensBefore:
    """Executed steps with their start round and the steps that released them."""

    def __init__(self, tbs_per_gpu: list[int]) -> None:
        self.nodes: dict[Origin, tuple[int, tuple[Origin, ...]]] = {}
        self.budget = MAX_VISITS
        #: (step, threadblock) -> highest step index of that threadblock found to happen before it
        self.known: dict[tuple[Origin, tuple[int, int]], int] = {}
        #: (gpu, tb) -> latest step of each threadblock of that gpu before its current step (None
        #: when that would take too much memory: then every query searches)
        self.clock = None
        if sum(n * n for n in tbs_per_gpu) <= MAX_CLOCK_CELLS:
            self.clock = {(g, t): [-1] * n for g, n in enumerate(tbs_per_gpu) for t in range(n)}
        self.signals: dict[Origin, list[int]] = {}

    def add(self, o: Origin, start: int, preds: tuple[Origin, ...], dep: Origin | None = None) -> None:
        """Record step ``o`` (about to run) released by ``preds``; ``dep`` is the flag-raising
        step of its own GPU it waited for, if any."""
        self.nodes[o] = (start, preds)
        if self.clock is None:
            return
        clock = self.clock[o[:2]]
        clock[o[1]] = o[2]
        if dep is not None:
            clock[:] = map(max, clock, self.signals[dep])   # elementwise, in C: O(threadblocks) per step

    def signal(self, o: Origin) -> None:
        """Step ``o`` raised its flag: others waiting on it learn what it knows."""
        if self.clock is not None:
            self.signals[o] = list(self.clock[o[:2]])

    def before(self, w: Origin, x: Origin) -> bool:
        """Whether ``w`` happens before ``x`` (or is ``x``), ``x`` being the step now running;
        True once the budget is spent."""
        if w[:2] == x[:2]:
            return w[2] <= x[2]
        if self.clock is not None and w[0] == x[0] and self.clock[x[:2]][w[1]] >= w[2]:
            return True
        tb = w[:2]
        if self.known.get((x, tb), -1) >= w[2]:
            return True
        w_start = self.nodes[w][0]
        stack, seen = [x], {x}
        while stack:
            y = stack.pop()
            for p in self.nodes[y][1]:
                if (p[:2] == tb and p[2] >= w[2]) or self.known.get((p, tb), -1) >= w[2]:
                    self.known[(x, tb)] = max(self.known.get((x, tb), -1), w[2])
                    return True
                if p in seen or self.nodes[p][0] < w_start:
                    continue
                self.budget -= 1
                if self.budget <= 0:
                    return True
                seen.add(p)
                stack.append(p)
        return False

    def conflict(self, slot: Slot, o: Origin, write: bool) -> Origin | None:
        """The access to ``slot`` that races with step ``o`` (a write when ``write``), or None."""
        if slot.writer is not None and not self.before(slot.writer, o):
            return slot.writer
        if write:
            for r in slot.readers.values():
                if r != o and not self.before(r, o):
                    return r
        return None
