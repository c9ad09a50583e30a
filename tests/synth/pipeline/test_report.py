"""Every committed synthesis report (results/<preset>/report.md) agrees with itself and with its
plan: the pick is the plan's entry at that size, a row whose pick is `nccl` shows NCCL's time as
the plan's, and the ratio, the busbw and the times match one another."""

import json
import re
from pathlib import Path

import pytest
from _paths import ROOT

from synth.formats.nccl_tests.conventions import BUSBW_FACTOR
from synth.ir.collectives import canonical

REPORTS = sorted(p for p in (ROOT / "results").glob("*/report.md") if (p.parent / "plan.json").exists())
#: the report's size labels (binary units, synth.formats.nccl_tests.sizes.size_label)
SIZES = {"1 KiB": 1 << 10, "1 MiB": 1 << 20, "1 GiB": 1 << 30}
ROW = re.compile(r"^\| (\w+) \| (1 [KMG]iB) \| ([^|]+) \| ([\d.]+) \| ([\d.]+|-) \| [^|]+ \| ([\d.]+x|-) \| ([\d.]+|-) \| "
                 r"([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$")


def _rows(report: Path):
    return [m.groups() for m in map(ROW.match, report.read_text().splitlines()) if m]


def _pick(plan: dict, coll: str, nbytes: int, ranks: int) -> str:
    root = 0 if coll in ("broadcast", "reduce", "gather", "scatter") else None
    for e in plan["entries"]:
        if e["collective"] != coll or (e["root"] is not None and e["root"] != root):
            continue
        if e["min_bytes"] <= nbytes and (e["max_bytes"] is None or nbytes < e["max_bytes"]):
            name = Path(e["schedule"]).name.split(".json")[0]
            return f"{name} (LL)" if e.get("protocol") == "ll" and name != "nccl" else name
    return "-"


def test_there_are_reports():
    assert len(REPORTS) >= 5


@pytest.mark.parametrize("report", REPORTS, ids=lambda p: p.parent.name)
def test_report_rows_agree_with_the_plan_and_each_other(report):
    plan = json.loads((report.parent / "plan.json").read_text())
    ranks = json.loads((report.parent / "summary.json").read_text())["ranks"]
    rows = _rows(report)
    assert len(rows) == 3 * 8, f"{report}: {len(rows)} table rows"
    for coll, size, pick, plan_us, nccl_us, ratio, ring_us, bound_us, plan_bw, nccl_bw in rows:
        nb, pick = SIZES[size], pick.strip()
        where = f"{report.parent.name} {coll} {size}"
        assert pick == _pick(plan, coll, nb, ranks), f"{where}: the report's pick is not the plan's"
        # the lower bound bounds both sides: our plan, NCCL and the ring (all printed to 0.05 µs)
        for who, t in (("plan", plan_us), ("NCCL", nccl_us), ("ring", ring_us)):
            assert t == "-" or float(bound_us) <= float(t) + 0.1, f"{where}: {who} {t} µs below the bound {bound_us}"
        if nccl_us == "-":
            continue
        p, q = float(plan_us), float(nccl_us)
        if pick == "nccl":
            assert p == q, f"{where}: the plan runs NCCL but shows {p} µs against NCCL's {q}"
        # times are printed to 0.05 µs, ratios to 0.005, busbw to 0.05 GB/s: compare as intervals
        lo, hi = (q - 0.05) / (p + 0.05) - 0.005, (q + 0.05) / max(p - 0.05, 1e-9) + 0.005
        assert lo <= float(ratio[:-1]) <= hi, f"{where}: ratio {ratio} but {q} / {p}"
        factor = float(BUSBW_FACTOR[canonical(coll)](ranks))
        for t, bw in ((p, plan_bw), (q, nccl_bw)):
            fast, slow = (factor * nb / ((t + d) * 1e-6) / 1e9 for d in (-0.05, 0.05))
            assert slow - 0.05 <= float(bw) <= fast + 0.05, f"{where}: busbw {bw} for {t} µs"


def test_the_report_builds_the_nccl_machine_model_once_not_per_size(tmp_path, monkeypatch):
    """The bound curve of every collective and size uses one set of cost parameters: the NCCL
    machine model behind them is built once per report, not once per plan size (240 times for
    dgx-h100's 8 collectives before)."""
    from synth.model import physics
    from synth.pipeline.synthesize import SynthesisOptions, run
    from topo_probe.load import load_topology
    calls = []
    real = physics.cost_params_for
    monkeypatch.setattr(physics, "cost_params_for", lambda *a, **k: calls.append(a) or real(*a, **k))
    opts = SynthesisOptions(collectives=("allgather", "broadcast"), time_limit_s=5, max_sat_ranks=2)
    run(load_topology("ring:3"), tmp_path / "out", opts)
    assert (tmp_path / "out" / "report.md").is_file()
    assert len(calls) == 1, f"cost_params_for called {len(calls)} times by the report"


def test_busbw_png_panels_and_title_fit_the_figure_without_overlapping(tmp_path, monkeypatch):
    """busbw.png's fixed margins (synth.pipeline.report.MARGINS_IN, no tight layout) leave room
    for every panel's title, tick labels, axis labels and legend: measured by matplotlib's own
    text extents at the saved resolution, each panel's drawn box lies inside the figure and
    overlaps no other panel's nor the figure's title."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from synth.pipeline.synthesize import SynthesisOptions, run
    from topo_probe.load import load_topology
    saved = []
    real = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: saved.append((self, k.get("dpi"))) or real(self, *a, **k))
    colls = ("allgather", "reducescatter", "allreduce", "broadcast", "alltoall")      # 2 rows of 4, 3 panels off
    run(load_topology("ring:3"), tmp_path / "out", SynthesisOptions(collectives=colls, time_limit_s=5, max_sat_ranks=2))
    (fig, dpi), = saved
    from topo_probe.pictures import png_text_chunks
    texts = png_text_chunks((tmp_path / "out" / "busbw.png").read_bytes()[:4096])   # marked: a rerun may replace it
    assert texts["Software"] == "topocoll: synthesize"
    fig.set_dpi(dpi)
    renderer = FigureCanvasAgg(fig).get_renderer()
    whole = fig.bbox
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes if ax.axison]
    assert len(boxes) == len(colls)
    title = fig._suptitle.get_window_extent(renderer)
    for k, box in enumerate(boxes):
        assert whole.x0 <= box.x0 and box.x1 <= whole.x1 and whole.y0 <= box.y0 and box.y1 <= whole.y1, \
            f"panel {k} ({box}) leaves the figure ({whole})"
        assert not box.overlaps(title), f"panel {k} overlaps the figure's title"
        for j in range(k):
            assert not box.overlaps(boxes[j]), f"panels {j} and {k} overlap"


def test_a_row_times_the_schedule_the_plan_picks_not_the_fastest_candidate():
    """A row's plan µs, ratio and busbw are those of the schedule the plan runs at that size, plus its
    executor's fixed cost: the plan may pass over a faster candidate for its executor cost (dgx-a100
    broadcast at 1 MiB: the plan runs broadcast-tree (LL), 43.0 µs, beside broadcast-bwopt (LL), 39.9 µs,
    and the row printed 39.9 µs and NCCL's 81.2 / 39.9 = 2.03x where the plan gives 81.2 / 43.0 = 1.89x,
    before the executor's 6 µs: 1.66x)."""
    from synth.pipeline.report import _plan_curve, _size_rows
    from synth.plan.planner import PLAN_SIZES
    from synth.plan.size_plan import Plan, PlanEntry
    fast = [10.0] * len(PLAN_SIZES)                  # the fastest candidate, not in the plan
    picked = [20.0] * len(PLAN_SIZES)                # what the plan runs (under LL to 1 MiB)
    picked_ll = [16.0] * len(PLAN_SIZES)
    curves = {"bc-fast (LL)": fast, "bc-fast": fast, "bc-pick": picked, "bc-pick (LL)": picked_ll}
    ll_end = (1 << 20) + 1
    two = {"executor": "native", "records": 2, "executor_us": 6.0}     # native: 4 µs + 1 µs per record
    plan = Plan("t", "0" * 16, [PlanEntry("broadcast", 0, ll_end, "schedules/bc-pick.json", root=0, protocol="ll",
                                          decision=two),
                                PlanEntry("broadcast", ll_end, None, "schedules/bc-pick.json", root=0,
                                          decision={**two, "records": 0})])
    nccl = {"times": [40.0] * len(PLAN_SIZES), "choices": ["ring/Simple/8"] * len(PLAN_SIZES)}
    series = {"ours": _plan_curve(curves), "nccl": nccl, "ring": None, "bound": [1.0] * len(PLAN_SIZES),
              "candidates": curves}
    rows = [r.split(" | ") for r in _size_rows("broadcast", 8, 0, plan, series)]
    got = {r[1]: (r[2], float(r[3]), r[6]) for r in rows}
    assert got["1 KiB"] == ("bc-pick (LL)", 22.0, "1.82x"), got       # 40 / (16 + 4 + 2)
    assert got["1 MiB"] == ("bc-pick (LL)", 22.0, "1.82x"), got
    assert got["1 GiB"] == ("bc-pick", 24.0, "1.67x"), got            # Simple above 1 MiB, no records: 40 / (20 + 4)
    assert rows[0][9] == f"{1024 / 22e-6 / 1e9:.1f}"                   # broadcast busbw factor 1


def test_a_row_refuses_a_plan_entry_without_a_decision():
    """An entry whose decision does not name its executor has no known fixed cost: the row is refused
    rather than printed with the schedule's time alone."""
    from synth.pipeline.report import _size_rows
    from synth.plan.planner import PLAN_SIZES
    from synth.plan.size_plan import Plan, PlanEntry
    plan = Plan("t", "0" * 16, [PlanEntry("allgather", 0, None, "schedules/ag.json")])
    series = {"ours": [5.0] * len(PLAN_SIZES), "nccl": None, "ring": None, "bound": [1.0] * len(PLAN_SIZES),
              "candidates": {"ag": [5.0] * len(PLAN_SIZES)}}
    with pytest.raises(ValueError, match="allgather from 0 bytes: no decision"):
        _size_rows("allgather", 4, None, plan, series)


@pytest.mark.parametrize("report", REPORTS, ids=lambda p: p.parent.name)
def test_a_schedule_row_is_its_curve_plus_the_executor_cost_its_decision_counted(report):
    """Every row whose pick is a schedule: plan µs = that schedule's modelled time at the size (summary.json's
    ``simulated_us``; under LL the plan entry's decision at its first size, where that is the row's size) plus
    EXECUTOR_COSTS of the executor and records plan.json's decision names, independent of the report's code."""
    from synth.plan.decision import EXECUTOR_COSTS
    plan = json.loads((report.parent / "plan.json").read_text())
    summary = json.loads((report.parent / "summary.json").read_text())
    checked = 0
    for coll, size, pick, plan_us, *_ in _rows(report):
        nb, pick = SIZES[size], pick.strip()
        if pick == "nccl":
            continue
        root = 0 if coll in ("broadcast", "reduce", "gather", "scatter") else None
        entry = next(e for e in plan["entries"] if e["collective"] == coll and e["root"] in (None, root)
                     and e["min_bytes"] <= nb and (e["max_bytes"] is None or nb < e["max_bytes"]))
        d = entry["decision"]
        fixed = EXECUTOR_COSTS[d["executor"]].call_us + EXECUTOR_COSTS[d["executor"]].record_us * d["records"]
        simple = summary["collectives"][coll]["simulated_us"][pick.removesuffix(" (LL)")]   # µs under Simple
        if entry["min_bytes"] == nb:
            sched = d["schedule_us"]
        elif entry.get("protocol") == "ll":
            continue                       # an LL time is recorded only at its range's first size
        else:
            sched = simple[size.replace("i", "").replace(" ", "")]
        assert abs(float(plan_us) - (sched + fixed)) <= 0.051, \
            f"{report.parent.name} {coll} {size}: plan µs {plan_us}, schedule {sched} + executor {fixed}"
        checked += 1
    assert checked or report.parent.name == "dgx-h100", f"{report}: no schedule row checked"


def test_busbw_png_draws_the_fastest_schedule_alone_and_the_manual_says_so():
    """busbw.png's "best schedule (ours)" curve is the fastest candidate's modelled time at each size, with no
    executor cost and whatever the plan picks (10 µs here, where the plan's pick runs 20 µs + its executor), so
    it is not the table's *plan µs*: docs/synthesis.md, which lists report.md and busbw.png together, must not
    give busbw.png the table's measure."""
    from synth.pipeline.report import _plan_curve, _plot_panel
    from synth.plan.planner import PLAN_SIZES

    class Axes:                                   # records what is drawn; the rest of matplotlib's API is a no-op
        def __init__(self):
            self.lines = {}

        def plot(self, x, y, style, label):
            self.lines[label] = list(y)

        def __getattr__(self, name):
            return lambda *a, **k: None

    curves = {"bc-fast": [10.0] * len(PLAN_SIZES), "bc-pick": [20.0] * len(PLAN_SIZES)}
    ax = Axes()
    _plot_panel(ax, "broadcast", 8, {"ours": _plan_curve(curves), "nccl": None, "ring": None, "tree": None,
                                     "bound": [1.0] * len(PLAN_SIZES)})
    k = PLAN_SIZES.index(1 << 20)
    assert ax.lines["best schedule (ours)"][k] == pytest.approx((1 << 20) / 10.0 / 1e3)    # broadcast factor 1
    row = next(line for line in (ROOT / "docs" / "synthesis.md").read_text().splitlines()
               if line.startswith("| `report.md`, `busbw.png` |"))
    assert "busbw.png" in row.split("|", 2)[2] and "fastest" in row.split("|", 2)[2], row
