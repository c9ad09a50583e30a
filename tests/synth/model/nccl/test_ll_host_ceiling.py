"""LL's multi-node ceiling is a host figure (NCCL's llMaxBws row chosen by CPU vendor), not a share of it per
channel: checked against NCCL's own table and a real 4-host H100 log (tests/fixtures/real_logs, its SOURCE header)."""

from __future__ import annotations

import pytest

from synth.model.nccl import DEFAULT_PARAMS, NcclMachine, NcclModel
from synth.model.nccl.channel_caps import ring_channel_cap_gbs
from synth.model.nccl.graphs import comm_graphs
from topo_probe import cluster, get_preset


def machine(hosts: int) -> NcclMachine:
    """``hosts`` H100 hosts of 8 GPUs, each GPU with its own 400 Gb/s InfiniBand NIC."""
    return NcclMachine.from_topology(cluster("dgx-h100", nodes=hosts)).with_(ranks=hosts * 8, nics_per_node=8)


def test_multi_node_ll_ceiling_is_the_hosts_not_a_channels_share():
    """NVIDIA/nccl v2.24.3-1 src/graph/tuning.cc lines 150-153 and 212-215: llMaxBws' multi-node rows are
    chosen by CPU vendor (Intel, more than two nodes: 20.4 GB/s); one host's by GPU generation (Hopper 141),
    shared by the channels that run."""
    four = machine(4)
    g4 = comm_graphs(four, version=(2, 24))
    assert four.cpu_vendor == "intel"
    assert ring_channel_cap_gbs(four, "LL", 1, g4, "allgather", (2, 24)) == pytest.approx(20.4)
    assert ring_channel_cap_gbs(four, "LL", 16, g4, "allgather", (2, 24)) == pytest.approx(20.4)
    one = NcclMachine.from_topology(get_preset("dgx-h100"))
    g1 = comm_graphs(one, version=(2, 24))
    assert ring_channel_cap_gbs(one, "LL", 4, g1, "allgather", (2, 24)) == pytest.approx(141.0 * 4 / g1.n_channels)


def test_one_channel_ll_all_gather_on_four_hosts_is_not_host_capped():
    """Real (Voltage Park, 4 x 8 H100, NCCL 2.24.3): all_gather 16 KiB 55.8 us, 128 KiB 65.0 us on the one
    LL channel NCCL's reduction leaves (128 KiB < 2 x 512 threads x 8 x 32 ranks): 112 KiB more in 9 us.
    The model's 128 KiB row is at most 25 us above its 16 KiB row (at a 1/16 share of 20.4 GB/s it was 90)."""
    model = NcclModel(machine(4), DEFAULT_PARAMS, version=(2, 24))
    small, big = model.choose("allgather", 16 << 10), model.choose("allgather", 128 << 10)
    assert (big.algorithm, big.protocol, big.channels) == ("ring", "LL", 1)
    assert big.time_us - small.time_us < 25.0
