"""A ring across hosts moves at most its channels' CTAs' rate (``p2p_cta.ring_net_cta_cap_gbs``): one CTA a channel
(NVIDIA/nccl v2.24.3-1 src/enqueue.cc lines 1428-1431), one slice at a time (src/device/prims_simple.h lines 235-305),
each Simple slice one network message (src/transport/net.cc line 1182) of 1 or 2 steps (src/include/collectives.h).
Checked against the hand-computed bound (channels x the fitted per-CTA rate) and against the real H100 InfiniBand
rings of 8 GPUs and NICs per host on 4 and 10 hosts (tests/fixtures/real_logs, each with its SOURCE header)."""

from __future__ import annotations

import pytest

from _paths import ROOT
from synth.formats.nccl_tests.runs import load_runs
from synth.model.nccl import DEFAULT_PARAMS, NcclMachine, NcclModel
from synth.model.nccl.env import NcclEnv
from synth.model.nccl.p2p_cta import ring_net_cta_cap_gbs
from topo_probe import cluster

LOGS = ROOT / "tests" / "fixtures" / "real_logs"


def last_busbw(file: str, coll: str | None = None) -> tuple[int, float]:
    """``(size, out-of-place busbw GB/s)`` of the largest row of ``file`` (of its ``coll`` run if it has several)."""
    runs = [r for r in load_runs(LOGS / file) if coll is None or coll in (r.collective or "").replace("_", "")]
    row = max(runs[0].rows, key=lambda r: r.size)
    return row.size, row.out_of_place.busbw_gbps


def machine(hosts: int, gpus_per_host: int) -> NcclMachine:
    """``hosts`` H100 hosts, ``gpus_per_host`` GPUs each with its own 400 Gb/s InfiniBand NIC."""
    m = NcclMachine.from_topology(cluster("dgx-h100", nodes=hosts))
    return m.with_(ranks=hosts * gpus_per_host, nics_per_node=gpus_per_host)


def test_the_bound_is_channels_times_the_cta_rate():
    """Hand-computed: 16 channels x 20 GB/s = 320 GB/s of bus bandwidth for Simple, half of it for LL."""
    from synth.model.nccl.params import ModelParams
    m = machine(4, 8)
    params = ModelParams(p2p_cta_gbs=20.0)
    assert ring_net_cta_cap_gbs(m, "ring", "Simple", 16, params) == pytest.approx(320.0)    # no per-message cost
    assert ring_net_cta_cap_gbs(m, "ring", "LL", 16, params) == pytest.approx(160.0)
    assert ring_net_cta_cap_gbs(machine(1, 8), "ring", "Simple", 16, params) == float("inf")


def hand_bound_gbs(coll: str) -> float:
    """16 channels x a 4 MiB / 8 step buffer's slice (2 steps, broadcast and reduce 1: collectives.h) over its time at
    the committed per-CTA rate plus one per-message cost (µs; GB/s = 1000 bytes a µs)."""
    slice_bytes = (1 << 22) // 8 * (1 if coll in ("broadcast", "reduce") else 2)
    per_slice_us = slice_bytes / (1000.0 * DEFAULT_PARAMS.p2p_cta_gbs) + DEFAULT_PARAMS.net_chunk_us("ib", "sm90")
    return 16 * slice_bytes / per_slice_us / 1000.0


@pytest.mark.parametrize("hosts, file, coll", [
    (4, "h100_32gpu_4node_all_gather_ib_voltagepark.txt", "allgather"),
    (4, "h100_32gpu_4node_broadcast_ib_voltagepark.txt", "broadcast"),
    (4, "h100_32gpu_4node_reduce_ib_voltagepark.txt", "reduce"),
    (10, "h100_80gpu_10node_5tests_8gpn_run0128.txt", "allgather"),
    (10, "h100_80gpu_10node_5tests_8gpn_run0128.txt", "reducescatter"),
])
def test_eight_gpus_a_host_stop_at_sixteen_ctas(hosts, file, coll):
    """4 and 10 hosts x 8 H100, 16 ring channels over 8 NICs: the model's busbw is the hand-computed CTA bound (below
    the NICs' 8 x 48 = 384 GB/s; broadcast / reduce under all_gather's by their halved slices), and the real rings
    stop there too (all_gather / reduce_scatter 323.5-324, broadcast / reduce 286 GB/s) within 6 %."""
    m = machine(hosts, 8)
    size, real = last_busbw(file, None if hosts == 4 else coll)
    c = NcclModel(m, env=NcclEnv()).choose(coll, size)
    assert (c.algorithm, c.protocol, c.channels) == ("ring", "Simple", 16)
    bound = hand_bound_gbs(coll)
    assert bound < 8 * 50.0 * DEFAULT_PARAMS.ring_net_efficiency("ib")
    assert c.busbw_gbps(m.ranks) == pytest.approx(bound, rel=0.02)
    assert c.busbw_gbps(m.ranks) == pytest.approx(real, rel=0.06)


def test_halved_slices_pay_the_message_cost_twice_as_often():
    """The real Voltage Park broadcast stops 12 % below its all_gather (286 vs 324 GB/s at 8 GiB); the model's bounds
    differ by the per-message cost paid per 512 KiB against per 1 MiB (hand-computed above), in the same direction."""
    real_ag = last_busbw("h100_32gpu_4node_all_gather_ib_voltagepark.txt")[1]
    real_bc = last_busbw("h100_32gpu_4node_broadcast_ib_voltagepark.txt")[1]
    assert real_bc < 0.9 * real_ag
    assert hand_bound_gbs("broadcast") < hand_bound_gbs("allgather")
    assert hand_bound_gbs("broadcast") / hand_bound_gbs("allgather") == pytest.approx(real_bc / real_ag, abs=0.1)


def test_four_gpus_a_host_stay_at_their_nics():
    """10 hosts x 4 H100: 16 channels over 4 NICs, 12 GB/s a channel, under the CTAs' bound: the NICs' 4 x 48 GB/s
    (hand-computed) is what the ring reaches, as the real run does (194.65 GB/s at 16 GiB)."""
    m = machine(10, 4)
    size, real = last_busbw("h100_40gpu_10node_5tests_4gpn_run0128.txt", "allgather")
    c = NcclModel(m, env=NcclEnv()).choose("allgather", size)
    assert c.channels == 16 and c.algorithm == "ring"
    assert c.busbw_gbps(m.ranks) == pytest.approx(4 * 50.0 * DEFAULT_PARAMS.ring_net_efficiency("ib"), rel=0.02)
    assert c.busbw_gbps(m.ranks) == pytest.approx(real, rel=0.03)


def test_a_bigger_nccl_buffsize_makes_fewer_slices_by_hand():
    """NCCL_BUFFSIZE=8 MiB: a 2-step slice of an all_gather is 2 MiB (8 MiB / NCCL_STEPS 8 x 2), so a CTA at 20 GB/s
    with a 2 µs slice cost moves 2097152 / (104.8576 + 2) bytes a µs; the default 4 MiB buffer 1048576 / (52.4288 + 2)."""
    from topo_probe import cluster
    from synth.model.nccl.env import NcclEnv
    from synth.model.nccl.machine import NcclMachine
    from synth.model.nccl.params import ModelParams

    m = NcclMachine.from_topology(cluster("dgx-h100", nodes=4))
    p = ModelParams(p2p_cta_gbs=20.0, net_chunk={"ib": 2.0})
    env = NcclEnv.from_environ({"NCCL_BUFFSIZE": str(8 << 20)})
    assert ring_net_cta_cap_gbs(m, "ring", "Simple", 16, p, "allgather", env.simple_step_bytes) == pytest.approx(
        16 * 2097152 / (104.8576 + 2.0) / 1000.0)
    assert ring_net_cta_cap_gbs(m, "ring", "Simple", 16, p, "allgather") == pytest.approx(
        16 * 1048576 / (52.4288 + 2.0) / 1000.0)
