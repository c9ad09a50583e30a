"""One GPU per node: from NCCL 2.23 every algorithm's network hop is the tree's row ("With ppn=1 latencies are
fully exposed, use the Tree network latency", NVIDIA/nccl v2.23.4-1 src/graph/tuning.cc lines 235-236; v2.22.3-1
line 225 took the algorithm's own row).  hwLatencies' NET rows (v2.25.1-1 line 139): tree LL / LL128 / Simple
5.0 / 8.5 / 14, ring 2.7 / 4.0 / 14.0, so a ring hop across hosts costs 2.3 µs more on LL and 4.5 µs more on LL128,
none on Simple.  Expectations by hand from those rows; the model's fitted per-transport extra cancels in each
difference."""

from __future__ import annotations

import pytest

from synth.model.nccl import DEFAULT_PARAMS, NcclMachine, NcclModel
from synth.model.nccl.latency import hop_latencies_us
from synth.model.nccl.versions import net_latency_algo
from topo_probe import cluster

TREE_NET = {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}      # tuning.cc hwLat[NCCL_HW_NET][NCCL_ALGO_TREE]
RING_NET = {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}      # tuning.cc hwLat[NCCL_HW_NET][NCCL_ALGO_RING]


def machine(gpus_per_host: int) -> NcclMachine:
    """2 H100 hosts, ``gpus_per_host`` GPUs each with its own 400 Gb/s InfiniBand NIC."""
    m = NcclMachine.from_topology(cluster("dgx-h100", nodes=2))
    return m.with_(ranks=2 * gpus_per_host, nics_per_node=gpus_per_host)


def test_the_rule_starts_at_2_23_and_only_for_one_gpu_a_node():
    assert net_latency_algo("ring", 1, (2, 23)) == "tree"
    assert net_latency_algo("ring", 1, (2, 22, 3)) == "ring"
    assert net_latency_algo("ring", 2, (2, 29)) == "ring"


@pytest.mark.parametrize("proto", ["LL", "LL128", "Simple"])
def test_one_gpu_a_host_ring_hop_is_the_trees_from_2_23(proto):
    one, eight = machine(1), machine(8)
    new = hop_latencies_us(one, "ring", proto, DEFAULT_PARAMS, version=(2, 25))[2]
    old = hop_latencies_us(one, "ring", proto, DEFAULT_PARAMS, version=(2, 22))[2]
    full = hop_latencies_us(eight, "ring", proto, DEFAULT_PARAMS, version=(2, 25))[2]
    assert new - old == pytest.approx(TREE_NET[proto] - RING_NET[proto])
    assert full == pytest.approx(old)             # 8 GPUs a host keep the ring's row


def test_nccls_own_ring_ll_estimate_moves_by_the_same_hop():
    """NCCL's tuner (the choice): a 2-rank ring all_gather crosses the network once (nInterSteps = nNodes - 1), so
    its LL estimate is 2.3 µs higher from 2.23 than at 2.22 (base and other terms of the two versions are equal)."""
    one = machine(1)
    lat = {v: NcclModel(one, version=v).table.latency[("allgather", "ring", "LL")] for v in ((2, 22), (2, 23))}
    assert lat[(2, 23)] - lat[(2, 22)] == pytest.approx(TREE_NET["LL"] - RING_NET["LL"])


@pytest.mark.parametrize("coll", ["broadcast", "reduce"])
@pytest.mark.parametrize("proto", ["LL", "LL128", "Simple"])
def test_ring_broadcast_and_reduce_keep_the_rings_row(coll, proto):
    """Ring broadcast / reduce read the ring's own row (``lat = hwLat[hw[a]][a][p]``, v2.23.4-1 tuning.cc lines
    241-249), not the substituted ``interLat``: one GPU a host at 2.25 pays what it paid at 2.22, and what 8 pay."""
    one, eight = machine(1), machine(8)
    assert net_latency_algo("ring", 1, (2, 25), coll) == "ring"
    new = hop_latencies_us(one, "ring", proto, DEFAULT_PARAMS, version=(2, 25), coll=coll)[2]
    old = hop_latencies_us(one, "ring", proto, DEFAULT_PARAMS, version=(2, 22), coll=coll)[2]
    full = hop_latencies_us(eight, "ring", proto, DEFAULT_PARAMS, version=(2, 25), coll=coll)[2]
    assert new == pytest.approx(old) and new == pytest.approx(full)
    assert new == pytest.approx(RING_NET[proto] + DEFAULT_PARAMS.net_latency_us(one.net_kind, proto, one.arch))
    lat = {v: NcclModel(one, version=v).table.latency[(coll, "ring", proto)] for v in ((2, 22), (2, 23))}
    assert lat[(2, 23)] == pytest.approx(lat[(2, 22)])       # NCCL's tuner: the same row


@pytest.mark.parametrize("proto", ["LL", "Simple"])
def test_rccl_keeps_its_rows(proto):
    """RCCL has no such rule (ROCm/rccl 0cbce2a7 src/graph/tuning.cc line 431: ``latencyInter`` or
    ``hwLat[NET][a][p]``): one MI355X a host pays the ring's network row, as 8 do."""
    one = NcclMachine.from_topology(cluster("mi355x", nodes=2)).with_(ranks=2, nics_per_node=1)
    eight = NcclMachine.from_topology(cluster("mi355x", nodes=2))
    assert one.amd and one.gpus_per_node == 1 and eight.gpus_per_node == 8
    for v in ((2, 22), (2, 25)):
        net = hop_latencies_us(one, "ring", proto, DEFAULT_PARAMS, version=v)[2]
        assert net == pytest.approx(hop_latencies_us(eight, "ring", proto, DEFAULT_PARAMS, version=v)[2])
        assert net == pytest.approx(RING_NET[proto] + DEFAULT_PARAMS.net_latency_us(one.net_kind, proto, one.arch))
