"""README's and docs/results.md's "Plan vs NCCL as it runs" tables quote the committed reports
(results/<machine>/report.md, its table of 1 KiB, 1 MiB and 1 GiB rows): each ``name[/name] R.RRx`` of a
cell is that report row's *plan vs NCCL*, the row's pick a schedule; every collective a cell gives no ratio
(outside parentheses) runs NCCL in the report, and such a cell says NCCL (or RCCL); a parenthesis
``our <schedule> takes A-B KiB: R.RRx`` is plan.json's range [A, B) of that schedule and its best ratio there.
The headline ratio is NCCL's time over the schedule's plus the executor's fixed cost, as the plan's decision
counts them (a hand-picked case below, from plan.json alone)."""

from __future__ import annotations

import json
import re

import pytest
from _paths import ROOT

DOCS = ("README.md", "docs/results.md")
COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather", "scatter", "alltoall")
#: the doc tables' column heads in order, and the report's size label of each
SIZES = ("1 KiB", "1 MiB", "1 GiB")
RATIO = re.compile(r"\b((?:[a-z]+/)*[a-z]+):? (\d+\.\d\d)x")
RANGE = re.compile(r"our ([\w-]+) (\w+) takes (\d+)-(\d+) KiB: (\d+\.\d\d)x")


def _report_rows(machine: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(collective, size label) -> (pick, plan vs NCCL) of the report's headline table."""
    out = {}
    for line in (ROOT / "results" / machine / "report.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 11 and cells[0] in COLLECTIVES and cells[1] in SIZES:
            out[(cells[0], cells[1])] = (cells[2], cells[6])
    return out


def _doc_rows(doc: str) -> dict[str, list[str]]:
    """machine -> its three cells (1 KiB, 1 MiB, 1 GiB) of the doc's plan-vs-NCCL table."""
    out = {}
    for line in (ROOT / doc).read_text().splitlines():
        m = re.match(r"\| `([\w-]+)` \| (.*) \|$", line)
        if m and (ROOT / "results" / m.group(1) / "report.md").is_file():
            cells = [c.strip() for c in m.group(2).split(" | ")]
            if len(cells) == 3:
                out[m.group(1)] = cells
    return out


def _outside_parentheses(cell: str) -> str:
    while re.search(r"\([^()]*\)", cell):
        cell = re.sub(r"\([^()]*\)", "", cell)
    return cell


@pytest.mark.parametrize("doc", DOCS)
def test_every_machine_of_the_table_has_its_row(doc):
    assert set(_doc_rows(doc)) == {"dgx1-v100", "dgx-a100", "dgx-h100", "mi300x", "pcie-8gpu-2socket"}


@pytest.mark.parametrize("doc", DOCS)
def test_every_table_cell_quotes_its_report(doc):
    for machine, cells in _doc_rows(doc).items():
        rows = _report_rows(machine)
        for size, cell in zip(SIZES, cells):
            where = f"{doc} {machine} {size}"
            text = _outside_parentheses(cell)
            named = set()
            for names, ratio in RATIO.findall(text):
                for coll in names.split("/"):
                    pick, got = rows[(coll, size)]
                    assert pick != "nccl", f"{where}: says {coll} {ratio}x, the report runs NCCL"
                    assert got == f"{ratio}x", f"{where}: says {coll} {ratio}x, the report {got}"
                    named.add(coll)
            others = [c for c in COLLECTIVES if c not in named]
            for coll in others:
                assert rows[(coll, size)][0] == "nccl", \
                    f"{where}: gives {coll} no ratio, the report runs {rows[(coll, size)][0]} there"
            assert not others or "NCCL" in text or "RCCL" in text, f"{where}: does not say NCCL runs the rest"


@pytest.mark.parametrize("doc", DOCS)
def test_a_range_a_cell_names_is_the_plans(doc):
    """``our one-shot allreduce takes 16-512 KiB: 1.42x``: plan.json runs allreduce-oneshot from 16 KiB up to
    512 KiB (not included), and the best NCCL / (schedule + executor) over those plan sizes is 1.42
    (results/ll_plan/cells.json, every plan size up to 1 MiB of the committed candidates)."""
    cells_json = json.loads((ROOT / "results" / "ll_plan" / "cells.json").read_text())
    found = 0
    for machine, cells in _doc_rows(doc).items():
        plan = json.loads((ROOT / "results" / machine / "plan.json").read_text())
        for cell in cells:
            for kind, coll, lo, hi, ratio in RANGE.findall(cell):
                name = f"{coll}-{kind.replace('-', '')}"
                lo, hi = int(lo) << 10, int(hi) << 10
                entry = next((e for e in plan["entries"] if e["collective"] == coll and e["min_bytes"] == lo
                              and e["schedule"].endswith(f"/{name}.json")), None)
                assert entry is not None and entry["max_bytes"] == hi, f"{doc} {machine}: no {name} range {lo}-{hi}"
                ours = [r for r in cells_json if (r["preset"], r["collective"]) == (machine, coll)
                        and lo <= r["bytes"] < hi]
                assert ours and all(r["schedule"] == name and r["after"] != "nccl" for r in ours), ours
                best = max(r["nccl_us"] / r["ours_us"] for r in ours)
                assert f"{best:.2f}" == ratio, f"{doc} {machine}: {name} says {ratio}x, the cells {best:.3f}"
                found += 1
    assert found >= 1


def test_the_dgx_a100_broadcast_cell_is_nccl_over_schedule_plus_executor():
    """Hand-picked: dgx-a100 broadcast at 1 MiB runs broadcast-tree under LL on the native executor;
    plan.json's decision counts 2 records (4 µs + 2 x 1 µs = 6 µs) beside the schedule's 42.997 µs and NCCL's
    81.154 µs, so the headline is 81.154 / 48.997 = 1.66x: the report's row, README's and docs/results.md's
    cell (before the executor was counted they said 81.154 / 42.997 = 1.89x)."""
    from synth.plan.decision import EXECUTOR_COSTS
    plan = json.loads((ROOT / "results" / "dgx-a100" / "plan.json").read_text())
    entry = next(e for e in plan["entries"] if e["collective"] == "broadcast" and e["min_bytes"] <= 1 << 20
                 and (e["max_bytes"] is None or 1 << 20 < e["max_bytes"]))
    d = entry["decision"]
    assert entry["schedule"].endswith("broadcast-tree.json") and entry["protocol"] == "ll"
    assert (d["executor"], d["records"]) == ("native", 2)
    cost = EXECUTOR_COSTS["native"]
    assert d["executor_us"] == cost.call_us + 2 * cost.record_us == 6.0
    want = f"{d['nccl_us'] / (d['executor_us'] + d['schedule_us']):.2f}x"
    assert want == "1.66x"
    assert _report_rows("dgx-a100")[("broadcast", "1 MiB")] == ("broadcast-tree (LL)", want)
    for doc in DOCS:
        assert f"broadcast/reduce {want} (LL)" in _doc_rows(doc)["dgx-a100"][1], doc


def test_the_readme_sweep_figure_counts_the_executor_as_the_table_does():
    """README's figure under the table plots the committed sim sweep (results/sweep/dgx-a100_all_reduce_sim.txt),
    whose plan series is what the drop-in runs, as the table counts it: at 4 MiB, where plan.json runs
    allreduce-direct, its busbw is 4 MiB x 2 x 7/8 over the decision's schedule_us + executor_us (65.68 + 12 µs:
    94.5 GB/s, 1.39x over NCCL), not over schedule_us alone (111.75 GB/s, 1.64x).  Its caption says so."""
    nb = 1 << 22
    plan = json.loads((ROOT / "results" / "dgx-a100" / "plan.json").read_text())
    entry = next(e for e in plan["entries"] if e["collective"] == "allreduce" and e["min_bytes"] <= nb
                 and (e["max_bytes"] is None or nb < e["max_bytes"]))
    d = entry["decision"]
    assert entry["schedule"] != "nccl" and entry["min_bytes"] == nb and entry["protocol"] == "simple", entry
    busbw = lambda us: nb * 2 * 7 / 8 / us / 1e3  # noqa: E731   GB/s, nccl-tests all_reduce factor 2(n-1)/n
    sim = (ROOT / "results" / "sweep" / "dgx-a100_all_reduce_sim.txt").read_text()
    row = next(line.split() for line in sim.splitlines() if line.split()[:1] == [str(nb)])
    plotted, nccl = float(row[5]), float(row[6])                      # the plan and nccl columns (GB/s)
    assert abs(plotted - busbw(d["schedule_us"] + d["executor_us"])) < 0.01, (plotted, d)
    assert abs(plotted - busbw(d["schedule_us"])) > 1.0
    assert abs(plotted / nccl - d["margin"]) < 0.005, (plotted / nccl, d["margin"])     # 1.39x, the table's
    readme = (ROOT / "README.md").read_text()
    caption = readme[:readme.index("![all_reduce busbw on dgx-a100]")].rsplit("\n\n", 2)[-2]
    assert "executor cost counted" in caption and "alone" not in caption, caption
    assert f"{d['margin']:.2f}x over NCCL at 4 MiB" in (ROOT / "docs" / "sweep.md").read_text()
