"""Presets vs published figures (tests/fixtures/REFERENCE.md, vendor data sheets) and real
``nvidia-smi topo -m`` captures."""

import json
import re

import networkx as nx
import pytest

from topo_probe.errors import TopologyError
from topo_probe.machines.presets import PRESETS, get_preset
from topo_probe.topology.model import GPU_LINK_KINDS


def reference_dgx1_links(fixtures_dir):
    """The DGX-1 link matrix as printed in REFERENCE.md (parsed, not copied)."""
    text = (fixtures_dir / "REFERENCE.md").read_text()
    m = re.search(r"links\[i\]\[j\]:\s*```\s*(\[\[.*?\]\])\s*```", text, re.S)
    return json.loads(m.group(1))


# name: (GPUs, GPU-fabric links per GPU, GB/s per GPU, PCIe x16 GB/s, NICs, NIC Gb/s, cc)
PUBLISHED = {
    "dgx1-v100": (8, 6, 150.0, 15.75, 4, 100, "7.0"),
    "dgx2": (16, 6, 150.0, 15.75, 8, 100, "7.0"),
    "dgx-a100": (8, 12, 300.0, 31.5, 8, 200, "8.0"),
    "dgx-h100": (8, 18, 450.0, 63.0, 8, 400, "9.0"),
    "pcie-8gpu-2socket": (8, 0, 0.0, 31.5, 2, 200, "8.0"),
    "mi300x": (8, 7, 448.0, 63.0, 8, 400, None),
}


def test_registry_is_documented():
    from topo_probe.machines.presets_current import CURRENT_PRESETS
    assert set(PRESETS) == set(PUBLISHED) | set(CURRENT_PRESETS) and not set(PUBLISHED) & set(CURRENT_PRESETS)
    for name, (builder, doc) in PRESETS.items():
        assert callable(builder) and len(doc) > 100, name


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_figures(name):
    gpus, nlinks, gbps, pcie, nics, nic_gbit, cc = PUBLISHED[name]
    t = get_preset(name)
    t.check_connected()
    assert t.num_gpus == gpus
    for i in range(gpus):
        g = t.gpu(i)
        out = [d for _, _, d in t.graph.out_edges(g, data=True)]
        assert sum(d["links"] for d in out if d["kind"] in GPU_LINK_KINDS) == nlinks
        assert t.gpu_bandwidth_gbps(i) == pytest.approx(gbps)
        assert [d["bandwidth_gbps"] for d in out if d["kind"] == "pcie"] == [pcie]
        attrs = t.graph.nodes[g]
        assert attrs["compute_capability"] == cc and attrs["host"] == 0 and attrs["index"] == i
        assert attrs["name"] and re.fullmatch(r"0000:[0-9A-F]{2}:00\.0", attrs["pci_bus_id"])
    nic_nodes = t.nodes_of_kind("nic")
    assert len(nic_nodes) == nics
    assert {t.graph.nodes[n]["speed_gbps"] for n in nic_nodes} == {nic_gbit / 8}
    assert len(t.nodes_of_kind("cpu")) == 2


def test_dgx1_link_matrix_cell_by_cell(fixtures_dir):
    ref = reference_dgx1_links(fixtures_dir)
    t = get_preset("dgx1-v100")
    for i in range(8):
        for j in range(8):
            assert t.nvlink_count(i, j) == ref[i][j], (i, j)
            if ref[i][j]:
                assert t.graph.edges[t.gpu(i), t.gpu(j)]["bandwidth_gbps"] == 25.0 * ref[i][j]


def test_dgx1_labels_and_classes(fixtures_dir):
    ref = reference_dgx1_links(fixtures_dir)
    t = get_preset("dgx1-v100")
    for i in range(8):
        for j in range(8):
            if i == j:
                continue
            # brute force: 2-hop NVLink relay exists (diameter 2)
            relay = any(ref[i][k] and ref[k][j] for k in range(8))
            if ref[i][j]:
                assert (t.smi_label(i, j), t.path_class(i, j)) == (f"NV{ref[i][j]}", "NVL")
            else:  # all non-NVLink pairs of the cube-mesh sit on different sockets
                assert (i < 4) != (j < 4)
                assert t.smi_label(i, j) == "SYS"
                assert t.path_class(i, j) == ("NVB" if relay else "SYS")
    same_socket_other_switch = t.pcie_class(t.gpu(0), t.gpu(2))
    assert same_socket_other_switch == "NODE" and t.pcie_class(t.gpu(0), t.gpu(1)) == "PIX"


def _parse_smi_gpu_block(text):
    lines = [ln.split() for ln in text.splitlines() if ln.startswith("GPU")]
    header = text.splitlines()[0].split()
    ngpu = sum(1 for h in header if re.fullmatch(r"GPU\d+", h))
    return [row[1:1 + ngpu] for row in lines[:ngpu]], [row[1 + ngpu:] for row in lines[:ngpu]]


def test_dgx1_nvlink_graph_isomorphic_to_real_capture(fixtures_dir):
    """A real DGX-1-pattern board numbers its GPUs differently; the NVLink graph must match."""
    cells, _ = _parse_smi_gpu_block((fixtures_dir / "nvsmi_topo_dgx1_v100.txt").read_text())
    real = nx.Graph()
    for i, row in enumerate(cells):
        for j, c in enumerate(row):
            if c.startswith("NV"):
                real.add_edge(i, j, w=int(c[2:]))
    t = get_preset("dgx1-v100")
    ours = nx.Graph()
    for i in range(8):
        for j in range(8):
            if t.nvlink_count(i, j):
                ours.add_edge(i, j, w=t.nvlink_count(i, j))
    assert nx.is_isomorphic(real, ours, edge_match=lambda a, b: a["w"] == b["w"])


def test_dgx_a100_matches_real_capture(fixtures_dir):
    cells, nic_cells = _parse_smi_gpu_block((fixtures_dir / "nvsmi_topo_dgx_a100.txt").read_text())
    t = get_preset("dgx-a100")
    nics = t.nodes_of_kind("nic")
    for i in range(8):
        assert [t.smi_label(i, j) for j in range(8)] == cells[i]
        # compute NICs NIC0..NIC7: the PXB cells (same PCIe complex) agree exactly
        real_pxb = {k for k in range(8) if nic_cells[i][k] == "PXB"}
        assert {k for k, n in enumerate(nics) if t.pcie_class(t.gpu(i), n) == "PXB"} == real_pxb
        assert {k for k, n in enumerate(nics) if t.gdr(i, n)[0]} == real_pxb


def test_dgx_a100_pcie_complexes():
    t = get_preset("dgx-a100")
    tops = [p for p in t.nodes_of_kind("pcie_switch")
            if any(t.kind(v) == "host_bridge" for v in t.graph.successors(p))]
    assert len(tops) == 4
    for top in tops:
        below = nx.ancestors(t.graph.subgraph(set(t.graph) - {n for n in t.graph if t.kind(n) in
                                                              ("host_bridge", "cpu", "nvswitch")}), top)
        kinds = sorted(t.kind(n) for n in below if t.kind(n) in ("gpu", "nic"))
        assert kinds == ["gpu", "gpu", "nic", "nic"]


def test_dgx2_planes_and_bisection():
    t = get_preset("dgx2")
    cross = [(u, v, d) for u, v, d in t.graph.edges(data=True)
             if t.kind(u) == t.kind(v) == "nvswitch"]
    assert len(cross) == 12 and {d["links"] for *_, d in cross} == {8}
    # published: 2.4 TB/s bisection (both directions) = 1.2 TB/s per direction, via max flow
    g = nx.DiGraph()
    for u, v, d in t.graph.edges(data=True):
        if d["kind"] == "nvlink":
            g.add_edge(u, v, capacity=d["bandwidth_gbps"])
    for i in range(16):
        g.add_edge("S" if i < 8 else t.gpu(i), t.gpu(i) if i < 8 else "T", capacity=1e9)
    assert nx.maximum_flow_value(g, "S", "T") == pytest.approx(1200.0)
    assert {t.smi_label(0, j) for j in range(1, 16)} == {"NV6"}
    assert len(t.routes(0, 9)) == 6  # one path per NVSwitch plane


def test_dgx_h100_switch_split():
    t = get_preset("dgx-h100")
    for i in range(8):
        per_switch = [t.graph.edges[t.gpu(i), f"nvswitch{k}"]["links"] for k in range(4)]
        assert per_switch == [5, 4, 4, 5]
        assert t.smi_label(i, (i + 1) % 8) == "NV18"
        assert [t.gdr(i, n)[0] for n in t.nodes_of_kind("nic")] == [k == i for k in range(8)]


def test_pcie_box_upi_parameter():
    from topo_probe.cli.display import pair_bandwidth_gbps
    slow = get_preset("pcie-8gpu-2socket", upi_gbps=10.0)
    fast = get_preset("pcie-8gpu-2socket")
    assert pair_bandwidth_gbps(slow, 0, 4) == 10.0
    assert pair_bandwidth_gbps(fast, 0, 4) == 31.5  # Gen4 x16 under a 62.4 GB/s UPI
    assert pair_bandwidth_gbps(fast, 0, 1) == 31.5
    assert [fast.smi_label(0, j) for j in range(8)] == ["X"] + ["PIX"] * 3 + ["SYS"] * 4
    assert not fast.p2p(0, 4).supported and fast.p2p(0, 3).supported
    with pytest.raises(TopologyError):
        get_preset("pcie-8gpu-2socket", upi_gbps=0)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_labels_symmetric(name):
    t = get_preset(name)
    for i, j in t.gpu_pairs():
        assert t.smi_label(i, j) == t.smi_label(j, i)
        assert t.path_class(i, j) == t.path_class(j, i)


def test_fingerprints_distinct_and_stable():
    """The presets of this file; the current-hardware ones (two share a fabric with these) are
    checked in test_presets_current.py."""
    fps = {name: get_preset(name).fingerprint() for name in PUBLISHED}
    assert len(set(fps.values())) == len(fps)
    assert all(get_preset(n).fingerprint() == fp for n, fp in fps.items())


def test_subset_keeps_links(fixtures_dir):
    ref = reference_dgx1_links(fixtures_dir)
    s = get_preset("dgx1-v100").subset(range(6))
    assert s.num_gpus == 6
    for i in range(6):
        for j in range(6):
            assert s.nvlink_count(i, j) == ref[i][j]
    s2 = get_preset("dgx1-v100").subset([4, 0])
    assert s2.nvlink_count(0, 1) == ref[4][0]


def test_unknown_preset_lists_names():
    with pytest.raises(TopologyError) as exc:
        get_preset("dgx-9000")
    assert "dgx-9000" in str(exc.value) and all(n in str(exc.value) for n in PRESETS)
    with pytest.raises(TopologyError, match="bad parameters"):
        get_preset("dgx1-v100", upi_gbps=3)
