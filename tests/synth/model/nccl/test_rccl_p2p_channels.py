"""RCCL's point-to-point channels on gfx950 xGMI hosts (synth/model/nccl/rccl_channels.py
``rccl_p2p_channels_per_peer``, graphs.py ``p2p_total_channels(.., rccl=True)``, p2p.py's one-host channel cap) against
references worked out by hand from the cited source and logs: RCCL 2.26.6 (Ahalperin/amd-dev 0d4f8c1
rccl/src/graph/paths.cc ``ncclTopoGetNchannels``: 4 channels per xGMI link on gfx942 / gfx950, 2 per network peer;
``ncclTopoComputeP2pChannels``: the least over all peers, to a power of two, doubled when every rank is on one host;
``p2pnChannels`` = min(pow2Up(channels), 4 * CHANNEL_LIMIT = 64); src/enqueue.cc ``scheduleP2pTasksToPlan`` /
``addP2pToPlan``: a send starts on nChannelsMin = per-peer channels halved while they times the ranks exceed
p2pnChannels, doubling while a part exceeds 32 chunks of 512 KiB) and the channel counts it printed
(Ahalperin/amd-dev 58a032f7 results/scale_{2gpu,4gpu,2x1gpu,2x2gpu}_alltoall/nccl_debug.log)."""

from __future__ import annotations

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.graphs import comm_graphs, p2p_total_channels
from synth.model.nccl.params import DEFAULT_PARAMS
from synth.model.nccl.rccl_channels import rccl_p2p_channels_per_peer
from topo_probe import cluster, get_preset

MI355X = NcclMachine.from_topology(get_preset("mi355x"))


@pytest.mark.parametrize("ranks, coll_channels, total, per_peer", [
    (2, 8, 8, 8),      # "8 coll channels, ..., 8 p2p channels, 8 p2p channels per peer" (scale_2gpu_alltoall)
    (4, 24, 32, 8),    # "24 coll channels, ..., 32 p2p channels, 8 p2p channels per peer" (scale_4gpu_alltoall)
])
def test_one_host_counts_match_rccl_log(ranks, coll_channels, total, per_peer):
    """On one host: min(channels, 4 per link) = 4, to a power of two 4, doubled = 8 per peer."""
    m = MI355X.with_(ranks=ranks)
    g = comm_graphs(m, version=(2, 26))
    assert (g.n_channels, p2p_total_channels(g.n_channels, True), g.p2p_channels_per_peer) == (coll_channels, total,
                                                                                                per_peer)


@pytest.mark.parametrize("gpn", [1, 2])
def test_across_hosts_two_per_peer(gpn):
    """2 x 1 and 2 x 2 MI355X: the network peer's 2 is the least and nothing doubles ("2 p2p channels per peer")."""
    m = NcclMachine.from_topology(cluster("mi355x", nodes=2, nics_per_node=gpn)).with_(ranks=2 * gpn)
    g = comm_graphs(m, version=(2, 26))
    assert g.p2p_channels_per_peer == 2 == rccl_p2p_channels_per_peer(m, g.n_channels, g.net_channels_per_peer)


def test_two_gpu_alltoall_doubles_its_channels_past_64_mib_a_peer():
    """2 x MI355X alltoall: nChannelsMin = 8 halved once (8 x 2 ranks > 8 p2p channels) = 4; a part of 64 MiB / 4 =
    16 MiB is 32 chunks (no doubling), 128 MiB / 4 = 32 MiB is more (8 channels).  Each channel's workgroup moves at
    most rccl_channel_gbs (6 GB/s): busbw 4 x 6 = 24 GB/s at 128 MiB per rank and 8 x 6 = 48 at 8 GiB (under the link's
    own rate).  RCCL 2.26.6 measured 29.1 and 44.5 GB/s there (mi355x_2gpu_1node_alltoall_dn_lab.txt): a jump of 1.5x
    between 128 and 256 MiB that a link-bound model (one rate at every size) cannot show."""
    model = NcclModel(MI355X.with_(ranks=2), DEFAULT_PARAMS, version=(2, 26))
    ch_gbs = DEFAULT_PARAMS.rccl_channel_gbs
    mid, big = (model.choose("alltoall", s) for s in (128 << 20, 8 << 30))
    assert (mid.label, big.label) == ("p2p/Simple/4", "p2p/Simple/8")
    # alltoall busbw = bytes sent to the other rank / time = (S / 2) / t
    mid_bus, big_bus = ((s / 2) / (c.time_us * 1e3) for s, c in ((128 << 20, mid), (8 << 30, big)))
    assert 0.93 * 4 * ch_gbs < mid_bus <= 4 * ch_gbs
    assert 0.99 * 8 * ch_gbs < big_bus <= 8 * ch_gbs
