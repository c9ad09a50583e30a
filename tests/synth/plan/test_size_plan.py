"""Plans: selection by size and root, JSON round trip, precise errors."""

import json

import pytest

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
