"""Bandwidth terms of a schedule: rounds per block its transfers need (exact fractions).

A step's transfers load every resource ``r`` of the fabric by the sum, over its transfers, of
the route fraction of ``r`` on the transfer's channel (chunks); resource ``r`` carries
``cap_r = bandwidth_gbps(r) / unit_gbps`` chunks per round (GB/s per direction over the
fabric's round unit, see :class:`synth.ir.fabric.Fabric`).  :func:`bandwidth_term` is the time
per block, in rounds, of the schedule pipelined over many slices (its limit is bounded
below by :attr:`synth.model.bounds.Bounds.bandwidth_rounds_per_block`);
:func:`lockstep_bandwidth_term` is the same with steps run one after another.  Both are
computed from the schedule's transfers alone, in exact rational arithmetic, so they can
judge any schedule, whichever synthesizer made it.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule
from synth.solve.bwopt.arborescence import exact

__all__ = ["bandwidth_term", "capacities", "lockstep_bandwidth_term", "resource_term"]


#: from this many distinct channels on, a cluster's loads are summed over its route arrays
ARRAY_PAIRS = 256


def capacities(fabric: Fabric, efficiency=None) -> dict:
    """Chunks per round of every resource; with ``efficiency`` (link kind -> factor) the effective
    ones, rounded as :mod:`synth.model.cuts` rounds them for its bounds."""
    if efficiency is not None:
        return {r: Fraction(info.bandwidth_gbps * efficiency(info.kind) / fabric.unit_gbps).limit_denominator(10**6)
                for r, info in fabric.resources.items()}
    unit = exact(fabric.unit_gbps)
    return {r: exact(info.bandwidth_gbps) / unit for r, info in fabric.resources.items()}


def _loads(fabric: Fabric, transfers) -> dict:
    """Chunks per resource of ``transfers`` (exact): the transfers counted per channel, the
    channels' route fractions counted per resource and fraction in integers, and one Fraction
    product per distinct (resource, fraction) (a cluster's routes share few fractions)."""
    counts = Counter((t.src, t.dst) for t in transfers)
    getter = getattr(fabric, "route_arrays", None)
    arrays = getter() if getter is not None and len(counts) >= ARRAY_PAIRS else None
    if arrays is not None:                 # a cluster: its routes as arrays
        got = arrays.exact_loads([i for i, _ in counts], [j for _, j in counts], list(counts.values()))
        if got is not None:
            return {arrays.names[r]: v for r, v in got.items()}
    times: dict = {}                       # (resource, numerator, denominator) -> chunks
    for (i, j), k in counts.items():
        for r, f in fabric.channels[(i, j)]:
            if not isinstance(f, Fraction):          # a hand-made fabric's int or float
                f = Fraction(f)
            key = (r, f.numerator, f.denominator)
            times[key] = times.get(key, 0) + k
    load: dict = {}
    for (r, num, den), k in times.items():
        load[r] = load.get(r, Fraction(0)) + Fraction(k * num, den)
    return load


def resource_term(fabric: Fabric, transfers, efficiency=None) -> Fraction:
    """The busiest resource's load over its capacity (rounds) for ``transfers`` run together,
    in chunks (not divided by pieces per block); ``efficiency`` as :func:`bandwidth_term`'s."""
    caps = capacities(fabric, efficiency)
    return max((v / caps[r] for r, v in _loads(fabric, transfers).items()), default=Fraction(0))


def bandwidth_term(schedule: Schedule, fabric: Fabric, efficiency=None) -> Fraction:
    """Rounds per block of ``schedule`` in the limit of many pipelined slices (exact); with
    ``efficiency`` (link kind -> achieved fraction, e.g. :meth:`synth.model.cost.CostParams.efficiency`)
    at the links' effective capacities, comparable with
    :meth:`synth.model.bounds.Bounds.rounds_per_block` for the same factors.

    Cut every chunk into ``m`` slices and run slice ``k``'s step ``t`` in wavefront ``k + t``
    (what :class:`synth.model.cost.CostModel` and pipelined runtimes do).  A wavefront lasts as long
    as its busiest resource needs, ``max_r load_r / cap_r`` rounds of slice-sized chunks
    (``cap_r = bandwidth_gbps(r) / unit_gbps`` chunks per round); in the ``m - S + 1`` full
    wavefronts every step is active, so as ``m`` grows the time per block tends to::

        max over resources r of  (sum over steps t of load_t(r)) / (cap_r * P)

    with ``P`` = pieces per block (``chunks_per_rank``; ``n * chunks_per_rank`` for
    allreduce).  This is the quantity the cut bound
    (:attr:`synth.model.bounds.Bounds.bandwidth_rounds_per_block`) bounds from below.
    :func:`lockstep_bandwidth_term` is the same without pipelining.

    Examples
    --------
    >>> from topo_probe.machines.generators import ring
    >>> from synth.ir.fabric import build_fabric
    >>> from synth.ir.schedule import Step, Transfer
    >>> f = build_fabric(ring(3))
    >>> s = Schedule("allgather", 3, 1, (Step(1, tuple(Transfer(r, r, (r + 1) % 3) for r in range(3))),
    ...                                  Step(1, tuple(Transfer(r, (r + 1) % 3, (r + 2) % 3) for r in range(3)))))
    >>> bandwidth_term(s, f)
    Fraction(2, 1)
    """
    caps = capacities(fabric, efficiency)
    load = _loads(fabric, (t for st in schedule.steps for t in st.transfers))
    worst = max((v / caps[r] for r, v in load.items()), default=Fraction(0))
    return worst / schedule.spec.pieces_per_block


def lockstep_bandwidth_term(schedule: Schedule, fabric: Fabric) -> Fraction:
    """Rounds per block when steps run one after another, each as long as its busiest resource
    needs (fractional rounds): ``sum over steps of max_r load_t(r) / cap_r``, over ``P``.

    Always >= :func:`bandwidth_term`; equal for a schedule whose steps all load the same
    resources in the same proportion.
    """
    caps = capacities(fabric)
    total = Fraction(0)
    for st in schedule.steps:
        load = _loads(fabric, st.transfers)
        total += max((v / caps[r] for r, v in load.items()), default=Fraction(0))
    return total / schedule.spec.pieces_per_block
