"""NCCL doubles a communicator's channels on hosts with fewer than 8 GPUs used (src/graph/connect.cc
``ncclTopoPostset``, v2.18.1-1 on), and a peer across hosts gets channels from them (paths.cc
``ncclTopoGetNchannels``): the counts below are worked out by hand from those two rules."""

from __future__ import annotations

import argparse

import pytest

from synth.model.nccl import DEFAULT_PARAMS, NcclMachine
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.p2p import p2p_time_us
from topo_probe.cli.options import apply_machine_arguments
from topo_probe.machines.presets import get_preset


def h100_hosts(hosts: int, gpus: int) -> NcclMachine:
    """``hosts`` DGX H100 hosts with ``gpus`` GPUs and as many 400 Gb/s NICs used on each."""
    ns = argparse.Namespace(nodes=hosts, nic_gbps=50.0, nics_per_node=gpus, rail_optimized=False)
    m = NcclMachine.from_topology(apply_machine_arguments(get_preset("dgx-h100"), ns))
    return m.with_(ranks=hosts * gpus)


@pytest.mark.parametrize("gpus, version, channels", [
    (8, (2, 28), 16),     # the ring searches at 45 GB/s: not over 45, no doubling (2 x 8 search channels)
    (4, (2, 28), 16),     # 4 GPUs: the ring searches 4 at 48, duplicated by the search to 8 x 24 -> 2 x 8
    (4, (2, 17), 8),      # before 2.18 the rule does not exist
    (2, (2, 28), 8),      # 2 at 48, duplicated to 4 x 24 -> 2 x 4 = 8
])
def test_hosts_of_fewer_gpus_double_their_channels(gpus, version, channels):
    assert comm_graphs(h100_hosts(10, gpus), version=version).n_channels == channels


@pytest.mark.parametrize("gpus, version, per_peer", [
    (4, (2, 29), 2),      # 2.29: ceil(50 / 14) = 4 a NIC; 5 batches of 8 peers: 4 x 5 > 16, 2 x 5 <= 16 -> 2
    (8, (2, 29), 1),      # 16 channels, 10 batches: 2 x 10 > 16 -> 1
    (4, (2, 28), 1),      # 2.28: 2 x 40 ranks > 4 x 16 p2p channels -> 1
])
def test_ten_hosts_get_the_channels_per_network_peer_nccl_gives(gpus, version, per_peer):
    assert comm_graphs(h100_hosts(10, gpus), version=version).net_channels_per_peer == per_peer


def test_ten_hosts_of_four_send_at_two_channels_rate_as_the_real_run_does():
    """xxrjun/nccl-tests-cluster's 10 x 4 H100 sendrecv (NCCL 2.29.2, a held-out fixture) reaches 26.3
    GB/s at 4-16 GiB; one channel (the rule without the doubling) would cap it at 14, two reach it."""
    m = h100_hosts(10, 4)
    g = comm_graphs(m, version=(2, 29))
    t_us, used = p2p_time_us(m, g, "sendrecv", 4 << 30, DEFAULT_PARAMS, version=(2, 29))
    gbs = (4 << 30) / t_us / 1000.0
    assert used == 2 and abs(gbs / 26.32 - 1) <= 0.15, (used, gbs)
