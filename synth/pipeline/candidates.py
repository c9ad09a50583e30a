"""The candidate schedules of one collective in a ``synthesize`` run: baselines, the CP-SAT
Pareto frontier, and the bandwidth-optimal schedules for nominal and effective capacities.

Each returns its schedules (not yet verified or saved: :func:`synth.pipeline.synthesize.synthesize_collective`
does that), the seconds it took and a note saying why it produced nothing, where it did not.
``opts`` is the run's :class:`synth.pipeline.synthesize.SynthesisOptions`.
"""

from __future__ import annotations

import time

from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule
from synth.model.physics import cost_params_for
from synth.pipeline.progress import RunProgress
from topo_probe.errors import SynthesisInfeasible, SynthesisTimeout, TopocollError, UnsupportedCollective

BWOPT_COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")


def baselines(fabric: Fabric, coll: str, root: int | None, log, notes: list[str], names=None,
              defer: bool = False) -> dict[str, Schedule]:
    """The NCCL-style baselines that apply to ``coll`` on ``fabric`` (name -> schedule), of
    ``names`` (default all); with ``defer`` not those of
    :data:`synth.pipeline.dominance.MIN_STEPS` (:func:`curves` builds them where they can win)."""
    from synth.baselines import BASELINES, baseline
    from synth.baselines._common import TooManyTransfers
    from synth.pipeline.dominance import MIN_STEPS
    out = {}
    for name in BASELINES:
        if (names is not None and name not in names) or (defer and name in MIN_STEPS):
            continue
        try:
            out[name] = baseline(name, fabric, coll, root=root)
        except TooManyTransfers as e:
            notes.append(f"{coll}: baseline {name} skipped: {e}")
        except UnsupportedCollective:
            continue                                  # does not apply to this collective or fabric
        except TopocollError as e:
            log(f"  {coll}: baseline {name} skipped: {e}")
    return out


def curves(fabric: Fabric, coll: str, root: int | None, res, cost, notes: list[str], save, prog: RunProgress,
           log, deferred: bool | None = None) -> dict[str, list[float]]:
    """Every candidate's cost-model times at the plan sizes (each schedule's loads once), of the
    :class:`synth.pipeline.synthesize.CollectiveResult` ``res``.  With ``deferred`` not None, the
    baselines :func:`baselines` deferred are built here (``save(name, schedule)`` verifies and
    saves each into ``res``), and with ``deferred`` True only where their lower bound is not
    above the built candidates' times at every plan size (:mod:`synth.pipeline.dominance`: a
    note says why each is left out).  ``res.schedules`` keeps the order of a run that builds
    every baseline first."""
    from synth.baselines import BASELINES
    from synth.pipeline.dominance import MIN_STEPS, skippable
    from synth.plan.planner import PLAN_SIZES, evaluate
    with prog.stage("simulate", coll):
        times = evaluate(res.schedules, cost.schedule_time_us, PLAN_SIZES)
    if deferred is None:
        return times
    with prog.stage("baselines", coll):
        why = skippable(fabric, coll, root, MIN_STEPS, times, PLAN_SIZES, cost.params) if deferred else {}
        for name, reason in why.items():
            notes.append(f"{coll}: baseline {name} not built: {reason}")
        late = baselines(fabric, coll, root, log, notes, names=[n for n in MIN_STEPS if n not in why])
    for name, s in late.items():
        save(f"{coll}-{name}", s)
    with prog.stage("simulate", coll):
        times.update(evaluate({f"{coll}-{n}": res.schedules[f"{coll}-{n}"] for n in late},
                              cost.schedule_time_us, PLAN_SIZES))
    first = [f"{coll}-{n}" for n in BASELINES if f"{coll}-{n}" in res.schedules]
    order = first + [n for n in res.schedules if n not in first]
    res.schedules = {n: res.schedules[n] for n in order}
    res.files = {n: res.files[n] for n in order if n in res.files}
    return {n: times[n] for n in order}


def sat_pareto(fabric: Fabric, coll: str, root: int | None, opts, save,
               prog: RunProgress, budget=None) -> tuple[list, float, str]:
    """CP-SAT's latency-bandwidth frontier (``save(S, R, C, schedule)`` hears each point as it is found),
    within ``opts.time_limit_s`` clock seconds of ``budget`` (a :class:`synth.solve.budget.SolveBudget`;
    None: a fresh one)."""
    if fabric.num_ranks > opts.max_sat_ranks:
        return [], 0.0, f"step synthesis skipped: {fabric.num_ranks} ranks > {opts.max_sat_ranks}"
    from synth.solve.sat.search import pareto
    t0 = time.perf_counter()
    try:
        with prog.solver_status() as report:
            points = pareto(fabric, coll, root=root, max_steps=opts.max_sat_steps, max_chunks=opts.max_sat_chunks,
                            time_limit_per_instance_s=max(1.0, opts.time_limit_s / 4),
                            total_time_limit_s=opts.time_limit_s, on_point=save, on_status=report, budget=budget)
    except (SynthesisTimeout, SynthesisInfeasible) as e:
        return [], time.perf_counter() - t0, f"step synthesis found nothing: {e}"
    return points, time.perf_counter() - t0, ""


def bwopt(fabric: Fabric, coll: str, root: int | None, opts, budget=None) -> tuple[Schedule | None, float, str]:
    """The bandwidth-optimal schedule for the links' nominal capacities (solved on ``budget``'s clock)."""
    if coll not in BWOPT_COLLECTIVES and not (coll == "alltoall" and fabric.shape is not None):
        return None, 0.0, ("bandwidth-optimal method covers allgather, reducescatter, allreduce, broadcast, reduce "
                           "(and alltoall on clusters of identical hosts)")
    from synth.solve.bwopt.optimal import bandwidth_optimal
    t0 = time.perf_counter()
    try:
        s = bandwidth_optimal(fabric, coll, root=root, time_limit_s=opts.time_limit_s, budget=budget)
    except TopocollError as e:
        return None, time.perf_counter() - t0, f"bandwidth-optimal method failed: {e}"
    return s, time.perf_counter() - t0, ""


def bwopt_effective(fabric: Fabric, coll: str, root: int | None, opts,
                    nominal: Schedule | None = None, budget=None) -> tuple[Schedule | None, float, str]:
    """The bandwidth-optimal method for the links' *effective* capacities (the cost model's
    per-kind efficiencies): a different optimum only where link kinds of different efficiency
    meet (PCIe next to the CPU link, NVLink next to a NIC).  On a cluster of hosts it is left
    out where the ``nominal`` bandwidth-optimal schedule already meets the cut bound at
    effective capacities (allreduce: the phased bound), as no schedule has a better bandwidth
    term there: the tree packing could only trade the hierarchy's few steps for more steps and
    chunks (8 x dgx-a100 allgather: 7.5 s CPU and 193,536 transfers instead of 4,032, at most
    4 % faster in the cost model at some sizes), and its export would cost more than the run.
    Elsewhere on a cluster it is the hierarchy with its split chosen for the effective
    capacities (:func:`synth.solve.cluster.compose.hierarchical`).  On one host, where a
    different step structure can pay (pcie-8gpu-2socket broadcast: 3 steps instead of 7), it
    always runs."""
    params = cost_params_for(fabric)
    if coll not in BWOPT_COLLECTIVES:
        return None, 0.0, ""
    if len({params.efficiency(info.kind) for info in fabric.resources.values()}) < 2:
        return None, 0.0, "every link kind has the same efficiency: the same optimum as bwopt"
    t0 = time.perf_counter()
    if nominal is not None and fabric.shape is not None and meets_effective_bound(nominal, fabric, coll, root, params):
        return None, time.perf_counter() - t0, ("the nominal bandwidth-optimal schedule meets the cut bound at "
                                                "effective capacities too: the same bandwidth optimum as bwopt")
    from synth.solve.bwopt.optimal import bandwidth_optimal
    try:
        s = bandwidth_optimal(fabric, coll, root=root, time_limit_s=opts.time_limit_s, efficiency=params,
                              budget=budget)
    except TopocollError as e:
        return None, time.perf_counter() - t0, f"bandwidth-optimal method (effective capacities) failed: {e}"
    return s, time.perf_counter() - t0, ""


def meets_effective_bound(schedule: Schedule, fabric: Fabric, coll: str, root: int | None, params) -> bool:
    """Does ``schedule``'s bandwidth term at the effective capacities of ``params`` reach the cut
    bound at those capacities (allreduce: the phased (RS + AG) / n bound, as its schedules are phased)?"""
    from synth.solve.bounds_cache import fabric_bounds
    from synth.solve.bwopt.bandwidth_term import bandwidth_term
    if coll == "allreduce":            # synth.model.bounds.phased_allreduce_bound, from the cached halves
        bound = sum(fabric_bounds(fabric, c).rounds_per_block(params)
                    for c in ("allgather", "reducescatter")) / fabric.num_ranks
    else:
        bound = fabric_bounds(fabric, coll, root).rounds_per_block(params)
    return bandwidth_term(schedule, fabric, params.efficiency) <= bound


__all__ = ["BWOPT_COLLECTIVES", "baselines", "bwopt", "bwopt_effective", "curves", "meets_effective_bound",
           "sat_pareto"]
