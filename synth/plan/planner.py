"""Pick, per message-size range, the fastest verified schedule by cost-model time.

>>> sizes = [8, 1024, 1 << 20]
>>> times = {"a": [1.0, 2.0, 90.0], "b": [5.0, 6.0, 40.0]}
>>> size_ranges(sizes, times)
[('a', 0, 1048576), ('b', 1048576, None)]
"""

from __future__ import annotations

from typing import Callable

#: the sizes (bytes) a plan is evaluated at: 8 B to 4 GiB in powers of two, like nccl-tests -f 2
PLAN_SIZES = [1 << k for k in range(3, 33)]


def size_ranges(sizes: list[int], times: dict[str, list[float]]) -> list[tuple[str, int, int | None]]:
    """Merge per-size winners into ranges ``(name, min_bytes, max_bytes)``.

    The first range starts at 0 and the last has no upper limit; a new range starts at the first
    evaluated size where another candidate is fastest.  Ties go to the name that sorts first.
    """
    if not times:
        return []
    names = sorted(times)
    winners = [min(names, key=lambda nm: (times[nm][k], nm)) for k in range(len(sizes))]
    ranges: list[tuple[str, int, int | None]] = []
    start = 0
    for k in range(1, len(sizes) + 1):
        if k == len(sizes) or winners[k] != winners[k - 1]:
            end = sizes[k] if k < len(sizes) else None
            ranges.append((winners[k - 1], start, end))
            if end is not None:
                start = end
    return ranges


def evaluate(candidates: dict[str, object], time_us: Callable[[object, int], float],
             sizes: list[int] = PLAN_SIZES) -> dict[str, list[float]]:
    """Cost-model times (µs) of every candidate schedule at every size."""
    return {name: [time_us(s, n) for n in sizes] for name, s in candidates.items()}
