"""The host assumed for NCCL's side of a topology without a PCIe tree (a link matrix).

The reference for every path class is NCCL's own rule, recomputed here by brute force on the link
matrix (NCCL 2.30.7 src/graph/paths.cc ncclTopoSetPaths): a direct NVLink is NVL, a path through
exactly one other GPU over NVLink is NVB, anything farther goes over PCIe and the CPU, which for
GPUs NCCL has no PCI information for is one CPU (src/graph/xml.cc): PHB.  P2P follows NCCL's
default P2P level PXB (paths.cc ncclTopoCheckP2p).
"""

from __future__ import annotations

import argparse
import itertools
import json

import networkx as nx
import pytest

from topo_probe.cli.main import main as topo_probe_main
from topo_probe.cli.options import add_machine_arguments, apply_machine_arguments
from topo_probe.errors import TopologyError
from topo_probe.load import load_topology
from topo_probe.machines.presets import DGX1_LINKS, get_preset
from topo_probe.parsers.link_matrix import parse_link_matrix
from topo_probe.parsers.nccl_xml import parse_nccl_xml
from topo_probe.parsers.nccl_xml_export import to_nccl_xml
from topo_probe.topology.host_assumption import host_assumption_line, needs_host_assumption
from topo_probe.topology.serialize import topology_from_dict, topology_to_dict


def ring_links(n: int) -> list[list[int]]:
    return [[1 if (j - i) % n in (1, n - 1) else 0 for j in range(n)] for i in range(n)]


def dgx1_without_one_nvlink() -> dict[str, list[list[int]]]:
    """Every DGX-1 matrix with one NVLink removed (24 links: 8 pairs of one link lose their pair,
    8 pairs of two keep one), plus the 8 double pairs removed whole, as the issue's gpu0-gpu4."""
    out = {}
    for i, j in itertools.combinations(range(8), 2):
        if DGX1_LINKS[i][j]:
            for drop in sorted({1, DGX1_LINKS[i][j]}):
                m = [list(r) for r in DGX1_LINKS]
                m[i][j] -= drop
                m[j][i] -= drop
                out[f"gpu{i}-gpu{j}-minus{drop}"] = m
    return out


VARIANTS = dgx1_without_one_nvlink()


def nccl_classes(links, far: str = "PHB") -> dict[tuple[int, int], str]:
    """NCCL's GPU-to-GPU path class of every pair, by hop count on the NVLink graph."""
    n = len(links)
    g = nx.Graph([(i, j) for i in range(n) for j in range(n) if links[i][j]])
    g.add_nodes_from(range(n))
    hops = dict(nx.all_pairs_shortest_path_length(g))
    return {(i, j): {1: "NVL", 2: "NVB"}.get(hops[i].get(j, 99), far)
            for i, j in itertools.permutations(range(n), 2)}


def matrix(links, **kw) -> dict:
    return {"format": "link-matrix", "name": "m", "links": links, "link_bandwidth_gbps": 25.0, **kw}


def test_variants_are_the_24_expected_ones():
    assert len(VARIANTS) == 24
    assert sum(1 for m in VARIANTS.values() if sum(map(sum, m)) == 2 * 24 - 2) == 16
    assert "gpu0-gpu4-minus2" in VARIANTS and "gpu0-gpu2-minus1" in VARIANTS


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_dgx1_without_one_nvlink_has_nccls_path_class_and_p2p_for_every_pair(name):
    links = VARIANTS[name]
    t = parse_link_matrix(matrix(links))
    want = nccl_classes(links)
    for (i, j), cls in want.items():
        assert t.path_class(i, j) == cls, (name, i, j)
        assert t.p2p(i, j).supported == (cls in ("NVL", "NVB")), (name, i, j)
    far = sum(1 for (i, j), c in want.items() if i < j and c == "PHB")
    line = host_assumption_line(t)
    assert "are PHB" in line and f"applies to {far} of 28 GPU pairs" in line
    assert ("gpu0-gpu4" in name and "minus2" in name) <= (t.path_class(0, 4) == "PHB")


def test_the_8_gpu_ring_matrix_and_the_full_dgx1_matrix():
    ring = parse_link_matrix(matrix(ring_links(8)))
    assert ring.path_class(0, 1) == "NVL" and ring.path_class(0, 2) == "NVB" and ring.path_class(0, 3) == "PHB"
    assert ring.smi_label(0, 4) == "PHB" and ring.smi_label(0, 7) == "NV1"
    assert "applies to 12 of 28 GPU pairs" in host_assumption_line(ring)       # 8 x 3 pairs at distance 3-4, halved
    full = parse_link_matrix(matrix([list(r) for r in DGX1_LINKS]))
    assert all(full.path_class(i, j) in ("NVL", "NVB") for i, j in full.gpu_pairs())
    assert "applies to 0 of 28" in host_assumption_line(full)              # stated, though no pair needs it


@pytest.mark.parametrize("cls, p2p", [("PIX", True), ("PXB", True), ("PHB", False), ("NODE", False), ("SYS", False)])
def test_the_field_sets_the_class_and_nccls_p2p_level_decides_p2p(cls, p2p):
    t = parse_link_matrix(matrix(ring_links(8), host_path_class=cls.lower()))
    assert t.path_class(0, 4) == cls and t.path_class(0, 2) == "NVB"
    assert t.p2p(0, 4).supported is p2p
    assert f"are {cls}," in host_assumption_line(t) and "set by the user" in host_assumption_line(t)


def test_a_bad_field_is_one_line_naming_it():
    with pytest.raises(TopologyError, match=r"m\.json: field 'host_path_class': .*one of PIX, PXB, PHB, NODE, SYS, "
                                            r"got 'NVL'"):
        parse_link_matrix(matrix(ring_links(4), host_path_class="NVL"), source="m.json")
    with pytest.raises(TopologyError, match="got int"):
        parse_link_matrix(matrix(ring_links(4), host_path_class=3), source="m.json")


def test_the_class_survives_json_subsets_and_copies_and_counts_in_the_fingerprint_only_when_set():
    plain = parse_link_matrix(matrix(ring_links(8)))
    sys_ = parse_link_matrix(matrix(ring_links(8), host_path_class="SYS"))
    phb = parse_link_matrix(matrix(ring_links(8), host_path_class="PHB"))
    assert len({plain.fingerprint(), sys_.fingerprint(), phb.fingerprint()}) == 3
    back = topology_from_dict(json.loads(json.dumps(topology_to_dict(sys_))))
    assert back.fingerprint() == sys_.fingerprint() and back.path_class(0, 4) == "SYS"
    assert "host_path_class" not in topology_to_dict(plain)
    assert sys_.copy().path_class(0, 4) == "SYS" and sys_.subset([0, 4]).path_class(0, 1) == "SYS"


def test_topologies_with_a_pcie_tree_need_no_assumption_and_broken_trees_still_fail():
    dgx1 = get_preset("dgx1-v100")
    assert not needs_host_assumption(dgx1.graph) and host_assumption_line(dgx1) is None
    assert dgx1.path_class(0, 5) == "NVB" and dgx1.smi_label(0, 5) == "SYS"
    broken = dgx1.copy()
    broken.graph.remove_edges_from([(u, v) for u, v, d in list(broken.graph.edges(data=True)) if d["kind"] == "cpu"])
    with pytest.raises(TopologyError, match="not connected by PCIe"):
        broken.pcie_class("gpu0", "gpu5")


def test_topo_probe_names_the_assumption_and_takes_the_flag(tmp_path, capsys):
    f = tmp_path / "ring8.json"
    f.write_text(json.dumps(matrix(ring_links(8))))
    assert topo_probe_main(["--topology", str(f)]) == 0
    out = capsys.readouterr().out
    assert "host assumption for NCCL's side only" in out and "are PHB" in out
    row0 = next(line for line in out.splitlines() if line.startswith("GPU0 ")).split()
    assert row0[1:5] == ["X", "NV1", "PHB", "PHB"]                       # GPU0 to GPU0..GPU3
    assert topo_probe_main(["--topology", str(f), "--host-path-class", "sys", "--json", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "are SYS" in out and "set by the user" in out
    assert load_topology(str(tmp_path / "t.json")).path_class(0, 3) == "SYS"
    assert topo_probe_main(["--topology", str(f), "--host-path-class", "NVL"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--host-path-class" in err


def test_a_cluster_of_link_matrices_keeps_the_class_on_each_host():
    p = argparse.ArgumentParser()
    add_machine_arguments(p)
    args = p.parse_args(["--nodes", "2", "--nic-gbps", "25", "--nics-per-node", "2", "--host-path-class", "SYS"])
    c = apply_machine_arguments(parse_link_matrix(matrix(ring_links(8))), args)
    assert c.num_gpus == 16 and c.path_class(0, 3) == "SYS" and c.path_class(8, 11) == "SYS"
    assert c.path_class(0, 8) == "NET" and c.path_class(0, 1) == "NVL"
    assert "are SYS" in host_assumption_line(c)


def test_the_class_survives_an_nccl_xml_round_trip():
    for cls in (None, "SYS", "PIX"):
        t = parse_link_matrix(matrix(ring_links(8), **({"host_path_class": cls} if cls else {})))
        back = parse_nccl_xml(to_nccl_xml(t))
        assert back.fingerprint() == t.fingerprint() and back.path_class(0, 4) == (cls or "PHB")
    with pytest.raises(TopologyError, match="<host path_class>.*got 'NVB'"):
        parse_nccl_xml(to_nccl_xml(t).replace('path_class="PIX"', 'path_class="NVB"'))
