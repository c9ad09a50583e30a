"""NCCL 2.8's tuner on 8 x A100 (NVIDIA/nccl v2.8.4-1 src/graph/tuning.cc ``ncclTopoTuneModel``):
Ampere's graph bandwidth capped at 235 GB/s, ring LL at a quarter of it (all_reduce) or a third
(broadcast on one node), ring LL128 at 16.9 GB/s per graph channel for all_reduce; from 2.21 LL
takes half (``busBw * .5``, v2.21.5-1), so a 2.28 run keeps llMaxBws' 87.7.  Every number below is
worked by hand from those lines and the latency rows of v2.8.4-1 (ring LL 3.6 + 0.47 per NVLink hop,
LL128 10.0 + 1.9, Simple 8.4 + 3.4)."""

from __future__ import annotations

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.runtime import _channel_cap
from topo_probe import get_preset

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
    assert _channel_cap(A100, "LL", 24, g, "allreduce", V28) == pytest.approx(58.75)
    assert _channel_cap(A100, "LL", 12, g, "broadcast", V28) == pytest.approx(235.0 / 3 / 2)
    assert _channel_cap(A100, "LL", 24, g, "allreduce", V228) == pytest.approx(87.7)
