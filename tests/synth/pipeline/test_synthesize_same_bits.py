"""synthesize records, per saved combining schedule, whether every rank ends with the same bits (summary.json's
``same_bits``, a sentence in report.md), and where two candidates tie on modelled time the plan takes the one
whose ranks agree.  Checked against a float32 NumPy replay of the saved files (tests/_sum_order_cases.py)."""

from __future__ import annotations

import json

import _sum_order_cases as cases
import numpy as np
import pytest

from synth.formats.schedule_file import load_schedule
from synth.ir.fabric import build_fabric
from synth.model.cost import CostModel
from synth.pipeline import synthesize as synth_mod
from synth.plan.decision import busiest_rank_records, decide_ranges
from topo_probe.load import load_topology


def _ranks_agree(schedule) -> bool:
    """Brute force: do all ranks hold the same float32 bits after the schedule on wide random inputs?"""
    out = cases.float32_replay(schedule, cases.wide_inputs(schedule.ranks, 4096, seed=7))
    bits = out.view(np.uint32)
    return all(np.array_equal(bits[r], bits[0]) for r in range(schedule.ranks))


@pytest.fixture(scope="module")
def with_two_trees(tmp_path_factory):
    """A 4-GPU all-reduce run whose baselines are extended by two_trees (ranks disagree) and its twin (agree)."""
    mp = pytest.MonkeyPatch()
    real = synth_mod.baselines

    def more(fabric, coll, *args, **kw):
        extra = {"two_trees": cases.two_trees(), "two_trees_twin": cases.two_trees_twin()} if coll == "allreduce" else {}
        return {**real(fabric, coll, *args, **kw), **extra}
    mp.setattr(synth_mod, "baselines", more)
    out = tmp_path_factory.mktemp("same_bits") / "out"
    opts = synth_mod.SynthesisOptions(collectives=("allreduce", "allgather"), time_limit_s=5, progress=False,
                                      max_sat_ranks=0, log=lambda s: None)
    try:
        summary = synth_mod.run(load_topology("full:4"), out, opts, force=True)
    finally:
        mp.undo()
    return out, summary


def test_summary_says_which_saved_schedules_give_every_rank_the_same_bits(with_two_trees):
    """Every saved all-reduce file, replayed in float32: its ranks agree exactly where summary.json says so; the
    copy-only allgather has no such record."""
    out, summary = with_two_trees
    same = json.loads((out / "summary.json").read_text())["collectives"]["allreduce"]["same_bits"]
    assert same == summary["collectives"]["allreduce"]["same_bits"]
    assert same["allreduce-two_trees"] is False and same["allreduce-two_trees_twin"] is True
    files = sorted((out / "schedules").glob("allreduce-*.json*"))
    assert {p.name.split(".json")[0] for p in files} == set(same) and len(same) >= 4
    assert {p.name.split(".json")[0]: _ranks_agree(load_schedule(p)) for p in files} == same
    assert "same_bits" not in summary["collectives"]["allgather"]


def test_report_names_the_schedule_whose_ranks_differ(with_two_trees):
    out, summary = with_two_trees
    n = len(summary["collectives"]["allreduce"]["same_bits"])
    line = next(ln for ln in (out / "report.md").read_text().splitlines() if ln.startswith("- **allreduce**"))
    assert line.endswith(f" Same bits on every rank: {n - 1} of {n} schedules; not `allreduce-two_trees` (ranks may "
                         "differ in the last bits of a float sum).")
    assert "Same bits" not in next(ln for ln in (out / "report.md").read_text().splitlines()
                                   if ln.startswith("- **allgather**"))


def test_an_equal_time_tie_goes_to_the_schedule_whose_ranks_agree():
    """Hand-made times: a and b equal at the first two sizes, a faster at the third; ``a`` sorts first, so before
    the rule it took the ties; now b takes them, and a still keeps the size where it is strictly faster."""
    times = {"a": [5.0, 7.0, 9.0], "b": [5.0, 7.0, 10.0]}
    assert decide_ranges([8, 64, 512], times, None, {}, "native") == [("a", None, 0, None)]
    assert decide_ranges([8, 64, 512], times, None, {}, "native", different_bits={"a"}) == \
        [("b", None, 0, 512), ("a", None, 512, None)]
    assert decide_ranges([8, 64, 512], times, None, {}, "native", different_bits={"b"}) == [("a", None, 0, None)]


def test_the_plan_prefers_the_twin_where_the_model_times_them_alike():
    """two_trees and its twin: the same steps, records and modelled time up to 256 KiB (checked here by the cost
    model in both protocols), the twin slower from 512 KiB (rank 3 sends three ways in its step 2).  ``a-...``
    (two_trees) sorts first, so the old rule took it at the tied sizes."""
    topo = load_topology("full:4")
    fabric = build_fabric(topo)
    a, b = cases.two_trees(), cases.two_trees_twin()
    cost = CostModel(fabric)
    assert busiest_rank_records(a) == busiest_rank_records(b)
    for proto in ("simple", "ll"):
        assert cost.schedule_time_us(a, 1024, proto) == cost.schedule_time_us(b, 1024, proto)
    assert cost.schedule_time_us(a, 4 << 20) < cost.schedule_time_us(b, 4 << 20)
    res = synth_mod.CollectiveResult(schedules={"allreduce-a": a, "allreduce-b": b},
                                     files={"allreduce-a": "schedules/a.json", "allreduce-b": "schedules/b.json"},
                                     same_bits={"allreduce-a": False, "allreduce-b": True})
    plan, _, _ = synth_mod.build_plan(fabric, {"allreduce": res})
    assert plan.select("allreduce", 1024).schedule == "schedules/b.json"
    assert plan.select("allreduce", 4 << 20).schedule == "schedules/a.json"
