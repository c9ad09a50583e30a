"""NCCL's CollNet algorithms by version (``versions.collnet_algorithms``), checked by hand against the source.

NVIDIA/nccl v2.8.4-1 has one CollNet, the chain up the node's GPUs (src/collectives/device/all_reduce.h lines
200-209, ``struct ncclTree* tree = &channel->collTree``), tuned by src/graph/tuning.cc lines 130-132 (busBw x .9,
LL a sixth of that, no LL128) with the CollNet latency rows of lines 57 and 65-69, on half the communicator's
channels with no small-message cut (src/enqueue.cc ``getAlgoInfo``); v2.9.9-1 .. v2.13.4-1 have one "Oneshot"
(direct) CollNet; v2.14.3-1 on both.  The tuner rules of 2.9 .. 2.20 (``collnet_versions.COLLNET_RULES_BY_VERSION``)
are checked on 2 x 8 A100 with 4 NICs a host, by hand from the tuning.cc lines each test cites.
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


# -- the CollNet tuner rules of 2.9 .. 2.19 (collnet_versions.COLLNET_RULES_BY_VERSION), by hand ---------------------
#: 2 x 8 A100 with 4 NICs a host: the CollNet graph has 4 channels at 24 GB/s (busBw 96 GB/s), ppn 8, GPUs per NIC 2;
#: the InfiniBand plugin reports no latency, so a network hop is the table's own
A100X2_4NIC = NcclMachine.from_topology(cluster("dgx-a100", nodes=2, nics_per_node=4), collnet=True)


def _table4(version):
    t = TuneTable.build(A100X2_4NIC, NcclEnv(collnet_enable=1), version)
    g = t.graphs.collnet
    assert (g.n_channels, g.bw_intra) == (4, 24.0)
    return t


def _simple(t, algo):
    return t.bandwidth[("allreduce", algo, "Simple")], t.latency[("allreduce", algo, "Simple")]


def test_nccl_29_oneshot_collnet_by_hand():
    # v2.9.9-1 tuning.cc lines 132-133: busBw x .9, Simple only, no GPU/NIC divisor; ratio .5 (line 136):
    # 96 x .9 x .5 = 43.2 GB/s (the 2.19 rule gave 96 / 1.5 x .5 = 32).  Latency lines 158-160, the chain's
    # formula on 2.8's rows (lines 56, 65-69): 0 + 2 x 7 x 4.0 (NVLink) + 10.7 (network) = 66.7 µs
    t = _table4((2, 9))
    assert _simple(t, "collnet_direct") == pytest.approx((43.2, 66.7))
    assert t.bandwidth[("allreduce", "collnet_direct", "LL")] == 0.0
    assert t.bandwidth[("allreduce", "collnet_direct", "LL128")] == 0.0


#: (version, algorithm, algbw GB/s, latency µs), by hand from NVIDIA/nccl src/graph/tuning.cc:
#: v2.12.12-1 direct: no .9 (line 132 only zeroes LL / LL128), no divisor: 96 x .5 = 48.0; lines 159-160:
#:   2 x (1 x 8.0 + 7 x 0.5) + 10.7 = 33.7 (rows lines 56, 65, 69: Simple 8.0 on NVLink, 10.7 on the network)
#: v2.14.3-1 direct: lines 139-144, f = 8 / 4 = 2, f - (f - 1) / 2 = 1.5: 96 / 1.5 x .5 = 32.0; lines 171-173
#:   (0.5 µs arity) 33.7.  Chain: line 145 busBw x .75: 96 x .75 x .5 = 36.0; lines 174-175 2 x 7 x 8.0 = 112
#:   (no network hop); v2.17.1-1 the same (line 168, lines 200-201)
#: v2.18.1-1 chain: no .75, 48.0; lines 223-224 add the network hop; rows lines 56-59, 70, 78 (base 0, NVLink
#:   4.75, network 14): 2 x 7 x 4.75 + 14 = 80.5
#: v2.19.3-1 lines 234-236 (0.4 µs arity) on rows lines 56-59, 68, 76 (direct 3.7 / 31, chain 2.8 / 30):
#:   direct 32.0, 2 x (3.7 + 7 x 0.4) + 31 = 44.0; chain 48.0, 2 x 7 x 2.8 + 30 = 69.2
BY_HAND = [((2, 12), "collnet_direct", 48.0, 33.7), ((2, 14), "collnet_direct", 32.0, 33.7),
           ((2, 14), "collnet_chain", 36.0, 112.0), ((2, 17), "collnet_chain", 36.0, 112.0),
           ((2, 18), "collnet_chain", 48.0, 80.5), ((2, 19), "collnet_direct", 32.0, 44.0),
           ((2, 19), "collnet_chain", 48.0, 69.2)]


@pytest.mark.parametrize("version, algo, algbw, latency", BY_HAND)
def test_collnet_estimates_by_hand(version, algo, algbw, latency):
    assert _simple(_table4(version), algo) == pytest.approx((algbw, latency))


def test_collnet_gather_scatter_from_220():
    # v2.19.3-1 tuning.cc lines 168-169 skip every algorithm but ring / NVLS for all_gather / reduce_scatter;
    # v2.20.3-1 lines 169-170 admit CollNet direct
    for coll in ("allgather", "reducescatter"):
        assert _table4((2, 19)).bandwidth[(coll, "collnet_direct", "Simple")] == 0.0
        assert _table4((2, 20)).bandwidth[(coll, "collnet_direct", "Simple")] > 0.0


def test_collnet_direct_needs_nvswitch_from_214():
    # v2.14.3-1 tuning.cc lines 206-209: "Disable CollNet+Direct if not on an NVSwitch system"; 2.9-2.13 have no such rule
    v100x2 = NcclMachine.from_topology(cluster("dgx1-v100", nodes=2), collnet=True)
    assert v100x2.intra != "nvswitch"
    key = ("allreduce", "collnet_direct", "Simple")
    assert TuneTable.build(v100x2, NcclEnv(collnet_enable=1), (2, 13)).bandwidth[key] > 0.0
    assert TuneTable.build(v100x2, NcclEnv(collnet_enable=1), (2, 14)).bandwidth[key] == 0.0


def test_hopper_collnet_direct_share_from_218():
    # v2.18.1-1 tuning.cc line 182: CollNet direct's busBw x .85 when every GPU is sm90+ (absent in v2.17.1-1)
    h100x2 = NcclMachine.from_topology(cluster("dgx-h100", nodes=2), collnet=True)
    key = ("allreduce", "collnet_direct", "Simple")
    for version, share in (((2, 17), 1.0), ((2, 18), 0.85)):
        t = TuneTable.build(h100x2, NcclEnv(collnet_enable=1), version)
        g = t.graphs.collnet
        f = h100x2.gpus_per_node / g.n_channels
        assert t.bandwidth[key] == pytest.approx(g.n_channels * g.bw_intra / (f - (f - 1) / 2) * share * 0.5)
