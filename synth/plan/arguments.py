"""The one check of each argument a caller hands the schedule selector (:class:`synth.plan.selector.ScheduleSelector`):
``plan`` (:func:`check_plan_arg`) and ``algo`` (:func:`check_algo_arg`).  Each refusal is one InvalidArgument line
that starts with the caller that owns the argument (Communicator, MPICommunicator, sweep, find_plan; the selector
itself by default) and quotes the value through :func:`topo_probe.errors.show`.

>>> check_algo_arg("bogus", "sweep")
Traceback (most recent call last):
...
topo_probe.errors.InvalidArgument: sweep: algorithm 'bogus': not 'plan', 'nccl', a baseline (ring, tree, direct, \
rhd, bruck, oneshot) or an existing schedule file
"""

from __future__ import annotations

import os
from pathlib import Path

from synth.plan.size_plan import Plan
from topo_probe.errors import InvalidArgument, show

#: the algorithm name (and plan entry) meaning "NCCL itself": NCCL is faster there
NCCL = "nccl"


def check_plan_arg(plan, owner: str = "ScheduleSelector"):
    """InvalidArgument, one line naming ``owner`` and the value, for a plan not a Plan, path, "auto", None or False."""
    if plan is None or plan is False or isinstance(plan, (os.PathLike, Plan)) or (isinstance(plan, str) and plan):
        return
    raise InvalidArgument(f"{owner}: plan must be a Plan, a plan.json file or folder, 'auto', None or False; "
                          f"got {type(plan).__name__} {show(plan)}")


class CheckedAlgo(str):
    """An algorithm the rule accepted: ``plan``, ``nccl``, a baseline name (:data:`synth.baselines.BASELINES`) or
    an existing schedule file (a path as its string), as a plain value.  Made only by the rule: the constructor
    applies it (to the plain value, ``str.__str__``) and refuses anything else in :func:`check_algo_arg`'s one line
    naming ``owner``, so no CheckedAlgo holds a refused value.  A selector made with one (the sweep's, whose command
    line checked every name before the first ran) takes it as it is.  Internal: in no ``__all__`` a user reads
    (callers pass plain strings or paths).  Whether the file holds a schedule that fits is the selector's to say."""

    __slots__ = ()

    def __new__(cls, algo, owner: str = "ScheduleSelector"):
        from synth.baselines import BASELINES
        name = os.fspath(algo) if isinstance(algo, os.PathLike) else algo
        # the value itself (not a str Enum's name), and the rule asked of it, not of a str subclass's own __eq__
        value = str.__str__(name) if isinstance(name, str) else None
        if value is not None and (value in ("plan", NCCL) or value in BASELINES or _is_file(value)):
            return super().__new__(cls, value)
        raise InvalidArgument(f"{owner}: algorithm {show(algo)}: not 'plan', 'nccl', a baseline "
                              f"({', '.join(BASELINES)}) or an existing schedule file")


def check_algo_arg(algo, owner: str = "ScheduleSelector") -> CheckedAlgo:
    """``algo`` (a path as its string) as a :class:`CheckedAlgo`: the same object where it is one already (checked
    once, by its owner), else a new one, whose constructor applies the rule (see CheckedAlgo) and refuses in one
    line naming ``owner`` and the value as given."""
    return algo if type(algo) is CheckedAlgo else CheckedAlgo(algo, owner)


def _is_file(name: str) -> bool:
    """Whether ``name`` is an existing file; a name the system cannot look up (too long: ENAMETOOLONG) is none."""
    try:
        return Path(name).is_file()
    except OSError:
        return False


__all__ = ["NCCL", "check_algo_arg", "check_plan_arg"]
