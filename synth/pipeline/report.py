"""report.md and busbw.png for a ``synthesize`` run: the plan against NCCL as it runs (modelled,
and measured where a real log of the machine exists), the ring and tree schedules and the bound."""

from __future__ import annotations

from pathlib import Path

from synth.formats.nccl_tests.conventions import BUSBW_FACTOR
from synth.formats.nccl_tests.sizes import size_label
from synth.ir.fabric import Fabric
from synth.ir.schedule import atomic_write_text
from synth.plan.planner import PLAN_SIZES
from synth.pipeline.wall_clock import unmarked, wall_number, wall_stages
from synth.plan.size_plan import Plan
from topo_probe.pictures import save_png
from topo_probe.topology.model import Topology


#: inches of one panel of busbw.png (width, height)
PANEL_IN = (4.2, 3.4)
#: inches around and between busbw.png's panels: left (tick labels and the y label), right,
#: bottom (tick labels and the x label), top (the figure's title), gap between columns (the
#: next panel's y label and tick labels), gap between rows (x label, then the next title)
MARGINS_IN = (0.75, 0.15, 0.55, 0.65, 0.8, 0.85)
#: how the comparison treats a cluster's network (see synth.plan.versus_nccl.nccl_curve)
_NETWORK_NOTE = ("; the network with InfiniBand's constants whatever its transport, as the schedules' cost model "
                 "has no transport-specific costs")


def busbw_gbps(collective: str, n: int, nbytes: int, time_us: float) -> float:
    """nccl-tests bus bandwidth in GB/s (1e9 B/s) for ``nbytes`` moved in ``time_us``."""
    return nbytes / (time_us * 1e3) * BUSBW_FACTOR[collective](n) if time_us > 0 else 0.0


def _plan_curve(curves: dict[str, list[float]]) -> list[float]:
    return [min(times[k] for times in curves.values()) for k in range(len(PLAN_SIZES))]


def _baseline_curve(curves: dict[str, list[float]], coll: str, name: str) -> list[float] | None:
    return curves.get(f"{coll}-{name}")


def _measured_lines(topo: Topology, colls: list[str], n: int) -> list[str]:
    """Measured NCCL beside the model, for machines with a real log (by preset name)."""
    from synth.model.nccl.measured import measured
    out = []
    for coll in colls:
        hit = measured(topo.name, coll)
        if hit:
            size, busbw, note = hit
            out.append(f"- measured NCCL {coll} at {size_label(size)}: {busbw:.1f} GB/s busbw ({note})")
    return (["", "Measured NCCL on this machine (real nccl-tests logs):", ""] + out) if out else []


def write_report(folder: Path, topo: Topology, fabric: Fabric, summary: dict,
                 curves: dict[str, dict[str, list[float]]], plan: Plan, nccl: dict | None = None) -> str:
    """Write ``report.md`` and ``busbw.png`` (one panel per collective) into ``folder``;
    ``nccl`` holds NCCL's modelled curve per collective (:func:`synth.plan.versus_nccl.nccl_curve`).
    Returns the report's text with its wall-clock times marked (:mod:`synth.pipeline.wall_clock`)."""
    from matplotlib.figure import Figure  # not pyplot: no figure manager or GUI backend to import

    from synth.model.physics import cost_params_for
    from synth.solve.bounds_cache import fabric_bounds

    nccl = nccl or {}

    n = fabric.num_ranks
    colls = list(curves)
    lines = _header_lines(topo, fabric, summary)
    lines[4:4] = _host_assumption_lines(summary)
    cols = max(1, min(4, len(colls)))
    rows = (len(colls) + cols - 1) // cols
    fig = Figure(figsize=(PANEL_IN[0] * cols, PANEL_IN[1] * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    params = cost_params_for(fabric)        # one NCCL machine model for every size and collective
    for idx, coll in enumerate(colls):
        c = curves[coll]
        root = summary["collectives"][coll].get("root")
        bound = fabric_bounds(fabric, coll, root)
        series = {"ours": _plan_curve(c), "candidates": c, "nccl": nccl.get(coll),
                  "ring": _baseline_curve(c, coll, "ring"),
                  "tree": _baseline_curve(c, coll, "tree"),
                  "bound": [bound.time_us(nb, params) for nb in PLAN_SIZES]}
        lines += _size_rows(coll, n, root, plan, series)
        _plot_panel(axes[idx // cols][idx % cols], coll, n, series)
    for j in range(len(colls), rows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.suptitle(f"{topo.name}: simulated busbw, synthesized schedules vs NCCL (modelled)")
    _fixed_margins(fig, rows, cols)
    save_png(fig, folder / "busbw.png", "synthesize", dpi=110)
    lines += _measured_lines(topo, colls, n)
    lines += ["", "![busbw](busbw.png)", "", "## Per collective", ""]
    lines += _per_collective_lines(summary, colls) + _plan_lines(plan) + _stage_lines(summary, colls)
    marked = "\n".join(lines) + "\n"
    atomic_write_text(folder / "report.md", unmarked(marked))
    return marked


def _fixed_margins(fig, rows: int, cols: int) -> None:
    """Margins and gaps of the panel grid in inches (:data:`MARGINS_IN`), the same for every
    figure: the panels' labels are the same texts at the same font sizes, so a tight layout
    (which lays every text out once more only to measure it: about 0.5 s CPU for 8 panels)
    would find nearly the same."""
    w, h = PANEL_IN[0] * cols, PANEL_IN[1] * rows
    left, right, bottom, top, gap_w, gap_h = MARGINS_IN
    ax_w = (w - left - right - gap_w * (cols - 1)) / cols
    ax_h = (h - bottom - top - gap_h * (rows - 1)) / rows
    fig.subplots_adjust(left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h,
                        wspace=gap_w / ax_w, hspace=gap_h / ax_h)


def _header_lines(topo: Topology, fabric: Fabric, summary: dict) -> list[str]:
    """The title, the fabric, how to read the table, and the table's head."""
    from synth.model.nccl import NcclMachine
    from synth.model.nccl.confidence import confidence_line
    from synth.model.nccl.tuning import NCCL_VERSION
    from synth.plan.decision import EXECUTOR_COSTS
    native = EXECUTOR_COSTS["native"]
    version = tuple(summary.get("options", {}).get("nccl_version") or NCCL_VERSION)       # the rules followed
    nccl = ".".join(map(str, version))
    sure = confidence_line(NcclMachine.from_topology(topo), version=version) if topo.num_gpus > 1 else ""
    return [f"# Synthesis report: {topo.name}", "",
            f"{fabric.describe()}; fingerprint `{fabric.fingerprint}`; "
            f"total {wall_number(format(summary['total_s'], '.1f'))} s.", "",
            "**Plan vs NCCL (modelled).** NCCL is what its tuner would pick at each size, timed by the NCCL model "
            "validated on real nccl-tests logs (`results/model_validation/report.md`; one process per GPU, NCCL "
            f"{nccl}'s rules and defaults{_NETWORK_NOTE if topo.nodes_of_kind('net_switch') else ''}). "
            "Where no schedule, its executor's "
            "measured fixed cost included, is predicted at least 5 % faster, the plan entry is `nccl`: NCCL is "
            "faster there and the drop-in calls it (one decision, made here; the Communicator runs what the plan "
            "says: *Plan* below). Schedules are timed by the same constants (`synth/model/physics.py`): "
            "the NCCL model's link rates, and NCCL's ring/Simple launch and hop latencies along the schedule's longest "
            "chain of hops (our steps move as Simple does), or where the plan says (LL), up to 1 MiB, ring/LL's with "
            "twice the bytes (our LL path); busbw in GB/s with nccl-tests factors; the "
            "bound is the links' physics alone (path latency plus the cut at those rates), so it bounds both sides.",
            "", *([sure + ".", ""] if sure else []),
            "*plan µs* is what the drop-in runs: where the plan picks a schedule, its modelled time plus the "
            "measured fixed cost of the executor that runs it, as the plan's decision counted it (*Plan* below names "
            f"the executor, its records and µs; native: {native.call_us:g} µs + {native.record_us:g} µs per record "
            "of the busiest rank); where it picks `nccl`, NCCL's time. *plan vs NCCL* (NCCL µs / plan µs) and "
            "*plan busbw* are of that time.", "",
            "| collective | size | plan picks | plan µs | NCCL µs (modelled) | NCCL picks | plan vs NCCL | ring µs | "
            "bound µs | plan busbw | NCCL busbw |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]


def _size_rows(coll: str, n: int, root, plan: Plan, series: dict) -> list[str]:
    """The table's rows of ``coll`` at 1 KiB, 1 MiB and 1 GiB (``series``: times per PLAN_SIZES)."""
    ours, nc, ring, bound_t = series["ours"], series["nccl"], series["ring"], series["bound"]
    out = []
    for nb in (1 << 10, 1 << 20, 1 << 30):
        label = size_label(nb)
        k = PLAN_SIZES.index(nb)
        entry = plan.select(coll, nb, root)
        pick = Path(entry.schedule).name.split(".json")[0] if entry else "-"
        pick += " (LL)" if entry and entry.protocol == "ll" and pick != "nccl" else ""
        fmt = lambda v: f"{v[k]:.1f}" if v else "-"  # noqa: E731
        # what the drop-in runs: NCCL, or the picked schedule's curve (the fastest candidate may lose
        # the decision on its executor cost, so the best of all curves is not necessarily the plan's)
        # plus the fixed cost of the executor that runs it, as the decision counted it
        picked = series.get("candidates", {}).get(pick)
        plan_t = nc["times"][k] if nc and pick == "nccl" else (picked or ours)[k] + _executor_us(entry)
        vs = f"{nc['times'][k] / plan_t:.2f}x" if nc else "-"
        out.append(f"| {coll} | {label} | {pick} | {plan_t:.1f} | {fmt(nc['times']) if nc else '-'} | "
                   f"{nc['choices'][k] if nc else '-'} | {vs} | {fmt(ring)} | {bound_t[k]:.1f} | "
                   f"{busbw_gbps(coll, n, nb, plan_t):.1f} | "
                   f"{busbw_gbps(coll, n, nb, nc['times'][k]) if nc else 0:.1f} |")
    return out


def _executor_us(entry) -> float:
    """The fixed cost (µs) of the executor that runs ``entry``'s schedule, as its decision counted it; 0 for none."""
    from synth.plan.decision import counted_executor_us
    return 0.0 if entry is None else counted_executor_us(entry.decision, f"plan entry {entry.collective} from "
                                                                          f"{entry.min_bytes} bytes")


def _plot_panel(ax, coll: str, n: int, series: dict) -> None:
    """busbw against size of our best schedule, NCCL, ring, tree and the bound."""
    nc = series["nccl"]
    for label, times, style in (("best schedule (ours)", series["ours"], "-"),
                                ("NCCL (modelled)", nc["times"] if nc else None, "-"),
                                ("ring", series["ring"], "--"), ("tree", series["tree"], ":"),
                                ("lower bound", series["bound"], "-.")):
        if times:
            ax.plot(PLAN_SIZES, [busbw_gbps(coll, n, nb, t) for nb, t in zip(PLAN_SIZES, times)],
                    style, label=label)
    ax.set_xscale("log", base=2)
    ax.set_title(coll)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)


def _per_collective_lines(summary: dict, colls: list[str]) -> list[str]:
    """One line per collective (Pareto points, bandwidth-optimal result, bounds), then what was
    skipped at this scale."""
    lines = []
    for coll in colls:
        s = summary["collectives"][coll]
        pts = ", ".join(f"(S{p['steps']},R{p['rounds']},C{p['chunks']})" for p in s["pareto"]) or s["pareto_note"] or "-"
        bw = s["bandwidth_optimal"]
        phased = f" (phased bound: {bw['ratio_to_phased_bound']:.4f})" if bw and bw.get("ratio_to_phased_bound") else ""
        bw_txt = (f"{bw.get('method', '?')}, ratio to bound {bw.get('ratio_to_bound', '?')}{phased}, "
                  f"{wall_number(str(bw['solve_s']))} s"
                  if bw
                  else s["bandwidth_optimal_note"])
        lines.append(f"- **{coll}**: Pareto {pts} in {wall_number(str(s['pareto_solve_s']))} s; "
                     f"bandwidth-optimal: {bw_txt}; "
                     f"bounds: {s['bounds']['latency_steps']} steps, "
                     f"{s['bounds']['bandwidth_rounds_per_block']} rounds per block.{_same_bits_text(s)}")
    notes = [n for coll in colls for n in summary["collectives"][coll].get("notes", [])]
    if notes:
        lines += ["", "## Skipped at this scale", ""] + [f"- {n}" for n in notes]
    return lines


def _same_bits_text(record: dict) -> str:
    """A combining collective's ``same_bits`` (summary.json) in words: whether every rank of each saved schedule
    ends with the same bits (float sums in one order, :mod:`synth.ir.sum_order`), naming those that do not."""
    same = record.get("same_bits")
    if not same:
        return ""
    odd = [name for name, ok in same.items() if not ok]
    if not odd:
        return f" Same bits on every rank: all {len(same)} schedules."
    return (f" Same bits on every rank: {len(same) - len(odd)} of {len(same)} schedules; "
            f"not {', '.join(f'`{n}`' for n in odd)} (ranks may differ in the last bits of a float sum).")


def _stage_lines(summary: dict, colls: list[str]) -> list[str]:
    """Seconds per stage of every collective (``summary.json``'s ``stages``), largest first."""
    from synth.pipeline.progress import format_stages
    lines = [f"- {coll}: {wall_stages(format_stages(summary['collectives'][coll]['stages']))}"
             for coll in colls if summary["collectives"][coll].get("stages")]
    return ["", "## Time per stage", ""] + lines if lines else []


def _plan_lines(plan: Plan) -> list[str]:
    """The plan, a line per range: what runs and what its decision counted (synth.plan.decision)."""
    lines = ["", "## Plan", "", "What runs at each size, as `plan.json` says and the Communicator runs it; *counted*: "
             "the executor whose measured fixed cost the decision added to our schedule's modelled time (µs at the "
             "range's first size), and NCCL's modelled time against it. Where an `nccl` range cannot run NCCL "
             "(NumPy arrays, MPI, no NCCL, ranks sharing a GPU, gather/scatter/alltoall, float8) its fallback runs.",
             "", "| collective | from | to | schedule | counted |", "|---|---|---|---|---|"]
    for e in plan.entries:
        hi = size_label(e.max_bytes, exact=True) if e.max_bytes is not None else "∞"
        runs = f"`{e.schedule}`" + (f" (fallback `{e.fallback}`)" if e.fallback else "") + (
            " under LL" if e.protocol == "ll" else "")
        lines.append(f"| {e.collective} | {size_label(e.min_bytes, exact=True)} | {hi} | {runs} | {_counted(e.decision)} |")
    return lines


def _counted(d: dict | None) -> str:
    """One plan range's decision in words."""
    if not d:
        return "-"
    ours = f"{d['executor']} executor {d['executor_us']:g} µs ({d['records']} records) + schedule {d['schedule_us']:g} µs"
    if d.get("nccl_us") is None:
        return ours
    return f"{ours} vs NCCL {d['nccl_us']:g} µs: NCCL / ours {d['margin']:.2f}"


def _host_assumption_lines(summary: dict) -> list[str]:
    """The host assumed for NCCL's side of a topology without a PCIe tree (summary.json's
    ``host_assumption``), as a paragraph after the fabric line; none when the topology has one."""
    host = summary.get("host_assumption")
    return [f"**Host assumption** {host}.", ""] if host else []
