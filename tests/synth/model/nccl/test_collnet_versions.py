"""NCCL's CollNet algorithms by version (``versions.collnet_algorithms``), checked by hand against the source.

NVIDIA/nccl v2.8.4-1 has one CollNet, the chain up the node's GPUs (src/collectives/device/all_reduce.h lines
200-209, ``struct ncclTree* tree = &channel->collTree``), tuned by src/graph/tuning.cc lines 130-132 (busBw x .9,
LL a sixth of that, no LL128) with the CollNet latency rows of lines 57 and 65-69, on half the communicator's
channels with no small-message cut (src/enqueue.cc ``getAlgoInfo``); v2.9.9-1 .. v2.13.4-1 have one "Oneshot"
(direct) CollNet; v2.14.3-1 on both.
"""

from __future__ import annotations

import pytest

from synth.model.nccl import NcclEnv, NcclMachine
from synth.model.nccl.tuning import TuneTable
from topo_probe import cluster

#: 2 x 8 A100 with a SHARP-capable switch (the preset's 8 NICs a host)
A100X2 = NcclMachine.from_topology(cluster("dgx-a100", nodes=2), collnet=True)


def _table(version):
    return TuneTable.build(A100X2, NcclEnv(collnet_enable=1), version)


@pytest.mark.parametrize("version, chain, direct", [((2, 8), True, False), ((2, 9), False, True),
                                                    ((2, 13), False, True), ((2, 14), True, True),
                                                    ((2, 28), True, True)])
def test_the_collnet_algorithms_of_each_version(version, chain, direct):
    t = _table(version)
    assert (t.bandwidth[("allreduce", "collnet_chain", "Simple")] > 0) is chain
    assert (t.bandwidth[("allreduce", "collnet_direct", "Simple")] > 0) is direct


def test_nccl_28_collnet_estimate_by_hand():
    t = _table((2, 8))
    g = t.graphs.collnet
    assert (g.n_channels, g.bw_intra) == (8, 24.0)              # the model's CollNet graph: 8 NICs at 24 GB/s
    bus = min(8 * 24.0, 235.0) * 0.9                             # tuning.cc: Ampere cap, then CollNet's .9
    assert t.bandwidth[("allreduce", "collnet_chain", "Simple")] == pytest.approx(bus * 0.5)
    assert t.bandwidth[("allreduce", "collnet_chain", "LL")] == pytest.approx(bus / 6 * 0.5)   # 14.4 GB/s
    assert t.bandwidth[("allreduce", "collnet_chain", "LL128")] == 0.0
    # latency: base + 2 x (GPUs per node - 1) x NVLink hop + one network hop; LL's hops x 1.8 across nodes
    assert t.latency[("allreduce", "collnet_chain", "Simple")] == pytest.approx(0.0 + 2 * 7 * 4.0 + 10.7)
    assert t.latency[("allreduce", "collnet_chain", "LL")] == pytest.approx(4.4 + 2 * 7 * 0.5 * 1.8 + 5.0)


def test_nccl_28_collnet_picks_and_channels():
    t = _table((2, 8))
    # 8 B: CollNet LL (22.0 µs) beats the tree's LL (4.4 + 2 x (7 x 0.52 x 1.8 + 5.0) = 27.5 µs)
    assert t.choose("allreduce", 8)[:3] == ("collnet_chain", "LL", 8)
    # half the communicator's 16 channels, not cut for a small message (only the threads halve)
    assert t.channels("collnet_chain", "Simple", 8) == (8, 64)
    assert t.channels("collnet_chain", "Simple", 1 << 30)[0] == 8
    # from 2.9 CollNet is direct and Simple only; the later chain keeps NCCL's newer rules (no LL)
    assert _table((2, 28)).bandwidth[("allreduce", "collnet_chain", "LL")] == 0.0


def test_nccl_algo_collnet_names_the_28_chain():
    # NCCL 2.8's NCCL_ALGO knows one "CollNet" (tuning.cc ncclAlgoStr {"Tree", "Ring", "CollNet"})
    only = TuneTable.build(A100X2, NcclEnv.from_environ({"NCCL_COLLNET_ENABLE": "1", "NCCL_ALGO": "CollNet"}), (2, 8))
    assert only.bandwidth[("allreduce", "collnet_chain", "Simple")] > 0
    assert only.bandwidth[("allreduce", "tree", "Simple")] == 0
    none = TuneTable.build(A100X2, NcclEnv.from_environ({"NCCL_COLLNET_ENABLE": "1", "NCCL_ALGO": "^CollNet"}), (2, 8))
    assert none.bandwidth[("allreduce", "collnet_chain", "Simple")] == 0


def test_nccl_28_collnet_ll_runs_at_nccls_own_estimate():
    # tuning.cc line 131: CollNet LL at a sixth of CollNet's busBw, "GDR read is disabled on both sides";
    # 8 NICs x 24 GB/s x .9 / 6 = 28.8 GB/s busBw, 14.4 GB/s algbw (ratio .5): 64 KiB more take 65536 / 14.4e3 µs
    from synth.model.nccl import DEFAULT_PARAMS
    from synth.model.nccl.runtime import collective_time_us
    t = _table((2, 8))
    dt = [collective_time_us(t, "allreduce", "collnet_chain", "LL", 8, n, DEFAULT_PARAMS) for n in (65536, 131072)]
    assert dt[1] - dt[0] == pytest.approx(65536 / (1000 * 14.4))
