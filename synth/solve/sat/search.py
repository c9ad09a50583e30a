"""Searches over instances: least steps and the latency-bandwidth Pareto frontier.

A schedule with S steps and R rounds for C chunks per rank costs about ``S * alpha +
(R / C) * beta * size`` (alpha: per-step latency, beta: time per byte over one unit link), so
S is the latency cost and R/C the bandwidth cost.  :func:`pareto` returns every (S, R, C)
such that no schedule has fewer steps and at most the same R/C, or fewer R/C with at most
the same steps (within ``max_steps`` and ``max_chunks``).  Every loop here is bounded by those
limits and by the time limits.

Lower bounds used to skip hopeless instances and to stop early (both proved): the latency
bound of :func:`synth.solve.sat.model.latency_lower_bound` and the rounds-per-chunk bound of
:func:`bandwidth_lower_bound` (fractional flow relaxations).
"""

from __future__ import annotations

import heapq
import math
import time
from fractions import Fraction
from typing import Callable

from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule
from synth.solve.sat.compose import DUALS, compose_allreduce, refine, reverse_fabric
from synth.solve.sat.instance import solve_instance
from synth.solve.sat.model import is_unicast, latency_lower_bound, spec_of
from synth.solve.budget import SolveBudget, budget_or_new
from synth.solve.stoppable import solve_lp
from topo_probe.errors import SynthesisInfeasible, SynthesisTimeout

Point = tuple[int, int, int, Schedule]


def bandwidth_lower_bound(fabric: Fabric, collective, root: int | None = None,
                          budget: SolveBudget | None = None) -> Fraction:
    """A proved lower bound on R/C (rounds per chunk) for ``collective`` on ``fabric``.

    Fractional flow relaxations solved with GLOP, each giving the least congestion
    ``lambda`` (load / capacity per round) with which the chunks can be routed:

    * **sink sets** P (each rank, each host, each "all ranks but one"): every chunk that some
      rank of P needs and none holds must enter P at least once;
    * **unicast** collectives (alltoall, gather, scatter): all chunks routed to their single
      destination together (a multicommodity flow, commodities aggregated by source).

    A schedule with R rounds for C chunks per rank is such a routing with congestion <= R/C.
    Combining collectives use their dual on the reversed fabric; AllReduce adds the bounds of
    ReduceScatter and AllGather (true for compositions, the only AllReduces built here).
    The LP solves charge ``budget`` (default: a fresh :class:`~synth.solve.budget.SolveBudget`).

    >>> from synth.ir.fabric import build_fabric
    >>> from topo_probe.machines.generators import ring
    >>> bandwidth_lower_bound(build_fabric(ring(4)), "allgather")
    Fraction(3, 2)
    """
    spec = spec_of(collective, fabric.num_ranks, 1, root)
    budget = budget_or_new(budget)
    if spec.name in DUALS:
        return bandwidth_lower_bound(reverse_fabric(fabric), DUALS[spec.name], spec.root, budget)
    if spec.name == "allreduce":
        return (bandwidth_lower_bound(fabric, "reducescatter", None, budget)
                + bandwidth_lower_bound(fabric, "allgather", None, budget))
    n = spec.ranks
    chunks = [(ch.pre[0], frozenset(ch.post) - frozenset(ch.pre)) for ch in spec.chunks() if len(ch.pre) == 1]
    sets = {frozenset([p]) for p in range(n)} | {frozenset(range(n)) - {q} for q in range(n)}
    hosts = fabric.hosts or [0] * n
    sets |= {frozenset(r for r in range(n) if hosts[r] == h) for h in set(hosts)}
    best = Fraction(0)
    for sink in sorted(sets, key=sorted):
        supply: dict[int, int] = {}
        for q, need in chunks:
            if q not in sink and need & sink:
                supply[q] = supply.get(q, 0) + 1
        if supply:
            best = max(best, _congestion(fabric, [(supply, sink, None)], budget))
    if is_unicast(spec):
        commodities: dict[int, dict[int, int]] = {}
        for q, need in chunks:
            for p in need:
                commodities.setdefault(q, {})[p] = commodities.setdefault(q, {}).get(p, 0) + 1
        best = max(best, _congestion(fabric, [({q: sum(d.values())}, frozenset(d), d)
                                              for q, d in sorted(commodities.items())], budget))
    return best


def _congestion(fabric: Fabric, commodities, budget: SolveBudget) -> Fraction:
    """Least lambda routing ``commodities`` fractionally with load(e) <= lambda * capacity(e, 1).

    Each commodity is (supply {rank: chunks}, sink ranks, demand {rank: chunks} or None); with
    None the sinks absorb the supply in any split.  The LP optimum is returned as the nearest
    fraction with denominator <= 1000 when it agrees with the float to 1e-9 (LP vertices are
    small rationals here), else rounded down to a multiple of 1e-6.
    """
    from ortools.linear_solver import pywraplp
    lp = pywraplp.Solver.CreateSolver("GLOP")
    lam = lp.NumVar(0.0, lp.infinity(), "lambda")
    load: dict = {}
    for k, (supply, sinks, demand) in enumerate(commodities):
        free_sinks = demand is None
        f = {(i, j): lp.NumVar(0.0, lp.infinity(), f"f{k}[{i},{j}]") for (i, j) in fabric.channels
             if not (free_sinks and i in sinks)}
        for v in range(fabric.num_ranks):
            if free_sinks and v in sinks:
                continue
            net = sum(x for (i, _), x in f.items() if i == v) - sum(x for (_, j), x in f.items() if j == v)
            lp.Add(net == supply.get(v, 0) - (demand or {}).get(v, 0))
        for (i, j), x in f.items():
            for res, frac in fabric.channels[i, j]:
                load.setdefault(res, []).append(float(frac) * x)
    for res, terms in load.items():
        lp.Add(sum(terms) <= lam * (fabric.resources[res].bandwidth_gbps / fabric.unit_gbps))
    lp.Minimize(lam)
    if solve_lp(lp, budget) != pywraplp.Solver.OPTIMAL:
        return Fraction(0)
    value = lam.solution_value()
    nice = Fraction(value).limit_denominator(1000)
    return nice if abs(float(nice) - value) < 1e-9 else Fraction(math.floor(value * 10**6), 10**6)


def _say(report, kind: str, text: str, status: str = "") -> None:
    if report is not None:
        report(kind, text, status)


def least_steps(fabric: Fabric, collective, *, root: int | None = None, chunks: int = 1,
                extra_rounds: int = 0, max_steps: int | None = None,
                time_limit_per_instance_s: float = 60.0, total_time_limit_s: float = 600.0,
                workers: int = 2, budget: SolveBudget | None = None) -> Schedule:
    """The schedule with the fewest steps S (and R = S + ``extra_rounds`` rounds, C = ``chunks``).

    Tries S from the larger of the latency bound and the bandwidth bound (R >= C * R/C bound)
    upward, up to ``max_steps`` (default: that bound + ranks).
    ``meta["least_steps_proven"]`` is True when every smaller S was proved infeasible (False
    when one of them timed out).  AllReduce: least-steps ReduceScatter ; least-steps AllGather.
    Time limits are clock seconds of ``budget`` (default: a fresh :class:`~synth.solve.budget.SolveBudget`).

    Raises
    ------
    SynthesisInfeasible
        Every S up to ``max_steps`` was proved infeasible.
    SynthesisTimeout
        Some instance timed out and none was found.
    """
    spec = spec_of(collective, fabric.num_ranks, chunks, root)
    budget = budget_or_new(budget)
    t0, window = time.perf_counter(), budget.window(total_time_limit_s)
    if spec.name == "allreduce":
        kw = dict(chunks=chunks, extra_rounds=extra_rounds, max_steps=max_steps, workers=workers,
                  time_limit_per_instance_s=time_limit_per_instance_s, budget=budget)
        rs = least_steps(fabric, "reducescatter", total_time_limit_s=total_time_limit_s, **kw)
        left = max(0.0, window.left_s())
        ag = least_steps(fabric, "allgather", total_time_limit_s=left, **kw)
        out = compose_allreduce(rs, ag, fabric)
        out.meta["least_steps_proven"] = False  # of the composition class only
        out.meta["wall_s"] = round(time.perf_counter() - t0, 3)
        return out
    lo = max(1, latency_lower_bound(fabric, spec),
             math.ceil(bandwidth_lower_bound(fabric, spec.name, spec.root, budget) * chunks) - extra_rounds)
    hi = max_steps if max_steps is not None else lo + fabric.num_ranks
    proven, last = True, ""
    for S in range(lo, hi + 1):
        left = window.left_s()
        if left <= 0:
            break
        try:
            s = solve_instance(fabric, spec.name, S, S + extra_rounds, chunks, root=spec.root,
                               time_limit_s=min(time_limit_per_instance_s, left), workers=workers, budget=budget)
        except SynthesisInfeasible:
            continue
        except SynthesisTimeout as e:
            proven, last = False, str(e)
            continue
        s.meta.update(least_steps_proven=proven, latency_bound=lo, search_wall_s=round(time.perf_counter() - t0, 3))
        return s
    where = f"{spec.name} on {fabric.topology_name!r} (C={chunks}, R=S+{extra_rounds})"
    if not proven or window.over():
        raise SynthesisTimeout(f"{where}: nothing found for S={lo}..{hi} within the time limits {last}".strip())
    raise SynthesisInfeasible(f"{where}: no schedule with S={lo}..{hi} steps")


def pareto(fabric: Fabric, collective, *, root: int | None = None, max_steps: int | None = None,
           max_chunks: int = 8, time_limit_per_instance_s: float = 60.0, total_time_limit_s: float = 600.0,
           on_point: Callable[[int, int, int, Schedule], None] | None = None,
           on_status: Callable[[str, str, str], None] | None = None, workers: int = 2,
           budget: SolveBudget | None = None) -> list[Point]:
    """The latency-bandwidth Pareto frontier [(S, R, C, schedule), ...], fewest steps first.

    For S = latency bound, bound + 1, ..., ``max_steps`` (default bound + 4), tries (R, C)
    with C <= ``max_chunks`` and R >= S in increasing R/C, from the bandwidth lower bound up to
    (not including) the best R/C of fewer steps; the first feasible one is a frontier point,
    handed to ``on_point(S, R, C, schedule)`` at once.  Stops early when R/C reaches the
    bandwidth lower bound.  ``on_status(kind, text, status)`` hears what the search does (kinds
    ``start``, ``update``, ``point``, ``done``; :func:`synth.pipeline.progress.status_bar` draws
    them).  A point's ``meta["dominance_proven"]`` is False when some smaller
    R/C for its S timed out instead of being proved infeasible.  AllReduce combines the
    ReduceScatter and AllGather frontiers (refined to a common C), an upper bound on its own.
    Time limits are clock seconds of ``budget`` (default: a fresh :class:`~synth.solve.budget.SolveBudget`).

    Raises SynthesisTimeout / SynthesisInfeasible when no point at all was found.
    """
    spec, budget = spec_of(collective, fabric.num_ranks, 1, root), budget_or_new(budget)
    if spec.name == "allreduce":
        return _pareto_allreduce(fabric, max_steps, max_chunks, time_limit_per_instance_s,
                                 total_time_limit_s, on_point, on_status, workers, budget)
    t0, window = time.perf_counter(), budget.window(total_time_limit_s)
    lo = max(1, latency_lower_bound(fabric, spec))
    hi = max_steps if max_steps is not None else lo + 4
    bound = bandwidth_lower_bound(fabric, spec.name, spec.root, budget)
    points: list[Point] = []
    best: Fraction | None = None
    timed_out = False
    # a BFS-tree schedule moves every chunk once per rank; this many rounds per step always suffice
    min_ratio = min(Fraction(r.bandwidth_gbps) / Fraction(fabric.unit_gbps) for r in fabric.resources.values())
    per_step = spec.num_chunks * spec.ranks * math.ceil(1 / min(min_ratio, Fraction(1)))
    _say(on_status, "start", f"{spec.name} pareto")
    for S in range(lo, hi + 1):
        if best is not None and best <= bound:
            break
        if window.over():
            timed_out = True
            break
        heap = [(max(Fraction(S, C), Fraction(math.ceil(bound * C), C)), C) for C in range(1, max_chunks + 1)]
        heapq.heapify(heap)
        proven = True
        while heap:
            ratio, C = heapq.heappop(heap)
            R = int(ratio * C)
            if R > S * C * per_step:
                continue  # cannot happen for S >= the latency bound; keeps the loop finite
            left = window.left_s()
            if (best is not None and ratio >= best) or left <= 0:
                timed_out |= left <= 0
                break
            _say(on_status, "update", f"{spec.name}: S={S} R={R} C={C}", f"{len(points)} point(s)")
            try:
                s = solve_instance(fabric, spec.name, S, R, C, root=spec.root, workers=workers,
                                   time_limit_s=min(time_limit_per_instance_s, left), budget=budget)
            except SynthesisInfeasible:
                heapq.heappush(heap, (Fraction(R + 1, C), C))
                continue
            except SynthesisTimeout:
                proven, timed_out = False, True
                heapq.heappush(heap, (Fraction(R + 1, C), C))
                continue
            s.meta.update(dominance_proven=proven, bandwidth_bound=str(bound), latency_bound=lo,
                          search_wall_s=round(time.perf_counter() - t0, 3))
            best = ratio
            points.append((S, R, C, s))
            _say(on_status, "point", f"  frontier point S={S} R={R} C={C} (R/C={ratio}) "
                                     f"after {time.perf_counter() - t0:.2f} s")
            if on_point is not None:
                on_point(S, R, C, s)
            break
    _say(on_status, "done", f"{spec.name} pareto done", f"{len(points)} point(s)")
    if not points:
        cls = SynthesisTimeout if timed_out else SynthesisInfeasible
        raise cls(f"{spec.name} on {fabric.topology_name!r}: no schedule with S <= {hi}, C <= {max_chunks} "
                  f"found within the limits")
    return points


def _pareto_allreduce(fabric, max_steps, max_chunks, per_s, total_s, on_point, on_status, workers,
                      budget: SolveBudget) -> list[Point]:
    t0, window = time.perf_counter(), budget.window(total_s)
    half = None if max_steps is None else max(1, max_steps - 1)
    kw = dict(max_steps=half, max_chunks=max_chunks, time_limit_per_instance_s=per_s, on_status=on_status,
              workers=workers, budget=budget)
    rs = pareto(fabric, "reducescatter", total_time_limit_s=total_s / 2, **kw)
    ag = pareto(fabric, "allgather", total_time_limit_s=max(0.0, window.left_s()), **kw)
    cand = []
    for S1, R1, C1, s1 in rs:
        for S2, R2, C2, s2 in ag:
            C = math.lcm(C1, C2)
            R = R1 * (C // C1) + R2 * (C // C2)
            if C <= max_chunks and (max_steps is None or S1 + S2 <= max_steps):
                cand.append((S1 + S2, Fraction(R, C), C, R, s1, s2))
    out: list[Point] = []
    for S, ratio, C, R, s1, s2 in sorted(cand, key=lambda c: (c[0], c[1], c[2])):
        if out and ratio >= Fraction(out[-1][1], out[-1][2]):
            continue  # dominated by a point with fewer (or as many) steps
        s = compose_allreduce(refine(s1, C // s1.chunks_per_rank), refine(s2, C // s2.chunks_per_rank), fabric)
        s.meta.update(dominance_proven=False, search_wall_s=round(time.perf_counter() - t0, 3))
        out.append((S, R, C, s))
        if on_point is not None:
            on_point(S, R, C, s)
    if not out:
        raise SynthesisInfeasible(f"allreduce on {fabric.topology_name!r}: no ReduceScatter+AllGather "
                                  f"composition with S <= {max_steps} and C <= {max_chunks}")
    return out
