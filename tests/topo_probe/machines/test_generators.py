"""Generators vs brute-force / networkx references; clusters vs hand-computed figures."""

import networkx as nx
import pytest
from _paths import FIXTURES

from topo_probe.cli.display import pair_bandwidth_gbps
from topo_probe.errors import TopologyError
from topo_probe.machines.clusters import cluster
from topo_probe.machines.generators import fully_connected, hub_and_spoke, line, ring, torus
from topo_probe.machines.presets import get_preset
from topo_probe.parsers.nvsmi import parse_nvsmi_topo


def _nv_edges(t):
    """Undirected GPU pairs joined by a direct GPU link, with link counts."""
    n = t.num_gpus
    return {(i, j): t.nvlink_count(i, j) for i in range(n) for j in range(i + 1, n) if t.nvlink_count(i, j)}


@pytest.mark.parametrize("n", [2, 3, 5, 8])
@pytest.mark.parametrize("links", [1, 3])
def test_ring_matches_cycle(n, links):
    t = ring(n, bandwidth_gbps=25.0, links=links)
    ref = nx.cycle_graph(n) if n > 2 else nx.path_graph(2)
    assert set(_nv_edges(t)) == {tuple(sorted(e)) for e in ref.edges()}
    assert set(_nv_edges(t).values()) == {links}
    for i in range(n):
        assert t.gpu_bandwidth_gbps(i) == 25.0 * links * ref.degree(i)
    t.check_connected()


def test_line_and_fully_connected():
    t = line(4, bandwidth_gbps=20.0)
    assert set(_nv_edges(t)) == {(0, 1), (1, 2), (2, 3)}
    assert [t.gpu_bandwidth_gbps(i) for i in range(4)] == [20.0, 40.0, 40.0, 20.0]
    f = fully_connected(6, bandwidth_gbps=64.0, kind="infinity_fabric")
    assert set(_nv_edges(f)) == {(i, j) for i in range(6) for j in range(i + 1, 6)}
    assert all(f.gpu_bandwidth_gbps(i) == 5 * 64.0 for i in range(6))
    assert all(d["kind"] == "infinity_fabric" for _, _, d in f.graph.edges(data=True))


@pytest.mark.parametrize("x,y", [(1, 2), (2, 2), (2, 3), (3, 3), (3, 4), (1, 5)])
def test_torus_matches_networkx_periodic_grid(x, y):
    t = torus(x, y)
    ref = nx.grid_2d_graph(x, y, periodic=True)
    expect = {tuple(sorted((a * y + b, c * y + d))) for (a, b), (c, d) in ref.edges()}
    assert set(_nv_edges(t)) == expect
    assert set(_nv_edges(t).values()) == {1}


def test_hub_and_spoke():
    t = hub_and_spoke(8, links=6)
    assert t.smi_label(2, 7) == t.smi_label(7, 2) == "NV6"
    assert t.routes(0, 1) == [(("gpu0", "nvswitch0", "gpu1"), 1.0)]
    assert pair_bandwidth_gbps(t, 0, 1) == 150.0


def test_pcie_fallback():
    bare = ring(6)
    assert bare.routes(0, 3) == []
    assert bare.smi_label(0, 3) == bare.path_class(0, 3) == "PHB"      # the host assumed for NCCL's side
    t = ring(6, pcie_gbps=31.5)
    assert t.smi_label(0, 3) == "PIX" and t.smi_label(0, 1) == "NV1"
    assert pair_bandwidth_gbps(t, 0, 3) == 31.5


@pytest.mark.parametrize("call", [lambda: ring(1), lambda: line(0), lambda: torus(1, 1),
                                  lambda: ring(4, kind="pcie"), lambda: cluster("dgx-a100", nodes=0)])
def test_bad_arguments(call):
    with pytest.raises(TopologyError):
        call()


def test_cluster_renumbers_and_wires_network():
    base = get_preset("dgx-a100")
    c = cluster("dgx-a100", nodes=3)
    assert c.num_gpus == 24
    for h in range(3):
        for local in range(8):
            node = c.gpu(h * 8 + local)
            assert node == f"h{h}.gpu{local}"
            assert c.host_of(h * 8 + local) == h
    net = [(u, v, d) for u, v, d in c.graph.edges(data=True) if d["kind"] == "network"]
    assert len(net) == 2 * 3 * 8  # every NIC of every host, both directions
    assert {d["bandwidth_gbps"] for _, _, d in net} == {200 / 8}  # HDR 200 Gb/s
    assert c.nodes_of_kind("net_switch") == ["netswitch0"]
    assert c.path_class(0, 9) == "NET" and c.path_class(8, 9) == "NVL"
    # within a host the copy is the preset (same labels)
    assert [c.smi_label(8, j) for j in range(8, 16)] == [base.smi_label(0, j) for j in range(8)]
    # across hosts GPU0 reaches both NICs of its PCIe complex (2 x 25 GB/s), so its own
    # Gen4 x16 link (31.5 GB/s) is the bottleneck
    assert pair_bandwidth_gbps(c, 0, 8) == min(31.5, 2 * 25.0)
    assert pair_bandwidth_gbps(c, 0, 1) == 300.0
    c.check_connected()


def test_cluster_rails_and_nic_override():
    c = cluster(get_preset("dgx-h100"), nodes=2, nic_gbps=40.0, net_latency_us=4.0, rail_optimized=True)
    assert c.nodes_of_kind("net_switch") == [f"netswitch{r}" for r in range(8)]
    for r in range(8):  # rail r joins NIC r of each host
        assert sorted(c.graph.predecessors(f"netswitch{r}")) == [f"h0.nic{r}", f"h1.nic{r}"]
    e = c.graph.edges["h0.nic3", "netswitch3"]
    assert (e["bandwidth_gbps"], e["latency_us"]) == (40.0, 2.0)
    assert pair_bandwidth_gbps(c, 3, 11) == 40.0


def test_cluster_needs_nics():
    with pytest.raises(TopologyError, match="no NICs"):
        cluster(ring(4), nodes=2)


def test_cluster_of_nvsmi_text_names_the_nic_speed_flag():
    """nvidia-smi shows NICs but not their speed: --nodes needs --nic-gbps, and the one line says so by that name
    (hand-written fixture, tests/fixtures/family/README.md)."""
    t = parse_nvsmi_topo((FIXTURES / "family" / "nvsmi_p100x4_driver384_soc.txt").read_text())
    with pytest.raises(TopologyError) as exc:
        cluster(t, nodes=2)
    assert "--nic-gbps" in str(exc.value) and "'nic0'" in str(exc.value) and "\n" not in str(exc.value)
    assert cluster(t, nodes=2, nic_gbps=12.5).graph.edges["h1.nic0", "netswitch0"]["bandwidth_gbps"] == 12.5


def test_cluster_leaf_spine_oversubscription():
    c = cluster("dgx-h100", nodes=5, spine_oversubscription=2, hosts_per_leaf=2)
    assert c.nodes_of_kind("net_switch") == ["leaf0", "leaf1", "leaf2", "spine"]
    assert sorted(c.graph.predecessors("leaf1")) == sorted([f"h{h}.nic{k}" for h in (2, 3) for k in range(8)] + ["spine"])
    for q in range(3):   # every leaf alike, the half-empty last one too: 2 hosts x 8 x 50 GB/s / 2
        assert c.graph.edges[f"leaf{q}", "spine"]["bandwidth_gbps"] == 400.0
        assert c.graph.edges["spine", f"leaf{q}"]["links"] == 8
    r = cluster("dgx-h100", nodes=3, rail_optimized=True, spine_oversubscription=4)
    assert len(r.nodes_of_kind("net_switch")) == 8 + 1          # 32 hosts per rail leaf: one group
    assert r.graph.edges["leaf0.rail5", "spine"]["bandwidth_gbps"] == 32 * 50.0 / 4
    assert r.path_class(0, 9) == "NET"                          # across rails through the spine


@pytest.mark.parametrize("ratio", [0.5, 0, -1, 2000, float("nan"), True])
def test_cluster_rejects_bad_oversubscription(ratio):
    with pytest.raises(TopologyError, match="oversubscription"):
        cluster("dgx-h100", nodes=2, spine_oversubscription=ratio)
