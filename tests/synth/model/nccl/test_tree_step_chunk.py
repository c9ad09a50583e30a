"""A tree's Simple chunk starts from the Simple step, NCCL_BUFFSIZE / NCCL_STEPS (NVIDIA/nccl v2.19.3-1
src/enqueue.cc lines 1328-1340: ``chunkSize = stepSize*chunkSteps``, chunkSteps 1 off the ring, then halved by
tree depth), and GPUDirect-TCPXO's env profile sets NCCL_BUFFSIZE=8388608 in every release
(GoogleCloudPlatform/container-engine-accelerators 992db812 gpudirect-tcpxo/README.md, e.g. line 447 of the Feb 06,
2025 release): a 1 MiB step on 2 x A3 Mega.  Hand-computed from those figures."""

from __future__ import annotations

import argparse
from dataclasses import replace

import pytest

from synth.model.nccl import DEFAULT_PARAMS, NcclMachine, NcclModel
from synth.model.nccl.nvls_pipeline import tree_simple_chunk_bytes
from synth.model.nccl.runtime import pipeline_fill_us, simple_chunk_bytes, tree_intra_channel_gbs
from topo_probe import get_preset
from topo_probe.cli.options import apply_machine_arguments

MIB = 1 << 20
P = replace(DEFAULT_PARAMS, net_eff={"*": 0.8})


def _a3mega(env=None):
    ns = argparse.Namespace(nodes=2, nic_gbps=25.0, nics_per_node=8, rail_optimized=False)    # 8 x 200 Gb/s a host
    m = NcclMachine.from_topology(apply_machine_arguments(get_preset("dgx-h100"), ns), net_kind="tcpxo")
    from synth.model.nccl.env import NcclEnv
    return NcclModel(m, P, NcclEnv.from_environ(env or {}), version=(2, 23)).table


def test_tree_chunk_halves_from_the_step():
    # depth 8 (7 GPUs + log2(2)); 256 KiB a channel: 512 KiB -> 128 KiB (< 64 chunks, floor), -> 64 KiB (< 32),
    # -> 32 KiB (< 8); a 1 MiB step halves the same way to the same floors; 128 MiB a channel keeps 1 MiB (128 >= 64)
    assert tree_simple_chunk_bytes(524288, 8, 256 * 1024) == 32768
    assert tree_simple_chunk_bytes(1048576, 8, 256 * 1024) == 32768
    assert tree_simple_chunk_bytes(1048576, 8, 128 * MIB) == 1048576
    assert tree_simple_chunk_bytes(524288, 8, 128 * MIB) == 524288


def test_tcpxo_profile_buffsize_gives_a3_mega_trees_a_1_mib_step():
    t = _a3mega()
    assert t.env.buffsize == 8388608
    assert simple_chunk_bytes(t, "tree", 2048 * MIB, 16) == 8388608 // 8        # 128 MiB a channel: the whole step
    assert simple_chunk_bytes(_a3mega({"NCCL_BUFFSIZE": "4194304"}), "tree", 2048 * MIB, 16) == 524288   # user wins


def test_a3_mega_tree_fill_by_hand():
    """2 GiB on 16 channels: 128 MiB a channel, one whole 1 MiB chunk.  2 network hops at 8 x 25 GB/s x 0.8 / 16
    channels = 10 GB/s, 14 GPU hops at NCCL's own tree speed a channel (:func:`tree_intra_channel_gbs`)."""
    t = _a3mega()
    intra = tree_intra_channel_gbs(t, 16)
    by_hand = 2 * MIB / (1000.0 * 10.0) + 14 * MIB / (1000.0 * intra)
    assert pipeline_fill_us(t, "tree", "Simple", 16, 2048 * MIB, P) == pytest.approx(by_hand)
