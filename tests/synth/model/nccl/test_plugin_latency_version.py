"""NCCL's tuner and the network plugin's reported latency, by NCCL version: none before 2.12 (net API v2-v5
have no latency), instead of NCCL's own network hop in 2.12-2.17, added to it (twice for Simple) from 2.18
(NVIDIA/nccl v2.11.4-1 / v2.12.7-1 / v2.17.1-1 / v2.18.1-1 src/graph/tuning.cc); and aws-ofi-nccl's figure by
its release (150 µs before v1.7.0).  The reference is a machine without a plugin (InfiniBand), whose tuner
latencies differ from EFA's by exactly the hand-computed plugin terms over NCCL's own table (2.9-2.17
``hwLat[NET]``: ring LL 2.7 µs, Simple 9.6 µs)."""

from __future__ import annotations

import argparse

import pytest

from synth.model.nccl import NcclEnv, NcclMachine
from synth.model.nccl.net_transport import tuner_inter_latency_us
from synth.model.nccl.tuning import TuneTable
from topo_probe.cli.options import apply_machine_arguments
from topo_probe.machines.presets import get_preset


def _p4d(net_kind: str, **changes) -> NcclMachine:
    ns = argparse.Namespace(nodes=2, nic_gbps=12.5, nics_per_node=4, rail_optimized=False)
    topo = apply_machine_arguments(get_preset("dgx-a100"), ns)
    return NcclMachine.from_topology(topo, net_kind=net_kind).with_(**changes)


def _ring_latency_gap(version: tuple, proto: str, **changes) -> float:
    """µs by which NCCL's ring all_reduce latency on 2 x p4d over EFA exceeds the same machine's over IB."""
    env = NcclEnv.from_environ({"NCCL_PROTO": proto})
    efa, ib = TuneTable.build(_p4d("efa", **changes), env, version), TuneTable.build(_p4d("ib"), env, version)
    key = ("allreduce", "ring", proto)
    return efa.latency[key] - ib.latency[key]


def test_the_rule_by_version():
    assert tuner_inter_latency_us(9.6, 75.0, "Simple", (2, 11)) == 9.6           # no latency in net API v5
    assert tuner_inter_latency_us(9.6, 75.0, "Simple", (2, 12)) == 75.0          # latencyInter replaces hwLat
    assert tuner_inter_latency_us(2.7, 75.0, "LL", (2, 17)) == 75.0
    assert tuner_inter_latency_us(9.6, 75.0, "Simple", (2, 18)) == pytest.approx(159.6)   # + flush
    assert tuner_inter_latency_us(2.7, 75.0, "LL", (2, 28)) == pytest.approx(77.7)
    assert tuner_inter_latency_us(9.6, 0.0, "Simple", (2, 23)) == 9.6            # no plugin figure


def test_ring_latency_against_a_machine_without_plugin():
    # 2 inter-node steps of the 30 of a 16-rank ring all_reduce
    assert _ring_latency_gap((2, 9), "Simple") == pytest.approx(0.0)
    assert _ring_latency_gap((2, 8), "LL") == pytest.approx(0.0)
    assert _ring_latency_gap((2, 17), "Simple") == pytest.approx(2 * (75.0 - 9.6))
    assert _ring_latency_gap((2, 17), "LL") == pytest.approx(2 * (75.0 - 2.7))
    assert _ring_latency_gap((2, 23), "Simple") == pytest.approx(2 * 2 * 75.0)


def test_an_older_plugins_reported_figure():
    # aws-ofi-nccl 1.5.0 (NCCL 2.17.1 on the ParallelCluster p4de): 150 µs instead of hwLat[NET]
    assert _ring_latency_gap((2, 17), "Simple", plugin_latency_us=150.0) == pytest.approx(2 * (150.0 - 9.6))
    assert _ring_latency_gap((2, 9), "Simple", plugin_latency_us=150.0) == pytest.approx(0.0)
