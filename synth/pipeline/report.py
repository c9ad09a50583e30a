"""report.md and busbw.png for a ``synthesize`` run: ours (the plan) against ring, tree and the bound."""

from __future__ import annotations

from pathlib import Path

from synth.ir.collectives import BUSBW_FACTOR
from synth.ir.fabric import Fabric
from synth.ir.schedule import atomic_write_text
from synth.plan.planner import PLAN_SIZES
from synth.plan.size_plan import Plan
from topo_probe.topology.model import Topology


def busbw_gbps(collective: str, n: int, nbytes: int, time_us: float) -> float:
    """nccl-tests bus bandwidth in GB/s (1e9 B/s) for ``nbytes`` moved in ``time_us``."""
    return nbytes / (time_us * 1e3) * BUSBW_FACTOR[collective](n) if time_us > 0 else 0.0


def _fmt_bytes(n: int) -> str:
    for unit, k in (("GB", 30), ("MB", 20), ("KB", 10)):
        if n >= 1 << k:
            return f"{n >> k} {unit}"
    return f"{n} B"


def _plan_curve(curves: dict[str, list[float]]) -> list[float]:
    return [min(times[k] for times in curves.values()) for k in range(len(PLAN_SIZES))]


def _baseline_curve(curves: dict[str, list[float]], coll: str, name: str) -> list[float] | None:
    return curves.get(f"{coll}-{name}")


def write_report(folder: Path, topo: Topology, fabric: Fabric, summary: dict,
                 curves: dict[str, dict[str, list[float]]], plan: Plan) -> None:
    """Write ``report.md`` and ``busbw.png`` (one panel per collective) into ``folder``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from synth.model.bounds import lower_bounds
    from synth.model.cost import CostParams

    n = fabric.num_ranks
    colls = list(curves)
    lines = [f"# Synthesis report: {topo.name}", "",
             f"{fabric.describe()}; fingerprint `{fabric.fingerprint}`; total {summary['total_s']:.1f} s.", "",
             "Simulated times (µs) from the calibrated cost model; busbw in GB/s with nccl-tests factors; the bound is "
             "the cut lower bound at the same achievable link bandwidths (NVLink 20 of 25 GB/s, ...).", "",
             "| collective | size | plan picks | plan µs | ring µs | tree µs | bound µs | plan / ring speed-up | plan busbw | bound busbw |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    cols = max(1, min(4, len(colls)))
    rows = (len(colls) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for idx, coll in enumerate(colls):
        c = curves[coll]
        ours = _plan_curve(c)
        root = summary["collectives"][coll].get("root")
        bound = lower_bounds(fabric, coll, root=root)
        bound_t = [bound.time_us(nb, CostParams()) for nb in PLAN_SIZES]
        ring, tree = _baseline_curve(c, coll, "ring"), _baseline_curve(c, coll, "tree")
        for label, nb in (("1 KB", 1 << 10), ("1 MB", 1 << 20), ("1 GB", 1 << 30)):
            k = PLAN_SIZES.index(nb)
            entry = plan.select(coll, nb, root)
            pick = Path(entry.schedule).name.split(".json")[0] if entry else "-"
            fmt = lambda v: f"{v[k]:.1f}" if v else "-"
            speed = f"{ring[k] / ours[k]:.2f}x" if ring else "-"
            lines.append(f"| {coll} | {label} | {pick} | {ours[k]:.1f} | {fmt(ring)} | {fmt(tree)} | "
                         f"{bound_t[k]:.1f} | {speed} | {busbw_gbps(coll, n, nb, ours[k]):.1f} | "
                         f"{busbw_gbps(coll, n, nb, bound_t[k]):.1f} |")
        ax = axes[idx // cols][idx % cols]
        for label, times, style in (("plan (ours)", ours, "-"), ("ring", ring, "--"), ("tree", tree, ":"),
                                    ("lower bound", bound_t, "-.")):
            if times:
                ax.plot(PLAN_SIZES, [busbw_gbps(coll, n, nb, t) for nb, t in zip(PLAN_SIZES, times)],
                        style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(coll)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    for j in range(len(colls), rows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.suptitle(f"{topo.name}: simulated busbw, synthesized plan vs NCCL-style baselines")
    fig.tight_layout()
    fig.savefig(folder / "busbw.png", dpi=110)
    plt.close(fig)
    lines += ["", "![busbw](busbw.png)", "", "## Per collective", ""]
    for coll in colls:
        s = summary["collectives"][coll]
        pts = ", ".join(f"(S{p['steps']},R{p['rounds']},C{p['chunks']})" for p in s["pareto"]) or s["pareto_note"] or "-"
        bw = s["bandwidth_optimal"]
        phased = f" (phased bound: {bw['ratio_to_phased_bound']:.4f})" if bw and bw.get("ratio_to_phased_bound") else ""
        bw_txt = (f"{bw.get('method', '?')}, ratio to bound {bw.get('ratio_to_bound', '?')}{phased}, {bw['solve_s']} s"
                  if bw
                  else s["bandwidth_optimal_note"])
        lines.append(f"- **{coll}**: Pareto {pts} in {s['pareto_solve_s']} s; bandwidth-optimal: {bw_txt}; "
                     f"bounds: {s['bounds']['latency_steps']} steps, "
                     f"{s['bounds']['bandwidth_rounds_per_block']} rounds per block.")
    notes = [n for coll in colls for n in summary["collectives"][coll].get("notes", [])]
    if notes:
        lines += ["", "## Skipped at this scale", ""] + [f"- {n}" for n in notes]
    lines += ["", "## Plan", "", "| collective | from | to | schedule |", "|---|---|---|---|"]
    for e in plan.entries:
        hi = _fmt_bytes(e.max_bytes) if e.max_bytes is not None else "∞"
        lines.append(f"| {e.collective} | {_fmt_bytes(e.min_bytes)} | {hi} | `{e.schedule}` |")
    atomic_write_text(folder / "report.md", "\n".join(lines) + "\n")
