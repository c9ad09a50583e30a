"""Rooted rings (broadcast, reduce) across hosts with several NICs: NCCL's ``sameChannels`` and the chunk each network
hop stores and forwards.

* NCCL's ring search replays channel 0's GPU order on every channel first, so a ring graph that needs several NICs
  per host is the retry's, with ``sameChannels`` 0 (NVIDIA/nccl v2.8.4-1 src/graph/search.cc lines 402, 414-420,
  662, 717-723); the tuner then charges a broadcast ``nsteps`` hops, Simple's at the tree's 28 µs row, instead of one
  (src/graph/tuning.cc lines 144-150).
* Each network hop of the chain forwards a whole chunk (src/transport/net.cc lines 286-327, 401-428): Simple one
  512 KiB step or the channel's share (src/collectives/device/broadcast.h lines 22-37), LL128 576,000 bytes or the
  channel's share in 38,400-byte granules (lines 118-133).

Every expected number below is worked by hand from those source constants and ABCI's figures (4 HDR HCAs a host,
9.75 GB/s of GPU memory each: aistabci/abci2.0benchmark pt2pt/inter_anode; ``ring_net_eff`` 12/12.5)."""

from __future__ import annotations

import pytest

from _paths import ROOT
from synth.formats.nccl_tests.runs import load_runs
from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.net_fill import pays_rooted_fill, rooted_chunk_bytes, rooted_net_fill_us
from topo_probe import cluster

LOGS = ROOT / "tests" / "fixtures" / "real_logs"
V28 = (2, 8)


def abci(hosts: int, nics: int = 4) -> NcclMachine:
    """``hosts`` x 8 A100 on NVSwitch, ``nics`` x 25 GB/s HCAs each moving GPU memory at 9.75 GB/s."""
    m = NcclMachine.from_topology(cluster("dgx-a100", nodes=hosts))
    return m.with_(nics_per_node=nics, nic_gbps=25.0, nic_dma_gbs=9.75, cpu_vendor="intel")


def test_a_ring_graph_over_four_nics_is_not_same_channels():
    """4 channels at 24 GB/s, one per 25 GB/s HCA: no single NIC carries two, so the same-channels search finds one
    channel and the retry without it the four.  One host, or one NIC a host (its one channel), keeps them the same."""
    assert NcclModel(abci(2), version=V28).table.graphs.ring.same_channels is False
    assert NcclModel(abci(2, nics=1), version=V28).table.graphs.ring.same_channels is True
    assert NcclModel(abci(1), version=V28).table.graphs.ring.same_channels is True


def test_nccl_28_charges_a_rooted_ring_every_step_without_same_channels():
    """2 hosts, 16 ranks, NCCL 2.8's rows: broadcast nsteps = nRanks = 16; base LL 3.6, LL128 10.0, Simple 8.4 µs;
    network ring hops LL 2.7, LL128 4.0, and Simple at the tree's 28 µs row.  With one NIC: base + one hop (9.6)."""
    lat = NcclModel(abci(2), version=V28).table.latency
    assert lat[("broadcast", "ring", "LL")] == pytest.approx(3.6 + 16 * 2.7)        # 46.8
    assert lat[("broadcast", "ring", "LL128")] == pytest.approx(10.0 + 16 * 4.0)    # 74.0
    assert lat[("broadcast", "ring", "Simple")] == pytest.approx(8.4 + 16 * 28.0)   # 456.4
    one = NcclModel(abci(2, nics=1), version=V28).table.latency
    assert one[("broadcast", "ring", "Simple")] == pytest.approx(8.4 + 9.6)


def test_nccl_switches_where_the_logs_drop():
    """With 456-3,600 µs on Simple, NCCL 2.8 keeps a multi-host broadcast on LL, then LL128, through 32 MiB.  The
    protocol switch shows in ABCI's logs as a row faster (16 hosts: 4 -> 8 MiB, 2,123 -> 2,008 µs) or nearly as fast
    (8 hosts: 2 -> 4 MiB, 807 -> 868 µs) as the half-size row before it."""
    for hosts, last_ll in ((16, 4 << 20), (8, 2 << 20)):
        model = NcclModel(abci(hosts), version=V28)
        assert model.choose("broadcast", last_ll).protocol == "LL"
        assert model.choose("broadcast", 2 * last_ll).protocol == "LL128"
        assert model.choose("broadcast", 32 << 20).protocol == "LL128"
        run = next(iter(load_runs(LOGS / f"a100_{8 * hosts}gpu_{hosts}node_broadcast_abci_hdr.txt")))
        t = {row.size: row.out_of_place.time_us for row in run.rows}
        assert t[2 * last_ll] < 1.1 * t[last_ll]


def test_the_chunk_a_network_hop_forwards():
    """Simple: min(512 KiB, the channel's share); LL128: the share rounded up to 38,400-byte granules (8 elements x
    640 threads x 8 bytes x 15/16), at most 576,000 bytes (120 x 640 x 8 x 15/16)."""
    assert rooted_chunk_bytes("Simple", 1 << 20, 8) == 131072
    assert rooted_chunk_bytes("Simple", 64 << 20, 8) == 524288
    assert rooted_chunk_bytes("LL128", 1 << 20, 8) == 4 * 38400                     # 131,072 -> 4 granules
    assert rooted_chunk_bytes("LL128", 4 << 20, 8) == 14 * 38400                    # 524,288 -> 14 granules
    assert rooted_chunk_bytes("LL128", 32 << 20, 8) == 576000


def test_the_fill_of_two_and_sixteen_abci_hosts():
    """8 channels over 4 HCAs of 9.75 GB/s at 12/12.5: 4.68 GB/s a channel.  2 hosts, 32 MiB LL128: one hop of
    576,000 bytes, 123.1 µs; 16 hosts: 15 hops, 1,846 µs.  The logs' LL128 rows from 8 MiB on rise by ~30 GB/s over
    an intercept of that size (2 hosts: 16 -> 32 MiB adds 564 µs, 1,251 - 1,128 = 123 µs left at 32 MiB)."""
    rate = 4 * 9.75 * 12.0 / 12.5 / 8
    assert rooted_net_fill_us("broadcast", "LL128", 32 << 20, 8, 2, rate) == pytest.approx(576000 / 4680.0)
    assert rooted_net_fill_us("broadcast", "LL128", 32 << 20, 8, 16, rate) == pytest.approx(15 * 576000 / 4680.0)
    assert rooted_net_fill_us("reduce", "Simple", 1 << 20, 8, 2, rate) == pytest.approx(131072 / 4680.0)
    assert pays_rooted_fill("broadcast", "ring", "LL") and not pays_rooted_fill("allgather", "ring", "Simple")
    run = next(iter(load_runs(LOGS / "a100_16gpu_2node_broadcast_abci_hdr.txt")))
    t = {row.size: row.out_of_place.time_us for row in run.rows}
    slope = (t[32 << 20] - t[16 << 20]) / (16 << 20)
    assert t[32 << 20] - slope * (32 << 20) == pytest.approx(576000 / 4680.0, rel=0.15)


def test_two_abci_hosts_broadcast_rows():
    """The model's 2-host broadcast (NCCL 2.8: LL128 from 1 MiB) within 15 % of the log at 1-32 MiB."""
    run = next(iter(load_runs(LOGS / "a100_16gpu_2node_broadcast_abci_hdr.txt")))
    model = NcclModel(abci(2), version=V28)
    for row in run.rows:
        if (1 << 20) <= row.size <= (32 << 20):
            assert model.choose("broadcast", row.size).protocol == "LL128"
            assert model.time_us("broadcast", row.size) == pytest.approx(row.out_of_place.time_us, rel=0.15)


def test_the_fill_and_the_hop_extra_it_replaces_share_one_predicate():
    """RCCL's rooted rings get no fill (its LL128 buffer differs), so they keep the fitted network-hop extra; one host
    has no network hop to fill; NVIDIA's multi-host rooted ring replaces it."""
    from topo_probe import cluster
    from synth.model.nccl.machine import NcclMachine
    from synth.model.nccl.net_fill import pays_rooted_fill

    mi300x = NcclMachine.from_topology(cluster("mi300x", nodes=2))
    a100 = NcclMachine.from_topology(cluster("dgx-a100", nodes=2))
    one = NcclMachine.from_topology(cluster("dgx-a100", nodes=1))
    assert not pays_rooted_fill("broadcast", "ring", "Simple", mi300x)
    assert pays_rooted_fill("broadcast", "ring", "Simple", a100)
    assert not pays_rooted_fill("broadcast", "ring", "Simple", one)
    assert not pays_rooted_fill("allreduce", "ring", "Simple", a100)


def test_the_fill_replaces_only_the_fitted_hop_extra_not_the_plugins_share():
    """EFA's LL hop carries the plugin's share of its 150 µs latency on top of the fitted ``net_lat``; the rooted
    fill (bytes over bandwidth) stands in for the fitted part only."""
    from synth.model.nccl.net_transport import plugin_latency_us
    from synth.model.nccl.params import DEFAULT_PARAMS as p

    share = p.plugin_hop_share * plugin_latency_us("efa", "sm80")
    assert share > 0
    assert p.net_latency_us("efa", "LL128", "sm80") - p.net_lat_own_us("efa", "LL128", "sm80") == pytest.approx(share)
    assert p.net_lat_own_us("ib", "LL128", "sm80") == pytest.approx(p.net_latency_us("ib", "LL128", "sm80"))
