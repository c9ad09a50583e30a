"""The network an nccl-tests log names in its NCCL INFO lines (synth.formats.nccl_tests.network),
and simulate --import using it: a p5 log is modelled over EFA v2, not InfiniBand."""

from __future__ import annotations

import pytest
from _paths import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.cli.simulate import main
from synth.formats.nccl_tests.network import network_of
from synth.formats.nccl_tests.runs import parse_runs
from synth.model.nccl.machine import NET_KINDS

FIX = FIXTURES
P5_INFO = FIX / "nccl_tests_info" / "p5_all_reduce_with_net_info.txt"
P5 = FIX / "real_logs" / "h100_aws_p5_16gpu_2node_all_reduce_nccl2.22.3.txt"
P5_MACHINE = ["--topology", "dgx-h100", "--nodes", "2", "--nics-per-node", "32", "--nic-gbps", "12.5",
              "--baseline", "nccl"]

IB8 = ("node1:4321:4321 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [2]mlx5_4:1/IB [3]mlx5_5:1/IB "
       "[4]mlx5_6:1/IB [5]mlx5_9:1/IB [6]mlx5_10:1/IB [7]mlx5_11:1/IB ; OOB ibp24s0:10.0.0.1<0>")
ROCE = "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE ; OOB eth0:10.1.0.2<0>"
SOCKET = "h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.0.2<0> [1]eth1:10.2.0.2<0>"


@pytest.mark.parametrize("lines,kind,nics", [
    ([IB8, "h:1:1 [0] NCCL INFO Using network IB"], "ib", 8),
    ([IB8], "ib", 8),
    ([ROCE, "h:1:1 [0] NCCL INFO Using network IB"], "roce", 2),
    ([SOCKET, "h:1:1 [0] NCCL INFO Using network Socket"], "socket", 2),
    # IB listed, but NCCL fell back to sockets (NCCL_IB_DISABLE=1): the choice wins
    ([IB8, SOCKET, "h:1:1 [0] NCCL INFO Using network Socket"], "socket", 2),
    (["h:1:1 [0] NCCL INFO NET/OFI Running on p4d.24xlarge platform",
      "h:1:1 [0] NCCL INFO NET/OFI Selected Provider is efa, fabric is efa (found 4 nics)"], "efa", 4),
    (["h:1:1 [0] NCCL INFO NET/OFI Running on p5.48xlarge platform",
      "h:1:1 [0] NCCL INFO Using network AWS Libfabric"], "efa2", None),
    (["h:1:1 [0] NCCL INFO NET/OFI Running on p5en.48xlarge platform"], "efa2", None),
    (["h:1:1 [0] NCCL INFO NET/OFI Selected Provider is tcp, fabric is tcp"], "socket", None),
    (["h:1:1 [0] NCCL INFO NET/FasTrak plugin initialized", "h:1:1 [0] NCCL INFO Using network FasTrak"], "tcpxo", None),
    (["h:1:1 [0] NCCL INFO NET/GPUDirectTCPX ver. 3.1.6."], "tcpxo", None),
])
def test_each_transport_is_read_from_its_info_lines(lines, kind, nics):
    got = network_of(lines)
    assert (got.kind, got.nics) == (kind, nics)


def test_a_log_without_info_lines_says_nothing():
    assert network_of(P5.read_text().splitlines()) is None
    assert parse_runs(P5.read_text())[0].network is None


def test_every_run_of_a_file_gets_the_network_wherever_the_info_lines_are():
    body = ("# nThread 1 nGpus 1\n#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
            "  1024 256 float sum -1 5.0 0.20 0.20 0 5.0 0.20 0.20 0\n")
    text = "# Collective test starting: all_reduce_perf\n" + body + ROCE + "\n" + \
           "# Collective test starting: all_gather_perf\n" + body
    runs = parse_runs(text)
    assert len(runs) == 2 and all(r.network.kind == "roce" for r in runs)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=200),
                          st.sampled_from([IB8, ROCE, SOCKET, "NCCL INFO NET/OFI Running on p5.48xlarge platform"])
                          .flatmap(lambda s: st.integers(0, len(s)).map(lambda k: s[:k] + s[k + 1:]))),
                max_size=8))
def test_any_text_gives_a_known_kind_or_none(lines):
    got = network_of(lines)
    assert got is None or (got.kind in NET_KINDS and (got.nics is None or got.nics >= 0))


def _table(capsys):
    out = capsys.readouterr().out
    rows = [ln.split() for ln in out.splitlines() if ln.strip() and not ln.startswith("#")]
    return out, {int(r[0]): float(r[5]) for r in rows if r[0].isdigit()}


def test_simulate_import_models_the_network_the_log_names(capsys):
    assert main(P5_MACHINE + ["--import", str(P5_INFO)]) == 0
    out, from_log = _table(capsys)
    assert "network efa2 (the log: NET/OFI platform p5, provider efa)" in out
    assert main(P5_MACHINE + ["--net", "efa2", "--import", str(P5)]) == 0
    _, explicit = _table(capsys)
    assert main(P5_MACHINE + ["--import", str(P5)]) == 0          # no INFO lines: InfiniBand by default
    out, default = _table(capsys)
    assert "network ib (default)" in out
    assert from_log == explicit and from_log.keys() == default.keys()
    assert from_log[65536] > 2 * default[65536]                   # EFA's plugin latency is not IB's


def test_simulate_import_refuses_a_log_of_another_rank_count(capsys):
    assert main(["--topology", "dgx-h100", "--baseline", "nccl", "--import", str(P5_INFO)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "16 ranks on 2 hosts" in err and "has 8 GPUs" in err


def test_a_hostile_line_costs_no_time():
    import time
    line = "NCCL INFO NET/OFI " * 200_000
    t = time.process_time()
    assert network_of([line, line[:4000]]) is None
    assert time.process_time() - t < 1.0
