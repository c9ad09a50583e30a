"""Plans: selection by size and root, JSON round trip, precise errors."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.ir.schedule import Schedule, Step, Transfer
from synth.plan.size_plan import Plan, PlanEntry
from topo_probe.errors import ScheduleFormatError


def test_select_by_size_root_and_round_trip(tmp_path):
    s = Schedule("broadcast", 2, 1, (Step(1, (Transfer(0, 0, 1),)),), root=0)
    s.save(tmp_path / "schedules" / "b.json")
    plan = Plan("t", "fp", [
        PlanEntry("allgather", 0, 1024, "schedules/small.json"),
        PlanEntry("allgather", 1024, None, "schedules/big.json"),
        PlanEntry("broadcast", 0, None, "schedules/b.json", root=0),
    ])
    plan.save(tmp_path / "plan.json")
    back = Plan.load(tmp_path / "plan.json")
    assert back.entries == plan.entries and back.base_dir == tmp_path
    assert back.select("all_gather", 1023).schedule == "schedules/small.json"
    assert back.select("allgather", 1024).schedule == "schedules/big.json"
    assert back.select("broadcast", 10, root=1) is None
    assert back.load_schedule(back.select("broadcast", 10, root=0)) == s


def test_bad_plan_entries_are_named(tmp_path):
    p = tmp_path / "plan.json"
    p.write_text(json.dumps({"format": "topocoll.plan", "version": 1,
                             "entries": [{"collective": "allgather", "min_bytes": 10, "max_bytes": 5,
                                          "schedule": "x.json"}]}))
    with pytest.raises(ScheduleFormatError, match=r"entries\[0\]: max_bytes 5 must be > min_bytes 10"):
        Plan.load(p)
    p.write_text(json.dumps({"format": "topocoll.plan", "version": 1, "entries": [{"collective": "allgather"}]}))
    with pytest.raises(ScheduleFormatError, match="missing field 'min_bytes'"):
        Plan.load(p)


def test_decision_and_fallback_round_trip_and_bad_values_are_named(tmp_path):
    d = {"executor": "native", "executor_us": 5.0, "records": 1, "schedule_us": 3.2, "nccl_us": 9.0, "margin": 1.08}
    plan = Plan("t", "fp", [PlanEntry("allreduce", 0, 64, "nccl", fallback="schedules/a.json", decision=d),
                            PlanEntry("allreduce", 64, None, "schedules/a.json", decision=d)])
    plan.save(tmp_path / "plan.json")
    back = Plan.load(tmp_path / "plan.json")
    assert [(e.fallback, e.decision) for e in back.entries] == [("schedules/a.json", d), (None, d)]
    assert back.path == tmp_path / "plan.json"
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert "fallback" not in doc["entries"][1]                 # only where it says something
    for field, value, words in (("fallback", "nccl", "fallback must be a schedule file path"),
                                ("fallback", 3, "fallback must be a schedule file path"),
                                ("decision", [1], "decision must be an object"),
                                ("decision", {"executor": 4}, "decision.executor must be a string"),
                                ("decision", {"margin": -1.0}, "decision.margin must be >= 0"),
                                ("decision", {"nccl_us": float("nan")}, "decision.nccl_us: nan is not a finite number")):
        bad = json.loads(json.dumps(doc))
        bad["entries"][0][field] = value
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(ScheduleFormatError, match=r"entries\[0\]" + ".*" + words.replace(".", r"\.")):
            Plan.load(tmp_path / "bad.json")


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(["allreduce", "broadcast"]), st.integers(0, 1), st.integers(0, 40),
                          st.one_of(st.none(), st.integers(1, 40))), max_size=12),
       st.lists(st.integers(0, 90), min_size=1, max_size=20))
def test_select_by_bisect_is_the_first_covering_entry_in_file_order(raw, sizes):
    """Plan.select (a bisect in an index) against a linear scan in file order, on hand-made
    plans with overlapping ranges, several roots and gaps."""
    entries = []
    for k, (coll, root, lo, width) in enumerate(raw):
        hi = None if width is None else lo + width
        entries.append(PlanEntry(coll, lo, hi, f"s{k}.json", root if coll == "broadcast" else None))
    plan = Plan("t", "fp", entries)
    for nbytes in sizes:
        for coll, root in (("allreduce", None), ("broadcast", 0), ("broadcast", 1)):
            want = next((e for e in entries if e.collective == coll and e.root == root and e.covers(nbytes)), None)
            assert plan.select(coll, nbytes, root) is want
    entries.append(PlanEntry("allreduce", 0, None, "late.json"))     # the index follows the list
    assert plan.select("allreduce", 95).schedule == next(e.schedule for e in entries
                                                          if e.collective == "allreduce" and e.covers(95))


@pytest.mark.parametrize("field", ["schedule", "fallback"])
@pytest.mark.parametrize("path", ["/etc/passwd", "../outside.json", "schedules/../../x.json", "~/x.json",
                                  "C:/x.json", "\\\\server\\x.json", "schedules\\..\\..\\x.json"])
def test_schedule_paths_outside_the_plans_folder_are_refused(tmp_path, field, path):
    entry = {"collective": "allgather", "min_bytes": 0, "schedule": path}
    if field == "fallback":
        entry = {"collective": "allgather", "min_bytes": 0, "schedule": "nccl", "fallback": path}
    p = tmp_path / "plan.json"
    p.write_text(json.dumps({"format": "topocoll.plan", "version": 1, "entries": [entry]}))
    with pytest.raises(ScheduleFormatError, match=rf"entries\[0\]\.{field}: .* is outside the plan's folder"):
        Plan.load(p)


def test_a_link_out_of_the_plans_folder_is_refused(tmp_path):
    outside = tmp_path / "elsewhere.json"
    Schedule("broadcast", 2, 1, (Step(1, (Transfer(0, 0, 1),)),), root=0).save(outside)
    (tmp_path / "res" / "schedules").mkdir(parents=True)
    (tmp_path / "res" / "schedules" / "b.json").symlink_to(outside)
    plan = Plan("t", "fp", [PlanEntry("broadcast", 0, None, "schedules/b.json", root=0)])
    plan.save(tmp_path / "res" / "plan.json")
    back = Plan.load(tmp_path / "res" / "plan.json")
    with pytest.raises(ScheduleFormatError, match="resolves outside the plan's folder"):
        back.load_schedule(back.entries[0])


COMMITTED_PLAN = Path(__file__).resolve().parents[3] / "results" / "dgx1-v100" / "plan.json"


def test_a_committed_plan_with_two_overlapping_entries_is_refused_naming_both(tmp_path):
    doc = json.loads(COMMITTED_PLAN.read_text())
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    Plan.load(tmp_path / "plan.json")                              # the committed plan loads
    first, second = doc["entries"][0], doc["entries"][1]
    assert (first["collective"], first["max_bytes"]) == (second["collective"], second["min_bytes"])
    first["max_bytes"] = second["max_bytes"]                       # entries[0] now reaches into entries[1]
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    lo, mid, hi = first["min_bytes"], second["min_bytes"], second["max_bytes"]
    with pytest.raises(ScheduleFormatError) as bad:
        Plan.load(tmp_path / "plan.json")
    assert str(bad.value) == (f"{tmp_path / 'plan.json'}: entries[0] and entries[1] overlap: {first['collective']} "
                              f"bytes [{lo}, {hi}) and [{mid}, {hi}) both cover [{mid}, {hi}); a plan has one entry "
                              f"per size")
    doc["entries"][0] = dict(second)                               # a duplicate is an overlap too
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    with pytest.raises(ScheduleFormatError, match=r"entries\[0\] and entries\[1\] overlap"):
        Plan.load(tmp_path / "plan.json")


def test_saving_overlapping_ranges_is_refused_and_other_roots_do_not_overlap(tmp_path):
    plan = Plan("t", "fp", [PlanEntry("broadcast", 0, None, "a.json", root=0),
                            PlanEntry("broadcast", 0, None, "b.json", root=1)])
    plan.save(tmp_path / "plan.json")                              # one range per root: no overlap
    assert Plan.load(tmp_path / "plan.json").select("broadcast", 5, root=1).schedule == "b.json"
    plan.entries.append(PlanEntry("broadcast", 1 << 20, 1 << 21, "c.json", root=1))
    with pytest.raises(ScheduleFormatError, match=r"entries\[1\] and entries\[2\] overlap: broadcast root 1 bytes "
                                                  r"\[0, no limit\) and \[1048576, 2097152\) both cover"):
        plan.save(tmp_path / "plan.json")


@st.composite
def _disjoint_entries(draw):
    """Entries of two collectives (broadcast: roots 0 and 1) whose ranges never overlap within one
    collective and root, with gaps, in shuffled file order."""
    entries = []
    for coll, root in (("allreduce", None), ("broadcast", 0), ("broadcast", 1)):
        cuts = sorted(draw(st.sets(st.integers(0, 60), max_size=8)))
        open_end = draw(st.booleans())
        for k in range(0, len(cuts) - 1):
            if draw(st.booleans()):                                # else a gap between cuts[k] and cuts[k + 1]
                entries.append(PlanEntry(coll, cuts[k], cuts[k + 1], f"{coll}{root}-{k}.json", root))
        if cuts and open_end:
            entries.append(PlanEntry(coll, cuts[-1], None, f"{coll}{root}-last.json", root))
    return draw(st.permutations(entries))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(_disjoint_entries(), st.data())
def test_disjoint_ranges_load_and_any_overlap_is_refused(tmp_path_factory, entries, data):
    """Random non-overlapping range sets (gaps allowed) load, and select what a linear scan does;
    one more entry overlapping any of them is refused, naming both."""
    folder = tmp_path_factory.mktemp("plan")
    Plan("t", "fp", list(entries)).save(folder / "plan.json")
    back = Plan.load(folder / "plan.json")
    for nbytes in range(0, 70, 3):
        for coll, root in (("allreduce", None), ("broadcast", 0), ("broadcast", 1)):
            want = next((e for e in entries if e.collective == coll and e.root == root and e.covers(nbytes)), None)
            assert back.select(coll, nbytes, root) == want
    if not entries:
        return
    k = data.draw(st.integers(0, len(entries) - 1))
    hit = entries[k]
    at = data.draw(st.integers(hit.min_bytes, hit.min_bytes + 40 if hit.max_bytes is None else hit.max_bytes - 1))
    lo = data.draw(st.integers(0, at))
    hi = data.draw(st.one_of(st.none(), st.integers(at + 1, at + 50)))
    doc = json.loads((folder / "plan.json").read_text())
    doc["entries"].append({"collective": hit.collective, "root": hit.root, "min_bytes": lo, "max_bytes": hi,
                           "schedule": "x.json"})
    (folder / "plan.json").write_text(json.dumps(doc))
    with pytest.raises(ScheduleFormatError, match=rf"entries\[\d+\] and entries\[{len(entries)}\] overlap: "
                                                  rf"{hit.collective}"):
        Plan.load(folder / "plan.json")


def test_discovery_refuses_the_topologys_own_plan_when_it_overlaps(tmp_path):
    """plan="auto" or a results folder: the topology's own plan.json is refused, not skipped as
    if it were another topology's (and a baseline run in its place)."""
    from synth.plan.selector import find_plan
    from topo_probe.machines.generators import fully_connected
    topo = fully_connected(4)
    plan = Plan(topo.name, topo.fingerprint(), [PlanEntry("allgather", 0, None, "nccl")])
    plan.save(tmp_path / topo.name / "plan.json")
    assert find_plan(topo, tmp_path)[0].entries == plan.entries
    doc = json.loads((tmp_path / topo.name / "plan.json").read_text())
    doc["entries"].append({"collective": "allgather", "min_bytes": 1000, "max_bytes": 524288, "schedule": "nccl"})
    (tmp_path / topo.name / "plan.json").write_text(json.dumps(doc))
    with pytest.raises(ScheduleFormatError, match=r"plan\.json: entries\[0\] and entries\[1\] overlap: allgather"):
        find_plan(topo, tmp_path)
