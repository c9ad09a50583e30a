"""The one place a ``topocoll`` process group asks which schedule a call runs: the same
decision as the :class:`~kernels.comm.communicator.Communicator` (plan.json's entry for the
collective and size, else the fastest baseline by the cost model; ``nccl`` where the plan says
NCCL is faster), through :class:`synth.plan.selector.ScheduleSelector`.

Topology: ``TOPOCOLL_TOPOLOGY`` (a preset name or file) when set, else every rank of the group
fully connected (``fully_connected(n)``); plan: ``TOPOCOLL_PLAN`` (a ``plan.json`` or results
folder) when set, else discovery in ``$TOPOCOLL_RESULTS`` / ``results`` (``plan="auto"``); no
plan is never an error (the cost-model fallback, said once on rank 0).

>>> sel = make_selector(4, rank=1)
>>> c = choose(sel, "allreduce", 4096)
>>> c.schedule.ranks, c.nccl
(4, False)
"""

from __future__ import annotations

import os
import weakref

from kernels.comm.communicator import nccl_bytes, resolve_topology
from synth.plan.selector import Choice, ScheduleSelector


#: selector -> (collective, nbytes, root) -> Choice: a call asks once per size (the cost-model
#: fallback times every baseline when asked)
_CHOICES: "weakref.WeakKeyDictionary[ScheduleSelector, dict]" = weakref.WeakKeyDictionary()


def make_selector(group_size: int, *, rank: int = 0) -> ScheduleSelector:
    """A selector for a group of ``group_size`` ranks (topology and plan from the environment,
    module docstring); only rank 0 warns about the fallback."""
    topology = resolve_topology(os.environ.get("TOPOCOLL_TOPOLOGY") or None, group_size)
    if topology.num_gpus != group_size:
        from topo_probe.errors import TopologyError
        raise TopologyError(f"TOPOCOLL_TOPOLOGY={os.environ['TOPOCOLL_TOPOLOGY']} has {topology.num_gpus} GPUs, "
                            f"the process group {group_size} ranks")
    plan = os.environ.get("TOPOCOLL_PLAN") or "auto"
    return ScheduleSelector(topology, plan=plan, warn_fallback=rank == 0, owner="topocoll process group")


def choose(selector: ScheduleSelector, collective: str, count: int, itemsize: int = 4,
           root: int | None = None) -> Choice:
    """The :class:`~synth.plan.selector.Choice` for ``collective`` on blocks of ``count``
    elements of ``itemsize`` bytes (the plan is keyed by the nccl-tests size of the call)."""
    key = (collective, nccl_bytes(collective, count, itemsize, selector.topology.num_gpus), root)
    cache = _CHOICES.setdefault(selector, {})
    hit = cache.get(key)
    if hit is None:
        if len(cache) >= 4096:
            cache.clear()
        hit = cache[key] = selector.select(*key)
    return hit


__all__ = ["make_selector", "choose"]
