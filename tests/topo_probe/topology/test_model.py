"""Topology model: path classes, routes, P2P/GDR, subset, fingerprint (hand-built machines)."""

import pytest

from topo_probe.errors import TopologyError
from topo_probe.topology.model import Topology


def pcie_box() -> Topology:
    """2 sockets; socket s: host bridge hb{s} -> two PCIe switches -> 1 GPU each (+1 NIC on pcie0)."""
    t = Topology("pcie-box")
    for s in range(2):
        t.add_node(f"cpu{s}", "cpu", numa_node=s)
        t.add_node(f"hb{s}", "host_bridge")
        t.add_link(f"cpu{s}", f"hb{s}", kind="cpu", bandwidth_gbps=64.0)
    t.add_link("cpu0", "cpu1", kind="cpu", bandwidth_gbps=10.0, latency_us=1.0)
    for k in range(4):
        t.add_node(f"pcie{k}", "pcie_switch")
        t.add_link(f"pcie{k}", f"hb{k // 2}", kind="pcie", bandwidth_gbps=31.5)
        t.add_gpu(k)
        t.add_link(f"gpu{k}", f"pcie{k}", kind="pcie", bandwidth_gbps=31.5, latency_us=1.0)
    t.add_node("nic0", "nic", name="mlx5_0")
    t.add_link("nic0", "pcie0", kind="pcie", bandwidth_gbps=31.5)
    return t


def test_pcie_path_classes_follow_nvidia_smi_legend():
    t = pcie_box()
    # GPUs 0 and 1 hang off different switches under the same host bridge: PHB
    assert t.smi_label(0, 1) == "PHB" == t.path_class(0, 1)
    # across sockets: SYS, and P2P says why not
    assert t.smi_label(0, 2) == "SYS"
    cap = t.p2p(0, 3)
    assert not cap.supported and cap.reason == "crosses CPU sockets"
    assert t.pcie_class("gpu0", "nic0") == "PIX"
    assert t.gdr(0, "nic0") == (True, "")
    ok, why = t.gdr(2, "nic0")
    assert not ok and "SYS" in why


def test_direct_nvlink_and_nvb():
    t = Topology("tri")
    for i in range(3):
        t.add_gpu(i)
    t.add_link("gpu0", "gpu1", kind="nvlink", links=2, bandwidth_gbps=50)
    t.add_link("gpu1", "gpu2", kind="nvlink", links=1, bandwidth_gbps=25)
    assert t.smi_label(0, 1) == "NV2" and t.smi_label(1, 0) == "NV2"
    assert t.path_class(0, 2) == "NVB"
    assert t.routes(0, 2) == []  # never routed through another GPU
    assert t.nvlink_count(1, 2) == 1


def test_nvswitch_routes_split_evenly_and_label_counts_fabric_links():
    t = Topology("sw")
    for i in range(4):
        t.add_gpu(i)
    for k in range(3):
        t.add_node(f"nvswitch{k}", "nvswitch")
        for i in range(4):
            t.add_link(f"gpu{i}", f"nvswitch{k}", kind="nvlink", links=2, bandwidth_gbps=50)
    routes = t.routes(0, 3)
    assert len(routes) == 3 and sum(f for _, f in routes) == pytest.approx(1.0)
    assert {p[1] for p, _ in routes} == {"nvswitch0", "nvswitch1", "nvswitch2"}
    assert t.smi_label(2, 1) == "NV6"


def test_subset_renumbers_and_keeps_switches():
    t = pcie_box()
    s = t.subset([2, 0])
    assert s.num_gpus == 2
    assert s.graph.nodes["gpu2"]["index"] == 0 and s.graph.nodes["gpu0"]["index"] == 1
    assert s.smi_label(0, 1) == "SYS"
    assert len(s.nodes_of_kind("pcie_switch")) == 4
    with pytest.raises(TopologyError, match="GPU 7 does not exist"):
        t.subset([0, 7])
    with pytest.raises(TopologyError, match="listed twice"):
        t.subset([0, 0])


def test_fingerprint_is_structural():
    a, b = pcie_box(), pcie_box()
    b.name = "renamed"
    assert a.fingerprint() == b.fingerprint()
    b.graph.edges["cpu0", "cpu1"]["bandwidth_gbps"] = 20.0
    assert a.fingerprint() != b.fingerprint()


def test_disconnected_topology_names_cut_off_gpus():
    t = Topology("cut")
    for i in range(3):
        t.add_gpu(i)
    t.add_link("gpu0", "gpu1", kind="nvlink", bandwidth_gbps=25)
    with pytest.raises(TopologyError, match=r"GPUs \[2\] are cut off"):
        t.check_connected()


def test_bad_node_kind_and_missing_node():
    t = Topology("bad")
    with pytest.raises(TopologyError, match="kind 'tpu'"):
        t.add_node("x", "tpu")
    t.add_gpu(0)
    with pytest.raises(TopologyError, match="'gpu9' does not exist"):
        t.add_link("gpu0", "gpu9", kind="nvlink", bandwidth_gbps=25)


def test_gpu_lookups_follow_changes_to_the_graph():
    """GPU lookups are kept between queries; adding a GPU, or a new graph, is seen at once."""
    from topo_probe.errors import TopologyError
    from topo_probe.topology.model import Topology
    t = Topology("grow")
    t.add_gpu(0)
    assert t.num_gpus == 1 and t.gpus == [t.gpu(0)]
    t.add_gpu(1)
    assert t.num_gpus == 2 and t.gpu(1) != t.gpu(0)
    t.gpus.append("not a gpu")                 # callers get a copy: the kept list is not theirs
    assert t.num_gpus == 2
    sub = t.subset([1])
    assert sub.num_gpus == 1 and sub.graph.nodes[sub.gpu(0)]["index"] == 0
    with pytest.raises(TopologyError, match="has no GPU 5"):
        t.gpu(5)


def test_one_hop_paths_are_the_direct_link():
    from topo_probe.machines.generators import fully_connected
    t = fully_connected(5)
    assert t.gpu_fabric_paths(1, 3) == [(t.gpu(1), t.gpu(3))]
