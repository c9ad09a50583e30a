"""Plans pick Simple or LL per schedule and size (<= LL_MAX_BYTES), then decide against NCCL;
entries record the protocol, old plans load as Simple, and every LL range meets the bound."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.baselines import available_baselines, baseline
from synth.ir.fabric import build_fabric
from synth.model.bounds import lower_bounds
from synth.model.cost import CostModel
from synth.model.physics import LL_MAX_BYTES, cost_params_for
from synth.pipeline.synthesize import CollectiveResult, build_plan, schedule_file
from synth.plan.decision import EXECUTOR_COSTS, busiest_rank_records, decide_ranges
from synth.plan.planner import PLAN_SIZES
from synth.plan.protocol import report_curves, with_protocols
from synth.plan.size_plan import Plan, PlanEntry
from synth.plan.versus_nccl import MARGIN, NCCL, nccl_curve
from topo_probe.errors import ScheduleFormatError
from topo_probe.machines.presets import get_preset


class Table:
    """A cost model given as a table: (schedule, bytes, protocol) -> µs."""

    def __init__(self, table):
        self.table = table

    def schedule_time_us(self, s, n, protocol="simple"):
        return self.table[(s, n, protocol)]


def test_ll_where_faster_up_to_the_limit_and_one_size_past_it_simple():
    sizes = [8, 64, 512, 4096]
    simple = {"a": [10.0, 11.0, 12.0, 20.0]}
    ll = {8: 5.0, 64: 12.0, 512: 11.0}                  # faster at 8 and 512, slower at 64
    table = {("A", n, "ll"): t for n, t in ll.items()} | {("A", 513, "simple"): 12.5}
    asked = []
    got = with_protocols(Table(table), {"a": "A"}, simple, sizes, lambda sz: asked.append(sz) or [99.0], "native",
                         [1.0, 2.0, 3.0, 4.0], max_bytes=512)
    out_sizes, times, protocols, nccl = got
    assert out_sizes == [8, 64, 512, 513, 4096] and asked == [[513]]
    assert times["a"] == [5.0, 11.0, 11.0, 12.5, 20.0]
    assert protocols["a"] == ["ll", "simple", "ll", "simple", "simple"]
    assert nccl == [1.0, 2.0, 3.0, 99.0, 4.0]
    # MPI (a cluster): no LL path, nothing changes
    assert with_protocols(Table({}), {"a": "A"}, simple, sizes, None, "mpi")[:2] == (sizes, simple)


def test_a_range_ends_where_the_protocol_changes():
    sizes = [8, 64, 512, 513]
    times = {"a": [1.0, 1.0, 1.0, 1.0]}
    protocols = {"a": ["ll", "ll", "simple", "simple"]}
    assert decide_ranges(sizes, times, None, {"a": 0}, "native", protocols) == [
        ("a", None, 0, 512), ("a", None, 512, None)]
    assert decide_ranges(sizes, times, None, {"a": 0}, "native") == [("a", None, 0, None)]


def test_protocol_round_trips_old_plans_load_as_simple_and_bad_values_are_named(tmp_path):
    plan = Plan("t", "fp", [PlanEntry("allreduce", 0, 1024, "schedules/a.json", protocol="ll"),
                            PlanEntry("allreduce", 1024, LL_MAX_BYTES + 1, NCCL, fallback="schedules/a.json",
                                      protocol="ll"),
                            PlanEntry("allreduce", LL_MAX_BYTES + 1, None, "schedules/b.json")])
    plan.save(tmp_path / "plan.json")
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert [e["protocol"] for e in doc["entries"]] == ["ll", "ll", "simple"]
    back = Plan.load(tmp_path / "plan.json")
    assert back.entries == plan.entries and back.select("allreduce", 100).protocol == "ll"
    assert back.select("allreduce", 1 << 21).protocol == "simple"
    for e in doc["entries"]:
        del e["protocol"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    assert {e.protocol for e in Plan.load(tmp_path / "old.json").entries} == {"simple"}
    for bad, msg in (("LL128", r"entries\[0\]\.protocol must be one of simple, ll, got 'LL128'"),
                     (1, r"entries\[0\]\.protocol must be one of simple, ll, got 1")):
        doc["entries"][0]["protocol"] = bad
        (tmp_path / "bad.json").write_text(json.dumps(doc))
        with pytest.raises(ScheduleFormatError, match=msg):
            Plan.load(tmp_path / "bad.json")
    doc["entries"][0]["protocol"] = "simple"
    doc["entries"][2]["protocol"] = "ll"                        # 1 MiB + 1 .. no limit under LL
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(ScheduleFormatError, match=r"entries\[2\]\.protocol: ll runs calls of at most 1048576 bytes"):
        Plan.load(tmp_path / "bad.json")


def _baselines(fab, coll):
    res = CollectiveResult()
    for name in available_baselines(fab, coll):
        s = baseline(name, fab, coll, root=None)
        res.schedules[f"{coll}-{name}"], res.files[f"{coll}-{name}"] = s, schedule_file(f"{coll}-{name}", s)
    return res


@pytest.mark.parametrize("preset,some_ll", [("dgx1-v100", True), ("pcie-8gpu-2socket", True), ("dgx-h100", False)])
def test_the_plan_takes_the_faster_protocol_then_decides_against_nccl(preset, some_ll):
    """Brute force beside build_plan: at every plan size the entry runs the schedule and protocol
    of least modelled time plus the executor's cost, or NCCL where that is not 5 % faster; LL only
    within LL_MAX_BYTES, and every LL time at or above the bound.  On DGX H100 the one-shot
    all-reduce (one step: nothing for LL to speed up) is the small-size pick, so no range is LL."""
    topo = get_preset(preset)
    fab = build_fabric(topo)
    res = _baselines(fab, "allreduce")
    plan, _, ncc = build_plan(fab, {"allreduce": res}, topo)
    cost, fixed, params = CostModel(fab), EXECUTOR_COSTS["native"], cost_params_for(fab)
    bound = lower_bounds(fab, "allreduce")
    nccl = ncc["allreduce"]["times"]
    lls = 0
    for k, n in enumerate(PLAN_SIZES + [LL_MAX_BYTES + 1]):
        nccl_us = nccl[k] if k < len(PLAN_SIZES) else nccl_curve(topo, "allreduce", [n])["times"][0]
        options = [(cost.schedule_time_us(s, n, p) + fixed.fixed_us(busiest_rank_records(s)), p, name)
                   for name, s in res.schedules.items() for p in (("simple", "ll") if n <= LL_MAX_BYTES else ("simple",))]
        best_us, proto, name = min(options, key=lambda o: (o[0], o[2], o[1] == "ll"))
        e = plan.select("allreduce", n)
        assert e.protocol == proto, n
        assert (e.schedule == NCCL) == (nccl_us / MARGIN < best_us), n
        assert (e.fallback if e.schedule == NCCL else e.schedule) == res.files[name], n
        if proto == "ll":
            lls += 1
            assert e.max_bytes is not None and e.max_bytes <= LL_MAX_BYTES + 1
            assert cost.schedule_time_us(res.schedules[name], n, "ll") >= bound.time_us(n, params)
    assert (lls > 0) == some_ll
    ll_entries = [e for e in plan.entries if e.protocol == "ll"]
    assert res.summary.get("ll_ranges", []) == [{"min_bytes": e.min_bytes, "max_bytes": e.max_bytes, "schedule": e.schedule,
                                         **({"fallback": e.fallback} if e.fallback else {}),
                                         "predicted_us": e.predicted_us} for e in ll_entries]


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                     max_leaves=6)


@settings(max_examples=150, deadline=None)
@given(protocol=_JSON | st.sampled_from(["simple", "ll", "LL", "Simple", "ll128", " ll"]),
       hi=st.sampled_from([None, 1024, LL_MAX_BYTES, LL_MAX_BYTES + 1, LL_MAX_BYTES + 2]))
def test_any_protocol_value_loads_as_one_of_two_or_is_refused_naming_the_field(tmp_path_factory, protocol, hi):
    path = tmp_path_factory.mktemp("p") / "plan.json"
    path.write_text(json.dumps({"format": "topocoll.plan", "version": 1, "entries": [
        {"collective": "allreduce", "min_bytes": 0, "max_bytes": hi, "schedule": "s.json", "protocol": protocol}]}))
    fits = hi is not None and hi <= LL_MAX_BYTES + 1
    try:
        entry = Plan.load(path).entries[0]
    except ScheduleFormatError as e:
        assert r"entries[0].protocol" in str(e) and "\n" not in str(e)
        assert protocol not in ("simple", "ll") or (protocol == "ll" and not fits)
    else:
        assert entry.protocol == protocol and (protocol == "simple" or fits)


def test_report_curves_keep_simple_and_add_the_best_protocol_curve_where_ll_wins():
    simple = {"a": [3.0, 4.0], "b": [1.0, 2.0]}
    sizes, times = [8, 16, 17], {"a": [2.0, 4.0, 9.0], "b": [1.0, 2.0, 3.0]}
    protocols = {"a": ["ll", "simple", "simple"], "b": ["simple"] * 3}
    assert report_curves(simple, sizes, times, protocols, [8, 16]) == {"a": [3.0, 4.0], "b": [1.0, 2.0],
                                                                       "a (LL)": [2.0, 4.0]}
