"""The export lowered once per schedule (:class:`synth.formats.msccl.writer.Export`) and checked
in place on the program itself (:mod:`synth.formats.msccl.as_program`) writes the same XML as the
text round trip it replaces: lower, print, parse the text back, replay it in place."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from synth.baselines import baseline
from synth.formats.msccl import as_program, parse
from synth.formats.msccl.layout import RUNTIME_MAX_STEPS_PER_TB
from synth.formats.msccl.parse import parse_program
from synth.formats.msccl.writer import (Export, _emit, build_program, most_steps_per_threadblock, protocol_for, runs_in_place_by_text,
                                        to_msccl_xml)
from synth.ir.fabric import build_fabric
from synth.ir.schedule import Schedule, Step, Transfer
from synth.ir.verifier import check
from synth.pipeline import msccl_export
from synth.plan.size_plan import Plan, PlanEntry
from topo_probe.errors import InvalidArgument
from topo_probe.machines.clusters import cluster

CASES = [("allreduce", "oneshot"), ("allreduce", "ring"), ("allgather", "direct"), ("reducescatter", "ring"),
         ("allreduce", "rhd"), ("allreduce", "tree")]


@pytest.fixture(scope="module")
def fabric16():
    return build_fabric(cluster("dgx-h100", 2))


def _late_alltoall() -> Schedule:
    """2-rank alltoall correct out of place only (rank 0 overwrites i[1] before sending it)."""
    s = Schedule("alltoall", 2, 1, (Step(1, (Transfer(2, 1, 0),)), Step(1, (Transfer(1, 0, 1),))))
    check(s)
    return s


def _reference_xml(s: Schedule, program=None, **kw) -> str:
    """The export as it was: lower, print, parse the text back and replay it in place.
    ``program``: ``build_program(s)`` when the caller already has it (the lowering does not depend on ``kw``)."""
    scratch, tbs, _ = program or build_program(s)
    head = Export(s).head(**kw)
    text = _emit(s, head, scratch, tbs)
    return text if runs_in_place_by_text(text, s.spec) else text.replace('inplace="1"', 'inplace="0"', 1)


def _without_lines(p):
    return dataclasses.replace(p, gpus=tuple(dataclasses.replace(g, tbs=tuple(
        dataclasses.replace(t, steps=tuple(dataclasses.replace(st, line=0) for st in t.steps)) for t in g.tbs))
        for g in p.gpus))


@pytest.mark.parametrize("coll,name", CASES)
def test_export_once_matches_the_text_round_trip(fabric16, coll, name):
    s = baseline(name, fabric16, coll)
    ex = Export(s)
    program = build_program(s)                   # the reference's lowering, once for both spans
    spans = [dict(min_bytes=0, max_bytes=8191, proto="LL", name="a"),
             dict(min_bytes=1 << 20, max_bytes=None, proto=protocol_for(None), name="a")]
    for kw in spans:
        text = ex.xml(**kw)
        assert text == _reference_xml(s, program, **kw)
        assert ex.most_steps() == most_steps_per_threadblock(text)
        head = ex.head(**kw)
        assert as_program.program_of(s, head, ex.scratch, ex.tbs) == _without_lines(
            parse_program(_emit(s, head, ex.scratch, ex.tbs)))


def test_out_of_place_only_program_is_still_declared_so():
    s = _late_alltoall()
    text = Export(s).xml()
    assert text == _reference_xml(s) and 'inplace="0" outofplace="1"' in text


def test_in_place_check_runs_once_per_schedule(fabric16, monkeypatch):
    s = baseline("ring", fabric16, "allreduce")
    calls = []
    real = as_program.program_of
    monkeypatch.setattr(as_program, "program_of", lambda *a: calls.append(1) or real(*a))
    ex = Export(s)
    for top in (8191, 65535, None):
        assert 'inplace="1"' in ex.xml(max_bytes=top, proto=protocol_for(top))
    assert len(calls) == 1


def test_text_the_parser_would_refuse_is_not_declared_in_place(fabric16, monkeypatch):
    """Before, an XML beyond the parser's element cap failed the in-place parse and was written
    with inplace="0"; the direct check says the same without parsing."""
    s = baseline("direct", fabric16, "allgather")
    cap = as_program.element_count(Export(s).tbs) - 1
    monkeypatch.setattr(parse, "MAX_ELEMENTS", cap)
    text = to_msccl_xml(s)
    assert 'inplace="0"' in text and text == _reference_xml(s)


def _plan_using(s: Schedule, file: str) -> Plan:
    return Plan("t", "f", [PlanEntry(s.collective, 0, 8192, file), PlanEntry(s.collective, 8192, None, "nccl")])


@pytest.mark.parametrize("only_plan", [False, True])
def test_plan_algorithm_rccl_cannot_load(fabric16, tmp_path, only_plan):
    """The one-shot all-reduce on 16 ranks sums 15 partials per chunk locally: built for RCCL
    (no rrc, 64 threadblocks) it needs more than 64 threadblocks, so it is not in msccl/: on a
    single host it goes to candidates/ in the generic form; at cluster scale (no candidates) it
    is not written; a note says why either way."""
    s = baseline("oneshot", fabric16, "allreduce")
    assert Export(s).most_steps() > RUNTIME_MAX_STEPS_PER_TB       # the generic lowering does not fit either
    file = "schedules/allreduce-oneshot.json"
    res = SimpleNamespace(schedules={"allreduce-oneshot": s}, files={"allreduce-oneshot": file}, summary={})
    msccl_export.export_msccl({"allreduce": res}, _plan_using(s, file), tmp_path, print, only_plan=only_plan,
                              runtime="rccl")
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.xml"))
    notes = res.summary["notes"]
    if only_plan:
        assert written == []
        assert any(n.startswith("msccl/allreduce-oneshot.xml not written: rccl cannot run it") and "threadblocks" in n
                   for n in notes)
    else:
        assert written == ["candidates/allreduce-oneshot.xml"]
        assert (tmp_path / written[0]).read_text() == _reference_xml(
            s, name="allreduce-oneshot", min_bytes=0, max_bytes=8191, proto=protocol_for(8191))
        assert any("not in the algorithm folder: rccl cannot run it" in n for n in notes)


def test_plan_algorithm_over_the_step_limit_is_spread_over_channels(fabric16, tmp_path):
    """The ring all-reduce's threadblocks are over the limit in the generic lowering (one channel
    per connection); built for RCCL its connections are cut over more channels until every
    threadblock fits, and the file RCCL's profile accepts is in msccl/."""
    from synth.formats.msccl.runtimes import RCCL, check_xml
    s = baseline("ring", fabric16, "allreduce")
    generic = Export(s)
    assert generic.most_steps() > RUNTIME_MAX_STEPS_PER_TB
    file = "schedules/allreduce-ring.json"
    res = SimpleNamespace(schedules={"allreduce-ring": s}, files={"allreduce-ring": file}, summary={})
    msccl_export.export_msccl({"allreduce": res}, _plan_using(s, file), tmp_path, print, only_plan=True,
                              runtime="rccl")
    assert sorted(p.name for p in tmp_path.rglob("*.xml")) == ["allreduce-ring.xml"]
    text = (tmp_path / "allreduce-ring.xml").read_text()
    program, bad = check_xml(text, RCCL)
    assert bad == [] and max(len(tb.steps) for g in program.gpus for tb in g.tbs) <= 64
    assert program.nchannels > generic.head()["nchannels"]


def test_a_candidate_no_power_of_two_call_picks_is_still_written(tmp_path):
    """The 8-GPU ring all-gather moves 7 chunks per rank (nchunksperloop 56): no power-of-two call
    picks it, so it can never be a ready file, but candidates/ (never loaded) keeps it, generic."""
    from synth.ir.fabric import build_fabric
    from topo_probe import get_preset
    s = baseline("ring", build_fabric(get_preset("mi300x")), "allgather")
    with pytest.raises(InvalidArgument, match="never picks"):
        Export(s, runtime="rccl").xml()
    res = SimpleNamespace(schedules={"allgather-ring": s}, files={"allgather-ring": "schedules/allgather-ring.json"},
                          summary={})
    msccl_export.export_msccl({"allgather": res}, Plan("t", "f"), tmp_path, print, runtime="rccl")
    written = tmp_path / "candidates" / "allgather-ring.xml"
    assert written.read_text() == Export(s).xml(name="allgather-ring")
