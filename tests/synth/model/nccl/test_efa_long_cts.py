"""A p3dn ring's long messages wait on the EFA provider's clear-to-send: NCCL's ring all_reduce message sizes
(all_reduce.h ``realChunkSize``, primitives.h slices: whole 1 MiB slices in 2.4, halves of at least 32 KiB from
2.5), libfabric's 64 KiB medium-message limit for host memory (rxr_init.c ``efa_max_medium_msg_size``), one
plugin share per long message along one loop's 2(n-1) steps; every figure by hand."""

from __future__ import annotations

import argparse

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl import net_transport
from synth.model.nccl.net_transport import EFA_MAX_MEDIUM_MSG_BYTES, ring_allreduce_messages, ring_cts_wait_us
from synth.model.nccl.params import ModelParams
from synth.model.nccl.runtime import _transfer_us
from topo_probe.cli.options import apply_machine_arguments
from topo_probe.machines.presets import get_preset

P = ModelParams(net_chunk={"*": 0.0}, plugin_hop_share=0.4)
MIB = 1 << 20


def _machine(preset: str, nics: int, kind: str = "efa") -> NcclMachine:
    ns = argparse.Namespace(nodes=2, nic_gbps=12.5, nics_per_node=nics, rail_optimized=False)
    topo = apply_machine_arguments(get_preset(preset), ns)
    for _, d in topo.graph.nodes(data=True):
        if d["kind"] == "nic":
            d["transport"] = kind
    return NcclMachine.from_topology(topo, net_kind=kind)


def test_ring_message_sizes_by_nccl_version():
    # 16 ranks, 2 channels: the step chunk is nbytes / 32, at most 4 x 512 KiB steps = 2 MiB
    # NCCL 2.4.8: one message per whole slice of up to 2 steps = 1 MiB
    assert ring_allreduce_messages(2 * MIB, 2, 16, (2, 4)) == [65536]
    assert ring_allreduce_messages(16 * MIB, 2, 16, (2, 4)) == [524288]
    assert ring_allreduce_messages(256 * MIB, 2, 16, (2, 4)) == [1048576, 1048576]
    # NCCL 2.6.4: two halves, each at least 1 MiB / 32 = 32 KiB
    assert ring_allreduce_messages(8 * MIB, 2, 16, (2, 6)) == [131072, 131072]
    assert ring_allreduce_messages(4 * MIB, 2, 16, (2, 6)) == [65536, 65536]
    assert ring_allreduce_messages(1 * MIB, 2, 16, (2, 6)) == [32768]
    # 2 ranks (one GPU per host), 4 channels, 2.6: 2 GiB -> chunk min(2 MiB, 256 MiB) = 2 MiB -> 2 x 1 MiB
    assert ring_allreduce_messages(2048 * MIB, 4, 2, (2, 6)) == [1048576, 1048576]


def test_p3dn_waits_one_plugin_share_per_long_message_and_step():
    p3dn, p4d = _machine("dgx1-v100", 1), _machine("dgx-a100", 4)
    share = P.net_message_us("efa", "Simple", "sm70")
    assert share == pytest.approx(0.4 * 150.0)                       # aws-ofi-nccl's p3dn latency
    assert EFA_MAX_MEDIUM_MSG_BYTES == 65536
    # 2.4, 16 MiB: one 512 KiB message per step, 2 x 15 = 30 steps: 30 x 60 = 1800 µs
    assert ring_cts_wait_us(p3dn, "ring", "allreduce", "Simple", 16 * MIB, 2, (2, 4), P.net_message_us) == \
        pytest.approx(30 * 60.0)
    # 2.6, 8 MiB: two 128 KiB messages per step: 60 x 60 = 3600 µs; 4 MiB: two 64 KiB (medium) ones: none
    assert ring_cts_wait_us(p3dn, "ring", "allreduce", "Simple", 8 * MIB, 2, (2, 6), P.net_message_us) == \
        pytest.approx(60 * 60.0)
    assert ring_cts_wait_us(p3dn, "ring", "allreduce", "Simple", 4 * MIB, 2, (2, 6), P.net_message_us) == 0.0
    # GPU Direct RDMA (p4d), another protocol or algorithm: nothing
    assert ring_cts_wait_us(p4d, "ring", "allreduce", "Simple", 16 * MIB, 8, (2, 9), P.net_message_us) == 0.0
    assert ring_cts_wait_us(p3dn, "ring", "allreduce", "LL", 16 * MIB, 2, (2, 4), P.net_message_us) == 0.0
    assert ring_cts_wait_us(p3dn, "tree", "allreduce", "Simple", 16 * MIB, 2, (2, 4), P.net_message_us) == 0.0


def test_the_wait_adds_to_a_p3dn_ring_transfer(monkeypatch):
    """The execution model adds the wait to the bandwidth term of a Simple ring all_reduce on p3dn: 16 MiB on
    2 channels under NCCL 2.4 takes 30 x 60 = 1800 µs longer than the same transfer without it."""
    t = NcclModel(_machine("dgx1-v100", 1), P, version=(2, 4)).table
    with_wait = _transfer_us(t, "allreduce", "ring", "Simple", 2, 16 * MIB, P)
    monkeypatch.setattr(net_transport, "host_staged", lambda kind, arch: False)
    assert with_wait - _transfer_us(t, "allreduce", "ring", "Simple", 2, 16 * MIB, P) == pytest.approx(1800.0)
