"""Schedule JSON written one string format per transfer is byte for byte what the indenting
encoder writes (``json.dumps(schedule.to_dict(), indent=1)``, the reference), empty steps,
reductions and schedules past the compact threshold included."""

from __future__ import annotations

import json

import pytest

from synth.baselines import baseline
from synth.ir import schedule as schedule_mod
from synth.ir.fabric import build_fabric
from synth.ir.schedule import Schedule, Step, Transfer
from topo_probe.machines.clusters import cluster


@pytest.fixture(scope="module")
def fabric16():
    return build_fabric(cluster("dgx-h100", 2))


@pytest.mark.parametrize("coll,name", [("allreduce", "ring"), ("allgather", "direct"), ("reduce", "tree"),
                                       ("alltoall", "bruck"), ("allreduce", "oneshot")])
def test_indented_json_matches_the_encoder(fabric16, coll, name):
    s = baseline(name, fabric16, coll)
    assert s.to_json() == json.dumps(s.to_dict(), indent=1)
    assert Schedule.from_dict(json.loads(s.to_json())) == s


def test_edge_cases_match_the_encoder():
    empty = Schedule("allgather", 1, 1, ())
    idle = Schedule("allreduce", 2, 1, (Step(2, ()), Step(1, (Transfer(0, 0, 1, "reduce"), Transfer(1, 1, 0)))),
                    meta={"note": "x\\ty", "n": [1, 2]})
    for s in (empty, idle):
        assert s.to_json() == json.dumps(s.to_dict(), indent=1)


def test_big_schedules_stay_compact(fabric16, monkeypatch):
    s = baseline("ring", fabric16, "allgather")
    monkeypatch.setattr(schedule_mod, "INDENT_TRANSFERS", 10)
    assert s.to_json() == json.dumps(s.to_dict(), separators=(",", ":"))


@pytest.mark.parametrize("coll,name", [("allreduce", "ring"), ("alltoall", "bruck"), ("allreduce", "oneshot")])
def test_compact_json_matches_the_encoder(fabric16, monkeypatch, coll, name):
    """Past the threshold the steps are formatted as text too: the bytes of the compact encoder."""
    s = baseline(name, fabric16, coll)
    monkeypatch.setattr(schedule_mod, "INDENT_TRANSFERS", 10)
    assert s.to_json() == json.dumps(s.to_dict(), separators=(",", ":"))
    idle = Schedule("allreduce", 2, 1, (Step(2, ()), Step(1, (Transfer(0, 0, 1, "reduce"), Transfer(1, 1, 0)))),
                    meta={"note": "x\\ty\u00e9", "n": [1, 2]})
    monkeypatch.setattr(schedule_mod, "INDENT_TRANSFERS", 0)
    assert idle.to_json() == json.dumps(idle.to_dict(), separators=(",", ":"))
    assert Schedule.from_dict(json.loads(idle.to_json())) == idle
