"""Hostile and broken MSCCL XML: the reader answers a verified schedule or one ScheduleFormatError
line, never another exception, and refuses expensive input before building anything."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _paths import FIXTURES
from synth.formats.msccl import from_msccl_xml
from synth.formats.msccl.parse import MAX_DEPTH, MAX_XML_CHARS
from synth.ir.verifier import check
from _msccl import program, ring_allreduce_fused
from _mutations import billion_laughs
from topo_probe.errors import ScheduleFormatError

SAMPLES = FIXTURES / "msccl"
ATTR = re.compile(r'(\w+)="([^"]*)"')


def _two_gpu_allpairs() -> str:
    def gpu(me: int, peer: int):
        net = [("s", "i", peer, "s", 0), ("r", "i", 0, "s", 0, 1, -1, -1, 1), ("nop", "i", -1, "o", -1, 0, 0, 1),
               ("s", "i", me, "i", me, 1, -1, -1, 0), ("r", "i", peer, "i", peer, 1, -1, -1, 0)]
        return (2, 0, 1, [(-1, -1, 0, [("nop", "i", -1, "o", -1, 0, 1, 1), ("re", "s", 0, "i", me, 1, 1, 1, 1)]),
                          (peer, peer, 0, net)])
    return program("allreduce", 2, 2, {0: gpu(0, 1), 1: gpu(1, 0)}, inplace=1, outofplace=0)


BASES = [ring_allreduce_fused(3), _two_gpu_allpairs(), (SAMPLES / "allgather-8n-1mb-4mb.xml").read_text(),
         (SAMPLES / "alltoall-8n-1mb-4mb.xml").read_text()]
VALUES = st.one_of(st.integers(-3, 40).map(str), st.integers(5, 40).map(lambda k: str(10 ** k)),
                   st.sampled_from(["", "x", "nan", " 1", "0x10", "-0", "1e3", "i", "o", "s", "rrcs", "nop", "é"]))


@st.composite
def mutated(draw) -> str:
    text = draw(st.sampled_from(BASES))
    attrs = list(ATTR.finditer(text))
    kind = draw(st.sampled_from(["delete", "swap", "value", "truncate", "garbage", "nest", "dup", "drop_line"]))
    if kind == "delete":
        m = attrs[draw(st.integers(0, len(attrs) - 1))]
        return text[:m.start()] + text[m.end():]
    if kind == "swap":
        a, b = sorted(draw(st.lists(st.integers(0, len(attrs) - 1), min_size=2, max_size=2)))
        ma, mb = attrs[a], attrs[b]
        if a == b:
            return text
        return (text[:ma.start(2)] + mb.group(2) + text[ma.end(2):mb.start(2)] + ma.group(2) + text[mb.end(2):])
    if kind == "value":
        m = attrs[draw(st.integers(0, len(attrs) - 1))]
        return text[:m.start(2)] + draw(VALUES) + text[m.end(2):]
    if kind == "truncate":
        return text[:draw(st.integers(0, len(text)))]
    if kind == "garbage":
        at = draw(st.integers(0, len(text)))
        return text[:at] + draw(st.text(min_size=1, max_size=12)) + text[at:]
    if kind == "nest":
        k = draw(st.integers(1, 3 * MAX_DEPTH))
        at = text.index(">") + 1
        return text[:at] + "<x>" * k + "</x>" * k + text[at:]
    lines = text.split("\n")
    i = draw(st.integers(0, len(lines) - 1))
    if kind == "dup":
        return "\n".join(lines[:i + 1] + [lines[i]] + lines[i + 1:])
    return "\n".join(lines[:i] + lines[i + 1:])


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_programs_give_a_verified_schedule_or_one_format_error(text):
    try:
        s = from_msccl_xml(text, source="m.xml")
    except ScheduleFormatError as e:
        msg = str(e)
        assert msg.startswith("m.xml: ") and "\n" not in msg and len(msg) < 600
        return
    check(s)


def test_entity_expansion_and_doctype_are_refused_before_expanding():
    bomb = billion_laughs("algo", "name")
    t = time.process_time()
    with pytest.raises(ScheduleFormatError, match="DOCTYPE and ENTITY declarations are refused"):
        from_msccl_xml(bomb, source="b.xml")
    assert time.process_time() - t < 1.0


def test_an_instance_too_large_to_track_is_refused_before_building_it():
    gpus = "".join(f'<gpu id="{g}" i_chunks="0" o_chunks="0" s_chunks="0"/>' for g in range(4096))
    text = ('<algo name="x" proto="Simple" nchannels="1" nchunksperloop="1048576" ngpus="4096" coll="alltoall" '
            f'inplace="0" outofplace="1" minBytes="0" maxBytes="0">{gpus}</algo>')
    t = time.process_time()
    with pytest.raises(ScheduleFormatError, match=r"\(rank, chunk\) pairs, more than the"):
        from_msccl_xml(text)
    assert time.process_time() - t < 2.0


def test_size_and_depth_limits():
    with pytest.raises(ScheduleFormatError, match="characters is more than"):
        from_msccl_xml("<algo>" + " " * MAX_XML_CHARS + "</algo>")
    deep = "<algo>" + "<x>" * (MAX_DEPTH + 5) + "</x>" * (MAX_DEPTH + 5) + "</algo>"
    with pytest.raises(ScheduleFormatError, match="levels"):
        from_msccl_xml(deep)


@pytest.mark.parametrize("edit, match", [
    (('ngpus="8"', 'ngpus="100000000000000000000000"'), r"<algo>: attribute ngpus=.* is not an integer"),
    (('ngpus="8"', 'ngpus="9"'), r"gpu 8 is missing"),
    (('coll="allgather"', 'coll="alltoallv"'), r"coll='alltoallv' is not a collective"),
    (('<tb id="3"', '<tb id="70"'), r"gpu 0: threadblock ids must be 0..55 once each; tb 3 is missing"),
    (('send="1" recv="-1" chan="0"', 'send="0" recv="-1" chan="0"'), r"gpu 0 tb 28: a threadblock cannot send"),
    (('cnt="1"', 'cnt="9000000"'), r"attribute cnt=9000000 is out of range"),
    (('srcoff="2"', 'srcoff="32"'), r"gpu 0 tb 29 step 0: o\[32:33\] is outside buffer .o. of 32 chunks"),
    (('nchannels="32"', 'nchannels="2"'), r"channel \d+ is not below nchannels=2"),
])
def test_specific_faults_name_the_place(edit, match):
    text = (SAMPLES / "allgather-8n-1mb-4mb.xml").read_text().replace(*edit, 1)
    with pytest.raises(ScheduleFormatError, match=match):
        from_msccl_xml(text)
