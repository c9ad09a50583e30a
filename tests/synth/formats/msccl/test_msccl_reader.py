"""MSCCL XML import: RCCL's shipped algorithms, every instruction, in-place layouts, and wrong
programs refused with one line naming gpu, threadblock and step."""

from __future__ import annotations


import pytest

from _paths import FIXTURES
from synth.formats.msccl import from_msccl_xml
from synth.formats.schedule_file import load_schedule
from synth.ir.fabric import build_fabric
from synth.ir.verifier import check
from _msccl import check_numerically, program, ring_allreduce_fused
from topo_probe.errors import ScheduleFormatError, ScheduleInvalid

SAMPLES = FIXTURES / "msccl"

# file: (collective, ranks, chunks per rank, in place only, IR transfers counted by hand)
EXPECTED = {
    # ring over 16 GPUs: each of 384 chunks crosses 15 links reducing, then 15 copying
    "all-reduce-ring-simple.xml": ("allreduce", 16, 24, False, 384 * 30),
    # 2 x 16 GPUs: 32*31 chunks leave their rank; the 480 that go through a relay cross twice
    "all-to-all-2d-hierarchical-simple-n2g32.xml": ("alltoall", 32, 1, False, 32 * 31 + 480),
    # in-place allgather: 4 chunks of each rank to 7 peers
    "allgather-8n-1mb-4mb.xml": ("allgather", 8, 4, True, 8 * 4 * 7),
    # all-pairs: every chunk to its owner (7 senders), then the sum back to 7 ranks
    "allreduce-allpairs-8n-ll.xml": ("allreduce", 8, 32, True, 256 * 7 * 2),
    # one step: every rank sends all 16 chunks to the 7 others and sums locally
    "allreduce_1step_mccl_8_2_8192_LL.xml": ("allreduce", 8, 2, True, 16 * 8 * 7),
    "alltoall-8n-1mb-4mb.xml": ("alltoall", 8, 4, False, 8 * 7 * 4),
}


def _fabric_for(ranks: int):
    from topo_probe.machines.clusters import cluster
    from topo_probe.machines.presets import get_preset
    from topo_probe.machines.specs import parse_generator_spec
    if ranks == 8:
        return build_fabric(get_preset("mi300x"))
    if ranks == 16:
        return build_fabric(parse_generator_spec("full:16"))
    return build_fabric(cluster(parse_generator_spec("full:16"), 2))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_rccl_algorithms_import_verify_and_compute_their_collective(name):
    coll, ranks, cpr, inplace_only, transfers = EXPECTED[name]
    fabric = _fabric_for(ranks)
    s = load_schedule(SAMPLES / name, fabric=fabric)
    assert (s.collective, s.ranks, s.chunks_per_rank, s.inplace) == (coll, ranks, cpr, inplace_only)
    assert sum(len(st.transfers) for st in s.steps) == transfers
    check(s, fabric)
    check_numerically(s)
    assert s.topology_fingerprint == fabric.fingerprint
    meta = s.meta["msccl"]
    assert meta["proto"] in ("LL", "Simple") and meta["nchunksperloop"] >= ranks


def test_attributes_are_read_into_meta():
    s = load_schedule(SAMPLES / "allreduce-allpairs-8n-ll.xml")
    m = s.meta["msccl"]
    assert (m["proto"], m["nchannels"], m["min_bytes"], m["max_bytes"], m["inplace"], m["outofplace"]) == \
        ("LL", 4, 20481, 327680, True, False)
    assert m["instructions"]["re"] == 1792 and m["instructions"]["nop"] == 2656
    assert m["max_threadblocks"] == 32


@pytest.mark.parametrize("max_bytes", [10**18, 2**63 - 1])
def test_a_max_bytes_of_19_digits_up_to_int64_is_read(max_bytes):
    """RCCL reads minBytes/maxBytes as int64 (mscclXmlGetAttrInt64, RCCL 2.21.5 src/misc/msccl/msccl_parser.cc
    lines 375-381): 10**18 and 2**63 - 1 (19 digits, the reader's own MAX_BYTES) are sizes, not 'not an integer'."""
    text = (SAMPLES / "allreduce-allpairs-8n-ll.xml").read_text()
    assert text.count('maxBytes="327680"') == 1
    s = from_msccl_xml(text.replace('maxBytes="327680"', f'maxBytes="{max_bytes}"'))
    assert s.meta["msccl"]["max_bytes"] == max_bytes


def test_fused_ring_in_the_rccl_style_is_read_with_reduce_then_copy_hops():
    s = from_msccl_xml(ring_allreduce_fused(4))
    check(s)
    check_numerically(s)
    ops = [t.op for st in s.steps for t in st.transfers]
    assert ops.count("reduce") == 4 * 3 and ops.count("copy") == 4 * 3
    assert s.num_steps == 6  # 2(n-1) rounds: a fused step forwards in the next round


def test_local_reduce_chain_scratch_and_cross_threadblock_dependencies():
    # 2 GPUs, allreduce of 2 chunks, RCCL all-pairs style: each sends the peer's chunk into the
    # peer's scratch, sums it locally with ``re`` in another threadblock that waits (nop + dep)
    # for the receive, then sends the sum back.
    def gpu(me: int, peer: int):
        net = [("s", "i", peer, "s", 0), ("r", "i", 0, "s", 0, 1, -1, -1, 1),
               ("nop", "i", -1, "o", -1, 0, 0, 0), ("s", "i", me, "i", me, 1, -1, -1, 0),
               ("r", "i", peer, "i", peer, 1, -1, -1, 0)]
        local = [("nop", "i", -1, "o", -1, 0, 1, 1), ("re", "s", 0, "i", me, 1, 1, 1, 1)]
        net[2] = ("nop", "i", -1, "o", -1, 0, 0, 1)
        return (2, 0, 1, [(-1, -1, 0, local), (peer, peer, 0, net)])
    xml = program("allreduce", 2, 2, {0: gpu(0, 1), 1: gpu(1, 0)}, inplace=1, outofplace=0)
    s = from_msccl_xml(xml)
    check(s)
    check_numerically(s)
    assert s.inplace and [[(t.src, t.dst, t.op) for t in st.transfers] for st in s.steps] == \
        [[(1, 0, "reduce"), (0, 1, "reduce")], [(1, 0, "copy"), (0, 1, "copy")]]


def test_multi_chunk_steps_move_every_chunk():
    gpus = {0: (2, 4, 0, [(-1, -1, 0, [("cpy", "i", 0, "o", 0, 2)]), (1, 1, 0, [("s", "i", 0, "o", 0, 2),
                                                                                ("r", "i", 0, "o", 2, 2)])]),
            1: (2, 4, 0, [(-1, -1, 0, [("cpy", "i", 0, "o", 2, 2)]), (0, 0, 0, [("s", "i", 0, "o", 2, 2),
                                                                                ("r", "i", 0, "o", 0, 2)])])}
    s = from_msccl_xml(program("allgather", 2, 4, gpus))
    check(s)
    assert sorted((t.chunk, t.src, t.dst) for st in s.steps for t in st.transfers) == \
        [(0, 0, 1), (1, 0, 1), (2, 1, 0), (3, 1, 0)]


def _allgather_two(tb0_steps, tb1_steps, local0=(("cpy", "i", 0, "o", 0),), **kw):
    return program("allgather", 2, 2, {0: (1, 2, 0, [(-1, -1, 0, list(local0)), (1, 1, 0, tb0_steps)]),
                                       1: (1, 2, 0, [(-1, -1, 0, [("cpy", "i", 0, "o", 1)]), (0, 0, 0, tb1_steps)])},
                   **kw)


GOOD0 = [("s", "i", 0, "o", 0), ("r", "i", 0, "o", 1)]
GOOD1 = [("s", "i", 0, "o", 1), ("r", "i", 0, "o", 0)]
COPY0 = [("cpy", "i", 0, "o", 0)]


def test_hand_allgather_is_fine_and_in_place_it_lives_in_the_output():
    check(from_msccl_xml(_allgather_two(GOOD0, GOOD1)))
    inplace = program("allgather", 2, 2, {0: (0, 2, 0, [(1, 1, 0, [("s", "o", 0, "o", 0), ("r", "o", 1, "o", 1)])]),
                                          1: (0, 2, 0, [(0, 0, 0, [("s", "o", 1, "o", 1), ("r", "o", 0, "o", 0)])])},
                      inplace=1, outofplace=0)
    assert from_msccl_xml(inplace).inplace


@pytest.mark.parametrize("steps0, steps1, local0, match", [
    # both receive first: nobody ever sends
    ([("r", "i", 0, "o", 1), ("s", "i", 0, "o", 0)], [("r", "i", 0, "o", 0), ("s", "i", 0, "o", 1)], COPY0,
     r"gpu 0 tb 1 step 0: waits forever for a message from gpu 1"),
    # a send nobody receives
    (GOOD0 + [("s", "i", 0, "o", 0)], GOOD1, COPY0,
     r"gpu 0 tb 1 step 2: sends to gpu 1 on channel 0 but no step receives it"),
    # gpu 0 never copies its own chunk into its output
    (GOOD0, GOOD1, [("nop", "i", -1, "o", -1)], r"gpu 0: run out of place, output o\[0\] ends with nothing"),
    # received onto the place another threadblock writes
    ([("s", "i", 0, "o", 0), ("r", "i", 0, "o", 0)], GOOD1, COPY0,
     r"gpu 0 tb 1 step 1: writes o\[0\], which gpu 0 tb 0 step 0 also uses, and nothing orders the two \(a race\)"),
    # sends what is not there yet
    ([("s", "o", 1, "o", 0), ("r", "i", 0, "o", 1)], GOOD1, COPY0,
     r"gpu 0 tb 1 step 0: reads o\[1\] before anything is there"),
    # a count that does not match the sender's
    ([("s", "i", 0, "o", 0), ("r", "i", 0, "o", 0, 2)], GOOD1, COPY0,
     r"gpu 0 tb 1 step 1: receives 2 chunks but gpu 1 tb 1 step 0 sent 1"),
    # reduce in an allgather
    ([("s", "i", 0, "o", 0), ("rrc", "i", 0, "o", 1)], GOOD1, COPY0, r"gpu 0 tb 1 step 1: a 'rrc' step in allgather"),
])
def test_wrong_programs_are_refused_naming_gpu_threadblock_and_step(steps0, steps1, local0, match):
    with pytest.raises(ScheduleFormatError, match=match) as e:
        from_msccl_xml(_allgather_two(steps0, steps1, local0), source="x.xml")
    assert "\n" not in str(e.value) and str(e.value).startswith("x.xml: ")


def test_a_race_and_a_dependency_that_never_signals_are_found():
    # gpu 0 copies its input to o[0] in tb 0 while tb 1 sends o[0]: nothing orders them
    race = program("allgather", 2, 2, {
        0: (1, 2, 0, [(-1, -1, 0, [("cpy", "i", 0, "o", 0)]),
                      (1, 1, 0, [("r", "i", 0, "o", 1), ("s", "o", 0, "o", 0)])]),
        1: (1, 2, 0, [(-1, -1, 0, [("cpy", "i", 0, "o", 1)]),
                      (0, 0, 0, [("s", "i", 0, "o", 1), ("r", "i", 0, "o", 0)])])})
    with pytest.raises(ScheduleFormatError, match=r"gpu 0 tb 1 step 1: reads o\[0\] written by gpu 0 tb 0 step 0, "
                                                  r"and nothing orders the two \(a race\)"):
        from_msccl_xml(race)
    # fixed by a dependency ... unless the step it names never raises its flag (hasdep=0)
    ok = race.replace('type="s" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1"',
                      'type="s" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="0" deps="0"')
    check(from_msccl_xml(ok))
    cpy = 'type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep='
    silent = ok.replace(cpy + '"1"', cpy + '"0"')
    with pytest.raises(ScheduleFormatError, match=r"gpu 0 tb 1 step 1: waits on tb 0 step 0, which never signals"):
        from_msccl_xml(silent)


def test_double_counting_and_relaying_a_partial_are_refused():
    # 2-GPU allreduce where gpu 1 adds gpu 0's partial twice
    twice = program("allreduce", 2, 2, {
        0: (2, 2, 0, [(1, 1, 0, [("s", "i", 0, "o", 0, 2), ("r", "i", 0, "o", 0, 2)])]),
        1: (2, 2, 0, [(0, 0, 0, [("rrc", "i", 0, "o", 0, 2), ("re", "o", 0, "o", 0, 2, -1, -1, 1)])])})
    with pytest.raises(ScheduleFormatError, match=r"gpu 1 tb 0 step 1: counts the contributions of ranks \[0, 1\]"):
        from_msccl_xml(twice)
    # 3 GPUs: gpu 1 forwards gpu 0's partial untouched (rcs) while holding its own: no IR form
    # (a correct program: gpu 2 adds both partials, one per channel)
    relay = program("reduce", 3, 1, {
        0: (1, 1, 0, [(1, -1, 0, [("s", "i", 0, "o", 0)])]),
        1: (1, 1, 1, [(2, 0, 0, [("rcs", "i", 0, "s", 0)]), (2, -1, 1, [("s", "i", 0, "o", 0)])]),
        2: (1, 1, 0, [(-1, 1, 0, [("rrc", "i", 0, "o", 0)]),
                      (-1, 1, 1, [("rrc", "o", 0, "o", 0, 1, 0, 0)])])})
    with pytest.raises(ScheduleFormatError, match=r"gpu 2 tb 0 step 0: receives from gpu 1 the contributions \[0\] "
                                                  r"to chunk 0, but gpu 1's copy then holds \[0, 1\]"):
        from_msccl_xml(relay)


def test_a_fabric_without_the_link_is_a_schedule_invalid():
    from topo_probe.machines.specs import parse_generator_spec
    ring = build_fabric(parse_generator_spec("ring:8"))
    with pytest.raises(ScheduleInvalid, match=r"gpu \d+ tb \d+ step \d+: gpu \d+ -> gpu \d+ is not a channel"):
        load_schedule(SAMPLES / "alltoall-8n-1mb-4mb.xml", fabric=ring)
    other = build_fabric(parse_generator_spec("full:4"))  # another rank count: not used, not tagged
    assert load_schedule(SAMPLES / "alltoall-8n-1mb-4mb.xml", fabric=other).topology_fingerprint == ""


@pytest.mark.parametrize("n", [2, 4, 8])
def test_one_shot_allreduce_round_trips(n):
    """A one-shot all-reduce sends each rank's own input while that rank already reduces its
    peers' into its output: the export runs the sends over several rounds, and the reader moves
    each back to round 0, where the sender held exactly what it sent; the result is the one-step
    schedule transfer for transfer (n(n-1) reduces per chunk, n chunks)."""
    from synth.baselines import baseline
    from synth.formats.msccl import to_msccl_xml
    from topo_probe.machines.generators import fully_connected
    fab = build_fabric(fully_connected(n))
    sched = baseline("oneshot", fab, "allreduce")
    back = from_msccl_xml(to_msccl_xml(sched), fabric=fab)
    check(back, fab)
    assert back.num_steps == 1
    key = sorted((t.chunk, t.src, t.dst, t.op) for t in back.steps[0].transfers)
    assert key == sorted((t.chunk, t.src, t.dst, t.op) for t in sched.steps[0].transfers)
    assert len(key) == n * n * (n - 1)
