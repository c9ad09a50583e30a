"""NCCL's split of a point-to-point send into channel parts and its LL/Simple choice
(src/enqueue.cc ``addP2pToPlan`` / ``scheduleP2pTasksToPlan``, NVIDIA/nccl v2.14.3-1 .. v2.30.7-1),
each checked against a case computed by hand from NCCL's rule."""

from __future__ import annotations

import argparse

import pytest

from synth.model.nccl import DEFAULT_PARAMS, NcclMachine
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.params import ModelParams
from synth.model.nccl.p2p import (
    net_part_channels,
    p2p_channels,
    p2p_net_hop_us,
    p2p_time_us,
    p2p_uses_ll,
    part_channels,
)
from topo_probe.cli.options import apply_machine_arguments
from topo_probe.machines.presets import get_preset

K, M = 1 << 10, 1 << 20


def b200(hosts: int) -> NcclMachine:
    ns = argparse.Namespace(nodes=hosts, nic_gbps=50.0, nics_per_node=8, rail_optimized=False)
    return NcclMachine.from_topology(apply_machine_arguments(get_preset("hgx-b200"), ns))


@pytest.mark.parametrize("nbytes, want", [(1, 1), (64 * K, 1), (64 * K + 1, 2), (128 * K, 2), (256 * K, 2),
                                          (256 * K + 1, 4), (8 * M, 4)])
def test_a_part_across_hosts_is_half_a_chunk_to_one_chunk(nbytes, want):
    """Across hosts (2.22+): chunk 128 KiB, parts of 64 .. 128 KiB, start min(2, bytes / 64 KiB),
    double while a part exceeds 128 KiB and the channels stay within 4: 256 KiB is 2 x 128 KiB, one
    byte more is 4 parts."""
    assert part_channels(nbytes, 2, 4, 128 * K, True, (2, 29)) == want


def test_before_2_22_a_part_across_hosts_may_be_an_eighth_of_a_chunk():
    """calcP2pChunkSize (v2.18.1-1): minSize stepSize / 8 on any communicator: 64 KiB starts on
    min(2, 64 KiB / 16 KiB) = 2 channels, not 1."""
    assert part_channels(64 * K, 2, 4, 128 * K, True, (2, 18)) == 2
    assert part_channels(64 * K, 2, 4, 128 * K, True, (2, 22)) == 1


@pytest.mark.parametrize("nbytes, want", [(100 * K, 2), (64 * M, 4), (64 * M + 4 * K, 8), (256 * M + 4 * K, 16)])
def test_a_part_on_one_host_is_an_eighth_of_a_chunk_to_32_chunks(nbytes, want):
    """One NVLink host: chunk 512 KiB, parts of 64 KiB .. 16 MiB; from 4 up to 16 channels."""
    assert part_channels(nbytes, 4, 16, 512 * K, False) == want


@pytest.mark.parametrize("version, nbytes, want", [((2, 13), 1 * K, False), ((2, 18), 16 * K, True),
                                                   ((2, 18), 16 * K + 1, False), ((2, 28), 64 * K, True),
                                                   ((2, 28), 64 * K + 1, False), ((2, 29), 16 * K, True),
                                                   ((2, 29), 32 * K, False)])
def test_ll_below_the_threshold_of_its_version(version, nbytes, want):
    """One channel in the part, four for the peer: 16 KiB (2.14-2.21), 4 x 16 KiB (2.22-2.28),
    1 x 16 KiB (2.29+); no LL for p2p before 2.14."""
    assert p2p_uses_ll(nbytes, 1, 4, version) is want


def test_a_small_send_across_hosts_is_simple():
    """8 KiB on 2 x 8 B200 under 2.29 is under one channel's LL threshold, but a p2p network
    connection has no LL buffer unless NCCL_ALLOC_P2P_NET_LL_BUFFERS=1 (src/transport/net.cc), so it
    goes Simple on one channel: p2p latency + the Simple hop + 8 KiB at one 14 GB/s channel."""
    m = b200(2)
    g = comm_graphs(m, version=(2, 29))
    assert net_part_channels(m, g, 8 * K, (2, 29)) == 1 and p2p_uses_ll(8 * K, 1, 4, (2, 29))
    p = DEFAULT_PARAMS
    rate = min(m.used_net_gbps / 8 * p.ring_net_efficiency("ib"), p.p2p_net_channel_gbs)
    want = p.p2p_latency_us + 14.0 + p.net_latency_us("ib", "Simple") + 8 * K / (1000.0 * rate)
    assert p2p_time_us(m, g, "sendrecv", 8 * K, p, version=(2, 29))[0] == pytest.approx(want)


def test_a_small_send_on_one_host_is_ll_at_half_the_rate():
    """8 KiB between two B200 on one host (2.29): LL (one channel, 8 KiB <= 16 KiB); its lines carry
    half data (times LL's fitted efficiency), so the one channel moves the lesser of bwIntra x NVLink efficiency and
    its CTA's rate (B200 at H100's 1.98 GHz: ``p2p_cta_gbs`` itself), halved, and at most a Blackwell LL CTA's
    rate, Hopper's 141 GB/s over its 24 channels (channel_caps.ll_cta_cap_gbs, test_ll_cta_cap.py)."""
    m = NcclMachine.from_topology(get_preset("hgx-b200"))
    g = comm_graphs(m, version=(2, 29))
    p = DEFAULT_PARAMS
    assert p2p_channels(m, g, 8 * K, (2, 29)) == 1
    gbs = min(g.ring.bw_intra * p.link_efficiency(m.arch, "nvlink"), p.p2p_cta_gbs) / 2 * p.proto_efficiency(m.arch, "LL")
    gbs = min(gbs, 141.0 / 24)
    want = p.p2p_latency_us + 8 * K / (1000.0 * gbs)
    assert p2p_time_us(m, g, "sendrecv", 8 * K, p, version=(2, 29))[0] == pytest.approx(want)


def test_a_mid_size_send_across_hosts_runs_on_its_parts_channels():
    """256 KiB on 2 x 8 B200 (2.29): NCCL starts on min(nChannelsMin, 4) and doubles once (2 x 128
    KiB), so two 14 GB/s channels carry it, not the peer's four."""
    m = b200(2)
    g = comm_graphs(m, version=(2, 29))
    n = net_part_channels(m, g, 256 * K, (2, 29))
    assert n == 2
    p = DEFAULT_PARAMS
    want = p.p2p_latency_us + p2p_net_hop_us(m, p) + 256 * K / (1000.0 * 2 * p.p2p_net_channel_gbs)
    assert p2p_time_us(m, g, "sendrecv", 256 * K, p, version=(2, 29)) == (pytest.approx(want), 2)


def test_one_host_alltoall_is_capped_by_its_parts_channels():
    """8 x B200 alltoall of 1 MiB a rank under 2.28: 128 KiB to each of 7 peers, each on
    p2p_channels (2) ring channels at bwIntra x NVLink efficiency or the CTA's rate (B200: ``p2p_cta_gbs``, at H100's
    clock), unless the links are slower; LL,
    since 128 KiB <= the peer's 32 channels x 16 KiB (2.22-2.28), at half data a line x LL's
    efficiency.  Under 2.29 the part's 2 channels x 16 KiB = 32 KiB: Simple, at the full rate, each part of 64 KiB
    one chunk the receiver then copies out of its FIFO (``ring_steps.p2p_simple_fill``): its 14 CTAs' rate over a
    CTA's copy rate (B200 at H100's clock: ``ring_copy_gbs``) on top."""
    m = NcclMachine.from_topology(get_preset("hgx-b200"))
    p = DEFAULT_PARAMS
    links = max(sum(r) for r in m.link_matrix) if m.link_matrix else m.links_per_gpu
    for version, frac, simple in (((2, 28), 0.5 * p.proto_efficiency(m.arch, "LL"), 0), ((2, 29), 1.0, 1)):
        g = comm_graphs(m, version=version)
        assert (g.p2p_channels_per_peer, p2p_channels(m, g, 128 * K, version)) == (32, 2)
        cap = 7 * 2 * min(g.ring.bw_intra * p.link_efficiency(m.arch, "nvlink"), p.p2p_cta_gbs) * frac
        cap = cap if simple else min(cap, 7 * 2 * 141.0 / 24)     # LL: a Blackwell LL CTA's rate (test_ll_cta_cap.py)
        gbs = min(links * m.link_gbs * p.p2p_link_share * p.link_efficiency(m.arch, "nvlink"), cap)
        fill = 1.0 + simple * min(1.0, gbs / 14 / p.ring_copy_gbs)
        want = p.p2p_latency_us + fill * 7 * 128 * K / (1000.0 * gbs)
        assert p2p_time_us(m, g, "alltoall", 1 * M, p, version=version)[0] == pytest.approx(want)


def h100_pair_hosts() -> NcclMachine:
    ns = argparse.Namespace(nodes=2, nic_gbps=50.0, nics_per_node=8, rail_optimized=False)
    return NcclMachine.from_topology(apply_machine_arguments(get_preset("dgx-h100"), ns))


def test_across_hosts_a_local_peer_gets_the_network_peers_channels_and_chunk():
    """2 x 8 H100 under 2.28: p2pnChannelsPerPeer is the least over all peers (paths.cc
    ncclTopoComputeP2pChannelsPerPeer), the network peers' 2; 16 ranks on 16 p2p channels start a
    part on 1; the 128 KiB net chunk: 128 KiB stays on 1 channel, 2 MiB doubles to 2."""
    m = h100_pair_hosts()
    g = comm_graphs(m, version=(2, 28))
    assert (g.n_channels, g.net_channels_per_peer) == (16, 2)
    assert [p2p_channels(m, g, s, (2, 28)) for s in (64 * K, 128 * K, 2 * M)] == [1, 1, 2]


def test_a_hosts_peers_share_their_parts_channels():
    """2 x 8 H100 alltoall of 32 MiB a rank (2 MiB a peer, 2 channels a part) with a ring channel
    slowed to 45 GB/s x 0.1: the 7 local peers share 2 CTAs (4.5 GB/s each), the 8 remote ones 2
    more; so 7 x 2 MiB / 9 GB/s and 8 x 2 MiB / 9 GB/s, the remote set the time."""
    m = h100_pair_hosts()
    g = comm_graphs(m, version=(2, 28))
    assert g.ring.bw_intra == 45.0
    p = ModelParams(link_eff={("*", "nvlink"): 0.1})
    hop = p2p_net_hop_us(m, p)
    want = p.p2p_latency_us + hop + 8 * 2 * M / (1000.0 * 2 * 45.0 * 0.1)
    assert p2p_time_us(m, g, "alltoall", 32 * M, p, version=(2, 28))[0] == pytest.approx(want)
