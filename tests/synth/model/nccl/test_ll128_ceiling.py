"""NCCL's own ring LL128 ceiling, by version, in NCCL's choice and in the execution model.

tuning.cc ``ncclTopoTuneModel``: 2.5-2.6 ``min(busBw*120/128, ll128MaxBw[coll])`` (one figure per
collective: all_reduce 100, reduce 72 GB/s); 2.7-2.9 ``ll128MaxBwPerCh[coll]*graphs[a]->nChannels``
(all_reduce 16.7 / 16.9 GB/s per channel) with ``busBw * (ppn < 2 ? 0.7 : 0.92)`` (0.7 to 2.22); from 2.10
the per-architecture ``perChMaxRingLL128Bw`` x the ring graph's channels.  The execution model takes
that ceiling, on the graph's channels, shared by the CTAs that run.  Every number by hand."""

from __future__ import annotations

import pytest

from _paths import ROOT  # noqa: F401  (puts the repository on sys.path)
from synth.model.nccl import NcclEnv, NcclMachine, NcclModel
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.channel_caps import ring_channel_cap_gbs
from topo_probe import cluster, get_preset

DGX2_12 = NcclMachine.from_topology(get_preset("dgx2")).with_(ranks=12)
A100 = NcclMachine.from_topology(get_preset("dgx-a100"))
H100_10 = NcclMachine.from_topology(cluster("dgx-h100", nodes=10))


def _cap(m, coll, channels, version):
    return ring_channel_cap_gbs(m, "LL128", channels, comm_graphs(m, NcclEnv(), version), coll, version)


def test_nccl_25_ceiling_is_one_figure_per_collective():
    # 12 V100 of a DGX-2: a ring graph of 6 channels at 20 GB/s, duplicated to 12 CTAs
    g = comm_graphs(DGX2_12, NcclEnv(), (2, 5))
    assert (g.ring.n_channels, g.n_channels) == (6, 12)
    assert _cap(DGX2_12, "allreduce", 12, (2, 5)) == pytest.approx(100.0)
    assert _cap(DGX2_12, "reduce", 12, (2, 5)) == pytest.approx(72.0)
    assert _cap(DGX2_12, "allreduce", 6, (2, 5)) == pytest.approx(50.0)        # half the CTAs, half
    # NCCL 2.5's own estimate: min(6 x 20 x 120/128 = 112.5, 100) bus, x 12 / 22 algorithm bandwidth
    bw = NcclModel(DGX2_12, version=(2, 5)).table.bandwidth[("allreduce", "ring", "LL128")]
    assert bw == pytest.approx(100.0 * 12 / 22)


def test_later_ceiling_counts_the_graphs_channels_not_the_ctas():
    # 8 x A100: 12 graph channels (24 CTAs): 12 x 20 = 240 GB/s from 2.10, 12 x 16.9 = 202.8 in 2.8
    assert _cap(A100, "allreduce", 24, (2, 28)) == pytest.approx(240.0)
    assert _cap(A100, "allreduce", 24, (2, 8)) == pytest.approx(202.8)
    assert _cap(A100, "allreduce", 24, (2, 7)) == pytest.approx(12 * 16.7)
    # 10 x 8 H100: 8 graph channels x 36.7 (Hopper, any node count) = 293.6 GB/s on 16 CTAs
    g = comm_graphs(H100_10, NcclEnv(), (2, 29))
    assert (g.ring.n_channels, g.n_channels) == (8, 16)
    assert _cap(H100_10, "allgather", 16, (2, 29)) == pytest.approx(293.6)


def test_one_gpu_per_node_discount_ends_at_2_23():
    # LL128 forced on (NCCL_PROTO=LL128): busBw x 0.7 up to 2.22, x 0.92 from 2.23 (one GPU per node)
    one = NcclMachine.from_topology(cluster("dgx-h100", nodes=4)).with_(ranks=4)
    assert one.gpus_per_node == 1
    env = NcclEnv.from_environ({"NCCL_PROTO": "LL128"})
    key = ("allreduce", "ring", "LL128")
    b22, b23 = (NcclModel(one, env=env, version=v).table.bandwidth[key] for v in ((2, 22), (2, 23)))
    assert b23 > 0 and b22 / b23 == pytest.approx(0.7 / 0.92)
