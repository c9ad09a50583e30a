"""MSCCL XML export: the runtime's rules hold, instructions fuse where msccl-tools fuses, the
attributes match RCCL's own files, and every export re-imports to the same transfers."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from _paths import FIXTURES, ROOT
from synth.formats.msccl import from_msccl_xml, to_msccl_xml
from synth.formats.msccl.layout import RECEIVES, SENDS
from synth.formats.msccl.parse import parse_program
from synth.formats.msccl.replay import replay
from synth.formats.msccl.writer import protocol_for
from synth.formats.schedule_file import load_schedule
from synth.ir.schedule import Schedule, Step, Transfer
from synth.ir.verifier import check
from _msccl import chain_broadcast, check_numerically
from topo_probe.errors import InvalidArgument, UnsupportedCollective


SAMPLES = FIXTURES / "msccl"


def ring_allgather(n: int) -> Schedule:
    steps = [Step(1, tuple(Transfer((r - k) % n, r, (r + 1) % n) for r in range(n))) for k in range(n - 1)]
    return Schedule("allgather", n, 1, tuple(steps), name="ring-ag")


def ring_allreduce(n: int, chunks: int = 1) -> Schedule:
    """Ring reduce-scatter (chunk g ends reduced at rank g) then ring allgather, as NCCL does."""
    steps = []
    for k in range(n - 1):
        steps.append(Step(chunks, tuple(Transfer(((r - k - 1) % n) * chunks + c, r, (r + 1) % n, "reduce")
                                        for r in range(n) for c in range(chunks))))
    for k in range(n - 1):
        steps.append(Step(chunks, tuple(Transfer(((r - k) % n) * chunks + c, r, (r + 1) % n)
                                        for r in range(n) for c in range(chunks))))
    return Schedule("allreduce", n, chunks, tuple(steps), name="ring-ar")




SCHEDULES = [ring_allgather(4), ring_allgather(5), ring_allreduce(4), ring_allreduce(3), ring_allreduce(4, 3),
             chain_broadcast(4, 3, 2)]


def rules_hold(xml: str, n: int) -> None:
    """The runtime's structural rules, checked on the XML tree independently of our parser."""
    algo = ET.fromstring(xml)
    gpus = algo.findall("gpu")
    assert [int(g.get("id")) for g in gpus] == list(range(n))
    sends: Counter = Counter()
    recvs: Counter = Counter()
    for g in gpus:
        rank, tbs = int(g.get("id")), g.findall("tb")
        assert [int(t.get("id")) for t in tbs] == list(range(len(tbs)))  # contiguous ids
        conns = [(t.get("chan"), "send", t.get("send")) for t in tbs if t.get("send") != "-1"]
        conns += [(t.get("chan"), "recv", t.get("recv")) for t in tbs if t.get("recv") != "-1"]
        assert len(conns) == len(set(conns))  # one threadblock per connection
        steps_of = {int(t.get("id")): t.findall("step") for t in tbs}
        for t in tbs:
            steps = steps_of[int(t.get("id"))]
            assert [int(s.get("s")) for s in steps] == list(range(len(steps)))
            for s in steps:
                kind, cnt = s.get("type"), int(s.get("cnt"))
                assert kind == "nop" or 1 <= cnt < 72
                if kind in SENDS:
                    assert int(t.get("send")) >= 0
                    sends[(rank, int(t.get("send")), t.get("chan"))] += cnt
                if kind in RECEIVES:
                    assert int(t.get("recv")) >= 0
                    recvs[(int(t.get("recv")), rank, t.get("chan"))] += cnt
                depid, deps = int(s.get("depid")), int(s.get("deps"))
                if depid >= 0:  # the step it waits on exists, raises its flag, and is no nop
                    target = steps_of[depid][deps]
                    assert target.get("hasdep") == "1" and target.get("type") != "nop"
                    assert depid != int(t.get("id"))
            # a nop only ever comes right before the step that carries the last dependency
            for a, b in zip(steps, steps[1:] + [None]):
                if a.get("type") == "nop":
                    assert b is not None and int(b.get("depid")) >= 0
    assert sends == recvs  # every chunk sent on a connection is received on it


def _transfers(s: Schedule) -> list:
    return sorted((t for st in s.steps for t in st.transfers), key=repr)


@pytest.mark.parametrize("sched", SCHEDULES, ids=lambda s: f"{s.name}-{s.ranks}-{s.chunks_per_rank}")
def test_export_obeys_runtime_rules_and_reimports_to_the_same_transfers(sched):
    check(sched)
    xml = to_msccl_xml(sched)
    rules_hold(xml, sched.ranks)
    back = from_msccl_xml(xml)
    check(back)
    check_numerically(back)
    assert (back.collective, back.ranks, back.chunks_per_rank, back.root) == \
        (sched.collective, sched.ranks, sched.chunks_per_rank, sched.root)
    assert _transfers(back) == _transfers(sched)


def test_ring_allreduce_fuses_like_rccls_own_ring():
    """Per rank a ring allreduce of one chunk per rank is s, (n-2) rrs, rrcs, (n-2) rcs, r: the
    instruction mix of RCCL's all-reduce-ring-simple.xml for each of its chunks."""
    n = 16
    kinds = Counter(re.findall(r'type="(\w+)"', to_msccl_xml(ring_allreduce(n))))
    assert kinds == {"s": n, "rrs": n * (n - 2), "rrcs": n, "rcs": n * (n - 2), "r": n}
    rccl = Counter(re.findall(r'type="(\w+)"', (SAMPLES / "all-reduce-ring-simple.xml").read_text()))
    chunks = 384
    assert {k: v // chunks for k, v in rccl.items()} == {k: v // n for k, v in kinds.items()} | {"rrs": 14, "rcs": 14}
    assert all(v % chunks == 0 for v in rccl.values())
    unfused = Counter(re.findall(r'type="(\w+)"', to_msccl_xml(ring_allreduce(n), fuse=False)))
    assert unfused == {"s": n * (n - 1) * 2, "rrc": n * (n - 1), "r": n * (n - 1)}


def test_attribute_sets_and_instruction_kinds_match_rcclss_files():
    ours = [to_msccl_xml(s) for s in SCHEDULES] + [to_msccl_xml(ring_allreduce(8), proto="LL")]

    def attrs(texts, tag):
        return {frozenset(e.attrib) for t in texts for e in ET.fromstring(t).iter(tag)}
    theirs = [p.read_text() for p in sorted(SAMPLES.glob("*.xml"))]
    # RCCL's ring file adds maxcount and nthreadblocks, which RCCL's parser never reads
    theirs_algo = {a - {"maxcount", "nthreadblocks"} for a in attrs(theirs, "algo")}
    assert attrs(ours, "algo") == theirs_algo
    for tag in ("gpu", "tb", "step"):
        assert attrs(ours, tag) == attrs(theirs, tag), tag
    kinds_ours = {k for t in ours for k in re.findall(r'type="(\w+)"', t)}
    kinds_theirs = {k for t in theirs for k in re.findall(r'type="(\w+)"', t)}
    assert kinds_ours <= kinds_theirs and {"rcs", "rrs", "rrcs"} <= kinds_ours


@pytest.mark.parametrize("style, spelling", [("rccl", "reducescatter"), ("azure", "reducescatter"),
                                             ("msccl", "reducescatter")])
def test_dialects_spell_reducescatter_their_way(style, spelling):
    """Every dialect writes the name both runtime parsers accept (``msccl_parser.cc`` refuses
    msccl-tools' ``reduce_scatter``)."""
    n = 3
    steps = [Step(1, tuple(Transfer((r - k - 1) % n, r, (r + 1) % n, "reduce") for r in range(n)))
             for k in range(n - 1)]
    xml = to_msccl_xml(Schedule("reducescatter", n, 1, tuple(steps)), style=style)
    assert f'coll="{spelling}"' in xml
    check(from_msccl_xml(xml))
    with pytest.raises(UnsupportedCollective):
        to_msccl_xml(ring_allgather(3), style="nccl")


def test_size_range_and_protocol_are_written():
    xml = to_msccl_xml(ring_allreduce(4), proto="LL", min_bytes=1024, max_bytes=65535, name='my "ring"')
    head = ET.fromstring(xml).attrib
    assert (head["proto"], head["minBytes"], head["maxBytes"], head["name"]) == ("LL", "1024", "65535", "my 'ring'")
    meta = from_msccl_xml(xml).meta["msccl"]
    assert (meta["min_bytes"], meta["max_bytes"], meta["proto"]) == (1024, 65535, "LL")
    assert protocol_for(256 * 1024) == "LL" and protocol_for(256 * 1024 + 1) == "Simple"
    with pytest.raises(InvalidArgument):
        to_msccl_xml(ring_allreduce(4), proto="LL64")
    with pytest.raises(InvalidArgument):
        to_msccl_xml(ring_allreduce(4), min_bytes=10, max_bytes=5)


def test_in_place_is_declared_only_when_it_verifies():
    xml = to_msccl_xml(ring_allreduce(4))
    assert 'inplace="1" outofplace="1"' in xml
    back = parse_program(xml)
    replay(back, ring_allreduce(4).spec, inplace=True, source="x")
    # 2-rank alltoall in two steps: rank 0 receives chunk 2 into o[1] (its i[1] when in place)
    # before it sends its own chunk 1 from i[1]: out of place only
    late = Schedule("alltoall", 2, 1, (Step(1, (Transfer(2, 1, 0),)), Step(1, (Transfer(1, 0, 1),))))
    check(late)
    assert 'inplace="0" outofplace="1"' in to_msccl_xml(late)
    with pytest.raises(InvalidArgument, match="not correct when called in place"):
        to_msccl_xml(late, inplace=True)
    assert 'inplace="0"' in to_msccl_xml(ring_allreduce(4), inplace=False)


def test_threadblock_cap_pairs_directions_then_refuses():
    from synth.baselines import baseline
    from synth.ir.fabric import build_fabric
    from topo_probe.machines.specs import parse_generator_spec
    s = baseline("direct", build_fabric(parse_generator_spec("full:8")), "alltoall")
    free = ET.fromstring(to_msccl_xml(s))
    assert max(len(g.findall("tb")) for g in free.iter("gpu")) == 14 + 1  # send + recv per peer, + local
    capped = to_msccl_xml(s, max_tbs_per_gpu=8)
    tree = ET.fromstring(capped)
    assert max(len(g.findall("tb")) for g in tree.iter("gpu")) == 8
    assert any(t.get("send") == t.get("recv") != "-1" for t in tree.iter("tb"))  # paired like RCCL's files
    rules_hold(capped, 8)
    assert _transfers(from_msccl_xml(capped)) == _transfers(s)
    with pytest.raises(InvalidArgument, match="gpu 0 needs 8 threadblocks even with sends and receives paired"):
        to_msccl_xml(s, max_tbs_per_gpu=7)


def _committed() -> list[Path]:
    return sorted(ROOT.glob("results/**/schedules/*.json"))


def test_there_are_committed_schedules_to_round_trip():
    assert len(_committed()) > 100


@pytest.mark.slow
@pytest.mark.parametrize("path", _committed(), ids=lambda p: str(p.relative_to(ROOT / "results")))
def test_every_committed_schedule_round_trips(path):
    s = load_schedule(path)
    xml = to_msccl_xml(s)
    back = from_msccl_xml(xml, source=str(path))
    check(back)
    assert _transfers(back) == _transfers(s)
