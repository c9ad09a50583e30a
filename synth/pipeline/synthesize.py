"""The ``synthesize`` pipeline: topology -> verified candidates -> plan, summary and exports.

For each collective it gathers candidates, each verified before it is saved:

* the NCCL-style baselines that apply (ring, tree, direct, rhd, bruck);
* the latency-bandwidth Pareto frontier from CP-SAT step synthesis (up to ``max_sat_ranks``
  ranks; each point is saved the moment it is found);
* the bandwidth-optimal LP + tree-packing schedule (allgather, reducescatter, allreduce,
  broadcast, reduce), and where link kinds of different efficiency meet (PCIe beside the CPU
  link, NVLink beside a NIC) the same method for the cost model's effective capacities
  (``<collective>-bwopt-effective``);

then picks the fastest by cost-model time for each size range (:mod:`synth.plan.planner`).

Output folder layout (default ``results/<topology-name>/``)::

    topology.json  schedules/*.json  msccl/*.xml  plan.json  summary.json  report.md  busbw.png

The documented paths are links into a versioned folder that is switched in one rename when
everything is written (:mod:`synth.pipeline.output`): a run stopped or killed at any instant
leaves the previous complete results, or the new complete ones; nothing else in ``--out`` is
touched, and folders holding other files are refused.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from synth.ir.collectives import COLLECTIVES, ROOTED, CollectiveSpec
from synth.ir.fabric import Fabric, build_fabric
from synth.ir.schedule import Schedule, atomic_write_text
from synth.ir.verifier import check
from synth.model.cost import CostModel, CostParams
from synth.pipeline.output import ResultsFolder, classify
from synth.plan.planner import PLAN_SIZES, evaluate, size_ranges
from synth.plan.size_plan import Plan, PlanEntry
from topo_probe.errors import InvalidArgument, SynthesisInfeasible, SynthesisTimeout, TopocollError
from topo_probe.topology.model import Topology

#: sizes (bytes) at which summary.json reports simulated times
SUMMARY_SIZES = {"1KB": 1 << 10, "1MB": 1 << 20, "1GB": 1 << 30}
BWOPT_COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")


@dataclass
class SynthesisOptions:
    """Knobs of a run: which collectives, time budgets (s), root for rooted collectives."""

    collectives: tuple[str, ...] = COLLECTIVES
    time_limit_s: float = 60.0
    root: int = 0
    max_sat_ranks: int = 8
    max_sat_steps: int = 8
    max_sat_chunks: int = 6
    progress: bool = True
    log: Callable[[str], None] = print


@dataclass
class CollectiveResult:
    """What one collective produced: saved schedules (name -> file) and the summary record."""

    schedules: dict[str, Schedule] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)


def _baselines(fabric: Fabric, coll: str, root: int | None, log) -> dict[str, Schedule]:
    from synth.baselines import available_baselines, baseline
    out = {}
    for name in available_baselines(fabric, coll):
        try:
            out[name] = baseline(name, fabric, coll, root=root)
        except TopocollError as e:
            log(f"  {coll}: baseline {name} skipped: {e}")
    return out


def _pareto(fabric: Fabric, coll: str, root: int | None, opts: SynthesisOptions, save, log) -> tuple[list, float, str]:
    if fabric.num_ranks > opts.max_sat_ranks:
        return [], 0.0, f"step synthesis skipped: {fabric.num_ranks} ranks > {opts.max_sat_ranks}"
    from synth.solve.sat.search import pareto
    t0 = time.perf_counter()
    try:
        points = pareto(fabric, coll, root=root, max_steps=opts.max_sat_steps, max_chunks=opts.max_sat_chunks,
                        time_limit_per_instance_s=max(1.0, opts.time_limit_s / 4),
                        total_time_limit_s=opts.time_limit_s, on_point=save, progress=opts.progress)
    except (SynthesisTimeout, SynthesisInfeasible) as e:
        return [], time.perf_counter() - t0, f"step synthesis found nothing: {e}"
    return points, time.perf_counter() - t0, ""


def _bwopt(fabric: Fabric, coll: str, root: int | None, opts: SynthesisOptions) -> tuple[Schedule | None, float, str]:
    if coll not in BWOPT_COLLECTIVES:
        return None, 0.0, "bandwidth-optimal method covers allgather, reducescatter, allreduce, broadcast, reduce"
    from synth.solve.bwopt.optimal import bandwidth_optimal
    t0 = time.perf_counter()
    try:
        s = bandwidth_optimal(fabric, coll, root=root, time_limit_s=opts.time_limit_s)
    except TopocollError as e:
        return None, time.perf_counter() - t0, f"bandwidth-optimal method failed: {e}"
    return s, time.perf_counter() - t0, ""


def _bwopt_effective(fabric: Fabric, coll: str, root: int | None,
                     opts: SynthesisOptions) -> tuple[Schedule | None, float, str]:
    """The bandwidth-optimal method for the links' *effective* capacities (the cost model's
    per-kind efficiencies): a different optimum only where link kinds of different efficiency
    meet (PCIe next to the CPU link, NVLink next to a NIC)."""
    params = CostParams()
    if coll not in BWOPT_COLLECTIVES:
        return None, 0.0, ""
    if len({params.efficiency(info.kind) for info in fabric.resources.values()}) < 2:
        return None, 0.0, "every link kind has the same efficiency: the same optimum as bwopt"
    from synth.solve.bwopt.optimal import bandwidth_optimal
    t0 = time.perf_counter()
    try:
        s = bandwidth_optimal(fabric, coll, root=root, time_limit_s=opts.time_limit_s, efficiency=params)
    except TopocollError as e:
        return None, time.perf_counter() - t0, f"bandwidth-optimal method (effective capacities) failed: {e}"
    return s, time.perf_counter() - t0, ""


def synthesize_collective(fabric: Fabric, coll: str, opts: SynthesisOptions, workdir: Path) -> CollectiveResult:
    """All candidates for one collective, saved under ``workdir/schedules`` as they appear."""
    from synth.model.bounds import lower_bounds
    root = opts.root if coll in ROOTED else None
    CollectiveSpec(coll, fabric.num_ranks, 1, root)  # validates root
    res = CollectiveResult()
    cost = CostModel(fabric)

    def save(name: str, s: Schedule) -> None:
        check(s, fabric)
        s.save(workdir / "schedules" / f"{_slug(name)}.json")
        res.schedules[name] = s

    for name, s in _baselines(fabric, coll, root, opts.log).items():
        save(f"{coll}-{name}", s)
    pareto_points, pareto_s, pareto_note = _pareto(
        fabric, coll, root, opts, lambda S, R, C, s: save(f"{coll}-sat-S{S}-R{R}-C{C}", s), opts.log)
    for S, R, C, s in pareto_points:
        if f"{coll}-sat-S{S}-R{R}-C{C}" not in res.schedules:
            save(f"{coll}-sat-S{S}-R{R}-C{C}", s)
    bw, bw_s, bw_note = _bwopt(fabric, coll, root, opts)
    if bw is not None:
        save(f"{coll}-bwopt", bw)
    bwe, bwe_s, bwe_note = _bwopt_effective(fabric, coll, root, opts)
    if bwe is not None:
        save(f"{coll}-bwopt-effective", bwe)
    bounds = lower_bounds(fabric, coll, root=root)
    sim = {name: {label: cost.schedule_time_us(s, nb) for label, nb in SUMMARY_SIZES.items()}
           for name, s in res.schedules.items()}
    res.summary = {
        "collective": coll, "root": root,
        "pareto": [{"steps": S, "rounds": R, "chunks": C, "schedule": f"{coll}-sat-S{S}-R{R}-C{C}"}
                   for S, R, C, _ in pareto_points],
        "pareto_solve_s": round(pareto_s, 3), "pareto_note": pareto_note,
        "bandwidth_optimal": None if bw is None else {
            "schedule": f"{coll}-bwopt", "solve_s": round(bw_s, 3),
            **{k: v for k, v in bw.meta.items() if isinstance(v, (int, float, str))}},
        "bandwidth_optimal_note": bw_note,
        "bandwidth_optimal_effective": None if bwe is None else {
            "schedule": f"{coll}-bwopt-effective", "solve_s": round(bwe_s, 3),
            **{k: v for k, v in bwe.meta.items() if isinstance(v, (int, float, str))}},
        "bandwidth_optimal_effective_note": bwe_note,
        "bounds": {"latency_steps": bounds.latency_steps, "latency_us": bounds.latency_us,
                   "bandwidth_rounds_per_block": str(bounds.bandwidth_rounds_per_block),
                   **({"phased_rounds_per_block": str(bounds.phased_rounds_per_block)}
                      if bounds.phased_rounds_per_block is not None else {}),
                   **{f"time_us_{k}": bounds.time_us(nb, cost.params) for k, nb in SUMMARY_SIZES.items()}},
        "simulated_us": sim,
    }
    return res


def build_plan(fabric: Fabric, results: dict[str, CollectiveResult]) -> tuple[Plan, dict]:
    """Plan entries per collective, and the per-size times used to pick them."""
    cost = CostModel(fabric)
    plan = Plan(fabric.topology_name, fabric.fingerprint)
    curves = {}
    for coll, res in results.items():
        times = evaluate(res.schedules, cost.schedule_time_us, PLAN_SIZES)
        curves[coll] = times
        for name, lo, hi in size_ranges(PLAN_SIZES, times):
            s = res.schedules[name]
            predicted = times[name][PLAN_SIZES.index(lo)] if lo in PLAN_SIZES else times[name][0]
            plan.entries.append(PlanEntry(coll, lo, hi, f"schedules/{_slug(name)}.json", s.root,
                                          round(predicted, 3)))
    return plan, curves


def _reusable(out_dir: Path, fabric: Fabric, opts: SynthesisOptions) -> dict | None:
    """The summary of earlier results in ``out_dir`` for the same fingerprint and collectives."""
    try:
        old = json.loads((out_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(old, dict) or not isinstance(old.get("collectives"), dict):
        return None
    if old.get("fingerprint") == fabric.fingerprint and set(opts.collectives) <= set(old["collectives"]):
        return old
    return None


def run(topo: Topology, out_dir: Path, opts: SynthesisOptions, *, force: bool = False) -> dict:
    """Synthesize everything for ``topo`` into ``out_dir``; returns the summary dict.

    ``out_dir`` must be new, empty or hold earlier results (see :mod:`synth.pipeline.output`,
    which also says what an interrupted or killed run leaves); anything else raises
    InvalidArgument before any work.  Without ``force``, results for the same topology
    fingerprint and collectives are reused (the summary gets ``"reused": True``).
    """
    fabric = build_fabric(topo)
    if fabric.num_ranks < 2:
        raise InvalidArgument(f"{topo.name}: a collective needs at least 2 GPUs, this topology has "
                              f"{fabric.num_ranks}")
    out_dir = Path(out_dir)
    classify(out_dir)
    old = None if force else _reusable(out_dir, fabric, opts)
    if old is not None:
        opts.log(f"reusing {out_dir} (same topology fingerprint {fabric.fingerprint}; --force to redo)")
        return {**old, "reused": True}
    with ResultsFolder(out_dir) as folder:
        work = folder.new_version()
        summary = _synthesize_into(work, topo, fabric, opts)
        folder.publish(work)
    return summary


def _synthesize_into(work: Path, topo: Topology, fabric: Fabric, opts: SynthesisOptions) -> dict:
    """Every output file of a run, written into the (not yet served) folder ``work``."""
    from synth.pipeline.report import write_report
    from topo_probe.topology.serialize import save_topology
    (work / "schedules").mkdir()
    t0 = time.perf_counter()
    results: dict[str, CollectiveResult] = {}
    for coll in opts.collectives:
        opts.log(f"{coll}: synthesizing on {fabric.describe()}")
        t = time.perf_counter()
        results[coll] = synthesize_collective(fabric, coll, opts, work)
        results[coll].summary["total_s"] = round(time.perf_counter() - t, 3)
    plan, curves = build_plan(fabric, results)
    plan.save(work / "plan.json")
    save_topology(topo, work / "topology.json")
    _export_msccl(results, work / "msccl", opts.log)
    summary = {"topology": topo.name, "fingerprint": fabric.fingerprint, "ranks": fabric.num_ranks,
               "fabric": fabric.describe(), "total_s": round(time.perf_counter() - t0, 3),
               "collectives": {c: r.summary for c, r in results.items()}}
    atomic_write_text(work / "summary.json", json.dumps(summary, indent=1))
    write_report(work, topo, fabric, summary, curves, plan)
    return summary


def _export_msccl(results: dict[str, CollectiveResult], folder: Path, log) -> None:
    from synth.formats.msccl import to_msccl_xml
    folder.mkdir(parents=True, exist_ok=True)
    for res in results.values():
        for name, s in res.schedules.items():
            try:
                atomic_write_text(folder / f"{_slug(name)}.xml", to_msccl_xml(s, name=name))
            except TopocollError as e:
                log(f"  msccl export of {name} skipped: {e}")
