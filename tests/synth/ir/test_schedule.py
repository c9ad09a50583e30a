"""Schedule IR JSON: round trips and precise errors for malformed documents."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.ir.schedule import Schedule, Step, Transfer
from topo_probe.errors import ScheduleFormatError


@st.composite
def schedules(draw):
    n = draw(st.integers(2, 5))
    c = draw(st.integers(1, 3))
    nchunks = n * c
    steps = []
    for _ in range(draw(st.integers(0, 4))):
        ts = []
        for _ in range(draw(st.integers(0, 5))):
            src = draw(st.integers(0, n - 1))
            dst = draw(st.integers(0, n - 1).filter(lambda d: d != src))
            ts.append(Transfer(draw(st.integers(0, nchunks - 1)), src, dst,
                               draw(st.sampled_from(["copy", "reduce"]))))
        steps.append(Step(draw(st.integers(1, 4)), tuple(ts)))
    coll = draw(st.sampled_from(["allgather", "reducescatter", "allreduce"]))
    return Schedule(coll, n, c, tuple(steps), name="rand", topology_name="t", topology_fingerprint="f")


@given(schedules())
@settings(derandomize=True, max_examples=100)
def test_json_round_trip(s):
    back = Schedule.from_dict(json.loads(s.to_json()))
    assert back == s
    assert back.to_dict()["cost"] == {"steps": s.num_steps, "rounds": s.num_rounds, "chunks": s.chunks_per_rank}


def _doc():
    return Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),)).to_dict()


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.update(format="other"), "format must be 'topocoll.schedule'"),
    (lambda d: d.update(version=9), "version 9 is not supported"),
    (lambda d: d["steps"][0]["transfers"][1].update(src=5), r"steps\[0\].transfers\[1\].src 5 is not a rank"),
    (lambda d: d["steps"][0]["transfers"][0].update(chunk=2), r"transfers\[0\].chunk 2 is out of range"),
    (lambda d: d["steps"][0].update(rounds=0), r"steps\[0\].rounds must be >= 1"),
    (lambda d: d["steps"][0]["transfers"][0].update(op="add"), "op must be 'copy' or 'reduce'"),
    (lambda d: d["chunks"][0].update(post=[0]), r"chunks\[0\]: pre/post"),
    (lambda d: d.pop("ranks"), "missing field 'ranks'"),
    (lambda d: d.update(ranks="2"), "ranks must be an integer"),
])
def test_malformed_documents_name_the_field(mutate, message):
    d = _doc()
    mutate(d)
    with pytest.raises(ScheduleFormatError, match=message):
        Schedule.from_dict(d, "s.json")


def test_save_is_atomic_and_load_reports_bad_json(tmp_path):
    s = Schedule.from_dict(_doc())
    p = tmp_path / "a" / "s.json"
    s.save(p)
    assert Schedule.load(p) == s
    assert [x.name for x in p.parent.iterdir()] == ["s.json"]
    p.write_text("{bad")
    with pytest.raises(ScheduleFormatError, match="line 1 column 2: invalid JSON"):
        Schedule.load(p)


def test_hash_is_computed_once_equal_schedules_hash_alike_and_pickles_drop_it():
    """Executors hash a schedule on every call: the hash is kept on the object, equals a fresh
    equal schedule's, differs for a changed one, and is not carried through pickle/copy (string
    hashes differ between processes)."""
    import copy
    import pickle

    from synth.baselines import baseline
    from synth.ir.fabric import build_fabric
    from topo_probe.machines.generators import ring as ring_topology

    fabric = build_fabric(ring_topology(6))
    s = baseline("ring", fabric, "allreduce", chunks=2)
    h = hash(s)
    assert s.__dict__["_hash"] == h
    twin = baseline("ring", fabric, "allreduce", chunks=2)
    assert twin == s and hash(twin) == h and "_hash" not in pickle.loads(pickle.dumps(s)).__dict__
    assert "_hash" not in copy.copy(s).__dict__ and hash(copy.deepcopy(s)) == h
    assert hash(s.with_(name="renamed")) != h and hash(s.with_(inplace=True)) != h
