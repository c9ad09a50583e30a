"""The start-up check of a ``topocoll`` group's ``timeout`` (``init_process_group(timeout=...)``,
``new_group(timeout=...)``), made through the group's store before any of its connections.

torch hands the backend's creator each rank's own timeout; where the store is the caller's
(``init_process_group(store=...)``) nothing checked it first, and a ``timedelta`` of 0 or less on one
rank ended that rank alone in gloo's check (``timeout.count() >= 0``, gloo ``context.cc``, as bundled
with torch 2.13) with a multi-line C++ error, its peers waiting out their whole timeout for its
connections.  Here each rank writes its global rank and its verdict (``ok`` or its one-line refusal)
under ``start/<rank>`` and reads every rank's, so a refusal on any rank ends the group's making on every
rank at once, with the same line naming the value and the ranks that refused
(:class:`~kernels.pytorch.errors.UnsupportedCall`).  Ranks may give different good timeouts: a
deadline is each rank's own.  The rule for the seconds is the MPI communicator's
(:func:`kernels.mpi.waiter.checked_timeout`).
"""

from __future__ import annotations

import math
from datetime import timedelta

from kernels.mpi.waiter import DEFAULT_TIMEOUT_S, checked_timeout
from kernels.pytorch.errors import UnsupportedCall
from topo_probe.errors import InvalidArgument

OK = "ok"


def checked_group_timeout(timeout) -> float:
    """``timeout`` (a :class:`datetime.timedelta`) in seconds when they are finite and > 0, else
    InvalidArgument in one line.

    >>> checked_group_timeout(timedelta(minutes=1))
    60.0
    >>> checked_group_timeout(timedelta(0))
    Traceback (most recent call last):
    ...
    topo_probe.errors.InvalidArgument: topocoll process group: timeout.total_seconds()=0.0: expected a finite \
number of seconds >= 0.001
    """
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else math.nan
    return checked_timeout(seconds, "topocoll process group: timeout.total_seconds()")


def check_timeouts(store, rank: int, size: int, timeout) -> None:
    """Every rank's verdict on its own ``timeout`` through ``store`` (module docstring); raises
    UnsupportedCall, the same line on every rank, when any rank refused its timeout, naming the refusing ranks by
    their global rank (:func:`global_rank`; with the group's ranks where the group is not the world).  A rank whose
    timeout is refused waits for the others' verdicts within :data:`~kernels.mpi.waiter.DEFAULT_TIMEOUT_S`."""
    try:
        checked_group_timeout(timeout)
        verdict, wait = OK, timeout
    except InvalidArgument as exc:     # waits on a deadline of its own: the store may carry the refused one
        verdict, wait = " ".join(str(exc).splitlines()), timedelta(seconds=DEFAULT_TIMEOUT_S)
    store.set(f"start/{rank}", f"{global_rank(rank)} {verdict}")
    keys = [f"start/{r}" for r in range(size)]
    store.wait(keys, wait)
    said = [store.get(k).decode("utf-8", "replace").split(" ", 1) for k in keys]
    members = [int(g) for g, _ in said]
    failed = [g for g, (_, v) in zip(members, said) if v != OK]
    if failed:
        whole = f"{size}" if members == list(range(size)) else f"the group's ranks {members}"
        first = next(v for _, v in said if v != OK)
        raise UnsupportedCall(f"{first} (the start-up check of the timeout failed on ranks {failed} of {whole})")


def global_rank(group_rank: int) -> int:
    """This process's rank in the default group (``new_group``: the group is made after it), else ``group_rank``
    (``init_process_group``: the group being made is the world)."""
    import torch.distributed as dist
    return dist.get_rank() if dist.is_initialized() else group_rank


__all__ = ["check_timeouts", "checked_group_timeout", "global_rank", "OK"]
