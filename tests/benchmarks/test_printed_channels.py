"""benchmarks/printed_channels.py: the channel counts NCCL / RCCL printed in the fixtures equal the model's
init-time counts, apart from the listed exceptions; and the parser on hand-written, hostile input."""

from __future__ import annotations

import sys

from _paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import printed_channels as pc  # noqa: E402

#: every (fixture, count) the model does not reproduce, with why (a new mismatch fails the audit): none since the MOC
#: hosts' GPU 0 is described on a SYS path to its NIC (nic_path.net_path_gbs: the socket link's 16 GB/s, one channel),
#: a description read from these very counts (printed_channels.INFERRED_FROM_COUNT: not independent agreement)
KNOWN: dict = {}
#: every fixture that prints two values of one count (two communicators, or hosts that disagree), with why the
#: value :func:`printed_channels.parse` keeps is nccl-tests' own: none today, so a new one fails the audit
KNOWN_CONFLICTS: dict = {}

SNIPPET = """\
# SOURCE: made up; 99 coll channels in a header line are not INFO lines
h:1:2 [0] NCCL INFO NCCL version 2.22.3+cuda12.6
h:1:2 [0] NCCL INFO Channel 00/02 :    0   1
h:1:2 [0] NCCL INFO Channel 01/02 :    0   1
h:1:2 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1
h:1:2 [0] NCCL INFO 2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer
h:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/1
"""


def test_every_printed_count_is_the_models_or_a_listed_exception():
    from nccl_log_cases import ALL_CASES

    rows = pc.audit(ALL_CASES)
    assert len(rows) >= 20                              # the fixtures print (or their headers state) counts
    found = {(r["case"].file, k) for r in rows for k in r["diff"]}
    assert found == set(KNOWN), (found - set(KNOWN), set(KNOWN) - found)
    agree = [r for r in rows if not r["diff"]]
    inferred = {r["case"].file for r in agree if r["inferred"]}
    assert inferred == pc.INFERRED_FROM_COUNT          # both MOC fixtures audited, agreeing by construction
    assert len(agree) - len(inferred) >= 18            # the independent agreement, as before the MOC description
    conflicting = {r["case"].file: r["conflicts"] for r in rows if r["conflicts"]}
    assert set(conflicting) == set(KNOWN_CONFLICTS), conflicting


def test_the_snellius_mesh_prints_16_p2p_channels_per_peer_and_the_model_gives_it():
    # 4 x H100, 6 NVLinks a pair: ncclTopoGetNchannels gives each peer 2 x 6 = 12, pow2Up 16 (not 2 x 18 -> 32)
    from nccl_log_cases import ALL_CASES

    row = next(r for r in pc.audit(ALL_CASES) if r["case"].file == "h100_4gpu_1node_all_reduce_snellius_nvlink.txt")
    assert row["printed"]["p2p_per_peer"] == row["modelled"]["p2p_per_peer"] == 16
    assert row["printed"]["coll"] == row["modelled"]["coll"] == 24


def test_a_snellius_sendrecv_runs_on_at_most_16_channels_a_peer_not_32():
    # by hand: 6 links a pair -> 2 x 6 = 12 -> pow2Up 16; NVSwitch's 2 x 18 = 36 would give 32
    from nccl_log_cases import ALL_CASES
    from validate_cost_model import _Keyed, _log_and_machine

    from synth.model.nccl import NcclModel, p2p

    case = next(c for c in ALL_CASES if c.file == "h100_4gpu_1node_all_reduce_snellius_nvlink.txt")
    model = NcclModel(_log_and_machine(_Keyed(case))[2], version=case.version)
    g = model.table.graphs
    assert p2p.local_channel_bounds(model.machine, g)[1] == 16
    assert p2p.p2p_channels(model.machine, g, 1 << 30, case.version) == 16


def test_parse_reads_the_summary_ring_and_tree_lines():
    p = pc.parse(SNIPPET)
    assert p.counts == dict(coll=2, nvls=0, p2p=2, p2p_per_peer=2, ring=2, tree=2)
    assert p.source == "info" and not p.conflicts


def test_old_summary_line_and_pre_2_5_ring_lines():
    text = ("x [0] NCCL INFO Ring 00 :    0   1   2\nx [0] NCCL INFO Ring 01 :    0   2   1\n"
            "x [0] NCCL INFO 2 coll channels, 2 p2p channels, 2 p2p channels per peer\n")
    p = pc.parse(text)
    assert p.counts["ring"] == 2 and p.counts["coll"] == 2 and p.counts["nvls"] is None


def test_no_info_lines_gives_no_counts_and_a_header_statement_is_used_only_then():
    assert not pc.parse("#  size count type\n 8 2 float sum -1 10.0 0.00 0.00 0\n").any
    stated = pc.parse("# SOURCE: ... 16 coll channels, rings over P2P ...\n 8 2 float\n")
    assert stated.counts["coll"] == 16 and stated.source == "header"
    assert pc.parse("", why="2 coll and 2 p2p channels printed").counts["coll"] == 2
    assert pc.parse(SNIPPET).counts["coll"] == 2       # INFO lines win over the header's "99"


def test_truncated_lines_are_skipped():
    text = ("h [0] NCCL INFO 24 coll channels, 24 collnet chan\n"
            "h [0] NCCL INFO Channel 00/24 :    0   1\nh [0] NCCL INFO Channel 01/2\n"
            "h [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-\n")
    p = pc.parse(text)
    assert p.counts["coll"] is None and p.counts["tree"] is None and p.counts["ring"] == 24


def test_two_counts_in_one_log_the_most_printed_wins_then_the_larger():
    line = "h [{r}] NCCL INFO {n} coll channels, 0 nvls channels, 32 p2p channels, 16 p2p channels per peer\n"
    p = pc.parse(line.format(r=0, n=24) + line.format(r=1, n=24) + line.format(r=2, n=16))
    assert p.counts["coll"] == 24 and p.conflicts == {"coll": [16, 24]}
    tie = pc.parse(line.format(r=0, n=8) + line.format(r=1, n=16))
    assert tie.counts["coll"] == 16 and tie.conflicts == {"coll": [8, 16]}


def test_connection_lines_are_not_ring_lines():
    text = "h [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\nh [0] NCCL INFO Channel 01/1 : 0[0] -> 1[1]\n"
    assert pc.parse(text).counts["ring"] is None


def test_nccl_2_4_channel_lines_without_a_total_count_like_ring_lines():
    text = ("x [0] NCCL INFO Channel 00 :    0   1   2\nx [0] NCCL INFO Channel 01 :    0   2   1\n"
            "x [0] NCCL INFO Channel 02 :    0   1   2\nx [0] NCCL INFO Ring 00 : 0 -> 1 via P2P/IPC\n")
    assert pc.parse(text).counts["ring"] == 3


def test_the_committed_report_is_what_the_audit_gives_today():
    """results/model_validation/printed_channels.md (the numbers docs/nccl-model.md quotes) is the audit of the
    head's model and fixtures: rerun `python benchmarks/printed_channels.py --out results/model_validation`."""
    from nccl_log_cases import ALL_CASES

    committed = (ROOT / "results" / "model_validation" / "printed_channels.md").read_text()
    rows = pc.audit(ALL_CASES)
    assert committed == pc.report(rows)
    assert f"{sum(not r['diff'] for r in rows)} of {len(rows)} fixtures" in committed
