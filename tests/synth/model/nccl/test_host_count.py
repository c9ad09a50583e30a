"""All-reduce bus bandwidth on H100 InfiniBand clusters falls with the host count, as real clusters'
does: checked against real nccl-tests logs of 2, 4, 8 and 10 hosts (tests/fixtures/real_logs,
each with its SOURCE header)."""

from __future__ import annotations

import pytest

from _paths import ROOT
from synth.formats.nccl_tests.runs import load_runs
from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.runtime import tree_net_passes
from topo_probe import cluster

LOGS = ROOT / "tests" / "fixtures" / "real_logs"
#: hosts -> logs of 8 x H100 per host over 8 x 400 Gb/s InfiniBand, NCCL defaults
CLUSTER = {2: "h100_16gpu_2node_all_reduce_ib_8nodecluster.txt", 4: "h100_32gpu_4node_all_reduce_ib_8nodecluster.txt",
           8: "h100_64gpu_8node_all_reduce_ib_8nodecluster.txt", 10: "h100_80gpu_10node_all_reduce_5tests_8gpn.txt"}
BIG = 4 << 30


def measured_busbw(file: str, size: int = BIG) -> float:
    """Out-of-place busbw (GB/s) the log measured at ``size`` bytes."""
    run = next(r for r in load_runs(LOGS / file) if any(row.size == size for row in r.rows))
    return next(row.out_of_place.busbw_gbps for row in run.rows if row.size == size)


def predicted_busbw(hosts: int, size: int = BIG) -> float:
    m = NcclMachine.from_topology(cluster("dgx-h100", nodes=hosts))
    return NcclModel(m).choose("allreduce", size).busbw_gbps(m.ranks)


def test_the_tree_crosses_a_node_twice_per_direction_beyond_two_hosts():
    passes = [tree_net_passes(NcclMachine.from_topology(cluster("dgx-h100", nodes=k)), "nvls_tree") for k in (2, 3, 8)]
    assert passes == [1, 2, 2]


def test_busbw_falls_with_host_count_as_real_clusters_do():
    real = {h: measured_busbw(f) for h, f in CLUSTER.items()}
    pred = {h: predicted_busbw(h) for h in CLUSTER}
    assert real[4] < 0.8 * real[2] and pred[4] < 0.8 * pred[2]          # both fall by more than 20 %
    for h in (4, 8, 10):                                                  # and by the same amount (15 %)
        assert pred[h] / pred[2] == pytest.approx(real[h] / real[2], rel=0.15), (h, pred, real)
    for h in CLUSTER:
        assert pred[h] == pytest.approx(real[h], rel=0.15), (h, pred[h], real[h])
