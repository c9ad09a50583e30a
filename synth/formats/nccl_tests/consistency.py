"""Whether each row of an nccl-tests log agrees with itself: a digit mangled in a copy is said, not read silently.

nccl-tests (NVIDIA/nccl-tests v2.19.6) computes a row's numbers from one measured time: ``algbw`` is bytes over
time (``baseBw = count * typesize [* nranks] / 1e9 / sec``, e.g. ``src/all_gather.cu`` lines 38-44) and ``busbw``
is ``algbw`` times the collective's factor of the rank count; it prints each with ``getFloatStr``
(``src/util.cu`` lines 487-505: 2 decimals where they fit, then 1, 0, exponent form).  So in one log
``algbw x time / size`` is one constant (1e-3 with time in µs; older builds' all_gather printed another size, so
the constant is read from the log) and ``busbw / algbw`` another (the factor, never needing the rank count the
log may not show), each within the rounding of the printed digits.  A row outside both, by more than its own
rounding, has a number that was not printed by nccl-tests as it is: :func:`inconsistent_notes` says where.

Each constant is the median over the more precise half of the measurements whose ``algbw`` is at least
:data:`PRECISE_GBPS` (their rounding below 0.5 %), so one mangled row cannot move it, and is known to the worst
rounding among them (plus :data:`SLACK`); a log with fewer than :data:`MIN_PRECISE` such measurements is not
checked for that constant.  A ``cputime`` log (``-C 1``) is not held to its time: it prints the
host's time to launch the iterations, while algbw and busbw still come from the GPU time (v2.19.6
``src/common.cu`` lines 767-772, 796, 858), so only ``busbw / algbw`` is checked there.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

#: GB/s: an algbw printed with 2 decimals from here on is known to 0.5 % or better
PRECISE_GBPS = 1.0
#: measurements a log needs above PRECISE_GBPS to read its constants from
MIN_PRECISE = 3
#: relative slack on a constant read from the log, beyond its measurements' own rounding
SLACK = 2e-3


#: the fewest decimals nccl-tests prints a bandwidth (``BW``) or a time (``TIME``) with, below each bound:
#: v2.19.6 ``getFloatStr`` (src/util.cu lines 487-497: width 6 for bandwidths, 2 decimals below 1,000, 1 below
#: 10,000; width 7 for times, 2 below 10,000) and the builds before it (``%6.2f`` bandwidths; times ``%7.2f``
#: below 100 us, ``%7.1f`` below 10,000, ``%7.0f`` above: NVIDIA/nccl-tests 2b00b4b src/common.cu lines 596-602)
BW_DECIMALS = ((1000.0, 2), (10000.0, 1))
TIME_DECIMALS = ((100.0, 2), (10000.0, 1))


def half_unit(value: float, decimals: tuple = BW_DECIMALS) -> float:
    """Half a unit of the last digit ``value`` was printed with: its shortest form's decimals, but at least the
    ``decimals`` every nccl-tests build prints below each bound (a flipped ``1.24`` -> ``1.20`` GB/s is not read as
    ``1.2`` +- 0.05); past them the shortest form sets it (the bound only widens), up to 1e6 with at most 0
    decimals (``123457``), above in exponent form (``1.2e+06`` is +-50,000).

    >>> half_unit(38.85), half_unit(1.2), half_unit(1034.5), half_unit(10.0), half_unit(123457.0), half_unit(1.2e6)
    (0.005, 0.005, 0.05, 0.005, 0.5, 50000.0)
    >>> half_unit(49.5, TIME_DECIMALS), half_unit(172.0, TIME_DECIMALS), half_unit(16330.0, TIME_DECIMALS)
    (0.005, 0.05, 0.5)
    """
    text = repr(float(value))
    if "e" in text or not math.isfinite(value):
        return abs(value) * 0.05
    whole, _, frac = text.partition(".")
    frac = frac.rstrip("0")
    least = next((d for bound, d in decimals if abs(value) < bound), 0)
    if frac or least:
        return 0.5 * 10.0 ** -max(least, len(frac))
    digits = whole.lstrip("-")
    return 0.5 * 10.0 ** (len(digits) - len(digits.rstrip("0")) if abs(value) >= 1e6 else 0)


def _measurements(log):
    for k, row in enumerate(log.rows):
        for place, m in (("out-of-place", row.out_of_place), ("in-place", row.in_place)):
            if m is not None and m.time_us and m.algbw_gbps is not None and row.size > 0:
                yield k, row, place, m


def _constant(pairs: list[tuple[float, float]]) -> tuple[float, float] | None:
    """``(constant, its relative slack)`` from ``(value, relative rounding)`` pairs, or None for fewer than
    :data:`MIN_PRECISE`: the median of the more precise half (at least :data:`MIN_PRECISE`), known to the worst
    rounding among them plus :data:`SLACK` (a median of rows printed as ``1.00`` GB/s is itself 0.5 % off)."""
    if len(pairs) < MIN_PRECISE:
        return None
    best = sorted(pairs, key=lambda p: p[1])[:max(MIN_PRECISE, (len(pairs) + 1) // 2)]
    return statistics.median(v for v, _ in best), SLACK + max(r for _, r in best)


def _rel(value: float, half: float | None = None) -> float:
    return (half_unit(value) if half is None else half) / value


def _around(value: float, scale: tuple[float, float] | None = None) -> tuple[float, float]:
    """The values ``value`` (+- its rounding) may stand for; divided by ``scale``, a constant read from the log
    with its slack (:func:`_constant`), widened by that slack."""
    d = half_unit(value)
    if scale is None:
        return value - d, value + d
    (c, slack) = scale
    return (value - d) / c * (1 - slack), (value + d) / c * (1 + slack)


def _time_around(time_us: float, unit: str) -> tuple[float, float]:
    """The µs a time printed in ``unit`` may stand for: the first builds' ms (``%7.3f``, NVIDIA/nccl-tests
    b188a15 src/common.cu line 573) are +-0.5 µs."""
    d = 0.5 if unit == "ms" else half_unit(time_us, TIME_DECIMALS)
    return time_us - d, time_us + d


def inconsistent_rows(log) -> list[tuple[int, str, str, float, float]]:
    """``(row index, placement, column, printed value, value its other columns give)`` for every measurement
    where no true algbw fits its printed time, algbw and busbw at once (module docstring): the column named is
    ``algbw`` where it misses its time, ``busbw`` where it misses its algbw, else ``time`` (it misses busbw)."""
    precise = [(row, m) for _, row, _, m in _measurements(log) if m.algbw_gbps >= PRECISE_GBPS]
    half_t = [_time_around(m.time_us, log.time_unit)[1] - m.time_us for _, m in precise]
    alg = _constant([(m.algbw_gbps * m.time_us / row.size, _rel(m.algbw_gbps) + _rel(m.time_us, h))
                     for (row, m), h in zip(precise, half_t) if m.time_us > h])
    alg = alg if "cputime" not in log.columns else None          # -C 1: not the time algbw was computed from
    bus = _constant([(m.busbw_gbps / m.algbw_gbps, _rel(m.algbw_gbps) + _rel(m.busbw_gbps))
                     for _, m in precise if m.busbw_gbps])
    bad = []
    for k, row, place, m in _measurements(log):
        a = _around(m.algbw_gbps)
        t_lo, t_hi = _time_around(m.time_us, log.time_unit)
        by_time = ((alg[0] * row.size / t_hi * (1 - alg[1]), alg[0] * row.size / t_lo * (1 + alg[1]))
                   if alg is not None and t_lo > 0 else (-math.inf, math.inf))
        by_bus = _around(m.busbw_gbps, bus) if bus is not None and m.busbw_gbps is not None else (-math.inf,
                                                                                                   math.inf)
        if max(a[0], by_time[0]) > min(a[1], by_time[1]):
            bad.append((k, place, "algbw", m.algbw_gbps, alg[0] * row.size / m.time_us))
        elif max(a[0], by_bus[0]) > min(a[1], by_bus[1]):
            bad.append((k, place, "busbw", m.busbw_gbps, bus[0] * m.algbw_gbps))
        elif max(a[0], by_time[0], by_bus[0]) > min(a[1], by_time[1], by_bus[1]):
            bad.append((k, place, "time", m.time_us, alg[0] * row.size / m.algbw_gbps if m.algbw_gbps else math.inf))
    return bad


def inconsistent_notes(log, path: str | Path) -> list[str]:
    """One line per inconsistent measurement of ``log``, each naming ``path`` (the file it was read from), line (the row's, recorded when it
    was read), column, the printed value and what its row's other numbers give."""
    rows = log.rows
    return [f"{path}:{rows[k].line or '?'}: {place} {col} {value:g} disagrees with its row (size {rows[k].size}), "
            f"which gives {want:.4g}: a mangled number? (nccl-tests prints algbw = size / time, busbw = algbw x "
            f"factor)" for k, place, col, value, want in inconsistent_rows(log)]


__all__ = ["BW_DECIMALS", "MIN_PRECISE", "PRECISE_GBPS", "SLACK", "TIME_DECIMALS", "half_unit", "inconsistent_notes",
           "inconsistent_rows"]
