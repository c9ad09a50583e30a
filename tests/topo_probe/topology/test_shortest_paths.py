"""The path index against networkx itself: every pair, every path kind, the same paths in the same order."""

from __future__ import annotations

import sys

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topo_probe.machines.clusters import cluster
from topo_probe.machines.presets import PRESETS, get_preset
from topo_probe.topology import shortest_paths
from topo_probe.topology.model import GPU_LINK_KINDS
from topo_probe.topology.shortest_paths import PathIndex
from _drawn_graphs import graphs

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


@st.composite
def _graphs_and_asks(draw):
    """A small random graph (``_drawn_graphs.graphs``, as test_path_counts draws them), its relays and edge kinds,
    and a sequence of (src, dst) asks with repeats, so kept path lists are asked for again, after other sources and
    evictions."""
    g, relays, edge_kinds = draw(graphs(2, 8, 30))
    node = st.sampled_from(sorted(g))
    asks = draw(st.lists(st.tuples(node, node), min_size=1, max_size=3 * len(g) ** 2))
    return g, relays, edge_kinds, asks


@settings(derandomize=True, max_examples=80, deadline=None)
@given(_graphs_and_asks(), st.integers(1, 4), st.integers(1, 6), st.integers(0, 40))
def test_kept_path_lists_answer_as_networkx(case, keep, kept_pairs, kept_nodes):
    """Pairs asked again (after other pairs, other sources, and evictions of both searches and kept lists:
    KEPT_PAIRS and KEPT_PATH_NODES made small) answer as networkx does, and each answer is a fresh list: changing
    it changes no later answer."""
    g, relays, kinds, asks = case
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shortest_paths, "KEPT_PAIRS", kept_pairs)
        mp.setattr(shortest_paths, "KEPT_PATH_NODES", kept_nodes)
        index, wants = PathIndex(g, kinds, relays, keep=keep), {}
        for a, b in asks:
            if (a, b) not in wants:
                wants[a, b] = _networkx_paths(g, a, b, kinds, relays) if a != b else [(a,)]
            got = index.paths(a, b)
            assert got == wants[a, b], (a, b)
            got.append(("junk",))
        assert len(index._built) <= kept_pairs
        assert index._built_nodes == sum(len(p) for paths, _ in index._built.values() for p in paths) <= kept_nodes


def test_each_pair_is_built_once(monkeypatch):
    """A display asks for a pair's fabric paths three times (matrix cell, bandwidth, P2P), each time after the
    other sources of its view (9 hosts: 72, more than the 64 searches kept): each pair's list is built once
    (before: three times), and the lists are networkx's (every pair of the first and last hosts, 112 with paths, and
    every 157th pair, of which one had paths)."""
    t = cluster("dgx-h100", nodes=9)
    built = []
    orig = PathIndex._last_hop
    monkeypatch.setattr(PathIndex, "_last_hop", lambda self, s, dst: built.append(dst) or orig(self, s, dst))
    pairs = [(i, j) for i in range(t.num_gpus) for j in range(t.num_gpus) if i != j]
    answers = [[t.gpu_fabric_paths(i, j) for i, j in pairs] for _ in range(3)]
    assert len(built) == len(pairs) == 72 * 71
    assert answers[0] == answers[1] == answers[2]
    relays = frozenset(t.nodes_of_kind("nvswitch"))
    hosts = {t.host_of(0), t.host_of(t.num_gpus - 1)}          # their NVLink pairs (only same-host pairs have paths)
    checked = [k for k, (i, j) in enumerate(pairs) if k % 157 == 0 or t.host_of(i) == t.host_of(j) in hosts]
    for k in checked:
        a, b = (t.gpu(x) for x in pairs[k])
        assert answers[2][k] == _networkx_paths(t.graph, a, b, GPU_LINK_KINDS, relays), pairs[k]
    assert sum(1 for k in checked if answers[2][k]) >= 2 * 8 * 7


def test_a_kept_list_is_not_answered_after_its_graph_changed():
    """A pair's kept list whose source's search was dropped (more sources asked since than the searches kept):
    edges removed after it, the pair asked again answers the graph as it is now, as it did before lists were
    kept (a source not kept is searched anew, and the search sees the edges changed)."""
    g = nx.DiGraph()
    for u, v in [("g0", "sw"), ("sw", "g1"), ("g2", "sw"), ("sw", "g3")]:
        g.add_edge(u, v, kind="nvlink")
    index = PathIndex(g, ("nvlink",), frozenset({"sw"}), keep=1)
    assert index.paths("g0", "g1") == [("g0", "sw", "g1")]
    assert index.paths("g2", "g3") == [("g2", "sw", "g3")]      # g0's search dropped, its list kept
    g.remove_edge("sw", "g1")
    assert index.paths("g0", "g1") == [] == _networkx_paths(g, "g0", "g1", ("nvlink",), frozenset({"sw"}))
    assert index.paths("g2", "g3") == [("g2", "sw", "g3")]


def test_a_display_sized_cluster_changed_after_every_source_answers_afresh():
    """72 GPUs (more sources than the 64 searches kept): GPU 0 -> GPU 1 asked, then one pair of every other
    source, then GPU 0's NVLinks cut: GPU 0 -> GPU 1 asked again answers the cut graph."""
    t = cluster("dgx-h100", nodes=9)
    assert t.gpu_fabric_paths(0, 1)
    for i in range(1, t.num_gpus):
        t.gpu_fabric_paths(i, (i + 1) % t.num_gpus)
    for u, v in list(t.graph.edges()):
        if t.graph.edges[u, v]["kind"] == "nvlink" and t.gpu(0) in (u, v):
            t.graph.remove_edge(u, v)
    assert t.gpu_fabric_paths(0, 1) == [] == _networkx_paths(t.graph, t.gpu(0), t.gpu(1), GPU_LINK_KINDS,
                                                             frozenset(t.nodes_of_kind("nvswitch")))


def test_a_count_in_between_does_not_hide_a_change():
    """A count of another source (dropping the first source's search) between a pair's list and an edge change:
    the pair asked again answers the changed graph."""
    g = nx.DiGraph()
    for u, v in [("g0", "sw"), ("sw", "g1"), ("g2", "sw"), ("sw", "g3")]:
        g.add_edge(u, v, kind="nvlink")
    index = PathIndex(g, ("nvlink",), frozenset({"sw"}), keep=1)
    assert index.paths("g0", "g1") == [("g0", "sw", "g1")]
    assert index.count("g2", "g3") == 1
    g.remove_edge("sw", "g1")
    assert index.paths("g0", "g1") == [] and index.count("g0", "g1") == 0


def _gpu_on_every_switch(k: int) -> tuple[nx.DiGraph, list, frozenset]:
    """A k x k grid of NVSwitches (links both ways), a GPU on each: corner to corner C(2k-2, k-1) paths."""
    g = nx.DiGraph()
    for a in range(k):
        for b in range(k):
            for u, v in [((a, b), (a + 1, b)), ((a, b), (a, b + 1))]:
                if v[0] < k and v[1] < k:
                    g.add_edge(f"sw{u}", f"sw{v}", kind="nvlink")
                    g.add_edge(f"sw{v}", f"sw{u}", kind="nvlink")
            g.add_edge(f"gpu{a * k + b}", f"sw{(a, b)}", kind="nvlink")
            g.add_edge(f"sw{(a, b)}", f"gpu{a * k + b}", kind="nvlink")
    return g, [f"gpu{i}" for i in range(k * k)], frozenset(n for n in g if n.startswith("sw"))


def _held_bytes(index) -> int:
    """Bytes of the containers an index holds (its searches, kept lists, adjacency), by walking them (sys.getsizeof
    each once); node ids, the graph and the relays are the caller's, not counted."""
    seen, todo, total = set(), [v for k, v in vars(index).items() if k not in ("_graph", "_relays")], 0
    while todo:
        o = todo.pop()
        if id(o) in seen or isinstance(o, (str, int, float, type(None))):
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        if isinstance(o, dict):
            todo += [*o.keys(), *o.values()]
        elif isinstance(o, (list, tuple, set, frozenset)):
            todo += o
        elif hasattr(o, "__slots__"):
            todo += [getattr(o, a) for a in o.__slots__]
    return total


def test_kept_lists_hold_a_bounded_memory():
    """Every pair of a 6 x 6 switch grid's GPUs (13,024 paths, 127,928 nodes), 4 searches kept: the lists kept stay
    within the node budget (made 20,000: 8 bytes a node and about 60 a path, so about 0.4 MB), where keeping every
    pair's list held about 2 MB; and the answers stay networkx's."""
    g, gpus, relays = _gpu_on_every_switch(6)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shortest_paths, "KEPT_PATH_NODES", 20_000, raising=False)
        index = PathIndex(g, ("nvlink",), relays, keep=4)
        assert sum(sum(map(len, index.paths(a, b))) for a in gpus for b in gpus if a != b) == 127_928
        held = _held_bytes(index)
        assert held < 600_000, held
        for a, b in [(gpus[0], gpus[-1]), (gpus[5], gpus[30]), (gpus[7], gpus[8])]:
            assert index.paths(a, b) == _networkx_paths(g, a, b, ("nvlink",), relays)
