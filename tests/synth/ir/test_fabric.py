"""Fabric: switch merging, channel routes, capacity units, transport policy."""

from fractions import Fraction

import pytest
from _topologies import DGX1_LINKS as DGX1  # noqa: E402
from _topologies import dgx1_hand

from synth.ir.fabric import build_fabric
from topo_probe.errors import TopologyError
from topo_probe.topology.model import Topology


def dgx1_with_pcie() -> Topology:
    t = dgx1_hand()
    t.add_node("cpu0", "cpu")
    for i in range(8):
        t.add_link(f"gpu{i}", "cpu0", kind="pcie", bandwidth_gbps=15.75)
    return t


def test_dgx1_auto_uses_nvlink_only_and_link_units():
    f = build_fabric(dgx1_with_pcie())
    assert f.unit_gbps == 25.0
    assert len(f.channels) == sum(1 for i in range(8) for j in range(8) if DGX1[i][j])
    assert not f.has_channel(0, 5)
    assert f.capacity(("gpu0", "gpu1"), 3) == 6.0  # NV2 edge, 3 rounds
    assert f.channel_bandwidth_gbps(0, 4) == 50.0


def test_dgx1_all_transport_adds_pcie_channels_with_shared_cpu():
    f = build_fabric(dgx1_with_pcie(), transport="all")
    assert f.has_channel(0, 5)
    load = f.load([(0, 5), (1, 6)])
    assert load[("cpu0", "gpu5")] == 1.0 and load[("gpu0", "cpu0")] == 1.0


def test_parallel_nvswitches_merge_into_one_port_per_gpu():
    t = Topology("sw")
    for i in range(4):
        t.add_gpu(i)
    for k in range(6):
        t.add_node(f"nvswitch{k}", "nvswitch")
        for i in range(4):
            t.add_link(f"gpu{i}", f"nvswitch{k}", kind="nvlink", links=2, bandwidth_gbps=50.0)
    f = build_fabric(t)
    assert len(f.resources) == 8  # one port each way per GPU
    (r1, f1), (r2, f2) = f.channels[(0, 1)]
    assert f1 == f2 == Fraction(1)
    assert f.resources[r1].bandwidth_gbps == 300.0 and f.resources[r1].links == 12
    assert f.capacity(r1, 1) == 12.0  # 12 NVLinks of 25 GB/s = 12 link-units per round


def test_gpus_without_any_route_are_named():
    t = Topology("cut")
    for i in range(3):
        t.add_gpu(i)
    t.add_link("gpu0", "gpu1", kind="nvlink", bandwidth_gbps=25.0)
    t.add_link("gpu2", "gpu1", kind="nvlink", bandwidth_gbps=25.0, both=False)
    with pytest.raises(TopologyError, match=r"GPUs \[2\] are cut off"):
        build_fabric(t)



def test_one_way_ring_is_a_fabric_and_the_connectivity_check_agrees_with_networkx():
    """build_fabric's strong-connectivity check (rank 0 reaches all and all reach rank 0, over
    arrays) against networkx's on random channel sets of 1..7 ranks; a one-way ring, where every
    rank reaches every other the long way round, is a fabric."""
    import random
    from types import SimpleNamespace

    import networkx as nx

    from synth.ir.fabric import _check_fabric_connected

    t = Topology("oneway5")
    for i in range(5):
        t.add_gpu(i)
    for i in range(5):                   # add_link links both ways: keep i -> i+1 only
        t.add_link(f"gpu{i}", f"gpu{(i + 1) % 5}", kind="nvlink", bandwidth_gbps=25.0)
    for i in range(5):
        t.graph.remove_edge(f"gpu{(i + 1) % 5}", f"gpu{i}")
    assert sorted(build_fabric(t).channels) == sorted((i, (i + 1) % 5) for i in range(5))
    rng = random.Random(7)
    outcomes = set()
    for _ in range(400):
        n = rng.randint(1, 7)
        pairs = [(i, j) for i in range(n) for j in range(n) if i != j and rng.random() < 0.3]
        g = nx.DiGraph()
        g.add_nodes_from(range(n))
        g.add_edges_from(pairs)
        fab = SimpleNamespace(num_ranks=n, channels=dict.fromkeys(pairs), topology_name="random")
        try:
            _check_fabric_connected(fab)
            refused = False
        except TopologyError as e:
            refused = True
            assert "cannot exchange data" in str(e)
        assert refused == (n > 1 and not nx.is_strongly_connected(g))
        outcomes.add(refused)
    assert outcomes == {True, False}
