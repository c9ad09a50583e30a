"""link-matrix JSON and the shared builders (NVLink counts, PCIe classes -> tree)."""

from __future__ import annotations

import itertools

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topo_probe.errors import TopologyError
from topo_probe.parsers.link_matrix import add_nvlinks, parse_link_matrix
from topo_probe.parsers.pcie_classes import add_pcie_tree_from_classes
from topo_probe.topology.model import Topology

DGX1 = [[0, 2, 1, 1, 2, 0, 0, 0], [2, 0, 1, 2, 0, 1, 0, 0], [1, 1, 0, 2, 0, 0, 2, 0],
        [1, 2, 2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2, 1, 1], [0, 1, 0, 0, 2, 0, 1, 2],
        [0, 0, 2, 0, 1, 1, 0, 2], [0, 0, 0, 1, 1, 2, 2, 0]]


def doc(**kw):
    d = {"format": "link-matrix", "name": "dgx1", "links": DGX1, "link_bandwidth_gbps": 25.0,
         "link_latency_us": 0.7}
    d.update(kw)
    return d


def test_dgx1_matrix_published_figures():
    t = parse_link_matrix(doc())
    assert t.name == "dgx1" and t.num_gpus == 8
    for i, j in itertools.product(range(8), repeat=2):
        assert t.nvlink_count(i, j) == DGX1[i][j]
        if DGX1[i][j]:
            e = t.graph.edges[f"gpu{i}", f"gpu{j}"]
            assert (e["kind"], e["bandwidth_gbps"], e["latency_us"]) == ("nvlink", 25.0 * DGX1[i][j], 0.7)
    assert all(t.gpu_bandwidth_gbps(i) == 150.0 for i in range(8))  # 6 x 25 GB/s
    g = nx.Graph([(i, j) for i in range(8) for j in range(8) if DGX1[i][j]])
    assert nx.diameter(g) == 2  # published: diameter 2
    assert not t.nodes_of_kind("nvswitch")


def test_asymmetric_matrix_gives_directed_edges_and_kind():
    t = parse_link_matrix(doc(links=[[0, 1], [0, 0]], link_kind="infinity_fabric"))
    assert t.nvlink_count(0, 1) == 1 and t.nvlink_count(1, 0) == 0
    assert t.graph.edges["gpu0", "gpu1"]["kind"] == "infinity_fabric"


@pytest.mark.parametrize("change,field", [
    ({"links": [[0, 1], [1]]}, "links[1]"),
    ({"links": [[0, -1], [1, 0]]}, "links[0][1]"),
    ({"links": [[0, True], [1, 0]]}, "links[0][1]"),
    ({"links": [[1, 1], [1, 0]]}, "links[0][0]"),
    ({"links": []}, "'links'"),
    ({"link_bandwidth_gbps": 0}, "'link_bandwidth_gbps'"),
    ({"link_bandwidth_gbps": "fast"}, "'link_bandwidth_gbps'"),
    ({"link_latency_us": -1}, "'link_latency_us'"),
    ({"link_kind": "pcie"}, "'link_kind'"),
    ({"format": "other"}, "'format'"),
    ({"name": ""}, "'name'"),
])
def test_errors_name_the_field(change, field):
    with pytest.raises(TopologyError) as exc:
        parse_link_matrix(doc(**change), source="m.json")
    msg = str(exc.value)
    assert msg.startswith("m.json: ") and field in msg and "\n" not in msg
    with pytest.raises(TopologyError, match="link_bandwidth_gbps"):
        parse_link_matrix({"links": [[0]]})
    with pytest.raises(TopologyError, match="JSON object"):
        parse_link_matrix([[0]])


def gpus(n):
    t = Topology("t")
    for i in range(n):
        t.add_gpu(i)
    return t


@pytest.mark.parametrize("k,plan", [(12, [2] * 6), (18, [4, 4, 5, 5]), (6, [1] * 6), (5, [1] * 5)])
def test_nvswitch_plans(k, plan):
    t = gpus(8)
    notes = add_nvlinks(t, [[0 if i == j else k for j in range(8)] for i in range(8)], link_gbps=25.0)
    sw = t.nodes_of_kind("nvswitch")
    assert sorted(t.graph.edges["gpu3", s]["links"] for s in sw) == plan
    assert t.smi_label(0, 5) == f"NV{k}" and t.gpu_bandwidth_gbps(2) == 25.0 * k
    assert len(notes) == 1 and f"NV{k}" in notes[0]


def test_two_nvlink_islands_and_direct_when_plausible():
    t = gpus(6)
    m = [[0] * 6 for _ in range(6)]
    for i, j in itertools.permutations(range(3), 2):
        m[i][j] = 18  # island 0-2: NV18 -> switches
    for i, j in itertools.permutations(range(3, 6), 2):
        m[i][j] = 6   # island 3-5: 12 links per GPU -> direct
    add_nvlinks(t, m, link_gbps=25.0)
    assert len(t.nodes_of_kind("nvswitch")) == 4
    assert t.nvlink_count(3, 4) == 6 and t.nvlink_count(0, 1) == 0 and t.smi_label(0, 1) == "NV18"
    assert not t.gpu_fabric_paths(0, 3)


# ----------------------------------------------------------------------------- PCIe tree
LABELS = ("SYS", "NODE", "PHB", "PXB")


def label(a, b):
    return next((LABELS[k] for k in range(4) if a[k] != b[k]), "PIX")


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.lists(st.tuples(*[st.integers(0, 1)] * 4), min_size=1, max_size=9), st.data())
def test_tree_reproduces_every_known_class(pos, data):
    """Random hierarchical positions (cpu, host bridge, upstream switch, leaf switch) give
    consistent classes; hide a random subset of pairs (as NVLink does); the built tree must
    reproduce every shown class, and the CPU split must follow the NUMA ids."""
    n = len(pos)
    t = gpus(n)
    eps = t.gpus
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    hidden = set(data.draw(st.lists(st.sampled_from(pairs), unique=True), label="hidden")) if pairs else set()
    classes = {(eps[a], eps[b]): label(pos[a], pos[b]) for a, b in pairs if (a, b) not in hidden}
    add_pcie_tree_from_classes(t, eps, classes, numa={e: p[0] for e, p in zip(eps, pos)}, pcie_gbps=31.5)
    for (a, b), c in classes.items():
        assert t.pcie_class(a, b) == c and t.pcie_class(b, a) == c
    for a, b in pairs:  # hidden pairs: only the CPU level is known (from NUMA)
        assert (t.pcie_class(eps[a], eps[b]) == "SYS") == (pos[a][0] != pos[b][0])
    assert [t.graph.nodes[e]["numa_node"] for e in eps] == [p[0] for p in pos]
    assert sorted(t.nodes_of_kind("cpu")) == sorted({f"cpu{p[0]}" for p in pos})


def test_contradiction_and_affinity_conflict_are_read_with_notes():
    t = gpus(3)
    e = t.gpus
    notes = add_pcie_tree_from_classes(t, e, {(e[0], e[1]): "PIX", (e[1], e[2]): "PIX", (e[0], e[2]): "SYS"},
                                       locate=lambda a, b: "cell")
    assert t.pcie_class("gpu0", "gpu2") == "PIX"   # the closure of the two PIX cells
    assert any("gpu0/gpu2 SYS read as PIX (cell)" in n for n in notes)
    t = gpus(2)
    notes = add_pcie_tree_from_classes(t, t.gpus, {("gpu0", "gpu1"): "NODE"}, numa={"gpu0": 0, "gpu1": 1})
    assert t.pcie_class("gpu0", "gpu1") == "NODE" and any("affinity differs" in n for n in notes)
    t = gpus(2)
    notes = add_pcie_tree_from_classes(t, t.gpus, {("gpu0", "gpu1"): "SYS"}, numa={"gpu0": 0, "gpu1": 0})
    assert t.pcie_class("gpu0", "gpu1") == "SYS" and any("same NUMA" in n for n in notes)
    assert [t.graph.nodes[g]["numa_node"] for g in t.gpus] == [0, 0]
    with pytest.raises(TopologyError, match="not one of"):
        add_pcie_tree_from_classes(gpus(2), ["gpu0", "gpu1"], {("gpu0", "gpu1"): "NV1"})


def test_hidden_pairs_without_affinity_share_a_cpu():
    t = gpus(4)
    notes = add_pcie_tree_from_classes(t, t.gpus, {})
    assert len(t.nodes_of_kind("cpu")) == 1 and t.pcie_class("gpu0", "gpu3") == "NODE"
    assert any("shared" in n for n in notes)
    t = gpus(3)
    add_pcie_tree_from_classes(t, t.gpus, {("gpu0", "gpu2"): "SYS"})
    assert t.pcie_class("gpu0", "gpu2") == "SYS"
    assert t.pcie_class("gpu0", "gpu1") == "NODE"  # gpu1 joins gpu0's CPU greedily, never gpu2's too


def test_every_name_the_parsers_package_lists_resolves():
    """Each name of ``topo_probe.parsers.__all__`` is importable from the package (the lazy ones
    from the module that defines them): ``to_nccl_xml`` once pointed at a module without it."""
    import topo_probe.parsers as parsers
    from topo_probe.parsers.nccl_xml_export import to_nccl_xml
    for name in parsers.__all__:
        assert getattr(parsers, name) is not None, name
    assert parsers.to_nccl_xml is to_nccl_xml
