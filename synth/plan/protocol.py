"""Which protocol a plan range's schedule runs under: Simple or LL (:mod:`synth.model.physics`).

The native executor can move a call's steps as NCCL's LL protocol does (data and flag in one
16-byte line, so the receiver polls the data itself) on calls of at most
:data:`synth.model.physics.LL_MAX_BYTES`.  So before the one decision against NCCL
(:func:`synth.plan.decision.decide_ranges`), each candidate schedule's time at each plan size of
at most that many bytes is the faster of its Simple and its LL time
(:meth:`synth.model.cost.CostModel.estimate` with ``protocol="ll"``: LL's latencies, twice the
bytes), and the protocol that gave it is kept.  The first size past the limit
(``LL_MAX_BYTES + 1``) is added to the sizes the decision looks at, so that a range run under LL
never covers a size the executor would refuse it at: the range of the last LL size ends there and
the next starts there, decided on Simple times.

Only the native executor (one host) has the LL path; a plan for MPI (clusters) keeps Simple.

>>> from topo_probe.machines.generators import fully_connected
>>> from synth.ir.fabric import build_fabric
>>> from synth.baselines import baseline
>>> from synth.model.cost import CostModel
>>> fab = build_fabric(fully_connected(4))
>>> ring = {"ring": baseline("ring", fab, "allgather")}
>>> cost = CostModel(fab)
>>> sizes, times, protocols, _ = with_protocols(cost, ring, {"ring": [cost.schedule_time_us(ring["ring"], n)
...     for n in (1024, 1 << 20, 1 << 22)]}, [1024, 1 << 20, 1 << 22], None, "native", max_bytes=1 << 20)
>>> sizes, protocols["ring"]                 # LL's hops win 1 KiB; its doubled bytes lose 1 MiB
([1024, 1048576, 1048577, 4194304], ['ll', 'simple', 'simple', 'simple'])
"""

from __future__ import annotations

from typing import Callable

from synth.model.physics import LL_MAX_BYTES

SIMPLE, LL = "simple", "ll"


def with_protocols(cost, schedules: dict, times: dict[str, list[float]], sizes: list[int],
                   nccl_at: Callable[[list[int]], list[float]] | None, executor: str,
                   nccl_times: list[float] | None = None, max_bytes: int = LL_MAX_BYTES):
    """``(sizes, times, protocols, nccl_times)`` for the decision: ``times`` (µs, Simple, at
    ``sizes``) of each schedule where LL is faster at a size of at most ``max_bytes`` replaced by
    the LL time, ``protocols[name][k]`` the protocol of each, and one size ``max_bytes + 1`` added
    (Simple there; ``nccl_at`` gives NCCL's time at it, ``nccl_times`` NCCL's at ``sizes``, both
    None: no NCCL).  ``executor`` other than ``native``: everything Simple, the sizes as given."""
    if executor != "native" or not schedules or sizes[0] > max_bytes:
        return list(sizes), times, {nm: [SIMPLE] * len(sizes) for nm in times}, nccl_times
    cut = next((k for k, n in enumerate(sizes) if n > max_bytes), len(sizes))
    extra = [] if max_bytes + 1 in sizes or cut == len(sizes) else [max_bytes + 1]
    out_sizes = sizes[:cut] + extra + sizes[cut:]
    out_times, protocols = {}, {}
    for name, s in schedules.items():
        simple = times[name]
        ll = [cost.schedule_time_us(s, n, LL) for n in sizes[:cut]]
        pick = [LL if b < a else SIMPLE for a, b in zip(simple[:cut], ll)]
        out_times[name] = [min(a, b) for a, b in zip(simple[:cut], ll)] + \
            [cost.schedule_time_us(s, n) for n in extra] + list(simple[cut:])
        protocols[name] = pick + [SIMPLE] * (len(extra) + len(sizes) - cut)
    if nccl_times is not None:
        nccl_times = list(nccl_times[:cut]) + (list(nccl_at(extra)) if extra else []) + list(nccl_times[cut:])
    return out_sizes, out_times, protocols, nccl_times


def report_curves(simple: dict[str, list[float]], sizes: list[int], times: dict[str, list[float]],
                  protocols: dict[str, list[str]], plan_sizes: list[int]) -> dict[str, list[float]]:
    """The curves a report draws (µs at ``plan_sizes``): each schedule's Simple curve, and beside
    it as ``<name> (LL)`` its best-protocol curve (``times`` at ``sizes``, as :func:`with_protocols`
    returns them) where LL is faster at some size."""
    keep = set(plan_sizes)
    return {**simple, **{f"{name} (LL)": [t for n, t in zip(sizes, ts) if n in keep]
                         for name, ts in times.items() if LL in protocols.get(name, ())}}


def ll_ranges(entries) -> list[dict]:
    """The plan ranges run under LL (``summary.json``'s ``ll_ranges``): sizes, what runs (an
    ``nccl`` range: its fallback) and the modelled µs at the range's first size."""
    return [{"min_bytes": e.min_bytes, "max_bytes": e.max_bytes, "schedule": e.schedule,
             **({"fallback": e.fallback} if e.fallback else {}), "predicted_us": e.predicted_us}
            for e in entries if e.protocol == LL]


__all__ = ["with_protocols", "report_curves", "ll_ranges", "SIMPLE", "LL"]
