"""Baselines left unbuilt because they provably cannot be the fastest candidate at any plan size.

A ring baseline on a cluster holds up to millions of transfers (64 ranks: 63 steps of every
rank's blocks; 256 ranks: a million transfers per collective), and building, timing, verifying
and saving it costs more than the rest of a run, while the plan never picks it there.  Before
building it, :func:`lower_bound_us` bounds from below what :class:`synth.model.cost.CostModel`
would charge it at each size, from two things known without building it:

* its step count (a ring of ``n`` ranks takes at least ``n - 1`` steps, an allreduce ``2(n - 1)``):
  the cost model charges every wavefront ``step_overhead_us``, and pipelining over ``k`` slices
  only adds wavefronts (``S + k - 1``), so the fixed part is at least
  ``launch_us + S * step_overhead_us`` (channel latencies are left out: at least 0);
* the cut bound at the links' effective rates (:meth:`synth.model.bounds.Bounds.rounds_per_block`):
  no schedule's bandwidth term ``B`` is below it, whatever the slicing (each step's load enters
  ``k`` wavefronts of ``1/k`` of the bytes, and a sum of maxima is at least the maximum of the
  sums), and the in-step pipelining term is at least ``2 sqrt(slice_overhead_us * B)``
  (``sqrt`` is subadditive).

The baseline is skipped when that bound is above the fastest already built candidate at every
size of :data:`synth.plan.planner.PLAN_SIZES` (the sizes the plan compares), so the plan is the
same with or without it: at each size some candidate is strictly faster.
"""

from __future__ import annotations

import math

from synth.ir.fabric import Fabric
from synth.model.physics import CostParams

#: baselines that may be left unbuilt: name -> least number of steps on ``n`` ranks
MIN_STEPS = {"ring": lambda n, coll: 2 * (n - 1) if coll == "allreduce" else n - 1}
#: the bound must exceed the fastest candidate by this factor (floating-point slack)
SLACK = 1.0 + 1e-9


def lower_bound_us(fabric: Fabric, name: str, coll: str, root: int | None, sizes: list[int],
                   params: CostParams) -> list[float]:
    """A lower bound (µs) of the cost model's time of baseline ``name`` at each of ``sizes``,
    computed without building it (see the module docstring)."""
    from synth.solve.bounds_cache import fabric_bounds
    steps = MIN_STEPS[name](fabric.num_ranks, coll)
    bounds = fabric_bounds(fabric, coll, root)
    rounds = float(bounds.rounds_per_block(params))
    fixed = params.launch_us + steps * params.step_overhead_us
    out = []
    for nb in sizes:
        bw = rounds * bounds.block_bytes(nb) / (bounds.unit_gbps * 1e3)
        out.append(fixed + bw + 2.0 * math.sqrt(params.slice_overhead_us * bw))
    return out


def dominated(bound: list[float], curves: dict[str, list[float]], sizes: list[int]) -> str:
    """Why a baseline whose times are at least ``bound`` can never be the fastest of ``curves``
    (times at ``sizes``), or ``""`` where some size is not covered."""
    if not curves or not sizes:
        return ""
    winners = []
    for k in range(len(sizes)):
        best = min(sorted(curves), key=lambda nm: curves[nm][k])
        if not bound[k] > curves[best][k] * SLACK:
            return ""
        winners.append(best)
    margin = min(bound[k] / curves[winners[k]][k] for k in range(len(sizes)))
    faster = ", ".join(sorted(set(winners)))
    return (f"its lower bound (step count x step overhead + cut bound) is above the modelled time of "
            f"{faster} at every plan size ({sizes[0]:,} B to {sizes[-1]:,} B; at least {margin:.4f}x)")


def skippable(fabric: Fabric, coll: str, root: int | None, names, curves: dict[str, list[float]],
              sizes: list[int], params: CostParams) -> dict[str, str]:
    """``{baseline: why}`` for each of ``names`` (those in :data:`MIN_STEPS`) that need not be built
    on ``fabric`` because ``curves`` (built candidates' times at ``sizes``) are faster everywhere."""
    out = {}
    for name in names:
        if name not in MIN_STEPS or fabric.num_ranks < 2:
            continue
        why = dominated(lower_bound_us(fabric, name, coll, root, sizes, params), curves, sizes)
        if why:
            out[name] = why
    return out


__all__ = ["MIN_STEPS", "dominated", "lower_bound_us", "skippable"]
