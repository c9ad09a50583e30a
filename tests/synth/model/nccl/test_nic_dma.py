"""A host whose NICs move GPU memory slower than their line rate (``NcclMachine.nic_dma_gbs``,
:attr:`synth.model.nccl.NcclMachine.gpu_net_gbps`): ABCI 2.0's 'Compute Node (A)', 4 x HDR
200 Gb/s, where the same repository's OSU osu_mbw_mr moved GPU buffers at 39.0 GB/s per host
(4 and 8 GPU pairs) and host buffers at 95 GB/s.  Hand-computed from those figures and NCCL's
NET_BW ratio (12 of 12.5 GB/s); NCCL's own graph search does not see the figure."""

from __future__ import annotations

import pytest

from _paths import ROOT
from synth.formats.nccl_tests.runs import load_runs
from synth.model.nccl import DEFAULT_PARAMS, NcclMachine, NcclModel
from synth.model.nccl.env import NcclEnv
from topo_probe import cluster
from topo_probe.errors import InvalidArgument

LOGS = ROOT / "tests" / "fixtures" / "real_logs"
V28 = (2, 8)
BIG = 8 << 30


def abci(hosts: int, dma: float = 39.0 / 4) -> NcclMachine:
    """``hosts`` x 8 A100 on NVSwitch with 4 x 25 GB/s NICs, each moving GPU memory at ``dma`` GB/s."""
    m = NcclMachine.from_topology(cluster("dgx-a100", nodes=hosts))
    return m.with_(nics_per_node=4, nic_gbps=25.0, nic_dma_gbs=dma)


def test_the_host_figure_is_four_nics_at_their_dma_rate():
    m = abci(2)
    assert m.used_net_gbps == 100.0                       # 4 x HDR line rate
    assert m.gpu_net_gbps == pytest.approx(39.0)         # 4 x 9.75: the OSU host figure
    assert m.with_(nic_dma_gbs=0.0).gpu_net_gbps == 100.0   # not stated: the line rate
    assert m.with_(nic_dma_gbs=30.0).gpu_net_gbps == 100.0  # above the line rate: no effect


def test_ring_streams_at_the_dma_rate_not_the_line_rate():
    """2 hosts, NCCL_ALGO=Ring, 8 GiB all_reduce: 4 NICs x 9.75 GB/s x 12/12.5 = 37.44 GB/s of bus
    bandwidth (the line rate would allow 96); the latency of 30 steps is under 1 % at this size."""
    env = NcclEnv.from_environ({"NCCL_ALGO": "Ring"})
    m = abci(2)
    c = NcclModel(m, env=env, version=V28).choose("allreduce", BIG)
    assert c.algorithm == "ring"
    assert DEFAULT_PARAMS.ring_net_efficiency("ib") == pytest.approx(12.0 / 12.5)
    assert c.busbw_gbps(m.ranks) == pytest.approx(4 * 9.75 * 12.0 / 12.5, rel=0.01)
    free = NcclModel(m.with_(nic_dma_gbs=0.0), env=env, version=V28).choose("allreduce", BIG)
    assert free.busbw_gbps(m.ranks) > 2 * c.busbw_gbps(m.ranks)


def test_nccl_builds_the_same_channels():
    """NCCL rates the GPU-NIC path by its PCIe widths (topo.cc), never by a DMA measurement: the
    graphs, and so the tuner's own estimates, are those of the line-rate host."""
    slow, free = NcclModel(abci(2), version=V28).table, NcclModel(abci(2, 0.0), version=V28).table
    assert slow.graphs == free.graphs
    assert (slow.graphs.ring.n_channels, slow.graphs.ring.bw_inter, slow.graphs.n_channels) == (4, 24.0, 8)
    assert slow.bandwidth == free.bandwidth


def test_two_abci_hosts_ring_rows_against_the_log():
    """The real 2-host table (NCCL 2.8.4): 16 MiB -> 32 MiB adds 861.3 µs, 36.5 GB/s of ring bus
    bandwidth on 16 ranks (16 MiB x 2 x 15/16 / 861.3 µs); the model's slope between the same rows
    is that of the 37.4 GB/s ceiling, within 15 %."""
    run = next(iter(load_runs(LOGS / "a100_16gpu_2node_all_reduce_abci_hdr.txt")))
    t = {row.size: row.out_of_place.time_us for row in run.rows}
    real = (16 << 20) * 2 * 15 / 16 / (t[32 << 20] - t[16 << 20]) / 1e3
    assert real == pytest.approx(36.5, abs=0.1)
    model = NcclModel(abci(2), env=NcclEnv.from_environ({"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}), version=V28)
    slope = (16 << 20) * 2 * 15 / 16 / (model.time_us("allreduce", 32 << 20) - model.time_us("allreduce", 16 << 20)) / 1e3
    assert slope == pytest.approx(real, rel=0.15)


def test_a_negative_figure_is_refused():
    with pytest.raises(InvalidArgument):
        abci(2, -1.0)


def test_the_figure_is_per_physical_nic_where_a_gpu_reaches_several():
    """AWS p5: 32 x 100 Gb/s EFA NICs for 8 H100s, each GPU on 4 of them (NCCL fuses them into one NIC its search
    sees).  A stated 12 GB/s per NIC, just under the 12.5 line rate, lets the 32 NICs move 384 GB/s of GPU memory,
    not the 8 fused NICs' 96 (the bus bandwidth fell from 467 to 148 GB/s)."""
    p5 = NcclMachine.from_topology(cluster("dgx-h100", nodes=2)).with_(nics_per_node=32, nic_gbps=12.5,
                                                                       net_kind="efa2", pcie_gen=5)
    assert p5.used_net_gbps == 400.0 and p5.visible_nics() == (8, 50.0)
    assert p5.with_(nic_dma_gbs=12.0).gpu_net_gbps == pytest.approx(32 * 12.0)
    assert p5.with_(ranks=2, nic_dma_gbs=12.0).gpu_net_gbps == pytest.approx(4 * 12.0)   # one GPU: its 4 NICs
    assert abci(2).with_(ranks=2).gpu_net_gbps == pytest.approx(9.75)                    # one GPU: its one HCA
