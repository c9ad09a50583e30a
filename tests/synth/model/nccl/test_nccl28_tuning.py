"""NCCL 2.8's tuner on 8 x A100 (NVIDIA/nccl v2.8.4-1 src/graph/tuning.cc ``ncclTopoTuneModel``):
Ampere's graph bandwidth capped at 235 GB/s, ring LL at a quarter of it (all_reduce) or a third
(broadcast on one node), ring LL128 at 16.9 GB/s per graph channel for all_reduce; from 2.21 LL
takes half (``busBw * .5``, v2.21.5-1), so a 2.28 run keeps llMaxBws' 87.7.  Every number below is
worked by hand from those lines and the latency rows of v2.8.4-1 (ring LL 3.6 + 0.47 per NVLink hop,
LL128 10.0 + 1.9, Simple 8.4 + 3.4)."""

from __future__ import annotations

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.channel_caps import ring_channel_cap_gbs
from topo_probe import cluster, get_preset

A100 = NcclMachine.from_topology(get_preset("dgx-a100"))
V28, V228 = (2, 8), (2, 28)


def test_graph_is_twelve_rings_capped_at_235():
    """12 duplicated rings (24 channels after ncclTopoPostset); 12 x 20 GB/s = 240 > 235."""
    t = NcclModel(A100, version=V28).table
    assert (t.graphs.ring.n_channels, t.graphs.n_channels) == (12, 24)
    assert t.bandwidth[("allreduce", "ring", "Simple")] == pytest.approx(235.0 * 8 / 14)


def test_ring_ll_and_ll128_bandwidths_by_hand():
    """all_reduce: LL min(87.7, 235 / 4) = 58.75, LL128 min(235 x 0.92, 16.9 x 12) = 202.8 GB/s bus,
    times 8 / 14; broadcast LL min(87.7, 235 / 3) = 78.33 (ratio 8 / 8).  2.28: LL min(87.7, 240 / 2)."""
    b = NcclModel(A100, version=V28).table.bandwidth
    assert b[("allreduce", "ring", "LL")] == pytest.approx(58.75 * 8 / 14)
    assert b[("allreduce", "ring", "LL128")] == pytest.approx(202.8 * 8 / 14)
    assert b[("broadcast", "ring", "LL")] == pytest.approx(235.0 / 3)
    assert NcclModel(A100, version=V228).table.bandwidth[("allreduce", "ring", "LL")] == pytest.approx(87.7 * 8 / 14)


def test_protocol_switch_points_by_hand():
    """NCCL 2.8's estimates: 1 MiB LL 3.6 + 14 x 0.47 + 1048576 / 33571 B/us = 41.41 us < LL128
    36.6 + 1048576 / 115886 = 45.65; 2 MiB LL128 54.70 < LL 72.65; 16 MiB Simple 56.0 + 16777216 /
    134286 = 180.94 < LL128 181.37.  2.28 keeps LL at 2 MiB and LL128 at 16 MiB."""
    m28, m228 = NcclModel(A100, version=V28), NcclModel(A100, version=V228)
    picks = {n: m28.choose("allreduce", n << 20) for n in (1, 2, 16)}
    assert [picks[n].protocol for n in (1, 2, 16)] == ["LL", "LL128", "Simple"]
    assert picks[1].nccl_us == pytest.approx(3.6 + 14 * 0.47 + 1048576 / (58.75 * 8 / 14 * 1000))
    assert picks[2].nccl_us == pytest.approx(10.0 + 14 * 1.9 + 2097152 / (202.8 * 8 / 14 * 1000))
    assert picks[16].nccl_us == pytest.approx(8.4 + 14 * 3.4 + 16777216 / (235.0 * 8 / 14 * 1000))
    assert [m228.choose("allreduce", n << 20).protocol for n in (2, 16)] == ["LL", "LL128"]


def test_broadcast_leaves_ll_for_simple_at_one_mib():
    """broadcast (ring, one hop of latency): 1 MiB LL 4.07 + 1048576 / 78333 = 17.46 us > Simple
    11.8 + 1048576 / 235000 = 16.26 us; 512 KiB stays LL (10.76 < 14.03)."""
    m = NcclModel(A100, version=V28)
    assert (m.choose("broadcast", 1 << 20).protocol, m.choose("broadcast", 512 << 10).protocol) == ("Simple", "LL")


def test_runtime_ll_cap_is_the_versions_estimate():
    """The execution model caps LL at NCCL's own LL estimate of the run's version: 58.75 GB/s on all
    24 channels for 2.8's all_reduce, 78.33 for its broadcast, llMaxBws' 87.7 for 2.28."""
    g = NcclModel(A100, version=V28).table.graphs
    assert ring_channel_cap_gbs(A100, "LL", 24, g, "allreduce", V28) == pytest.approx(58.75)
    assert ring_channel_cap_gbs(A100, "LL", 12, g, "broadcast", V28) == pytest.approx(235.0 / 3 / 2)
    assert ring_channel_cap_gbs(A100, "LL", 24, g, "allreduce", V228) == pytest.approx(87.7)


def test_two_node_latencies_by_hand():
    """2 x 8 A100 on NCCL 2.8 (tuning.cc v2.8.4-1): tree rows base 4.4 / 4.4, hops LL 0.52 (x 1.8 across
    nodes), LL128 1.25, network 5.0 / 8.5: tree LL 4.4 + 2 x (7 x 0.936 + 5.0) = 27.50 us, tree LL128
    4.4 + 2 x (7 x 1.25 + 8.5) = 38.9; ring LL 3.6 + 28 x 0.846 + 2 x 2.7 = 32.69 (no network overhead
    before 2.18).  2.28 keeps its own: tree LL128 14.0 + 2 x (7 x 1.25 + 8.5) = 48.5."""
    two = NcclMachine.from_topology(cluster("dgx-a100", nodes=2))
    lat = NcclModel(two, version=V28).table.latency
    assert lat[("allreduce", "tree", "LL")] == pytest.approx(4.4 + 2 * (7 * 0.52 * 1.8 + 5.0))
    assert lat[("allreduce", "tree", "LL128")] == pytest.approx(38.9)
    assert lat[("allreduce", "ring", "LL")] == pytest.approx(3.6 + 28 * 0.47 * 1.8 + 2 * 2.7)
    assert NcclModel(two, version=V228).table.latency[("allreduce", "tree", "LL128")] == pytest.approx(48.5)


def test_ring_plateau_by_hand():
    """2.8-2.17 multiply the ring/Simple all_reduce latency across nodes by 1.9 from nRanks / 16 x 64 KiB
    (64 KiB on 16 ranks): 8.4 + 28 x 3.4 + 2 x 9.6 = 122.8 us below, 233.32 us from there."""
    two = NcclMachine.from_topology(cluster("dgx-a100", nodes=2))
    t = NcclModel(two, version=V28).table
    bw = t.bandwidth[("allreduce", "ring", "Simple")] * 1000.0
    assert t.latency[("allreduce", "ring", "Simple")] == pytest.approx(122.8)
    assert t.algo_time_us("allreduce", "ring", "Simple", 65535) == pytest.approx(122.8 + 65535 / bw)
    assert t.algo_time_us("allreduce", "ring", "Simple", 65536) == pytest.approx(122.8 * 1.9 + 65536 / bw)


def test_ll_max_bws_only_from_2_8():
    """``llMaxBws`` first appears in v2.8.3-1 (src/graph/tuning.cc line 75); v2.7.8-1's ring LL is ``busBw *= 1/4
    or 1/3`` alone (line 113).  DGX-1's 6 NVLink rings x 20 GB/s: all_gather LL at 2.7 is 120 / 3 = 40 GB/s bus
    (x 8 / 7 algorithm), at 2.8 min(39, 40) = 39; the execution model's LL cap follows (40 on 2.7's 12 channels)."""
    v100 = NcclMachine.from_topology(get_preset("dgx1-v100"))
    t27, t28 = NcclModel(v100, version=(2, 7)).table, NcclModel(v100, version=V28).table
    assert (t27.graphs.ring.n_channels, t27.graphs.ring.bw_intra) == (6, 20.0)
    assert t27.bandwidth[("allgather", "ring", "LL")] == pytest.approx(40.0 * 8 / 7)
    assert t28.bandwidth[("allgather", "ring", "LL")] == pytest.approx(39.0 * 8 / 7)
    assert ring_channel_cap_gbs(v100, "LL", 12, t27.graphs, "allgather", (2, 7)) == pytest.approx(40.0)
    assert ring_channel_cap_gbs(v100, "LL", 12, t28.graphs, "allgather", V28) == pytest.approx(39.0)
