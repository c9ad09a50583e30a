"""Step loads and the capacity test of the verifier's ``over-capacity`` rule, in one place.

A step's transfers load the fabric's resources (chunks, :meth:`synth.ir.fabric.Fabric.load` of
the sends merged per rank pair); a resource carries ``capacity(resource, rounds) = rounds x
bandwidth_gbps / unit_gbps`` chunks in a step of ``rounds`` rounds, with :data:`CAPACITY_EPS`
chunks of slack.  :func:`rounds_for_loads` is the fewest rounds that pass, :func:`sized_steps`
builds steps declaring them (and hands their loads to :func:`synth.ir.verifier.check`).  With
many loaded resources (:data:`ARRAY_LOADS`) the tests run on NumPy arrays, with the very
arithmetic of :meth:`Fabric.capacity`, element by element.
"""

from __future__ import annotations

import math

from synth.ir.fabric import Fabric, Resource
from synth.ir.schedule import Step

__all__ = ["ARRAY_LOADS", "CAPACITY_EPS", "over_capacity", "required_rounds", "rounds_for_loads", "sized_steps",
           "step_loads"]

#: slack allowed when comparing a load with a capacity (chunks)
CAPACITY_EPS = 1e-9
#: capacity tests of at least this many loaded resources run on arrays
ARRAY_LOADS = 64


def step_loads(fabric: Fabric, sends: list[tuple[int, int]] | list[tuple[int, int, float]]) -> dict[Resource, float]:
    """Chunks per resource for ``sends`` = [(src, dst[, chunks])]: :meth:`Fabric.load` of the
    sends merged per (src, dst) pair (what the ``over-capacity`` rule compares)."""
    counts: dict[tuple[int, int], float] = {}
    for snd in sends:
        counts[(snd[0], snd[1])] = counts.get((snd[0], snd[1]), 0.0) + (snd[2] if len(snd) > 2 else 1.0)
    return fabric.load([(i, j, k) for (i, j), k in counts.items()])


def required_rounds(fabric: Fabric, sends: list[tuple[int, int]] | list[tuple[int, int, float]]) -> int:
    """Fewest whole rounds (>= 1) in which ``sends`` = [(src, dst[, chunks])] fit the fabric.

    Uses exactly the test of the ``over-capacity`` rule, so a step declaring this many rounds
    passes it.

    >>> from topo_probe.topology.model import Topology
    >>> from synth.ir.fabric import build_fabric
    >>> t = Topology("two"); _ = t.add_gpu(0); _ = t.add_gpu(1)
    >>> t.add_link("gpu0", "gpu1", kind="nvlink", links=2, bandwidth_gbps=50.0)
    >>> f = build_fabric(t)
    >>> required_rounds(f, [(0, 1)] * 5)   # 2 links carry 2 chunks per round
    3
    """
    return rounds_for_loads(fabric, step_loads(fabric, sends))


def _transfer_loads(fabric: Fabric, ts: tuple) -> dict[Resource, float]:
    """:func:`step_loads` of the ``(src, dst)`` pairs of transfers ``ts``, the pairs counted over
    arrays (in order of first appearance, as the dict of :func:`step_loads` keeps them) where there
    are many and every rank is in range."""
    n = fabric.num_ranks
    if len(ts) < ARRAY_LOADS:
        return step_loads(fabric, [(t.src, t.dst) for t in ts])
    import numpy as np
    src = np.fromiter([t.src for t in ts], dtype=np.int64, count=len(ts))
    dst = np.fromiter([t.dst for t in ts], dtype=np.int64, count=len(ts))
    if ((src < 0) | (src >= n) | (dst < 0) | (dst >= n)).any():
        return step_loads(fabric, list(zip(src.tolist(), dst.tolist())))
    pair, first, count = np.unique(src * n + dst, return_index=True, return_counts=True)
    order = np.argsort(first)
    pair = pair[order]
    return fabric.load(list(zip((pair // n).tolist(), (pair % n).tolist(), count[order].astype(float).tolist())))


def sized_steps(fabric: Fabric, groups) -> tuple[tuple[Step, ...], list[dict[Resource, float]]]:
    """A :class:`Step` per group of transfers in ``groups`` (empty groups dropped), each declaring
    the rounds its loads need (:func:`required_rounds`), and those loads (chunks per resource, per
    step): what :func:`synth.ir.verifier.check` and :func:`synth.ir.verifier.verify` take as ``loads``
    instead of computing them again."""
    steps, loads = [], []
    for ts in groups:
        ts = tuple(ts)
        if ts:
            load = _transfer_loads(fabric, ts)
            steps.append(Step(rounds_for_loads(fabric, load), ts))
            loads.append(load)
    return tuple(steps), loads


def _as_arrays(fabric: Fabric, loads: dict[Resource, float]):
    """``(loads, bandwidths)`` as arrays in ``loads`` order, where :meth:`Fabric.capacity` is the
    plain ``rounds * bandwidth_gbps / unit_gbps`` and ``loads`` is big enough to pay (else None)."""
    if len(loads) < ARRAY_LOADS or type(fabric).capacity is not Fabric.capacity:
        return None
    kept = getattr(loads, "arrays", None)     # a ResourceLoads of this fabric: its arrays, made with it
    if kept is not None and kept[2] is fabric:
        return kept[0], kept[1]
    import numpy as np
    res = fabric.resources
    return (np.fromiter(loads.values(), dtype=float, count=len(loads)),
            np.array([res[r].bandwidth_gbps for r in loads], dtype=float))


def over_capacity(fabric: Fabric, loads: dict[Resource, float], rounds: int) -> list[Resource]:
    """The resources of ``loads`` carrying more than ``capacity(resource, rounds)`` (the
    ``over-capacity`` test, :data:`CAPACITY_EPS` allowed), in ``loads`` order."""
    arrays = _as_arrays(fabric, loads)
    if arrays is None:
        return [r for r, load in loads.items() if load > fabric.capacity(r, rounds) + CAPACITY_EPS]
    vals, bw = arrays
    over = vals > rounds * bw / fabric.unit_gbps + CAPACITY_EPS      # capacity's very arithmetic
    return [r for r, o in zip(loads, over.tolist()) if o] if over.any() else []


def rounds_for_loads(fabric: Fabric, loads: dict[Resource, float]) -> int:
    """Fewest whole rounds (>= 1) in which ``loads`` (chunks per resource, e.g. from
    :func:`step_loads`) fit ``fabric``'s capacities, by the test of the ``over-capacity`` rule."""
    arrays = _as_arrays(fabric, loads)
    if arrays is not None:         # the same arithmetic as below, element by element
        import numpy as np
        vals, bw = arrays
        per_round = 1 * bw / fabric.unit_gbps
        pos = per_round > 0
        rounds = max(1, int(np.max(np.ceil(vals[pos] / per_round[pos] - 1e-12)))) if pos.any() else 1
        while (vals > rounds * bw / fabric.unit_gbps + CAPACITY_EPS).any():
            rounds += 1
        return rounds
    rounds = 1
    for r, load in loads.items():
        per_round = fabric.capacity(r, 1)
        if per_round > 0:
            rounds = max(rounds, math.ceil(load / per_round - 1e-12))
    while any(load > fabric.capacity(r, rounds) + CAPACITY_EPS for r, load in loads.items()):
        rounds += 1
    return rounds
