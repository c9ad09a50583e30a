"""The runtime profiles (:mod:`synth.formats.msccl.runtimes`) against RCCL's own algorithms,
deliberately broken copies of our exports, and the RCCL lowering replayed through the reader."""

from __future__ import annotations

import dataclasses
import gzip
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth import bandwidth_optimal, build_fabric, from_msccl_xml
from synth.baselines import BASELINES, baseline
from synth.formats.msccl.parse import parse_program
from synth.formats.msccl.program import XStep, XThreadblock
from synth.formats.msccl.runtimes import (MSCCL_EXECUTOR_NCCL, RCCL, RCCL_6_0, check_program, check_xml, picked,
                                          picked_sizes)
from synth.formats.msccl.writer import Export, to_msccl_xml
from synth.ir.collectives import ROOTED
from topo_probe import get_preset
from topo_probe.errors import InvalidArgument, TopocollError
from topo_probe.machines.specs import parse_generator_spec

FIXTURES = Path(__file__).parents[3] / "fixtures" / "msccl"
PRODUCTION = sorted((FIXTURES / "rccl-algorithms").glob("*.xml.gz"))


def _program(path: Path):
    return parse_program(gzip.decompress(path.read_bytes()).decode(), source=path.name)


def test_the_twelve_production_algorithms_are_there():
    assert len(PRODUCTION) == 12


@pytest.mark.parametrize("path", PRODUCTION, ids=lambda p: p.name)
def test_rccl_production_algorithms_pass_every_profile(path):
    """RCCL's own MI300X algorithms load and launch under every profile: on a GPU the checker does not know under
    RCCL's (64 CUs assumed, RCCL's cap), on an H100 (132 SMs) under msccl-executor-nccl, whose unknown GPU
    is given 32 SMs (more than the 64 threadblocks some of these launch would be refused there)."""
    program = _program(path)
    for profile, device in ((RCCL, None), (RCCL_6_0, None), (MSCCL_EXECUTOR_NCCL, "NVIDIA H100 80GB HBM3")):
        assert check_program(program, profile, device=device) == [], profile.name


def test_picked_sizes_by_hand():
    """allreduce-allpairs-8n-ll-64tb: nchunksperloop 512, [65537, 524287] bytes: float32 calls of
    2**15 and 2**16 elements (131072, 262144 bytes) only; alltoall-8n-0-9kb: nchunksperloop 8 =
    ngpus, every count from 1: 32 B (8 ranks x 1 float) up to 8192 B under maxBytes 9216."""
    ar = _program(FIXTURES / "rccl-algorithms" / "allreduce-allpairs-8n-ll-64tb.xml.gz")
    assert picked_sizes(ar) == [131072, 262144]
    assert picked(ar, 2 ** 15 + 512)                 # in range and a multiple of 512: picked
    assert not picked(ar, 2 ** 15 + 256)             # in range, not a multiple of 512
    assert not picked(ar, 2 ** 17)                   # a multiple, but 524288 bytes > maxBytes
    a2a = _program(FIXTURES / "rccl-algorithms" / "alltoall-8n-0-9kb.xml.gz")
    assert picked_sizes(a2a) == [32 * 2 ** k for k in range(9)]


def test_the_full_op_ring_is_refused_by_rccl_only():
    """RCCL's unit-test ring uses rcs/rrs/rrcs: only full-ops builds (ROCm 6.0) launch it; its
    nchunksperloop 384 (3 x 128) divides no power-of-two count, which every profile reports."""
    ring = parse_program((FIXTURES / "all-reduce-ring-simple.xml").read_text(), source="ring")
    never = ["nchunksperloop=384: count * 1 is never a multiple of it at a power-of-two count, so the runtime "
             "never picks it there"]
    assert any("rcs, rrcs, rrs" in v for v in check_program(ring, RCCL))
    assert check_program(ring, RCCL_6_0) == never and check_program(ring, MSCCL_EXECUTOR_NCCL) == never


@pytest.fixture(scope="module")
def ours():
    """Our RCCL export of a 4-rank ring all-reduce, and its program."""
    s = baseline("ring", build_fabric(parse_generator_spec("full:4")), "allreduce")
    text = to_msccl_xml(s, runtime="rccl")
    program = parse_program(text, source="ours")
    assert check_program(program, RCCL, every_size=True) == []
    return text, program


def _tb(program, gpu=0, tb=0, **changes):
    """``program`` with gpu ``gpu``'s threadblock ``tb`` changed."""
    g = program.gpus[gpu]
    tbs = list(g.tbs)
    tbs[tb] = dataclasses.replace(tbs[tb], **changes)
    gpus = list(program.gpus)
    gpus[gpu] = dataclasses.replace(g, tbs=tuple(tbs))
    return dataclasses.replace(program, gpus=tuple(gpus))


def _first_recv_tb(program):
    return next(i for i, tb in enumerate(program.gpus[0].tbs) if tb.recv >= 0)


def test_broken_copies_are_each_caught(ours):
    text, program = ours
    k = _first_recv_tb(program)
    tb = program.gpus[0].tbs[k]
    recv = next(i for i, s in enumerate(tb.steps) if s.kind == "r")
    full_op = list(tb.steps)
    full_op[recv] = dataclasses.replace(full_op[recv], kind="rrc")
    nop = XStep(0, "nop", "i", -1, "o", -1, 0, -1, -1, 0)
    long_tb = tb.steps + tuple(dataclasses.replace(nop, index=len(tb.steps) + i) for i in range(65 - len(tb.steps)))
    extra = tuple(XThreadblock(len(program.gpus[0].tbs) + i, -1, -1, 0, ()) for i in range(65 - len(program.gpus[0].tbs)))
    g0 = program.gpus[0]
    chain = (dataclasses.replace(nop, depid=k, deps=0), dataclasses.replace(tb.steps[0], index=1, depid=-1, deps=-1))
    broken = {
        "step types rrc": _tb(program, tb=k, steps=tuple(full_op)),
        "65 steps": _tb(program, tb=k, steps=long_tb),
        "65 threadblocks": dataclasses.replace(program, gpus=(dataclasses.replace(g0, tbs=g0.tbs + extra),)
                                               + program.gpus[1:]),
        "coll='reduce_scatter'": dataclasses.replace(program, coll_spelling="reduce_scatter"),
        "never picks it": dataclasses.replace(program, nchunksperloop=48),
        "cnt >= 72": _tb(program, tb=k, steps=(dataclasses.replace(tb.steps[0], cnt=72),) + tb.steps[1:]),
        "channel 128": _tb(program, tb=k, chan=128),
        "follows nop steps": _tb(program, tb=k, steps=chain),
        "more than 32": dataclasses.replace(program, gpus=(dataclasses.replace(g0, tbs=tuple(
            XThreadblock(i, 1 + i % 3, -1, 0, ()) for i in range(33))),) + program.gpus[1:]),
    }
    for what, bad in broken.items():
        found = check_program(bad, RCCL)
        assert any(what in v for v in found), (what, found)


def test_a_range_below_the_first_picked_call_is_caught_when_every_size_counts(ours):
    _, program = ours
    wide = dataclasses.replace(program, min_bytes=0)
    assert check_program(wide, RCCL) == []
    assert any("not picked" in v for v in check_program(wide, RCCL, every_size=True))


def test_mi300x_bandwidth_optimal_allreduce_and_reducescatter_run_on_rccl():
    fabric = build_fabric(get_preset("mi300x"))
    for coll in ("allreduce", "reducescatter"):
        s = bandwidth_optimal(fabric, coll, time_limit_s=20)
        generic = parse_program(to_msccl_xml(s), source="generic")
        assert check_program(generic, RCCL) != []                   # rrc / rrcs: refused before
        text = to_msccl_xml(s, runtime="rccl", max_bytes=1 << 30)
        program, bad = check_xml(text, RCCL, every_size=True)
        assert bad == [] and program.inplace and not set(program.instruction_counts()) - {"s", "r", "re", "cpy", "nop"}
        back = from_msccl_xml(text, fabric=fabric)
        assert back.collective == coll and back.ranks == 8


def test_a_schedule_that_cannot_fit_is_refused_with_the_rule():
    """A 70-rank direct all-gather needs a threadblock per peer: more than RCCL's 64."""
    s = baseline("direct", build_fabric(parse_generator_spec("full:70")), "allgather")
    with pytest.raises(InvalidArgument, match="threadblocks"):
        to_msccl_xml(s, runtime="rccl")


#: the largest value of the int8_t both runtimes keep a step's depid in (mscclThreadBlock.dependentBid,
#: src/include/msccl/msccl_struct.h line 58 at RCCL 0cbce2a7 and msccl-executor-nccl c6f6b36d)
INT8_MAX = 2 ** 7 - 1


def test_a_depid_the_runtimes_int8_cannot_hold_is_caught(ours):
    """depid 128 is -128 in the int8_t: the kernel would wait on a flag before the array."""
    _, program = ours
    k = _first_recv_tb(program)
    tb = program.gpus[0].tbs[k]
    bad = _tb(program, tb=k, steps=(dataclasses.replace(tb.steps[0], depid=INT8_MAX + 1, deps=0),) + tb.steps[1:])
    for profile in (MSCCL_EXECUTOR_NCCL, RCCL):
        assert any("depid above 127" in v for v in check_program(bad, profile)), profile.name
    ok = _tb(program, tb=k, steps=(dataclasses.replace(tb.steps[0], depid=INT8_MAX, deps=0),) + tb.steps[1:])
    assert not any("depid" in v for v in check_program(ok, MSCCL_EXECUTOR_NCCL))


def test_msccl_executor_exports_name_no_threadblock_an_int8_cannot_hold(executor_xml):
    """A 16-rank one-shot all-reduce of 2 chunks per rank wants 136 threadblocks per GPU, which
    msccl-executor-nccl loads (1,024), but a wait on threadblock 128 or above wraps: the export
    keeps every depid within the int8_t and still passes the profile (for an H100: its 132 SMs keep
    them resident; the V100s of the DGX-2 would cap them at 80, test_msccl_occupancy)."""
    text = executor_xml("NVIDIA H100 80GB HBM3")      # conftest.py: the DGX-2 one-shot, built once
    depids = [int(d) for d in re.findall(r'depid="(-?[0-9]+)"', text)]
    assert max(depids) == INT8_MAX
    assert check_xml(text, MSCCL_EXECUTOR_NCCL, every_size=True, device="NVIDIA H100 80GB HBM3")[1] == []


TOPOLOGIES = ("full:4", "ring:6", "dgx1-v100")


def _fabric(name, cache={}):
    if name not in cache:
        cache[name] = build_fabric(get_preset(name) if "-" in name else parse_generator_spec(name))
    return cache[name]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topo=st.sampled_from(TOPOLOGIES), coll=st.sampled_from(["allgather", "reducescatter", "allreduce",
                                                                "alltoall", "broadcast", "reduce"]),
       name=st.sampled_from(sorted(BASELINES)), runtime=st.sampled_from(["rccl", "msccl-executor-nccl"]))
def test_lowered_xml_replays_to_the_same_collective_and_passes_its_profile(topo, coll, name, runtime):
    try:
        s = baseline(name, _fabric(topo), coll, root=0 if coll in ROOTED else None)
    except TopocollError:
        return                                       # the baseline does not apply here
    try:
        ex = Export(s, runtime=runtime)
    except InvalidArgument as e:       # a rule it cannot be made to fit, named
        assert any(why in str(e) for why in ("threadblocks", "steps", "channels")), str(e)
        return
    try:
        text = ex.xml()
    except InvalidArgument as e:       # e.g. 6 chunks per rank on 8 GPUs: no power-of-two count is picked
        loop = ex.head()["nchunksperloop"]
        mult = s.ranks if coll in ("allgather", "reducescatter", "alltoall") else 1
        assert "never picks" in str(e) and all((2 ** k * mult) % loop for k in range(40)), str(e)
        return
    program, bad = check_xml(text, ex.profile, every_size=True)
    assert bad == []
    if runtime == "rccl":
        assert not set(program.instruction_counts()) & {"rcs", "rrs", "rrc", "rrcs"}
    back = from_msccl_xml(text, fabric=_fabric(topo))       # replayed and verified
    assert (back.collective, back.ranks, back.spec.num_chunks) == (s.collective, s.ranks, s.spec.num_chunks)
    moved = {(t.src, t.dst, t.chunk) for st_ in back.steps for t in st_.transfers}
    assert moved == {(t.src, t.dst, t.chunk) for st_ in s.steps for t in st_.transfers}


#: the largest chunk offset a step can name: both runtimes keep srcoff and dstoff in int16_t fields
#: (mscclTransmission.srcOffset/dstOffset, src/include/msccl/msccl_struct.h lines 44-45 at RCCL 0cbce2a7, the same
#: struct in msccl-executor-nccl; msccl_parser.cc lines 571-575 store them and 610-611 bounds-check only the wrapped
#: value, and the kernel, src/device/msccl_kernel_impl.h lines 292-293, multiplies it by the chunk size)
INT16_MAX = 2 ** 15 - 1


def _one_send_xml(offset: int) -> str:
    """A hand-written 2-rank all-gather of 65,536 chunks per loop whose one send and receive use ``offset``."""
    step = f'srcbuf="o" srcoff="{offset}" dstbuf="o" dstoff="{offset}" cnt="1" depid="-1" deps="-1" hasdep="0"'
    gpus = "".join(
        f'<gpu id="{g}" i_chunks="32768" o_chunks="65536" s_chunks="0">'
        f'<tb id="0" send="{1 - g if g == 0 else -1}" recv="{1 - g if g == 1 else -1}" chan="0">'
        f'<step s="0" type="{"s" if g == 0 else "r"}" {step}/></tb></gpu>' for g in (0, 1))
    return ('<algo name="x" proto="Simple" nchannels="1" nchunksperloop="65536" ngpus="2" coll="allgather" '
            f'inplace="0" outofplace="1" minBytes="0" maxBytes="0">{gpus}</algo>')


@pytest.mark.parametrize("profile", [RCCL, MSCCL_EXECUTOR_NCCL], ids=lambda p: p.name)
def test_a_chunk_offset_the_runtimes_int16_cannot_hold_is_caught(profile):
    """Offset 32,768 is -32,768 in the int16_t: RCCL's bounds check (msccl_parser.cc 270-288) then refuses the file."""
    assert check_xml(_one_send_xml(INT16_MAX), profile)[1] == []
    found = check_xml(_one_send_xml(INT16_MAX + 1), profile)[1]
    assert any("offset above 32767" in v for v in found), found


@settings(max_examples=40, deadline=None)
@given(offset=st.integers(0, 65535))
def test_every_offset_is_judged_by_the_int16_rule(offset):
    """Any offset of the 65,536-chunk buffer: refused by both profiles exactly where int16_t cannot hold it."""
    for profile in (RCCL, MSCCL_EXECUTOR_NCCL):
        found = check_xml(_one_send_xml(offset), profile)[1]
        assert any("offset above" in v for v in found) == (offset > INT16_MAX), (profile.name, found)
