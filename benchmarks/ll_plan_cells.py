"""Which <= 1 MiB plan cells our schedules take from NCCL once the native executor can run LL.

    python benchmarks/ll_plan_cells.py --out results/ll_plan          # report.md, cells.json

For each single-host preset of README's plan-vs-NCCL table it reads the committed candidate
schedules of ``results/<preset>/`` (names from ``summary.json``; the topology's fingerprint must
match the preset's) and lets the one decision of :mod:`synth.plan.decision` choose among them
twice: with every step under Simple (the plans before LL) and as ``synthesize`` now plans, with LL
where faster (:mod:`synth.plan.protocol`, what ``synthesize`` now does).  A cell is a
(collective, plan size) with size <= :data:`synth.model.physics.LL_MAX_BYTES`; per cell it
reports what runs before and after, our modelled µs (schedule under its protocol plus the native
executor's measured fixed cost) against NCCL's modelled µs, and the lower bound
(:class:`synth.model.bounds.Bounds` with the machine's link constants) beside the LL schedule's
time: a cell below the bound fails the run (exit 1).  Nothing under ``results/<preset>/`` is
rewritten.  About a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from synth.formats.schedule_file import load_schedule  # noqa: E402
from synth.ir.fabric import build_fabric  # noqa: E402
from synth.ir.schedule import atomic_write_text  # noqa: E402
from synth.model.bounds import lower_bounds  # noqa: E402
from synth.model.cost import CostModel  # noqa: E402
from synth.model.physics import LL_MAX_BYTES, cost_params_for  # noqa: E402
from synth.pipeline.synthesize import CollectiveResult, build_plan  # noqa: E402
from synth.plan.decision import EXECUTOR_COSTS, busiest_rank_records, decide_ranges  # noqa: E402
from synth.plan.planner import PLAN_SIZES, evaluate  # noqa: E402
from synth.plan.versus_nccl import NCCL  # noqa: E402
from topo_probe.machines.presets import get_preset  # noqa: E402

#: the single-host machines of README's "Plan vs NCCL as it runs" table
PRESETS = ("dgx1-v100", "dgx-a100", "dgx-h100", "mi300x", "pcie-8gpu-2socket")
SIZES = [n for n in PLAN_SIZES if n <= LL_MAX_BYTES]


def committed_results(preset: str, results: Path):
    """``(topology, fabric, {collective: CollectiveResult})`` of the committed candidates."""
    folder = results / preset
    summary = json.loads((folder / "summary.json").read_text())
    topo = get_preset(preset)
    fabric = build_fabric(topo)
    if fabric.fingerprint != summary["fingerprint"]:
        raise SystemExit(f"{folder}/summary.json: fingerprint {summary['fingerprint']} is not preset {preset}'s "
                         f"{fabric.fingerprint}")
    out = {}
    for coll, rec in summary["collectives"].items():
        res = CollectiveResult(summary=dict(rec))
        for name in rec["simulated_us"]:
            file = next(f for f in (f"schedules/{name}.json", f"schedules/{name}.json.gz") if (folder / f).is_file())
            res.schedules[name], res.files[name] = load_schedule(folder / file), file
        out[coll] = res
    return topo, fabric, out


def simple_only(schedules: dict, cost: CostModel, nccl_times: list[float]) -> dict[int, str]:
    """Plan size -> what the one decision runs with every step under Simple (a schedule name or ``nccl``)."""
    records = {name: busiest_rank_records(s) for name, s in schedules.items()}
    ranges = decide_ranges(PLAN_SIZES, evaluate(schedules, cost.schedule_time_us), nccl_times, records, "native")
    return {n: runs for runs, _, lo, hi in ranges for n in PLAN_SIZES if lo <= n and (hi is None or n < hi)}


def cells(preset: str, results: Path) -> list[dict]:
    """One record per (collective, size <= LL_MAX_BYTES) of ``preset``."""
    topo, fabric, res = committed_results(preset, results)
    plan, _, ncc = build_plan(fabric, res, topo)
    cost, params, fixed = CostModel(fabric), cost_params_for(fabric), EXECUTOR_COSTS["native"]
    rows = []
    for coll, r in res.items():
        bound = lower_bounds(fabric, coll, r.summary.get("root"))
        before = simple_only(r.schedules, cost, ncc[coll]["times"])
        for n in SIZES:
            root = r.summary.get("root")
            after = plan.select(coll, n, root)
            ours = after.fallback if after.schedule == NCCL else after.schedule
            name = next(nm for nm, f in r.files.items() if f == ours)
            s = r.schedules[name]
            ll_us = cost.schedule_time_us(s, n, "ll")
            sched_us = ll_us if after.protocol == "ll" else cost.schedule_time_us(s, n)
            rows.append({"preset": preset, "collective": coll, "bytes": n, "schedule": name,
                         "before": "nccl" if before[n] == NCCL else "ours/simple",
                         "after": "nccl" if after.schedule == NCCL else f"ours/{after.protocol}",
                         "protocol": after.protocol, "ours_us": round(sched_us + fixed.fixed_us(
                             busiest_rank_records(s)), 3), "schedule_us": round(sched_us, 3),
                         "ll_us": round(ll_us, 3), "nccl_us": round(ncc[coll]["times"][PLAN_SIZES.index(n)], 3),
                         "nccl_choice": ncc[coll]["choices"][PLAN_SIZES.index(n)],
                         "bound_us": round(bound.time_us(n, params), 3)})
    return rows


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB" if n >= 1 << 10 else f"{n} B"


def _runs_of(rows: list[dict]) -> str:
    """Consecutive sizes of one collective as ``8 B-16 KiB 1.22-1.54x`` pieces."""
    parts, run = [], []
    for r in rows + [None]:
        if run and (r is None or r["bytes"] != 2 * run[-1]["bytes"]):
            x = [q["nccl_us"] / q["ours_us"] for q in run]
            size = _size(run[0]["bytes"]) + ("" if len(run) == 1 else f"-{_size(run[-1]['bytes'])}")
            parts.append(f"{size} {min(x):.2f}" + ("" if len(run) == 1 else f"-{max(x):.2f}") + "x")
            run = []
        if r is not None:
            run.append(r)
    return ", ".join(parts)


def _by_collective(rows: list[dict]) -> str:
    colls = dict.fromkeys(r["collective"] for r in rows)
    return "; ".join(f"{c} {_runs_of([r for r in rows if r['collective'] == c])}" for c in colls) or "none"


def _at(rows: list[dict], n: int) -> str:
    """README's column for size ``n``: what our schedules run (``LL``: under LL; ``new``: NCCL's
    before LL), with NCCL / ours (README's measure: the schedule's modelled time plus the native
    executor's fixed cost, what the drop-in runs), and what stays NCCL."""
    here = [r for r in rows if r["bytes"] == n]
    ours = [f"{r['collective']} {r['nccl_us'] / r['ours_us']:.2f}x" + (
        (" (new, LL)" if r["before"] == "nccl" else " (LL)") if r["protocol"] == "ll" else "")
        for r in here if r["after"] != "nccl"]
    nccl = [r["collective"] for r in here if r["after"] == "nccl"]
    return "; ".join(ours + ([f"NCCL: {'/'.join(nccl)}"] if nccl else []))


def report(rows: list[dict], command: str) -> str:
    won = [r for r in rows if r["before"] == "nccl" and r["after"] == "ours/ll"]
    kept = [r for r in rows if r["after"] == "nccl"]
    below = [r for r in rows if r["ll_us"] < r["bound_us"] - 1e-9]
    presets = list(dict.fromkeys(r["preset"] for r in rows))
    lines = ["# Plan cells <= 1 MiB that LL takes from NCCL (modelled)", "", f"    {command}", "",
             "Per single-host preset, the one decision over the committed candidate schedules with every step "
             "under Simple (before), and with LL where faster (after, as synthesize now plans: after the first "
             "step NCCL's ring/LL hop latencies scaled by the architecture's fitted ratio, Simple's launch and "
             "first hop, twice the bytes on the wire). *ours*: the "
             "schedule under its protocol plus the native executor's measured fixed cost (the Simple path's); "
             "*NCCL*: NCCL's modelled choice; x: NCCL / ours; *bound*: the lower bound with the machine's link "
             "constants, which every LL time must meet.", "",
             f"**{len(won)} cells move from NCCL to our schedules under LL; {len(kept)} stay with NCCL; "
             f"{len(below)} LL times below the bound (of {len(rows)} cells, sizes 8 B - 1 MiB).**", "",
             "| preset | taken from NCCL under LL | still NCCL |", "|---|---|---|"]
    for p in presets:
        mine = [r for r in rows if r["preset"] == p]
        lines.append(f"| `{p}` | {_by_collective([r for r in won if r['preset'] == p])} | "
                     f"{_by_collective([r for r in kept if r['preset'] == p])} |")
    lines += ["", "At README's two small columns (1 KB, 1 MB), what the new plans run; x here is README's measure, "
              "NCCL / ours as above (the schedule plus the executor's fixed cost, what the drop-in runs):", "",
              "| preset | 1 KiB | 1 MiB |", "|---|---|---|"]
    lines += [f"| `{p}` | {_at([r for r in rows if r['preset'] == p], 1 << 10)} | "
              f"{_at([r for r in rows if r['preset'] == p], 1 << 20)} |" for p in presets]
    lines += ["", "## Every cell", "", "| preset | collective | size | before | after | schedule | ours µs | LL µs "
              "| NCCL µs (choice) | bound µs |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['preset']} | {r['collective']} | {_size(r['bytes'])} | {r['before']} | {r['after']} | "
              f"{r['schedule']} | {r['ours_us']:g} | {r['ll_us']:g} | {r['nccl_us']:g} ({r['nccl_choice']}) | "
              f"{r['bound_us']:g} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "ll_plan")
    ap.add_argument("--results", type=Path, default=ROOT / "results", help="folder of the committed results")
    ap.add_argument("--presets", nargs="*", default=list(PRESETS))
    args = ap.parse_args(argv)
    rows = [row for p in args.presets for row in cells(p, args.results)]
    args.out.mkdir(parents=True, exist_ok=True)
    cmd = "python benchmarks/ll_plan_cells.py --out results/ll_plan" + (
        f" --presets {' '.join(args.presets)}" if list(args.presets) != list(PRESETS) else "")
    text = report(rows, cmd)
    atomic_write_text(args.out / "report.md", text)
    atomic_write_text(args.out / "cells.json", json.dumps(rows, indent=1))
    print(text.split("## Every cell")[0])
    return 1 if any(r["ll_us"] < r["bound_us"] - 1e-9 for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
