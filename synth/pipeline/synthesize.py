"""The ``synthesize`` pipeline: topology -> verified candidates -> plan, summary and exports.

For each collective it gathers candidates, each verified before it is saved:

* the NCCL-style baselines that apply (ring, tree, direct, rhd, bruck);
* the latency-bandwidth Pareto frontier from CP-SAT step synthesis (up to ``max_sat_ranks``
  ranks; each point is saved the moment it is found);
* the bandwidth-optimal LP + tree-packing schedule (allgather, reducescatter, allreduce,
  broadcast, reduce), and where link kinds of different efficiency meet (PCIe beside the CPU
  link, NVLink beside a NIC) the same method for the cost model's effective capacities
  (``<collective>-bwopt-effective``); on clusters of identical hosts the hierarchical schedule
  and the AllToAll multicommodity-flow LP (:func:`synth.solve.bwopt.optimal.bandwidth_optimal`);

then picks the fastest by cost-model time for each size range (:mod:`synth.plan.planner`).

Output folder layout (default ``results/<topology-name>/``)::

    topology.json  schedules/*.json  msccl/*.xml  msccl/candidates/*.xml  plan.json  summary.json
    report.md  busbw.png

``msccl/`` holds the plan's algorithms as MSCCL XML with their size ranges, ready to be RCCL's
``MSCCL_ALGO_DIR`` (rooted collectives only under ``msccl/candidates/``: the XML has no root).

At cluster scale (see :data:`LARGE_RANKS`) some stages cannot run and say so in the summary's ``notes`` and the
report: schedules of more than :data:`GZIP_TRANSFERS` transfers are written as ``schedules/*.json.gz``, baselines stop
at :data:`synth.baselines._common.MAX_TRANSFERS` transfers, the tree packing stops at
:data:`synth.solve.bwopt.optimal.TREES_MAX_RANKS` ranks (the hierarchy covers allgather, reducescatter, allreduce,
broadcast and reduce at any size), and MSCCL XML is written for the schedules the plan uses, gzip-compressed beyond
:data:`synth.pipeline.msccl_export.GZIP_XML_BYTES` (a 1,024-rank allgather: 370 MB) into ``msccl/compressed/``
(the runtimes read every file of ``msccl/`` as XML), and not for schedules in which a rank talks to more than
:data:`synth.pipeline.msccl_export.MSCCL_MAX_PEERS` peers (the MSCCL runtime cannot load them).

The documented paths are plain files and folders. A run writes everything into a hidden versioned folder first and
then puts it in place, one rename per path, ``summary.json`` last (:mod:`synth.pipeline.output`,
:mod:`synth.pipeline.publish`): a run stopped or killed at any instant leaves the previous complete results, the new
complete ones, or (killed while putting them in place, ``summary.json`` missing) the new ones complete in the hidden
folder, which the next run puts in place; nothing else in ``--out`` is touched, and folders holding other files are
refused. New results equal to those in place apart from wall-clock times are not put in place at all: the folder stays
as it was (:mod:`synth.pipeline.keep`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from synth.ir.collectives import COLLECTIVES, ROOTED, CollectiveSpec, check_collective_gpus
from synth.ir.fabric import Fabric, build_fabric
from synth.formats.schedule_file import save_schedule
from synth.ir.schedule import Schedule, atomic_write_text
from synth.ir.step_columns import kept_columns, keeping_columns
from synth.ir.sum_order import inconsistent_chunks
from synth.ir.verifier import check
from synth.model.cost import CostModel
from synth.pipeline.collector import PausedCollector
from synth.pipeline.candidates import BWOPT_COLLECTIVES, baselines, bwopt, bwopt_effective, curves, sat_pareto
from synth.pipeline.msccl_export import default_runtime, export_msccl
from synth.pipeline.keep import link_identical, unchanged
from synth.pipeline.output import ResultsFolder, ResultsNotWritten, classify, not_written
from synth.pipeline.progress import RunProgress
from synth.pipeline.reuse_check import dropped_results, verify_reused
from synth.pipeline.wall_clock import WALL_CLOCK_META, dump_json
from synth.plan.model_identity import model_version
from synth.plan.planner import PLAN_SIZES, evaluate
from synth.plan.size_plan import Plan, PlanEntry
from topo_probe.errors import InvalidArgument
from topo_probe.topology.model import Topology

#: schedules with more transfers than this are saved gzip-compressed (``.json.gz``)
GZIP_TRANSFERS = 100_000
#: from this many ranks on (two 8-GPU hosts), MSCCL XML is exported for the plan's schedules only:
#: the other candidates' XML (rings of n^2 transfers, one-shot all-reduces) cost 5 to 10 times
#: the synthesis there (4 x dgx-h100: about 45 of 55 CPU seconds)
LARGE_RANKS = 16
#: sizes (bytes) at which summary.json reports simulated times
SUMMARY_SIZES = {"1KB": 1 << 10, "1MB": 1 << 20, "1GB": 1 << 30}


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
    #: log every collective's stage times (``summary.json`` records them always)
    verbose: bool = False
    #: from LARGE_RANKS ranks on, leave unbuilt the ring baselines that provably cannot be the
    #: fastest at any plan size (:mod:`synth.pipeline.dominance`); False builds them all
    skip_dominated: bool = True
    #: MSCCL runtime the ``msccl/`` files are built for (None: rccl on AMD GPUs, else msccl-executor-nccl)
    msccl_runtime: str | None = None
    #: the NCCL (major, minor) whose rules the plan's NCCL comparison follows (None: the model's default)
    nccl_version: tuple | None = None


@dataclass
class CollectiveResult:
    """What one collective produced: saved schedules (name -> file) and the summary record."""

    schedules: dict[str, Schedule] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    #: schedule name -> file, relative to the output folder
    files: dict[str, str] = field(default_factory=dict)
    #: schedule name -> cost-model times (µs) at PLAN_SIZES (what the plan compares)
    curves: dict[str, list[float]] = field(default_factory=dict)
    #: combining schedule name -> whether every rank ends with the same bits (synth.ir.sum_order)
    same_bits: dict[str, bool] = field(default_factory=dict)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)


def run_independent(meta: dict) -> dict:
    """``meta`` without the solvers' wall-clock times (:data:`WALL_CLOCK_META`): what a saved
    schedule file holds, the same bytes on every run (summary.json keeps the times)."""
    return {k: v for k, v in meta.items() if k not in WALL_CLOCK_META}


def schedule_file(name: str, s: Schedule) -> str:
    """The schedule's file under the output folder: ``.json``, or ``.json.gz`` when it is big."""
    big = sum(len(st.transfers) for st in s.steps) > GZIP_TRANSFERS
    return f"schedules/{_slug(name)}.json{'.gz' if big else ''}"


def _same_bits(s: Schedule, fabric: Fabric) -> bool:
    """Does every rank of the verified combining ``s`` end with the same bits?  Checked on the step columns its
    verification left on ``fabric`` (:func:`synth.ir.step_columns.keeping_columns`), the others read now."""
    kept = kept_columns(fabric)
    return not inconsistent_chunks(s, kept.take(s.steps) if kept is not None else None)


def synthesize_collective(fabric: Fabric, coll: str, opts: SynthesisOptions, workdir: Path,
                          prog: RunProgress | None = None, budget=None) -> CollectiveResult:
    """All candidates for one collective, saved under ``workdir/schedules`` as they appear;
    ``prog`` times the stages (its ``collective_stages(coll)``); the solvers charge ``budget`` (a
    :class:`synth.solve.budget.SolveBudget`; None: a fresh one per solver call)."""
    from synth.solve.bounds_cache import fabric_bounds
    root = opts.root if coll in ROOTED else None
    CollectiveSpec(coll, fabric.num_ranks, 1, root)  # validates root
    res = CollectiveResult()
    cost = CostModel(fabric)
    prog = prog if prog is not None else RunProgress([coll], enabled=False)

    def save(name: str, s: Schedule) -> None:
        with prog.stage("verify", coll):
            check(s, fabric)
            res.same_bits.update({name: _same_bits(s, fabric)} if s.spec.combining else {})
        with prog.stage("save", coll):
            res.files[name] = schedule_file(name, s)
            save_schedule(s.with_(meta=run_independent(s.meta)), workdir / res.files[name])
        res.schedules[name] = s

    notes: list[str] = []
    deferred = fabric.num_ranks >= LARGE_RANKS         # rings: built last, only where they can win
    with prog.stage("baselines", coll):
        found = baselines(fabric, coll, root, opts.log, notes, defer=deferred)
    for name, s in found.items():
        save(f"{coll}-{name}", s)
    with prog.stage("pareto", coll):
        pareto_points, pareto_s, pareto_note = sat_pareto(
            fabric, coll, root, opts, lambda S, R, C, s: save(f"{coll}-sat-S{S}-R{R}-C{C}", s), prog, budget)
    for S, R, C, s in pareto_points:
        if f"{coll}-sat-S{S}-R{R}-C{C}" not in res.schedules:
            save(f"{coll}-sat-S{S}-R{R}-C{C}", s)
    with prog.stage("bwopt", coll):
        bw, bw_s, bw_note = bwopt(fabric, coll, root, opts, budget)
    if bw is not None:
        save(f"{coll}-bwopt", bw)
    with prog.stage("bwopt_effective", coll):
        bwe, bwe_s, bwe_note = bwopt_effective(fabric, coll, root, opts, bw, budget)
    if bwe is not None:
        save(f"{coll}-bwopt-effective", bwe)
    with prog.stage("bounds", coll):
        bounds = fabric_bounds(fabric, coll, root)
    time_limited = fabric.num_ranks <= opts.max_sat_ranks or coll in BWOPT_COLLECTIVES or (
        coll == "alltoall" and fabric.shape is not None)          # a solver with a time budget ran
    res.curves = curves(fabric, coll, root, res, cost, notes, save, prog, opts.log,
                        opts.skip_dominated if deferred else None)
    with prog.stage("simulate", coll):
        sim = {name: {label: res.curves[name][PLAN_SIZES.index(nb)] for label, nb in SUMMARY_SIZES.items()}
               for name in res.schedules}
    res.summary = {
        "collective": coll, "root": root, "time_limited": time_limited,
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
        "simulated_us": sim, **({"same_bits": res.same_bits} if res.same_bits else {}),
        "notes": notes,
    }
    return res


def build_plan(fabric: Fabric, results: dict[str, CollectiveResult], topo: Topology | None = None,
               nccl_version: tuple | None = None) -> tuple[Plan, dict, dict]:
    """Plan entries per collective, the per-size times used to pick them, and NCCL's modelled
    curve per collective (NCCL ``nccl_version``'s rules): the one decision of :mod:`synth.plan.decision`
    (modelled time plus the executor's measured fixed cost; with ``topo`` and >= 2 ranks, ``nccl``
    where NCCL is predicted faster by the margin), recorded per entry."""
    from synth.plan.decision import counted_records, decide_ranges, executor_for, range_record
    from synth.plan.protocol import ll_ranges, report_curves, with_protocols
    from synth.plan.versus_nccl import NCCL, nccl_curve
    cost = CostModel(fabric)
    plan = Plan(fabric.topology_name, fabric.fingerprint, model=model_version())   # the models the decisions used
    curves, ncc = {}, {}
    executor = executor_for(fabric)
    for coll, res in results.items():
        times = res.curves if set(res.curves) == set(res.schedules) else \
            evaluate(res.schedules, cost.schedule_time_us, PLAN_SIZES)
        curves[coll] = times
        if topo is not None and fabric.num_ranks > 1:
            ncc[coll] = nccl_curve(topo, coll, PLAN_SIZES, version=nccl_version)
        nccl_t = ncc[coll]["times"] if coll in ncc else None
        records = {name: counted_records(s, executor) for name, s in res.schedules.items()}
        sizes, times, protos, nccl_t = with_protocols(cost, res.schedules, times, PLAN_SIZES, lambda sz: nccl_curve(
            topo, coll, sz, version=nccl_version)["times"], executor, nccl_t)  # LL where faster, calls <= LL_MAX_BYTES
        curves[coll] = report_curves(curves[coll], sizes, times, protos, PLAN_SIZES)
        odd = {nm for nm, same in res.same_bits.items() if not same}           # equal times: the same-bits one
        for name, fallback, lo, hi in decide_ranges(sizes, times, nccl_t, records, executor, protos, odd):
            k = sizes.index(lo) if lo in sizes else 0
            ours = fallback if name == NCCL else name
            s = res.schedules[ours]
            decision = range_record(executor, records[ours], times[ours][k], None if nccl_t is None else nccl_t[k])
            path = res.files.get(ours, schedule_file(ours, s))
            if name == NCCL:
                plan.entries.append(PlanEntry(coll, lo, hi, NCCL, s.root, round(nccl_t[k], 3), path, decision,
                                              protos[ours][k]))
            else:
                plan.entries.append(PlanEntry(coll, lo, hi, path, s.root, round(times[name][k], 3), None, decision,
                                              protos[name][k]))
        ll = ll_ranges(e for e in plan.entries if e.collective == coll)
        res.summary.update({"ll_ranges": ll} if ll else {})          # shown where a range runs LL
    return plan, curves, ncc


def _options_record(opts: SynthesisOptions) -> dict:
    """The options of a run that change its results (the root is per collective, in its record)."""
    return {"time_limit_s": opts.time_limit_s, "max_sat_ranks": opts.max_sat_ranks,
            "max_sat_steps": opts.max_sat_steps, "max_sat_chunks": opts.max_sat_chunks,
            "model": model_version(), "msccl_runtime": opts.msccl_runtime,
            "nccl_version": list(opts.nccl_version) if opts.nccl_version else None}    # None: the model's default


def _reusable(out_dir: Path, fabric: Fabric, opts: SynthesisOptions) -> dict | None:
    """The summary of earlier results in ``out_dir`` made with everything that changes a result
    the same: the topology fingerprint (NIC transports, so ``--net``, included), the model
    version, the solver settings, the root of every rooted collective asked for, and the time
    limit where a solver with a time budget ran for a collective asked for.  None otherwise, also
    for results that do not record their options (made by earlier versions)."""
    try:
        old = json.loads((out_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(old, dict) or not isinstance(old.get("collectives"), dict) or \
            not isinstance(old.get("options"), dict) or old.get("fingerprint") != fabric.fingerprint:
        return None
    was = old["options"]
    if any(was.get(k) != v for k, v in _options_record(opts).items() if k != "time_limit_s"):
        return None
    for coll in opts.collectives:
        rec = old["collectives"].get(coll)
        if not isinstance(rec, dict) or rec.get("root") != (opts.root if coll in ROOTED else None):
            return None
        if rec.get("time_limited", True) and was.get("time_limit_s") != opts.time_limit_s:
            return None
    return old


def run(topo: Topology, out_dir: Path, opts: SynthesisOptions, *, force: bool = False) -> dict:
    """Synthesize everything for ``topo`` into ``out_dir``; returns the summary dict.

    ``out_dir`` must be new, empty or hold earlier results (see :mod:`synth.pipeline.output`,
    which also says what an interrupted or killed run leaves); anything else raises
    InvalidArgument before any work.  Without ``force``, earlier results made with everything
    that changes a result the same (:func:`_reusable`) are reused (the summary gets
    ``"reused": True``).  New results equal to those in place apart from wall-clock times leave
    the folder as it was (:mod:`synth.pipeline.keep`; the summary, with this run's times, gets
    ``"unchanged"``: the number of files kept).
    """
    t0 = time.perf_counter()
    if opts.msccl_runtime is None:
        opts = replace(opts, msccl_runtime=default_runtime(topo))
    fabric = build_fabric(topo)
    fabric_s = time.perf_counter() - t0
    check_collective_gpus(topo.name, fabric.num_ranks)
    wanted = {coll: opts.root if coll in ROOTED else None for coll in opts.collectives}
    for coll, root in wanted.items():
        CollectiveSpec(coll, fabric.num_ranks, 1, root)  # validates root
    out_dir = Path(out_dir)
    classify(out_dir)
    with ResultsFolder(out_dir) as folder:      # a run killed earlier is finished or cleaned here
        old = None if force else _reusable(out_dir, fabric, opts)
        checked = verify_reused(out_dir, fabric, model_version()) if old is not None else None
        if isinstance(checked, str):
            opts.log(f"not reusing {out_dir}: {checked}; synthesizing again")
        elif old is not None:
            n, secs, lines = checked
            opts.log(f"reusing {out_dir} (same topology fingerprint {fabric.fingerprint}, options and model; "
                     "--force to redo)")
            opts.log(f"verified the {n} schedules its plan runs against this topology in {secs:.2f} s; the plan:")
            for line in lines:
                opts.log(f"  {line}")
            return {**old, "reused": True}
        dropped = None if force else dropped_results(out_dir, fabric.fingerprint, wanted)
        if dropped is not None:
            raise InvalidArgument(f"output folder {out_dir}: {dropped}; add --force to replace them, or choose "
                                  "another --out")
        had_results = (out_dir / "summary.json").is_file()
        work = folder.new_version()
        try:
            summary, report_marked = _synthesize_into(work, topo, fabric, opts, fabric_s)
        except OSError as exc:
            raise ResultsNotWritten(not_written(exc, work, out_dir, had_results)) from exc
        kept = unchanged(out_dir, work, report_marked)
        if kept is not None:                     # the version is deleted on leaving
            times = "this run's stage times are above" if opts.verbose else "--verbose prints this run's stage times"
            opts.log(f"results unchanged apart from wall-clock times: kept {kept} files in {out_dir}/ as they were; "
                     f"{times}")
            return {**summary, "unchanged": kept}
        link_identical(out_dir, work)
        folder.publish(work)
    return summary


def _synthesize_into(work: Path, topo: Topology, fabric: Fabric, opts: SynthesisOptions,
                     fabric_s: float = 0.0) -> tuple[dict, str]:
    """Every output file of a run, written into the (not yet served) folder ``work``; every
    collective's record and the summary get ``stages`` (seconds per stage).  Returns the summary
    and the report's text with its wall-clock times marked (:mod:`synth.pipeline.wall_clock`)."""
    from synth.pipeline.report import write_report
    from synth.solve.budget import SolveBudget
    from topo_probe.topology.host_assumption import host_assumption_line
    from topo_probe.topology.serialize import save_topology
    (work / "schedules").mkdir()
    t0 = time.perf_counter() - fabric_s
    results: dict[str, CollectiveResult] = {}
    budget = SolveBudget()                  # the run's deterministic solver clock, handed to every solve
    with RunProgress(opts.collectives, opts.progress, opts.verbose, opts.log) as prog, PausedCollector() as gcp:
        prog.run_wide["fabric"] = fabric_s
        for coll in opts.collectives:
            opts.log(f"{coll}: synthesizing on {fabric.describe()}")
            t = time.perf_counter()
            with keeping_columns(fabric):     # the verifications' step columns, for the same-bits check (_same_bits)
                results[coll] = synthesize_collective(fabric, coll, opts, work, prog, budget)
            gcp.checkpoint()
            results[coll].summary["total_s"] = round(time.perf_counter() - t, 3)
        with prog.stage("plan"):
            plan, curves, ncc = build_plan(fabric, results, topo, opts.nccl_version)
        for coll, curve in ncc.items():
            results[coll].summary["nccl_modelled"] = {
                label: {"time_us": round(curve["times"][PLAN_SIZES.index(nb)], 3),
                        "choice": curve["choices"][PLAN_SIZES.index(nb)]} for label, nb in SUMMARY_SIZES.items()}
        with prog.stage("write"):
            plan.save(work / "plan.json")
            save_topology(topo, work / "topology.json")
        for coll, res in results.items():            # one collective at a time, to time each
            with prog.stage("export", coll):
                export_msccl({coll: res}, plan, work / "msccl", opts.log, only_plan=fabric.num_ranks >= LARGE_RANKS,
                             runtime=opts.msccl_runtime, topo=topo)
            res.summary["stages"] = prog.collective_stages(coll)
            prog.collective_done(coll)
        summary = {"topology": topo.name, "fingerprint": fabric.fingerprint, "ranks": fabric.num_ranks,
                   "fabric": fabric.describe(), "total_s": round(time.perf_counter() - t0, 3),  # so far, for the report
                   "msccl_runtime": opts.msccl_runtime, "options": _options_record(opts),
                   "collectives": {c: r.summary for c, r in results.items()}}
        host = host_assumption_line(topo)          # NCCL's side of a topology without a PCIe tree
        summary.update({"host_assumption": host} if host else {})
        with prog.stage("report"):
            report_marked = write_report(work, topo, fabric, summary, curves, plan, ncc)
        with prog.stage("write"):
            summary["stages"] = prog.run_stages()
            summary["total_s"] = round(time.perf_counter() - t0, 3)
            atomic_write_text(work / "summary.json", dump_json(summary))
        prog.run_done()
    return summary, report_marked
