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

On a cluster of hosts the ring of an allgather, reducescatter or allreduce also has a bound per
step: in every step each of its ``R`` rings moves one chunk over each of its edges (rings found
without relays), and a ring through every host leaves host 0 at least once, so at least ``R``
chunks cross host 0's min cut to the other hosts in each step, at most at that cut's effective
rate.  A wavefront of ``a`` steps of ``1/k`` of the message then takes at least ``a`` times that,
which bounds the in-step pipelining term of every wavefront, and the bandwidth term by
``S x`` that (:func:`_stepwise`).

The baseline is skipped when that bound is above the fastest already built candidate at every
size of :data:`synth.plan.planner.PLAN_SIZES` (the sizes the plan compares), so the plan is the
same with or without it: at each size some candidate is strictly faster.
"""

from __future__ import annotations

import math

from synth.ir.collectives import CollectiveSpec
from synth.ir.fabric import Fabric
from synth.model.physics import CostParams
from topo_probe.errors import TopocollError

#: baselines that may be left unbuilt: name -> least number of steps on ``n`` ranks
MIN_STEPS = {"ring": lambda n, coll: 2 * (n - 1) if coll == "allreduce" else n - 1}
#: the bound must exceed the fastest candidate by this factor (floating-point slack, and the cut
#: capacities' rational rounding, 1e-6 at most)
SLACK = 1.0 + 1e-5
#: collectives whose ring moves one chunk over every edge of every ring in every step
EVERY_EDGE = ("allgather", "reducescatter", "allreduce")
#: the rings :func:`synth.baselines.ring.build` searches for (its ``max_rings``)
MAX_RINGS = 64


def lower_bound_us(fabric: Fabric, name: str, coll: str, root: int | None, sizes: list[int],
                   params: CostParams) -> list[float]:
    """A lower bound (µs) of the cost model's time of baseline ``name`` at each of ``sizes``,
    computed without building it (see the module docstring)."""
    from synth.solve.bounds_cache import fabric_bounds
    steps = MIN_STEPS[name](fabric.num_ranks, coll)
    bounds = fabric_bounds(fabric, coll, root)
    rounds = float(bounds.rounds_per_block(params))
    per_step = _step_us_per_byte(fabric, coll, params) if name == "ring" else 0.0
    fixed = params.launch_us + steps * params.step_overhead_us
    out = []
    for nb in sizes:
        bw = rounds * bounds.block_bytes(nb) / (bounds.unit_gbps * 1e3)
        out.append(max(fixed + bw + 2.0 * math.sqrt(params.slice_overhead_us * bw),
                       _stepwise(steps, bw, per_step * nb, params)))
    return out


def _step_us_per_byte(fabric: Fabric, coll: str, params: CostParams) -> float:
    """Least µs of one ring step per byte of the message, from host 0's min cut (0 where the
    per-step argument does not hold: one host, relayed rings, other collectives)."""
    shape = fabric.shape
    if coll not in EVERY_EDGE or shape is None or shape.hosts < 2:
        return 0.0
    from synth.baselines.ringsearch import find_rings
    from synth.model.cuts import _cut, _Graph
    try:
        if find_rings(fabric, MAX_RINGS).relayed:      # cached: the ring's build finds the same rings
            return 0.0
    except TopocollError:
        return 0.0
    host = set(range(shape.gpus_per_host))
    cut = float(_cut(_Graph(fabric, params), host, set(range(fabric.num_ranks)) - host))
    if cut <= 0:
        return 0.0
    spec = CollectiveSpec(coll, fabric.num_ranks, 1, None)    # R rings, R chunks per rank: R chunks
    step_share = 1.0 / max(spec.input_blocks(), spec.output_blocks()) / spec.pieces_per_block
    return step_share / (cut * fabric.unit_gbps * 1e3)


def _stepwise(steps: int, bw: float, tau: float, params: CostParams) -> float:
    """Least cost-model time of ``steps`` steps that each take at least ``tau`` µs of bandwidth
    term (and ``bw`` in all), over the pipelining choices: ``k`` slices give ``steps + k - 1``
    wavefronts, ``a`` steps in one take at least ``a tau / k`` (``a`` runs 1 .. m-1 twice and
    ``m = min(steps, k)`` in the others)."""
    best = math.inf
    for k in sorted(set(params.pipeline_slices)):
        m, big = min(steps, k), max(steps, k)
        roots = 2.0 * sum(math.sqrt(a) for a in range(1, m)) + (big - m + 1) * math.sqrt(m)
        pipe = 2.0 * math.sqrt(params.slice_overhead_us * tau / k) * roots
        best = min(best, params.launch_us + (steps + k - 1) * params.step_overhead_us
                   + max(steps * tau, bw) + pipe)
    return best


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
    return (f"its lower bound (launch, steps x step overhead, the cut bounds) is above the modelled time of "
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
