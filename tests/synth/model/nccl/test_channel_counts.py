"""Ring channel counts across hosts by NCCL's own rules (src/graph/search.cc ``getTotalBw`` and
``ncclTopoDupChannels``, src/graph/connect.cc ``ncclTopoPostset``), worked out by hand from the source
figures: SM90_NVLINK_BW 20.6 GB/s x 18 links, PCIe Gen5 48 GB/s (topo.h), a 400 Gb/s NIC 50 GB/s."""

from __future__ import annotations

import argparse

import pytest

from synth.model.nccl import NcclMachine
from synth.model.nccl.channel_counts import dup_channels, lone_gpu_total_gbs
from synth.model.nccl.graphs import comm_graphs, nvlink_per_link_gbs
from topo_probe.cli.options import apply_machine_arguments
from topo_probe.machines.presets import get_preset


def hosts_of(preset: str, hosts: int, gpus: int) -> NcclMachine:
    """``hosts`` hosts of ``preset`` with ``gpus`` GPUs and as many 400 Gb/s NICs used on each."""
    ns = argparse.Namespace(nodes=hosts, nic_gbps=50.0, nics_per_node=gpus, rail_optimized=False)
    return NcclMachine.from_topology(apply_machine_arguments(get_preset(preset), ns)).with_(ranks=hosts * gpus)


def test_one_h100_per_host_searches_against_its_own_links():
    """totalBw = max(PCIe 48, 18 x 20.6 NVLink) = 370.8, not a CPU path's 10 GB/s (the per-link figure the
    model's graphs use, topo.h SM90_NVLINK_BW 20.6)."""
    m = hosts_of("dgx-h100", 2, 1)
    assert lone_gpu_total_gbs(m, nvlink_per_link_gbs(m)) == pytest.approx(370.8)


@pytest.mark.parametrize("version", [(2, 28), (2, 29)])
def test_one_h100_per_host_runs_the_two_channels_of_24_gbs_nccl_printed(version):
    """maxBw = min(NIC 50, PCIe 48) = 48: one channel at 48 fills the GPU's path to its NIC (a second
    at 24 is no more, 22 / 48 < .49 ends the search); duplicated to 2 x 24, the "2 channels of 24 GB/s"
    of NCCL 2.28.3's own debug log of that machine (xxrjun/nccl-tests-cluster c3756a6d); the
    communicator twice that, 4, with no <8 PPN doubling (24 <= 45)."""
    g = comm_graphs(hosts_of("dgx-h100", 2, 1), version=version)
    assert (g.ring.n_channels, g.ring.bw_intra, g.n_channels) == (2, 24.0, 4)


def test_two_b200_per_host_duplicate_their_graph_across_hosts():
    """2 x B200 per host, 2 NICs, NCCL 2.26: 2 channels at 48 (one per NIC), 2 <= 4 so duplicated to
    4 x 24 (search.cc v2.26.6-1 line 1096, the same call as on one host); the communicator 8; the
    <8 PPN doubling is sm90-only before 2.27."""
    g = comm_graphs(hosts_of("hgx-b200", 2, 2), version=(2, 26))
    assert (g.ring.n_channels, g.ring.bw_intra, g.n_channels) == (4, 24.0, 8)


@pytest.mark.parametrize("args, want", [
    ((6, 60.0, 90, 16), (12, 30.0)),          # 8 x H100 on one host: 6 x 60 -> 12 x 30
    ((8, 45.0, 90, 16), (8, 45.0)),           # sm90, under 50 GB/s on more than 4 channels: kept
    ((4, 40.0, 90, 16), (8, 20.0)),           # 8 x H800 (8 NVLinks): 4 x 40 -> 8 x 20, "16 coll channels"
    ((12, 24.0, 80, 16), (12, 24.0)),         # under 25 GB/s: kept
    ((4, 40.0, 90, 16, (2, 17)), (4, 40.0)),  # before 2.18 sm90 needs 50 GB/s
    ((4, 30.0, 80, 16, (2, 17)), (8, 15.0)),  # ... and sm80 25
])
def test_dup_channels_follows_the_source_rule(args, want):
    assert dup_channels(*args) == want


def test_mesh_peer_channels_are_twice_the_links_of_the_least_joined_pair():
    """NVIDIA/nccl v2.22.3-1 src/graph/paths.cc ncclTopoGetNchannels: 2 x (path bw / NVLink bw) per NVL peer, 2 over
    any other path; ncclTopoComputeP2pChannels keeps the least.  By hand: 4 x H100, 6 links a pair -> 12 (the
    communicator's 24 channels do not lower it); a 3-GPU chain 0-1 (2 links), 1-2 (1 link), 0-2 (none) -> 2."""
    from synth.model.nccl.channel_counts import mesh_peer_channels
    from synth.model.nccl.graphs import comm_graphs

    m = NcclMachine.from_topology(get_preset("dgx-h100")).with_(ranks=4)
    mesh = m.with_(intra="nvlink", nvls_switch=False, link_matrix=((0, 6, 6, 6), (6, 0, 6, 6), (6, 6, 0, 6),
                                                                   (6, 6, 6, 0)))
    assert mesh_peer_channels(mesh) == 12
    assert comm_graphs(mesh, version=(2, 22, 3)).p2p_channels_per_peer == 12
    chain = m.with_(intra="nvlink", ranks=3, link_matrix=((0, 2, 0), (2, 0, 1), (0, 1, 0)))
    assert mesh_peer_channels(chain) == 2
    assert mesh_peer_channels(m) is None                           # NVSwitch: every link of the GPU (2 x 18)
    assert comm_graphs(m, version=(2, 22, 3)).p2p_channels_per_peer == min(36, comm_graphs(m).n_channels)


def test_an_nvb_pair_counts_its_narrower_legs_links_from_2_30_7_only():
    """v2.30.7-1 src/graph/paths.cc line 933 (``PATH_NVL || PATH_NVB``); v2.30.4-1 counts NVL paths only.  By hand: a
    4-GPU ring of 2 links a pair, diagonals unlinked: a diagonal is 2 through PCIe before, 2 x min(2, 2) = 4 after."""
    from synth.model.nccl.channel_counts import mesh_peer_channels
    from synth.model.nccl.graphs import comm_graphs

    links = ((0, 2, 0, 2), (2, 0, 2, 0), (0, 2, 0, 2), (2, 0, 2, 0))
    ring = NcclMachine.from_topology(get_preset("dgx-h100")).with_(ranks=4, intra="nvlink", nvls_switch=False,
                                                                   link_matrix=links)
    assert [mesh_peer_channels(ring, v) for v in ((2, 30, 4), (2, 30, 7))] == [2, 4]
    assert [comm_graphs(ring, version=v).p2p_channels_per_peer for v in ((2, 30, 4), (2, 30, 7))] == [2, 4]
