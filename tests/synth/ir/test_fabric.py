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
