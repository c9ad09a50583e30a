"""Importing the MSCCL algorithms RCCL ships (tests/fixtures/msccl, BSD licence beside them):
every instruction, in-place layouts, scratch, several channels, cross-threadblock dependencies,
2 x 16 GPUs; hostile and mutated files give one-line ScheduleFormatErrors and nothing else."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _paths import FIXTURES
from synth.formats.msccl.reader import from_msccl_xml
from synth.ir.fabric import build_fabric
from synth.ir.verifier import check
from topo_probe.errors import ScheduleFormatError, TopocollError
from topo_probe.load import load_topology
from topo_probe.machines.clusters import cluster

SAMPLES = FIXTURES / "msccl"
FILES = sorted(SAMPLES.glob("*.xml"))


def _fabric(n: int):
    if n == 8:
        return build_fabric(load_topology("mi300x"))
    if n <= 16:
        return build_fabric(load_topology(f"xgmi:{n}"))
    return build_fabric(cluster(load_topology(f"xgmi:{n // 2}"), 2))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_sample_imports_and_verifies_on_a_matching_topology(path):
    text = path.read_text()
    n = int(re.search(r'ngpus="(\d+)"', text).group(1))
    fab = _fabric(n)
    s = from_msccl_xml(text, source=path.name, fabric=fab)
    check(s, fab)                                    # independent second check
    assert s.ranks == n and s.meta["msccl"]["proto"] in ("LL", "LL128", "Simple")
    kinds = set(re.findall(r'type="(\w+)"', text))
    reduces = sum(t.op == "reduce" for step in s.steps for t in step.transfers)
    if s.collective == "allreduce":                  # every rank's contribution was combined somewhere
        assert reduces >= n - 1
    else:
        assert reduces == 0
    assert kinds <= {"s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop"}


def test_the_ring_with_fused_instructions_is_a_ring():
    s = from_msccl_xml((SAMPLES / "all-reduce-ring-simple.xml").read_text())
    assert (s.ranks, s.num_steps) == (16, 30)        # 2 (n - 1) steps
    per_step = {len(st.transfers) for st in s.steps}
    assert per_step == {16 * 24}                     # every rank moves each of its 24 chunk slices every step


def test_in_place_allgather_reads_its_input_inside_the_output():
    s = from_msccl_xml((SAMPLES / "allgather-8n-1mb-4mb.xml").read_text())
    assert (s.collective, s.chunks_per_rank, s.num_steps, s.meta["msccl"]["inplace"]) == ("allgather", 4, 1, True)


def _mutations(text: str, rng: random.Random) -> str:
    kind = rng.randrange(7)
    if kind == 0:                                                     # drop an attribute
        attrs = re.findall(r' \w+="[^"]*"', text)
        return text.replace(rng.choice(attrs), "", 1)
    if kind == 1:                                                     # an attribute out of range
        m = rng.choice(list(re.finditer(r'(\w+)="(-?\d+)"', text)))
        val = rng.choice(["-7", "99999999", "1e9", "", "x", "²", str(10 ** 30)])
        return text[:m.start(2)] + val + text[m.end(2):]
    if kind == 2:                                                     # truncate
        return text[: rng.randrange(len(text))]
    if kind == 3:                                                     # swap a step type
        m = rng.choice(list(re.finditer(r'type="(\w+)"', text)))
        return text[:m.start(1)] + rng.choice(["s", "r", "rcs", "rrs", "rrc", "re", "nop", "zz"]) + text[m.end(1):]
    if kind == 4:                                                     # delete a step line
        lines = text.splitlines()
        idx = rng.choice([k for k, ln in enumerate(lines) if "<step" in ln])
        return "\n".join(lines[:idx] + lines[idx + 1:])
    if kind == 5:                                                     # garbage bytes
        k = rng.randrange(len(text))
        return text[:k] + "".join(chr(rng.randrange(1, 0x2FF)) for _ in range(5)) + text[k:]
    return "<!DOCTYPE a [<!ENTITY x 'y'>]>" + text                    # hostile declarations


SMALL = [p for p in FILES if p.stat().st_size < 600_000]


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SMALL), st.integers(0, 2**32 - 1))
def test_mutated_samples_raise_only_project_errors(path, seed):
    text = _mutations(path.read_text(), random.Random(seed))
    try:
        s = from_msccl_xml(text, source=path.name)
    except ScheduleFormatError as e:
        assert "\n" not in str(e) and path.name in str(e)
        return
    except TopocollError:
        return
    check(s)                                         # what is accepted is a correct schedule


@pytest.mark.parametrize("text,msg", [
    ("<algo/>", "<algo>: missing attribute 'coll'"),
    ('<algo coll="allreduce" ngpus="99999"/>', "ngpus=99999 is out of range"),
    ('<algo name="x" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce" inplace="0">'
     '<gpu id="0" i_chunks="2" o_chunks="2" s_chunks="0"/></algo>', "gpu 1 is missing (ngpus=2)"),
    ('<algo name="x" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="0">'
     '<gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0"><tb id="0" send="-1" recv="-1" chan="0">'
     '<step s="0" type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>'
     '</tb></gpu><gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0"/></algo>', "gpu 0 tb 0 step 0: a 'r' step in a threadblock without a receive peer"),
])
def test_bad_programs_name_the_place(text, msg):
    with pytest.raises(ScheduleFormatError, match=re.escape(msg)):
        from_msccl_xml(text, source="t.xml")
