"""The path index against networkx itself: every pair, every path kind, the same paths in the same order."""

from __future__ import annotations

import networkx as nx
import pytest

from topo_probe.machines.clusters import cluster
from topo_probe.machines.presets import PRESETS, get_preset
from topo_probe.topology.shortest_paths import PathIndex

KINDS = [(("nvlink", "xgmi"), ("nvswitch",)),
         (("pcie", "cpu"), ("pcie_switch", "host_bridge", "cpu")),
         (("pcie", "cpu", "network"), ("pcie_switch", "host_bridge", "cpu", "nic", "net_switch"))]


def _networkx_paths(g, src, dst, edge_kinds, relays):
    """The reference: networkx's all_shortest_paths on the view that keeps src, dst and relays only."""
    view = nx.subgraph_view(g, filter_node=lambda n: n in (src, dst) or n in relays,
                            filter_edge=lambda u, v: g.edges[u, v]["kind"] in edge_kinds)
    try:
        return [tuple(p) for p in nx.all_shortest_paths(view, src, dst)]
    except nx.NetworkXNoPath:
        return []


def _check_all_pairs(t, endpoints):
    compared = 0
    for edge_kinds, relay_kinds in KINDS:
        relays = frozenset(n for n, d in t.graph.nodes(data=True) if d["kind"] != "gpu" and d["kind"] in relay_kinds)
        index = PathIndex(t.graph, edge_kinds, relays, keep=4)
        for a in endpoints:
            for b in endpoints:
                assert index.paths(a, b) == _networkx_paths(t.graph, a, b, edge_kinds, relays), (t.name, a, b)
                compared += 1
    return compared


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_every_pair_as_networkx(name):
    t = get_preset(name)
    ends = [t.gpu(i) for i in range(min(t.num_gpus, 12))] + t.nodes_of_kind("nic")[:4]
    assert _check_all_pairs(t, ends) == 3 * len(ends) ** 2


@pytest.mark.parametrize("kwargs", [{"nodes": 2}, {"nodes": 3, "rail_optimized": True}])
def test_clusters_every_pair_as_networkx(kwargs):
    t = cluster("dgx-h100", **kwargs)
    ends = [t.gpu(i) for i in range(0, t.num_gpus, 3)] + t.nodes_of_kind("nic")[::5]
    _check_all_pairs(t, ends)


def test_a_path_never_passes_through_an_endpoint():
    # g0 -> g2 -> g1 is shorter than g0 -> s -> t -> g1, but g2 is a GPU: never a relay
    g = nx.DiGraph()
    for u, v in [("g0", "g2"), ("g2", "g1"), ("g0", "s"), ("s", "t"), ("t", "g1")]:
        g.add_edge(u, v, kind="nvlink")
    assert PathIndex(g, ("nvlink",), frozenset({"s", "t"})).paths("g0", "g1") == [("g0", "s", "t", "g1")]
    assert PathIndex(g, ("nvlink",), frozenset({"s"})).paths("g0", "g1") == []


def test_a_changed_graph_gets_fresh_paths():
    """Edges removed after a search: the next source searched notices, and forgets every earlier search."""
    t = cluster("dgx-h100", nodes=2)
    assert t.network_paths(0, 8)
    for u, v in list(t.graph.edges()):
        if t.graph.edges[u, v]["kind"] == "network":
            t.graph.remove_edge(u, v)
    assert t.network_paths(1, 9) == [] == _networkx_paths(t.graph, t.gpu(1), t.gpu(9), KINDS[2][0], frozenset())
    assert t.network_paths(0, 8) == []
    t.graph.remove_node(t.nodes_of_kind("nvswitch")[0])          # a node fewer: a new index at once
    assert t.gpu_fabric_paths(0, 1) == _networkx_paths(t.graph, t.gpu(0), t.gpu(1), KINDS[0][0],
                                                        frozenset(t.nodes_of_kind("nvswitch")))
