"""synth.model.nccl.tuner_plugin: the emulator of NCCL's example tuner plugin against cases
worked by hand from its source (plugins/tuner/example/plugin.c and src/enqueue.cc at NCCL
v2.30.3-1: loadConfig, pluginGetCollInfo, ncclGetAlgoInfo), and hostile files reported, not
crashing."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth.model.nccl.tuner_plugin import (
    ALGORITHMS,
    COLLECTIVES,
    PLUGIN_BUILDS,
    PROTOCOLS,
    SIZE_MAX,
    Query,
    match,
    parse_conf,
)

RING_LL = frozenset({("ring", "ll"), ("ring", "simple"), ("tree", "ll")})
WITH_NVLS = RING_LL | {("nvls", "simple")}


def q(coll="allreduce", nbytes=100, nodes=1, ranks=8, available=WITH_NVLS, **kw):
    return Query(coll, nbytes, nodes, ranks, frozenset(available), **kw)


CONF = parse_conf(
    "# comment\n"
    "allreduce,0,1000,nvls,simple,0,1,8\n"          # line 2: NVLS, NCCL's channels
    "allreduce,0,1000,tree,ll,4,1,8\n"              # line 3: taken where NVLS is IGNORE
    "allreduce,1001,2000,ring,ll,-1,1,8\n"          # line 4: channels -1
    "allreduce,0,-1,ring,simple,0,-1,-1\n"          # line 5: any shape, 0 .. 2^64-1
    "reduce,10,20,ring,ll,0,2,-1,-1,1\n")           # line 6: 2 nodes, registered buffers only


def test_the_first_matching_line_applies_and_channels_0_keep_ncclS_count():
    out = match(CONF, q(nbytes=1000))
    assert (out.line.number, out.algorithm, out.protocol, out.channel_cap) == (2, "nvls", "simple", None)
    assert not out.one_channel


def test_a_line_nccl_marks_unavailable_is_skipped_and_the_next_one_applies_with_its_channels():
    out = match(CONF, q(nbytes=0, available=RING_LL))               # no NVLS: line 2 is IGNORE
    assert (out.line.number, out.algorithm, out.protocol, out.channel_cap) == (3, "tree", "ll", 4)


def test_channels_minus_one_leaves_the_pluginS_one_channel():
    out = match(CONF, q(nbytes=1500))
    assert (out.line.number, out.channel_cap, out.one_channel) == (4, 1, True)


def test_byte_ranges_are_inclusive_and_minus_one_is_two_to_the_64_minus_one():
    assert match(CONF, q(nbytes=2000)).line.number == 4
    assert match(CONF, q(nbytes=2001)).line.number == 5
    assert CONF.lines[3].max_bytes == SIZE_MAX
    assert match(CONF, q(nbytes=SIZE_MAX)).line.number == 5


def test_node_and_rank_counts_must_be_equal_or_wildcards():
    assert match(CONF, q(nbytes=100, ranks=4)).line.number == 5      # lines 2-4 are for 8 ranks
    assert match(CONF, q(nbytes=100, nodes=2, ranks=8)).line.number == 5


def test_no_matching_line_leaves_ncclS_choice_on_one_channel():
    out = match(CONF, q("broadcast", 100))
    assert out.fell_through and out.one_channel and out.algorithm is None


def test_optional_fields_pipe_ops_and_reg_buff_are_wildcards_when_absent():
    assert CONF.lines[0].pipe_ops == -1 and CONF.lines[0].reg_buff == -1
    assert match(CONF, q("reduce", 15, nodes=2, ranks=16, reg_buff=1)).line.number == 6
    assert match(CONF, q("reduce", 15, nodes=2, ranks=16, reg_buff=0)).fell_through


def test_names_are_case_sensitive_and_unknown_ones_read_as_allreduce_ring_simple():
    c = parse_conf("AllGather,0,10,NVLS,LL,0,1,8\n", "t.conf")
    line = c.lines[0]
    assert (line.collective, line.algorithm, line.protocol) == ("allreduce", "ring", "simple")
    assert [p.split(": ", 1)[1].split(" ")[1] for p in c.report()] == ["collective", "algorithm", "protocol"]
    assert all(r.startswith("t.conf:1: unknown ") for r in c.report())


def test_empty_fields_vanish_and_shift_the_rest_as_strtok_does():
    c = parse_conf("allreduce,,0,100,ring,ll,0,1,8\n")              # 8 fields once the empty one is gone
    assert (c.lines[0].min_bytes, c.lines[0].max_bytes, c.lines[0].algorithm) == (0, 100, "ring")
    c = parse_conf("allreduce,0,,ring,ll,0,1,8\n")                   # 7 fields: ignored
    assert c.lines == () and any("7 fields" in p for p in c.report())


def test_numbers_read_as_strtoull_and_glibc_atoi_read_them():
    c = parse_conf("allreduce,-5,18446744073709551616,ring,ll,99999999999999999999,x,8,-1,-1,extra,more\n")
    line = c.lines[0]
    assert line.min_bytes == SIZE_MAX - 4                 # strtoull("-5") wraps
    assert line.max_bytes == SIZE_MAX                     # overflow: ULLONG_MAX
    assert line.channels == -1                            # strtol clamps to LONG_MAX, (int) keeps the low 32 bits
    assert line.nodes == 0                                # atoi("x")
    text = "\n".join(c.report())
    assert "12 fields" in text and "nNodes 0: matches no communicator" in text and "channels -1" in text


def test_a_line_over_255_bytes_is_read_in_pieces():
    long_line = "#" + "x" * 253 + "," + "allreduce,0,100,tree,ll,0,1,8\n"   # the 2nd fgets starts at ','
    c = parse_conf(long_line + "reduce,0,1,ring,ll,0,1,8\n")
    assert [(l.number, l.collective) for l in c.lines] == [(1, "allreduce"), (2, "reduce")]
    assert any("longer than 255 bytes" in p for p in c.report())


def test_comments_only_at_the_first_byte_and_crlf_lines_still_read():
    c = parse_conf("  # not a comment,0,1,ring,ll,0,1,8\r\nallreduce,0,1,ring,ll,0,1,8\r\n")
    assert c.lines[0].collective == "allreduce" and c.lines[0].number == 1 and c.lines[1].ranks == 8
    text = "\n".join(c.report())
    assert "'#' after blanks" in text and "carriage return" in text


def test_an_empty_or_missing_file_matches_nothing():
    assert match(parse_conf(""), q()).fell_through
    assert match(parse_conf("# only comments\n\n"), q()).fell_through


def test_only_the_2_30_3_build_reads_the_csv_and_survives_a_match():
    working = [b for b in PLUGIN_BUILDS if b.works]
    assert [(b.path, b.releases) for b in working] == [("plugins/tuner/example", "2.30.3 and later")]
    assert all("segfault" in b.note for b in PLUGIN_BUILDS if b.reads_csv and not b.works)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=600), st.binary(max_size=600),
                 st.lists(st.sampled_from(["allreduce", "reduce", "ring", "nvls", "ll", "simple", "-1", "0", "8",
                                           "18446744073709551615", "", " ", "#", "\r", "\t", "x" * 300]),
                          max_size=40).map(",".join)))
def test_any_text_is_read_without_raising_and_every_problem_is_one_line(text):
    planted = "nosuch,0,100,ring,simple,0,-1,-1,-1,-1"          # a line the plugin misreads, after the text
    text += ("\n" + planted) if isinstance(text, str) else ("\n" + planted).encode()
    c = parse_conf(text, "h.conf")
    n = (text.count("\n") if isinstance(text, str) else text.count(b"\n")) + 1
    reports = c.report()
    assert f"h.conf:{n}: unknown collective 'nosuch': the plugin reads it as allreduce" in reports
    assert all("\n" not in r and r.startswith("h.conf:") for r in reports), reports
    numbers = [int(r.split(":")[1]) for r in reports]
    assert numbers == sorted(numbers) and numbers[-1] == n, numbers   # in file order, the planted line last
    assert numbers[0] >= 1, numbers
    for line in c.lines:
        assert 0 <= line.min_bytes <= SIZE_MAX and 0 <= line.max_bytes <= SIZE_MAX
        assert -(1 << 31) <= line.channels < 1 << 31
        match(c, q(line.collective, line.min_bytes))                # never raises


# ------------------------------------------------------------------ the real plugin's answers
FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "nccl_tuner_plugin"


def _answers(name):
    for line in (FIXTURES / f"{name}.answers").read_text().splitlines():
        if line.startswith("#"):
            continue
        query, answer = line.split(" -> ")
        nodes, ranks, coll, nbytes, pipe, reg, mask = (int(x) for x in query.split())
        pairs = frozenset((a, p) for i, a in enumerate(ALGORITHMS) for j, p in enumerate(PROTOCOLS)
                          if mask >> (3 * i + j) & 1)
        yield Query(COLLECTIVES[coll], nbytes, nodes, ranks, pairs, pipe, reg), tuple(int(x) for x in answer.split())


@pytest.mark.parametrize("name", ["fresh_dgx_h100", "fresh_2x_dgx_a100", "committed_before_dgx_h100", "hostile"])
def test_the_emulator_answers_as_ncclS_compiled_plugin_does(name):
    """tests/fixtures/nccl_tuner_plugin: NCCL's plugins/tuner/example/plugin.c (v2.30.3-1) compiled
    on a CPU and called through ncclTunerPlugin_v5 (REFERENCE.md); the entry it set to 0.0 and
    the *nChannels it returned, for 800-900 queries per file."""
    conf = parse_conf((FIXTURES / f"{name}.conf").read_bytes(), name)
    n = 0
    for q, (algo, proto, channels) in _answers(name):
        out = match(conf, q)
        want = (None, None) if algo < 0 else (ALGORITHMS[algo], PROTOCOLS[proto])
        raw = 1 if out.line is None else (1 if out.line.channels == -1 else out.line.channels)
        assert ((out.algorithm, out.protocol), raw) == (want, channels), (q, out.label)
        n += 1
    assert n >= 800
