"""JSON round trips (presets, clusters, random topologies) and exact validation messages."""

import copy
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topo_probe.errors import TopologyError
from topo_probe.machines.clusters import cluster
from topo_probe.machines.generators import add_pcie_tree, ring
from topo_probe.machines.presets import PRESETS, get_preset
from topo_probe.topology.model import P2PCapability, Topology
from topo_probe.topology.serialize import load_topology_json, save_topology, topology_from_dict, topology_to_dict


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_round_trip(name, tmp_path):
    t = get_preset(name)
    back = topology_from_dict(json.loads(json.dumps(topology_to_dict(t))))
    assert back == t
    assert back.fingerprint() == t.fingerprint()
    assert (back.description, back.assumptions) == (t.description, t.assumptions)
    save_topology(t, tmp_path / "t.json")
    assert load_topology_json(tmp_path / "t.json") == t
    assert os.listdir(tmp_path) == ["t.json"]  # no temporary file left behind


def test_cluster_and_overrides_round_trip(tmp_path):
    c = cluster("dgx-h100", nodes=2)
    c.p2p_overrides[(0, 1)] = P2PCapability(True, False, False, "disabled")
    save_topology(c, tmp_path / "c.json")
    back = load_topology_json(tmp_path / "c.json")
    assert back == c and back.p2p(0, 1) == P2PCapability(True, False, False, "disabled")
    assert back.fingerprint() == c.fingerprint()


def test_one_way_link_round_trip():
    t = ring(3)
    t.graph.edges["gpu0", "gpu1"]["bandwidth_gbps"] = 10.0  # asymmetric pair
    t.graph.remove_edge("gpu2", "gpu0")  # one-way edge
    d = topology_to_dict(t)
    assert sum(1 for ln in d["links"] if ln["both"]) == 1  # gpu1<->gpu2 only
    assert topology_from_dict(d) == t


def test_hand_written_doc_defaults_both_directions():
    doc = {"format": "topocoll.topology", "version": 1, "name": "pair",
           "nodes": [{"id": "a", "kind": "gpu", "index": 0}, {"id": "b", "kind": "gpu", "index": 1}],
           "links": [{"src": "a", "dst": "b", "kind": "nvlink", "links": 2, "bandwidth_gbps": 50}]}
    t = topology_from_dict(doc)
    assert t.graph.edges["b", "a"]["bandwidth_gbps"] == 50.0 and t.smi_label(1, 0) == "NV2"


def test_a_misspelt_link_field_is_refused_not_dropped():
    """"latency": 5 for latency_us was ignored: the link read with latency 0 us and no word said so."""
    doc = {"format": "topocoll.topology", "version": 1, "name": "pair",
           "nodes": [{"id": "a", "kind": "gpu", "index": 0}, {"id": "b", "kind": "gpu", "index": 1}],
           "links": [{"src": "a", "dst": "b", "kind": "nvlink", "bandwidth_gbps": 50, "latency": 5.0}]}
    with pytest.raises(TopologyError) as exc:
        topology_from_dict(doc, source="m.json")
    assert str(exc.value) == ("m.json: links[0]: unknown field 'latency' (a link has bandwidth_gbps, both, dst, kind, "
                              "latency_us, links, src)")


# ---------------------------------------------------------------- random topologies
@st.composite
def random_topologies(draw):
    """Symmetric random machines: NVLink mesh, NVSwitches joined to every GPU with the same
    link count, and a PCIe tree (1-2 sockets, 1-2 switches per socket) so all pairs connect."""
    n = draw(st.integers(2, 8))
    t = Topology(draw(st.sampled_from(["r", "rand-topo"])))
    for i in range(n):
        t.add_gpu(i, host=0, name="GPU", compute_capability=draw(st.sampled_from(["7.0", "9.0", None])))
    bw = st.floats(1.0, 100.0, allow_nan=False)
    for i in range(n):
        for j in range(i + 1, n):
            k = draw(st.integers(0, 3))
            if k:
                t.add_link(f"gpu{i}", f"gpu{j}", kind="nvlink", links=k, bandwidth_gbps=k * draw(bw),
                           latency_us=draw(st.floats(0, 2)))
    for s in range(draw(st.integers(0, 2))):
        sw = t.add_node(f"nvswitch{s}", "nvswitch")
        k = draw(st.integers(1, 3))
        for i in range(n):
            if not t.graph.has_edge(f"gpu{i}", sw):
                t.add_link(f"gpu{i}", sw, kind="nvlink", links=k, bandwidth_gbps=25.0 * k, latency_us=0.35)
    sockets = draw(st.integers(1, 2))
    per = draw(st.integers(1, 2))
    groups = [[] for _ in range(sockets * per)]
    for i in range(n):
        groups[draw(st.integers(0, len(groups) - 1))].append(f"gpu{i}")
    spec = [[[groups[s * per + p]] for p in range(per)] for s in range(sockets)]
    add_pcie_tree(t, spec, pcie_gbps=draw(st.sampled_from([15.75, 31.5, 63.0])),
                  inter_socket_gbps=draw(bw))
    return t


@settings(derandomize=True, max_examples=60, deadline=None)
@given(random_topologies())
def test_random_round_trip(t):
    back = topology_from_dict(json.loads(json.dumps(topology_to_dict(t))))
    assert back == t and back.fingerprint() == t.fingerprint()


@settings(derandomize=True, max_examples=40, deadline=None)
@given(random_topologies())
def test_random_labels_symmetric(t):
    for i, j in t.gpu_pairs():
        assert t.smi_label(i, j) == t.smi_label(j, i)
        assert t.path_class(i, j) == t.path_class(j, i)


# ---------------------------------------------------------------- malformed documents
def _doc():
    return topology_to_dict(ring(3, pcie_gbps=31.5))


def _set(path, value):
    def mutate(d):
        *head, last = path
        for p in head:
            d = d[p]
        d[last] = value
    return mutate


def _nodes_order(d):
    return [n["id"] for n in d["nodes"]]


MALFORMED = [
    (_set(["links", 3, "bandwidth_gbps"], 0), "links[3].bandwidth_gbps must be > 0, got 0"),
    (_set(["links", 0, "bandwidth_gbps"], "fast"), "links[0].bandwidth_gbps must be > 0, got 'fast'"),
    (_set(["links", 1, "links"], 0), "links[1].links must be an integer >= 1, got 0"),
    (_set(["links", 1, "latency_us"], -1), "links[1].latency_us must be >= 0, got -1"),
    (_set(["links", 2, "kind"], "wifi"),
     "links[2].kind 'wifi' is not one of nvlink, infinity_fabric, pcie, cpu, network"),
    (_set(["links", 0, "dst"], "gpu9"), "links[0].dst 'gpu9' is not a node"),
    (_set(["nodes", 2, "kind"], "foo"),
     "nodes[2].kind 'foo' is not one of gpu, nvswitch, pcie_switch, host_bridge, cpu, nic, net_switch"),
    (_set(["nodes", 1, "id"], "gpu0"), "nodes[1].id 'gpu0' is defined twice"),
    (_set(["nodes", 2, "index"], 0), "nodes[2].index 0 duplicates the GPU index of nodes[0]"),
    (_set(["nodes", 1, "index"], -1), "nodes[1].index must be an integer >= 0, got -1"),
    (_set(["format"], "other"), "format must be 'topocoll.topology', got 'other'"),
    (_set(["version"], 2), "version 2 is not supported (this toolkit reads 1)"),
    (_set(["p2p_overrides"], [{"src": 0, "dst": 5, "read": True, "write": True, "atomics": True}]),
     "p2p_overrides[0].dst must be a GPU index 0..2, got 5"),
    (_set(["links", 0, "both"], "yes"), "links[0].both must be true or false, got 'yes'"),
    # read with str methods: an integer bus id ended topo-probe --nccl-xml in an AttributeError traceback
    (_set(["nodes", 0, "pci_bus_id"], 5), "nodes[0].pci_bus_id must be a string, got 5"),
    (_set(["nodes", 0, "compute_capability"], 9.0), "nodes[0].compute_capability must be a string, got 9.0"),
    # was accepted, and the GPU's SM silently read as unknown
    (_set(["nodes", 0, "compute_capability"], "abc"),
     "nodes[0].compute_capability 'abc' is not a major.minor like '9.0'"),
    (_set(["nodes", 0, "compute_capability"], "9.10"),        # sm_from_compute_capability reads one minor digit
     "nodes[0].compute_capability '9.10' is not a major.minor like '9.0'"),
]


@pytest.mark.parametrize("mutate,message", MALFORMED)
def test_malformed_messages(mutate, message):
    d = copy.deepcopy(_doc())
    assert _nodes_order(d)[:3] == ["gpu0", "gpu1", "gpu2"]
    mutate(d)
    with pytest.raises(TopologyError) as exc:
        topology_from_dict(d, source="t.json")
    assert str(exc.value) == f"t.json: {message}"


def test_duplicate_link_and_cut_off_gpus():
    d = _doc()
    assert len(d["links"]) == 8  # 3 ring + 3 GPU uplinks + switch-bridge + bridge-CPU
    d["links"].append(dict(d["links"][0]))
    with pytest.raises(TopologyError, match=r"^t.json: links\[8\]: link gpu0->gpu1 is defined twice$"):
        topology_from_dict(d, source="t.json")
    d = _doc()
    d["nodes"].append({"id": "gpu3", "kind": "gpu", "index": 3})
    d["nodes"].append({"id": "gpu4", "kind": "gpu", "index": 4})
    d["links"].append({"src": "gpu3", "dst": "gpu4", "kind": "nvlink", "links": 1, "bandwidth_gbps": 25})
    with pytest.raises(TopologyError) as exc:
        topology_from_dict(d, source="t.json")
    assert str(exc.value) == "t.json: topology 'ring3': GPUs [3, 4] are cut off from GPU 0"


def test_file_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "topocoll.topology",\n "version": 1,,}')
    with pytest.raises(TopologyError, match=r"bad.json: line 2 column .*: invalid JSON"):
        load_topology_json(bad)
    with pytest.raises(TopologyError, match="missing.json: cannot read"):
        load_topology_json(tmp_path / "missing.json")
    with pytest.raises(TopologyError, match="cannot write"):
        save_topology(ring(2), tmp_path / "no" / "such" / "dir.json")


def test_check_replaceable_takes_an_empty_file_refuses_any_other(tmp_path):
    """Audit 65 review: an empty file (``OUT=$(mktemp)``) holds nothing to lose, so it may be replaced;
    a file of one byte that is not ours, or a folder, is still refused in one line."""
    from topo_probe.errors import UsageError
    from topo_probe.topology.serialize import check_replaceable
    empty = tmp_path / "tmp.XXXX"
    empty.touch()
    check_replaceable("--json", empty, lambda head: False, "a topology JSON")
    empty.write_text("\n")
    with pytest.raises(UsageError, match=r"--json would replace .*tmp\.XXXX, which is not a topology JSON"):
        check_replaceable("--json", empty, lambda head: False, "a topology JSON")
    with pytest.raises(UsageError, match="not a regular file"):
        check_replaceable("--json", tmp_path, lambda head: True, "a topology JSON")


@pytest.mark.parametrize("sm", [0, 5, 90, 103, 120, 1000, 1 << 20])     # 1 << 20: the most the NCCL XML loader takes
def test_what_topo_probe_writes_from_an_nccl_xml_reads_back(sm, fixtures_dir, tmp_path):
    """An NCCL XML ``sm`` of 1000 became compute_capability '100.0', which the JSON loader then refused as
    'not a major.minor': a file topo-probe --json wrote could not be read back."""
    from topo_probe.load import load_topology
    xml = tmp_path / "t.xml"
    xml.write_text((fixtures_dir / "nccl_topo_dump_h200_partial.xml").read_text().replace('sm="90"', f'sm="{sm}"'))
    t = load_topology(str(xml))
    assert {d.get("nccl_sm") for _, d in t.graph.nodes(data=True) if d.get("kind") == "gpu"} == {sm}
    back = topology_from_dict(json.loads(json.dumps(topology_to_dict(t))), source="t.json")
    assert back.fingerprint() == t.fingerprint() and topology_to_dict(back) == topology_to_dict(t)


def test_numpy_integer_node_fields_are_kept_as_the_ints_checked_and_save(tmp_path):
    """``index``, ``host``, ``numa_node`` and ``gpu_numa_id`` pass the integer rule as NumPy integers (is_int) and
    were kept as they were: ``save_topology`` then failed with "Object of type int64 is not JSON serializable".
    Reference: the same document with plain ints, written out."""
    import numpy as np
    doc = topology_to_dict(cluster("dgx-h100", 2))
    keys = ("index", "host", "numa_node", "gpu_numa_id")
    nodes = [{k: (np.int64(v) if k in keys and v is not None else v) for k, v in nd.items()} for nd in doc["nodes"]]
    assert {k for nd in nodes for k, v in nd.items() if isinstance(v, np.int64)} >= {"index", "host", "numa_node"}
    got = topology_from_dict(dict(doc, nodes=nodes), "t.json")
    assert {type(d[k]) for _, d in got.graph.nodes(data=True) for k in keys if d.get(k) is not None} == {int}
    save_topology(got, tmp_path / "got.json")
    save_topology(topology_from_dict(doc, "t.json"), tmp_path / "plain.json")
    assert (tmp_path / "got.json").read_text() == (tmp_path / "plain.json").read_text()


def _cluster_doc_with_nic_edge(bw, links):
    doc = json.loads(json.dumps(topology_to_dict(cluster("dgx-h100", 2))))
    ln = next(ln for ln in doc["links"] if ln["kind"] == "network")
    ln["bandwidth_gbps"], ln["links"] = bw, links
    return doc


@pytest.mark.parametrize("bw, links", [(1e9, 1),                 # one port of 1e9 GB/s: 10,000x the fastest NIC
                                       (1e-6, 524_288)])        # 524,288 ports of 1.9e-12 GB/s each
def test_a_network_edge_out_of_the_per_port_range_is_refused(bw, links):
    """A network edge's bandwidth is bounded per port (what one NIC over R .. one NIC carries), not as a total."""
    with pytest.raises(TopologyError, match="bandwidth_gbps"):
        topology_from_dict(_cluster_doc_with_nic_edge(bw, links), "c.json")
