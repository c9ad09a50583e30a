"""Schedule JSON written one string format per transfer is byte for byte what the indenting
encoder writes (``json.dumps(schedule.to_dict(), indent=1)``, the reference), empty steps,
reductions and schedules past the compact threshold included; a document's plain transfers are read
by a fast path that gives what the checked path gives (the reference), hostile ones included."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.baselines import baseline
from synth.ir import schedule as schedule_mod
from synth.ir.fabric import build_fabric
from synth.ir.schedule import OPS, Schedule, Step, Transfer
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


class _Dict(dict):
    pass


class _Str(str):
    pass


#: per field, values the checked path refuses or reads differently (5 ranks x 10 chunks below)
_HOSTILE = {"chunk": [-1, 10, True, None, 2.0, np.int64(3), "1"],
            "src": [-1, 5, False, None, 1.0, np.int64(1), "0"],
            "dst": [-1, 5, True, None, 4.0, np.int64(2), "4"],
            "op": ["send", "", None, 3, "COPY", _Str("copy"), _Str("send")]}


def _changed(t: dict):
    """``t`` and every one-change variant of it: each hostile value of each field, dst set to src, each key
    dropped, a dict subclass, the values as a list."""
    yield t
    for key, values in _HOSTILE.items():
        yield from ({**t, key: v} for v in values)
    yield {**t, "dst": t["src"]}
    yield from ({k: v for k, v in t.items() if k != drop} for drop in t)
    yield _Dict(t)
    yield list(t.values())


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.fixed_dictionaries({"chunk": st.integers(0, 9), "src": st.integers(0, 4), "dst": st.integers(0, 4)},
                             optional={"op": st.sampled_from(OPS)}))
def test_the_plain_transfer_fast_path_reads_what_the_checked_path_reads(valid):
    """Transfers of 5 ranks x 10 chunks, each with every one change of :func:`_changed`: every transfer the
    fast path takes is the checked path's Transfer (same field types); every other one goes to the checked
    path, whose line names what is wrong."""
    from synth.ir.collectives import CollectiveSpec
    spec = CollectiveSpec("allgather", 5, 2, None)
    for t in _changed(valid):
        fast = schedule_mod._plain_transfer(t, spec.num_chunks, spec.ranks)
        try:
            checked = schedule_mod._transfer(t, spec, "where")
        except Exception as exc:
            assert fast is None, (t, fast, exc)
            continue
        assert fast is None or (fast == checked and [type(getattr(fast, k)) for k in ("chunk", "src", "dst", "op")]
                                == [type(getattr(checked, k)) for k in ("chunk", "src", "dst", "op")]), (t, fast)


#: values of a transfer field beyond :data:`_HOSTILE`: huge, negative zero, NumPy bool/unsigned, bool for op
_MORE = [2**63, -(10**30), -0.0, np.bool_(True), np.uint64(1), 1 + 0j]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(coll=st.sampled_from(["allgather", "broadcast", "reduce", "alltoall"]), ranks=st.integers(2, 6),
       cpr=st.integers(1, 3), data=st.data())
def test_a_document_reads_the_same_with_and_without_the_fast_path(coll, ranks, cpr, data):
    """Whole documents through :meth:`Schedule.from_dict`, as read with the fast path and with it turned off
    (every transfer checked, the reference): the same Schedule (same field types) or the same error line.
    Collectives with more chunks than ranks and fewer (broadcast, reduce) catch a fast path handed the
    wrong bounds by the step reader."""
    from synth.ir.collectives import CollectiveSpec
    spec = CollectiveSpec(coll, ranks, cpr, 0 if coll in ("broadcast", "reduce") else None)
    n, r = spec.num_chunks, ranks
    edge = st.sampled_from([0, 1, n - 1, n, r - 1, r, max(n, r), *_MORE])
    field = st.one_of(st.integers(0, max(n, r)), edge)
    valid = {"chunk": data.draw(st.integers(0, n - 1)), "src": data.draw(st.integers(0, r - 1)),
             "dst": data.draw(st.integers(0, r - 1)), "op": data.draw(st.sampled_from(OPS))}
    odd = data.draw(st.fixed_dictionaries({}, optional={"chunk": field, "src": field, "dst": field,
                                                         "op": st.sampled_from([*OPS, "Copy", True]), "x": edge}))
    for t in (*_changed(valid), {**valid, **odd}):
        doc = {"format": schedule_mod.FORMAT, "version": 1, "collective": coll, "ranks": r, "chunks_per_rank": cpr,
               "root": spec.root, "steps": [{"rounds": 1, "transfers": [dict(valid, dst=(valid["src"] + 1) % r), t]}]}
        read = []
        for fast in (True, False):
            with pytest.MonkeyPatch.context() as mp:
                if not fast:
                    mp.setattr(schedule_mod, "_plain_transfer", lambda *_: None)
                try:
                    got = Schedule.from_dict(doc, "doc")
                    read.append((got, [[type(v) for v in (x.chunk, x.src, x.dst, x.op)]
                                       for s in got.steps for x in s.transfers]))
                except Exception as exc:                 # noqa: BLE001 -- the refusal itself is compared
                    read.append((type(exc), str(exc)))
        assert read[0] == read[1], (t, read)
