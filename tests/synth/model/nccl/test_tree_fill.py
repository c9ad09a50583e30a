"""A tree's Simple pipeline fill crosses every hop of the tree, the GPUs' chain inside each node as
well as the network (NVIDIA/nccl v2.27.3-1 src/device/prims_simple.h lines 193-299: a hop forwards a
slice only once it has all of it; a tree's slice is its chunk, ``ProtoSimple<1, 1>`` in
src/device/all_reduce.h), and a channel never sends more than its own bytes at once (all_reduce.h
``nelem = min(chunkCount, channelCount - elemOffset)``).  Checked by hand on 2 x AWS p4d (8 x A100 and
4 x 100 Gb/s EFA per host) from the source's rules and NCCL's own tree graph figures."""

from __future__ import annotations

import argparse
from dataclasses import replace

import pytest

from synth.model.nccl import DEFAULT_PARAMS, NcclMachine, NcclModel
from synth.model.nccl.runtime import pipeline_fill_us, simple_chunk_bytes, tree_intra_channel_gbs
from topo_probe import get_preset
from topo_probe.cli.options import apply_machine_arguments

MIB = 1 << 20
P = replace(DEFAULT_PARAMS, net_eff={"*": 0.8})


def _p4d_table():
    ns = argparse.Namespace(nodes=2, nic_gbps=12.5, nics_per_node=4, rail_optimized=False)
    m = NcclMachine.from_topology(apply_machine_arguments(get_preset("dgx-a100"), ns), net_kind="efa")
    return NcclModel(m, P, version=(2, 17)).table


def _by_hand(nbytes: int, channels: int, intra_gbs: float) -> float:
    """enqueue.cc v2.17.1-1 lines 1303-1308 (tree depth 7 + log2(2) = 8): 512 KiB halved while a channel
    holds fewer than 64 / 32 / 8 chunks (floors 128 / 64 / 32 KiB), at most the channel's bytes; 14 GPU
    hops (7 up, 7 down) at ``intra_gbs``, 2 network hops at 4 x 12.5 GB/s x 0.8 / 8 channels = 5 GB/s."""
    per_channel = nbytes / channels
    chunk = 524288
    for mult, floor in ((64, 131072), (32, 65536), (8, 32768)):
        while per_channel / chunk < mult and chunk > floor:
            chunk //= 2
    chunk = min(chunk, -(-nbytes // channels))
    return 14 * chunk / (1000.0 * intra_gbs) + 2 * chunk / (1000.0 * 5.0)


def test_intra_rate_is_nccls_tree_graph_shared_by_the_channels():
    """NCCL's search puts the p4d's tree graph on 4 channels of 24 GB/s inside the node (twice the
    12 GB/s of its 100 Gb/s NICs); the communicator runs 8 channels: 12 GB/s each."""
    t = _p4d_table()
    assert (t.graphs.tree.n_channels, t.graphs.tree.bw_intra) == (4, 24.0)
    assert tree_intra_channel_gbs(t, 8) == pytest.approx(12.0)


@pytest.mark.parametrize("mib", [1, 4, 16, 64, 1024])
def test_tree_fill_by_hand(mib):
    t = _p4d_table()
    n = mib * MIB
    assert pipeline_fill_us(t, "tree", "Simple", 8, n, P) == pytest.approx(_by_hand(n, 8, 12.0))


def test_one_gib_numbers():
    """1 GiB on 8 channels: 512 KiB chunks; 14 x 524288 B / 12 GB/s = 611.7 us inside the nodes plus
    2 x 524288 B / 5 GB/s = 209.7 us across: 821.4 us (the network hops alone, as before, 209.7)."""
    assert pipeline_fill_us(_p4d_table(), "tree", "Simple", 8, 1 << 30, P) == pytest.approx(821.38, abs=0.01)


def test_a_channel_sends_at_most_its_own_bytes():
    """64 KiB on 8 channels is 8 KiB a channel, under the 32 KiB floor of the chunk: the fill moves 8 KiB
    per hop, not the chunk."""
    t = _p4d_table()
    assert simple_chunk_bytes(t, "tree", 65536, 8) == 32768
    assert pipeline_fill_us(t, "tree", "Simple", 8, 65536, P) == pytest.approx(
        14 * 8192 / 12000.0 + 2 * 8192 / 5000.0)


def test_no_fill_on_one_host_nor_for_other_protocols():
    t = NcclModel(NcclMachine.from_topology(get_preset("dgx-a100")), P).table
    assert pipeline_fill_us(t, "tree", "Simple", 8, 1 << 30, P) == 0.0
    assert pipeline_fill_us(_p4d_table(), "tree", "LL128", 8, 1 << 30, P) == 0.0
