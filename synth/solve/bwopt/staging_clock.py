"""How :func:`synth.solve.bwopt.staging.stage` reads the time left of its window: a
:class:`StagingClock` records the least window under which every read decides the same, so that
:mod:`synth.solve.bwopt.stage_reuse` can tell when a kept staging is what a new search would give.
"""

from __future__ import annotations

__all__ = ["StagingClock"]


class StagingClock:
    """How :func:`~synth.solve.bwopt.staging.stage` reads its window's time left: ``share(s)`` is
    ``min(left / 3, s)``, a solve's limit; ``enough(m)`` is ``left >= m``.  Each read records the
    least window limit under which it decides the same as with any larger one (``need``, clock
    seconds), and ``clipped`` whether some read fell short of that (a limit cut by the time left).
    A staging that was never clipped is what any window of at least ``need`` gives: the same
    solves, with the same limits, charging the same clock (:mod:`synth.solve.bwopt.stage_reuse`)."""

    def __init__(self) -> None:
        self.window = None
        self.need = 0.0
        self.clipped = False

    def _read(self, threshold: float) -> float:
        spent = self.window.spent_s()
        self.need = max(self.need, spent + threshold)
        self.clipped = self.clipped or self.window.limit_s - spent < threshold
        return self.window.limit_s - spent

    def share(self, seconds: float) -> float:
        return min(self._read(3 * seconds) / 3, seconds)

    def enough(self, seconds: float) -> bool:
        return self._read(seconds) >= seconds
