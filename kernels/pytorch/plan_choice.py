"""The one place a ``topocoll`` process group asks what a call runs: the same lookup as the
:class:`~kernels.comm.communicator.Communicator`, :func:`kernels.comm.route.plan_route` (the
decision plan.json recorded when it was built: its schedule, or ``nccl``; where NCCL cannot run
the call, the plan's fallback schedule and the reason; no entry: the fastest baseline by the cost
model), so a process group runs what plan.json says.

Topology: ``TOPOCOLL_TOPOLOGY`` (a preset name or file) when set, else every rank of the group
fully connected (``fully_connected(n)``); plan: ``TOPOCOLL_PLAN`` (a ``plan.json`` or results
folder) when set, else discovery in ``$TOPOCOLL_RESULTS`` / ``results`` (``plan="auto"``); no
plan is never an error (the cost-model fallback, said once on rank 0).

>>> sel = make_selector(4, rank=1)
>>> r = choose(sel, "allreduce", 4096, no_nccl="CPU tensors: NCCL runs on GPUs only")
>>> r.schedule.ranks, r.ran != "nccl"
(4, True)
"""

from __future__ import annotations

import os
import weakref

from kernels.comm.communicator import nccl_bytes, resolve_topology
from kernels.comm.route import Route, plan_route, substituted
from kernels.pytorch.agreement import DATA_BYTES_MAX
from kernels.pytorch.host_cost import host_time_us
from synth.plan.selector import NCCL, ScheduleSelector


#: why a CPU call never runs on NCCL (the route's reason where a plan says nccl)
_CPU = "CPU tensors: NCCL runs on GPUs only"
#: selector -> (collective, nbytes, root) -> Route: a call asks once per size (the cost-model
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
    return ScheduleSelector(topology, plan=plan, warn_fallback=rank == 0, owner="topocoll process group",
                            typed=os.environ.get("TOPOCOLL_TOPOLOGY") or None)


def choose(selector: ScheduleSelector, collective: str, count: int, itemsize: int = 4,
           root: int | None = None, *, no_nccl="", host: bool = False) -> Route:
    """The :class:`~kernels.comm.route.Route` of ``collective`` on blocks of ``count`` elements of
    ``itemsize`` bytes (the plan is keyed by the nccl-tests size of the call); ``no_nccl``: why
    this call cannot run on torch's NCCL group ('' where it can; a function is asked only where
    the plan says ``nccl``); ``host``: CPU tensors, whose all-reduce without a plan entry runs
    the baseline the host transport's cost model picks (:func:`host_fallback`)."""
    key = (collective, nccl_bytes(collective, count, itemsize, selector.topology.num_gpus), root)
    cache = _CHOICES.setdefault(selector, {})
    if len(cache) >= 4096:
        cache.clear()
    if host and collective == "allreduce":
        hit = cache.get((*key, "host"))
        if hit is None:
            route = plan_route(selector, *key, no_nccl=_CPU, layer="topocoll")
            hit = cache[(*key, "host")] = host_fallback(selector, route)
        return hit
    planned = cache.get(key)
    if planned is None:                      # the plan's own answer, NCCL assumed able to run
        planned = cache[key] = plan_route(selector, *key, no_nccl="", layer="topocoll")
    if planned.ran != NCCL:
        return planned
    why = no_nccl() if callable(no_nccl) else no_nccl
    if not why:
        return planned
    hit = cache.get((*key, why))
    if hit is None:                          # the plan's fallback, with the reason
        hit = cache[(*key, why)] = plan_route(selector, *key, no_nccl=why, layer="topocoll")
    return hit


def host_fallback(selector: ScheduleSelector, route: Route) -> Route:
    """``route`` of a CPU all-reduce, or, where no plan entry covers it (the cost-model
    fallback), the baseline :func:`kernels.pytorch.host_cost.host_time_us` finds fastest on the
    host transport (the first of :data:`synth.baselines.BASELINES` among equals); a plan's
    entry stands."""
    if route.planned or not route.ran.startswith("best:") or route.schedule is None:
        return route
    from synth.baselines import BASELINES
    best, best_us = None, host_time_us(route.schedule, route.nbytes, DATA_BYTES_MAX)
    for algo in BASELINES:
        choice = selector.select_baseline(algo, route.collective, route.root)
        us = None if choice is None else host_time_us(choice.schedule, route.nbytes, DATA_BYTES_MAX)
        if us is not None and us < best_us:
            best, best_us = choice, us
    if best is None or best.label == route.ran:
        return route
    return substituted(route, best, f"the host transport's cost model picks {best.label} "
                                    f"(kernels.pytorch.host_cost, CPU tensors)")


__all__ = ["make_selector", "choose", "host_fallback"]
