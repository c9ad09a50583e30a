"""Python's cyclic garbage collector during a ``synthesize`` run: paused, run once per collective.

A run makes millions of small objects that live until it ends (a 256-rank schedule holds
65,000 to a million :class:`synth.ir.schedule.Transfer` objects, and a run keeps every
schedule until the plan is made) and almost no reference cycles: refcounting frees nearly
everything.  The collector still scans every live container object at each full collection,
and with so many of them it took about a third of a 256-GPU run's CPU time (32 x dgx-h100,
all eight collectives: 24 s CPU with it, 16 s without).  :class:`PausedCollector` turns automatic
collection off for the run; :meth:`PausedCollector.checkpoint` (after each collective) collects
once, freeing the cycles made since the last checkpoint, and freezes what is still alive
(:func:`gc.freeze`), so later collections skip it; what exists on entering (the modules
imported so far: NumPy, OR-Tools, pandas, networkx) is frozen at once, so the first checkpoint
does not scan it either.  Leaving unfreezes and restores the
collector as it was.  Nothing a run computes depends on when garbage is collected.
"""

from __future__ import annotations

import gc

__all__ = ["PausedCollector"]


class PausedCollector:
    """Context manager: no automatic collection inside; :meth:`checkpoint` collects and freezes.

    >>> import gc
    >>> before = gc.isenabled()
    >>> with PausedCollector() as pc:
    ...     inside = gc.isenabled()
    ...     _ = pc.checkpoint()
    >>> inside, gc.isenabled() == before, gc.get_freeze_count()
    (False, True, 0)
    """

    def __init__(self) -> None:
        self.enabled = False

    def __enter__(self) -> "PausedCollector":
        self.enabled = gc.isenabled()
        gc.disable()
        gc.freeze()            # what exists before the run (imported modules, their objects) is never scanned
        return self

    def checkpoint(self) -> int:
        """Collect the cycles made since the last checkpoint and freeze the survivors; returns
        the number of unreachable objects found (:func:`gc.collect`)."""
        found = gc.collect()
        gc.freeze()
        return found

    def __exit__(self, *exc) -> None:
        gc.unfreeze()
        if self.enabled:
            gc.enable()
