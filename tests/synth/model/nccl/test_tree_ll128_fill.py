"""A tree's LL128 chunk crossing the network hops up and down the tree whole (``net_fill.tree_ll128_net_fill_us``).

The chunk is enqueue.cc's (NVIDIA/nccl v2.8.4-1 src/enqueue.cc lines 404-411, unchanged at v2.27.3-1 lines
2034-2042): one LL128 step of 614,400 bytes of lines (120 x 640 x 8), halved while a channel holds fewer than
``nsteps x 64 / ppn`` (down to 128 KiB), then ``nsteps x 16 / ppn`` (down to 32 KiB) of them, ``nsteps = 1 +
log2(nodes) + ppn / 10``; 15 of its 16 words are data.  The network proxy forwards a step only whole (net.cc lines
286-327, 401-428).  Every number below is worked by hand from those rules."""

from __future__ import annotations

import pytest

from _paths import ROOT
from synth.formats.nccl_tests.runs import load_runs
from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.net_fill import net_chunk_fill_us, tree_ll128_chunk_bytes, tree_ll128_net_fill_us
from topo_probe import cluster

LOGS = ROOT / "tests" / "fixtures" / "real_logs"


def test_the_chunk_by_hand():
    """16 hosts x 8 GPUs (nsteps 5.8: halve under 46.4, then under 11.6 chunks a channel), 8 channels:
    32 MiB: 4 MiB a channel holds 6, 13, 27 chunks of 614,400 / 307,200 / 153,600 B, so 76,800 (54 of them) ->
    72,000 data bytes; 2 MiB: 3 of 76,800 -> 38,400 (6) -> 19,200 (13) -> 18,000.  4 hosts (nsteps 3.8: 30.4 and
    7.6), 8 MiB: 76,800 (13 a channel) -> 72,000; 4 MiB: 6 of 76,800 -> 38,400 -> 36,000."""
    assert tree_ll128_chunk_bytes(32 << 20, 8, 16, 8) == 72000
    assert tree_ll128_chunk_bytes(2 << 20, 8, 16, 8) == 18000
    assert tree_ll128_chunk_bytes(8 << 20, 8, 4, 8) == 72000
    assert tree_ll128_chunk_bytes(4 << 20, 8, 4, 8) == 36000
    assert tree_ll128_chunk_bytes(64 << 10, 8, 4, 8) == 8192                  # never more than the channel's share


def test_the_fill_by_hand():
    """2 x log2(16) = 8 network hops x 72,000 B at 4.14 GB/s a channel: 139.1 µs; 4 hosts, 4 hops: 69.6 µs."""
    assert tree_ll128_net_fill_us(32 << 20, 8, 16, 8, 4.14) == pytest.approx(8 * 72000 / 4140.0)
    assert tree_ll128_net_fill_us(8 << 20, 8, 4, 8, 4.14) == pytest.approx(4 * 72000 / 4140.0)
    assert tree_ll128_net_fill_us(8 << 20, 8, 1, 8, 4.14) == 0.0


def test_only_tree_ll128_and_rooted_rings_pay_it():
    """Two hosts of 4 NICs moving 39 GB/s (tree rate 39 x 0.85 spread over 8 channels); a ring all_reduce, a tree's
    Simple (its own fill, pipeline_fill_us) and LL pay nothing here, nor does an AMD host."""
    m = NcclMachine.from_topology(cluster("dgx-a100", nodes=2)).with_(nics_per_node=4, nic_gbps=25.0)
    fill = net_chunk_fill_us("allreduce", "tree", "LL128", 8 << 20, 8, m, 37.4, 33.2)
    assert fill == pytest.approx(2 * tree_ll128_chunk_bytes(8 << 20, 8, 2, 8) / (1000.0 * 33.2 / 8))
    for algo, proto in (("ring", "LL128"), ("tree", "Simple"), ("tree", "LL")):
        assert net_chunk_fill_us("allreduce", algo, proto, 8 << 20, 8, m, 37.4, 33.2) == 0.0
    mi = NcclMachine.from_topology(cluster("mi300x", nodes=2))
    assert net_chunk_fill_us("allreduce", "tree", "LL128", 8 << 20, 8, mi, 37.4, 33.2) == 0.0


def test_sixteen_abci_hosts_tree_rows():
    """16 ABCI hosts (NCCL 2.8.4): tree/LL128 from 256 KiB; with the fill the model's 2-32 MiB rows are within 15 %
    of the log (without it 17-23 % fast at 8-32 MiB: the tree's 8 network hops, twice the 4 hosts' 4)."""
    m = NcclMachine.from_topology(cluster("dgx-a100", nodes=16)).with_(nics_per_node=4, nic_gbps=25.0,
                                                                       nic_dma_gbs=9.75, cpu_vendor="intel")
    model = NcclModel(m, version=(2, 8))
    run = next(iter(load_runs(LOGS / "a100_128gpu_16node_all_reduce_abci_hdr.txt")))
    for row in run.rows:
        if (2 << 20) <= row.size <= (32 << 20):
            assert model.choose("allreduce", row.size).label == "tree/LL128/8"
            assert model.time_us("allreduce", row.size) == pytest.approx(row.out_of_place.time_us, rel=0.15)
