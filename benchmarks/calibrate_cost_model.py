"""Calibrate the cost model against a real nccl-tests log: ring allreduce on 8 x A100 (dgx-a100).

Usage::

    python benchmarks/calibrate_cost_model.py [--log tests/fixtures/nccl_tests_allreduce_a100x8_single_process.txt]
                                              [--out results/calibration]

What it does:

1. parses the log (:mod:`synth.formats.nccl_tests.reader`) and builds the NCCL-style ring allreduce baseline
   (:func:`synth.baselines.baseline`, 12 rings = NCCL channels) on the ``dgx-a100`` preset;
2. fits the two calibrated constants of :class:`synth.model.cost.CostParams`: the per-step overhead
   from the latency floor (median out-of-place time of sizes <= 64 KiB) and the slice overhead by
   minimising the worst busbw ratio over sizes >= 1 MiB (grid of 0.01 µs), with every other
   parameter at its documented default;
3. evaluates the *default* CostParams (the rounded fit, as shipped) and checks the acceptance
   criteria: |simulated / measured busbw - 1| <= 25 % at every size >= 1 MiB, and simulated time
   within 2x of measured at every smaller size;
4. writes ``ring_allreduce_dgx_a100.{md,csv,png}`` to ``--out``.

Exit status 1 when a criterion fails.
"""

from __future__ import annotations

import argparse
import csv
import io
import statistics
import sys
from dataclasses import asdict, replace
from pathlib import Path

from synth.baselines import baseline
from synth.formats.nccl_tests.consistency import inconsistent_notes
from synth.formats.nccl_tests.runs import load_nccl_tests
from synth.ir.fabric import build_fabric
from synth.ir.schedule import atomic_write_text
from synth.model.bounds import lower_bounds
from synth.model.cost import CostModel, CostParams, busbw_gbps
from topo_probe.machines.presets import get_preset
from topo_probe.pictures import save_png

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "tests" / "fixtures" / "nccl_tests_allreduce_a100x8_single_process.txt"
OUT = ROOT / "results" / "calibration"
BIG = 1 << 20          # busbw criterion from 1 MiB
FLOOR_MAX = 64 << 10   # latency floor: sizes up to 64 KiB
TOL_BUSBW = 0.25
TOL_SMALL = 2.0


def measured(log) -> list[tuple[int, float, float, float | None]]:
    """(size, out-of-place time µs, out-of-place busbw, in-place busbw) per row."""
    return [(r.size, r.out_of_place.time_us, r.out_of_place.busbw_gbps,
             r.in_place.busbw_gbps if r.in_place else None) for r in log.rows]


def fit(fabric, sched, rows) -> tuple[float, float, float]:
    """(step overhead, slice overhead, worst busbw deviation) fitted on ``rows``."""
    floor = statistics.median(t for s, t, _, _ in rows if s <= FLOOR_MAX)
    base = CostModel(fabric, CostParams(step_overhead_us=0.0, slice_overhead_us=0.0))
    t0 = base.schedule_time_us(sched, rows[0][0])
    step = max(0.0, (floor - t0) / sched.num_steps)
    best = None
    for k in range(0, 201):
        p = CostParams(step_overhead_us=step, slice_overhead_us=k / 100)
        dev = worst_deviation(CostModel(fabric, p), sched, rows)
        if best is None or dev < best[2] - 1e-12:
            best = (step, k / 100, dev)
    return best


def worst_deviation(model, sched, rows) -> float:
    return max(abs(model.schedule_busbw_gbps(sched, s) / b - 1) for s, _, b, _ in rows if s >= BIG)


def evaluate(model, sched, rows, bound, params) -> list[dict]:
    n = sched.ranks
    out = []
    for size, t_meas, bb_meas, bb_ip in rows:
        t_sim = model.schedule_time_us(sched, size)
        bb_sim = busbw_gbps("allreduce", n, size, t_sim)
        lb = bound.time_us(size, params)
        out.append({"size_bytes": size, "measured_time_us": t_meas, "measured_busbw_gbps": bb_meas,
                    "measured_busbw_inplace_gbps": bb_ip, "simulated_time_us": round(t_sim, 3),
                    "simulated_busbw_gbps": round(bb_sim, 3),
                    "busbw_ratio": round(bb_sim / bb_meas, 4) if bb_meas else None,
                    "time_ratio": round(t_sim / t_meas, 4),
                    "bound_time_us": round(lb, 3), "bound_busbw_gbps": round(busbw_gbps("allreduce", n, size, lb), 3)})
    return out


def check(table: list[dict]) -> list[str]:
    """Failed criteria, one line each (empty when all pass)."""
    bad = []
    for r in table:
        if r["size_bytes"] >= BIG and abs(r["busbw_ratio"] - 1) > TOL_BUSBW:
            bad.append(f"size {r['size_bytes']}: busbw ratio {r['busbw_ratio']} outside 1 +- {TOL_BUSBW}")
        if r["size_bytes"] < BIG and not 1 / TOL_SMALL <= r["time_ratio"] <= TOL_SMALL:
            bad.append(f"size {r['size_bytes']}: time ratio {r['time_ratio']} outside [1/{TOL_SMALL}, {TOL_SMALL}]")
    return bad


def _human(size: int) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << k:
            return f"{size >> k} {unit}" if size % (1 << k) == 0 else f"{size} B"
    return f"{size} B"


def report_md(table, params, fitted, plain, sched, log_path, command, failures) -> str:
    step, slice_, dev = fitted
    plain, plain16 = plain
    meas16 = next(r["measured_busbw_gbps"] for r in table if r["size_bytes"] == 16 << 20)
    big = [r for r in table if r["size_bytes"] >= BIG]
    worst = max(big, key=lambda r: abs(r["busbw_ratio"] - 1))
    small = [r for r in table if r["size_bytes"] < BIG]
    lines = [
        "# Cost model calibration: ring allreduce, 8 x A100 (dgx-a100 preset)",
        "",
        f"Produced by `{command}`.",
        "",
        f"Measured: `{log_path}` (nccl-tests all_reduce_perf, 8 x A100-SXM4-80GB, one process, out-of-place "
        "columns). Simulated: `synth.baselines.baseline('ring', fabric, 'allreduce')` on "
        f"`build_fabric(get_preset('dgx-a100'))` ({sched.num_steps} steps, {sched.chunks_per_rank} chunks per rank = "
        f"{len(sched.meta.get('rings', []))} rings) timed by `synth.model.cost.CostModel` with the default `CostParams`.",
        "",
        "## Result",
        "",
        f"* busbw, sizes >= 1 MiB: worst ratio {worst['busbw_ratio']:.3f} at {_human(worst['size_bytes'])} "
        f"(criterion: within 25 %); at 4 GiB {table[-1]['simulated_busbw_gbps']:.1f} vs "
        f"{table[-1]['measured_busbw_gbps']:.1f} GB/s measured.",
        f"* small sizes (< 1 MiB): simulated/measured time between {min(r['time_ratio'] for r in small):.2f} and "
        f"{max(r['time_ratio'] for r in small):.2f} (criterion: within 2x); 8 B: "
        f"{table[0]['simulated_time_us']:.1f} us vs {table[0]['measured_time_us']:.1f} us.",
        f"* criteria: {'all pass' if not failures else 'FAILED: ' + '; '.join(failures)}.",
        "",
        "| size | measured busbw (GB/s) | simulated busbw (GB/s) | ratio | measured time (us) | simulated time (us) | bound busbw (GB/s) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in table:
        lines.append(f"| {_human(r['size_bytes'])} | {r['measured_busbw_gbps']:.2f} | {r['simulated_busbw_gbps']:.2f} | "
                     f"{(r['busbw_ratio'] or 0):.3f} | {r['measured_time_us']:g} | {r['simulated_time_us']:.2f} | "
                     f"{r['bound_busbw_gbps']:.2f} |")
    lines += [
        "",
        "ratio = simulated / measured busbw (0.000 where the log prints 0.00; below 1 MiB the log's two "
        "decimals dominate it, compare the times instead). The bound column is "
        "`synth.model.bounds.lower_bounds(...).time_us(size, params)` expressed as busbw: no schedule can beat it "
        "under the same efficiency factors.",
        "",
        "## Parameters",
        "",
        "| parameter | value | source |",
        "|---|---:|---|",
        f"| nvlink_efficiency | {params.nvlink_efficiency:.4g} | NCCL SM80_NVLINK_BW 20 of 25 GB/s per link (src/graph/topo.h) |",
        f"| launch_us | {params.launch_us} | NCCL Ring/LL base latency 6.6 us (src/graph/tuning.cc baseLat) |",
        f"| step_overhead_us | {params.step_overhead_us} | fitted: (floor - launch - 14 x 0.7 us latency) / 14 = {step:.3f} |",
        f"| slice_overhead_us | {params.slice_overhead_us} | fitted: best worst-case busbw ratio >= 1 MiB, {slice_:.2f} (deviation {dev:.3f}) |",
        "| channel latency | 0.7 us | dgx-a100 preset: GPU -> NVSwitch -> GPU, 0.35 us per edge |",
        "",
        "The other efficiencies (PCIe 24/31.5, CPU 0.5, network 12/12.5, Infinity Fabric 48/64) do not enter "
        "this single-host NVLink run.",
        "",
        "## Deviations explained",
        "",
        "* **Plain alpha-beta is not enough.** With `slice_overhead_us=0` (time = launch + S x (overhead + "
        f"latency) + bytes / (0.8 x 300 GB/s)) the worst busbw deviation >= 1 MiB is {plain:.2f}: "
        f"at 16 MiB it predicts {plain16:.0f} GB/s where NCCL reaches {meas16:.0f}; NCCL approaches the "
        "link rate much more slowly than a constant latency implies. The square-root term of "
        "`synth.model.cost` (each step streamed through a two-stage buffer pipeline, optimal slice count) "
        "reproduces the slow approach to 232 GB/s with one extra constant.",
        "* **2 MiB vs 32 MiB.** The log is not smooth: 2 MiB runs at 62 GB/s but 4 MiB only 71 GB/s "
        "(most likely NCCL's tuner changes protocol or channel count there). A smooth model cannot follow both sides, "
        "so it is ~20 % low at 2 MiB and ~20 % high at 16-32 MiB; the fit balances the two.",
        "* **In-place vs out-of-place.** The in-place column differs by up to 20 % (512 MiB, 2 MiB); the "
        "model has one value and is compared with out-of-place.",
        "* **Small sizes.** Below 64 KiB the measured time is flat at ~39 us; the model adds 14 x "
        "(1.6 us overhead + 0.7 us latency) to the 6.6 us launch and matches the floor by construction. "
        "NCCL's protocols (LL, LL128, Simple) are not modelled separately.",
        "* **Reductions** are assumed to run at link speed; at 4 GiB the model is within 1 %, so the "
        "reduction cost is hidden, as expected for NVLink-bound A100 rings.",
        "",
    ]
    return "\n".join(lines)


def write_csv(path: Path, table: list[dict]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(table[0]))
    w.writeheader()
    w.writerows(table)
    atomic_write_text(path, buf.getvalue())


def write_png(path: Path, table: list[dict]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    x = [r["size_bytes"] for r in table]
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot(x, [r["measured_busbw_gbps"] for r in table], "o-", label="measured (nccl-tests, out-of-place)")
    ax.plot(x, [r["measured_busbw_inplace_gbps"] for r in table], ".:", color="gray", label="measured (in-place)")
    ax.plot(x, [r["simulated_busbw_gbps"] for r in table], "s-", label="simulated (CostModel, ring baseline)")
    ax.plot(x, [r["bound_busbw_gbps"] for r in table], "--", label="lower bound (same efficiencies)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title("ring allreduce, 8 x A100 (dgx-a100): measured vs simulated")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_png(fig, path, "benchmarks/calibrate_cost_model.py", dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", default=str(LOG), help="nccl-tests all_reduce_perf log of 8 x A100")
    ap.add_argument("--out", default=str(OUT), help="output folder")
    args = ap.parse_args(argv)
    log = load_nccl_tests(args.log)
    for note in inconsistent_notes(log, args.log):           # a mangled row would move the fit: say which
        print(f"warning: {note}", file=sys.stderr)
    rows = measured(log)
    fabric = build_fabric(get_preset("dgx-a100"))
    sched = baseline("ring", fabric, "allreduce")
    params = CostParams()
    fitted = fit(fabric, sched, rows)
    plain_params = replace(params, slice_overhead_us=0.0, step_overhead_us=fitted[0])
    plain_model = CostModel(fabric, plain_params)
    plain = (worst_deviation(plain_model, sched, rows), plain_model.schedule_busbw_gbps(sched, 16 << 20))
    table = evaluate(CostModel(fabric, params), sched, rows, lower_bounds(fabric, "allreduce"), params)
    failures = check(table)
    out = Path(args.out)
    try:
        log_name = Path(args.log).resolve().relative_to(ROOT)
    except ValueError:
        log_name = Path(args.log)
    command = "python benchmarks/calibrate_cost_model.py" + ("" if Path(args.log).resolve() == LOG else f" --log {args.log}")
    atomic_write_text(out / "ring_allreduce_dgx_a100.md",
                      report_md(table, params, fitted, plain, sched, log_name, command, failures))
    write_csv(out / "ring_allreduce_dgx_a100.csv", table)
    write_png(out / "ring_allreduce_dgx_a100.png", table)
    print(f"fitted step_overhead_us={fitted[0]:.3f} slice_overhead_us={fitted[1]:.2f} (worst deviation {fitted[2]:.3f}); "
          f"defaults {asdict(params)['step_overhead_us']} / {params.slice_overhead_us}; plain alpha-beta worst {plain[0]:.3f}")
    for f in failures:
        print(f"FAIL {f}", file=sys.stderr)
    print(f"wrote {out}/ring_allreduce_dgx_a100.{{md,csv,png}}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
