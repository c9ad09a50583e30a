"""Schedules as .json.gz wherever they are read (Schedule.load, load_schedule, plans), compact JSON
for big schedules, and hostile gzip bytes turned into ScheduleFormatError."""

from __future__ import annotations

import gzip
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from synth.formats.schedule_file import load_schedule, save_schedule
from synth.ir import schedule as schedule_mod
from synth.ir.schedule import Schedule, Step, Transfer
from topo_probe.errors import ScheduleFormatError

AG = Schedule("allgather", 3, 1, (Step(1, tuple(Transfer(r, r, (r + 1) % 3) for r in range(3))),
                                  Step(1, tuple(Transfer(r, (r + 1) % 3, (r + 2) % 3) for r in range(3)))))


def test_gzip_round_trip_through_every_reader(tmp_path):
    path = tmp_path / "ag.json.gz"
    save_schedule(AG, path)
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    assert Schedule.load(path) == load_schedule(path) == AG


def test_big_schedules_are_written_compact(tmp_path, monkeypatch):
    monkeypatch.setattr(schedule_mod, "INDENT_TRANSFERS", 4)
    text = AG.to_json()
    assert "\n" not in text and json.loads(text)["steps"][1]["transfers"][0] == {"chunk": 0, "src": 1, "dst": 2,
                                                                                  "op": "copy"}
    monkeypatch.setattr(schedule_mod, "INDENT_TRANSFERS", 6)
    assert "\n" in AG.to_json() and Schedule.from_dict(json.loads(AG.to_json())) == AG


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_mutated_gzip_is_an_error_or_a_schedule(tmp_path_factory, data):
    raw = bytearray(gzip.compress(AG.to_json().encode(), mtime=0))
    cut = data.draw(st.integers(2, len(raw)))
    flips = data.draw(st.lists(st.tuples(st.integers(2, len(raw) - 1), st.integers(0, 255)), max_size=3))
    for k, v in flips:
        raw[k] = v
    path = tmp_path_factory.mktemp("gz") / "s.json.gz"
    path.write_bytes(bytes(raw[:cut]))
    for reader in (Schedule.load, load_schedule):
        try:
            got = reader(path)
        except ScheduleFormatError:
            continue
        assert isinstance(got, Schedule)


def test_a_cluster_scale_schedule_passes_the_schedule_limits(tmp_path):
    """A one-step direct AllGather of 520 ranks: 269,880 transfers, more JSON objects than the
    general loader limit (2**18) but within the schedule limits, so it loads back equal from
    .json.gz through both readers."""
    from topo_probe.limits import MAX_JSON_CONTAINERS
    n = 520
    s = Schedule("allgather", n, 1, (Step(1, tuple(Transfer(c, c, d) for c in range(n) for d in range(n) if d != c)),))
    path = tmp_path / "big.json.gz"
    save_schedule(s, path)
    text = gzip.decompress(path.read_bytes()).decode()
    assert text.count("{") + text.count("[") > MAX_JSON_CONTAINERS
    assert load_schedule(path) == s
    assert Schedule.load(path) == s
