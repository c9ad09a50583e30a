"""Fewest-hop paths where there are many: counted without listing (dynamic programming over the
search's levels) against the binomial count and against networkx; a pair with more than
MAX_PATHS refused in one line; a search that never visits endpoints (torus:32x32's display)."""

from __future__ import annotations

import math
import time

import networkx as nx
from hypothesis import given, settings, strategies as st
import pytest

from topo_probe.errors import TopologyError
from topo_probe.machines.clusters import cluster
from topo_probe.machines.presets import PRESETS, get_preset
from topo_probe.machines.specs import parse_generator_spec
from topo_probe.topology.model import Topology
from topo_probe.topology.shortest_paths import MAX_PATHS, PathIndex
from _drawn_graphs import graphs
from tests.topo_probe.topology.test_shortest_paths import _networkx_paths


def _switch_grid(k: int) -> Topology:
    """A k x k grid of NVSwitches, GPU 0 on corner (0, 0), GPU 1 on corner (k-1, k-1)."""
    t = Topology(f"grid{k}")
    sw = {(a, b): t.add_node(f"sw{a}_{b}", "nvswitch") for a in range(k) for b in range(k)}
    for (a, b), name in sw.items():
        for nb in ((a + 1, b), (a, b + 1)):
            if nb in sw:
                t.add_link(name, sw[nb], kind="nvlink", bandwidth_gbps=50.0)
    for i, corner in enumerate([(0, 0), (k - 1, k - 1)]):
        t.add_link(t.add_gpu(i), sw[corner], kind="nvlink", bandwidth_gbps=50.0)
    return t


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_switch_grid_paths_as_networkx_and_binomial(k):
    t = _switch_grid(k)
    paths = t.gpu_fabric_paths(0, 1)
    relays = frozenset(t.nodes_of_kind("nvswitch"))
    assert paths == _networkx_paths(t.graph, "gpu0", "gpu1", ("nvlink", "xgmi"), relays)
    assert len(paths) == math.comb(2 * (k - 1), k - 1)          # monotone lattice paths, corner to corner
    assert [f for _, f in t.routes(0, 1)] == pytest.approx([1 / len(paths)] * len(paths))


def test_too_many_paths_refused_in_one_line_and_counted_exactly():
    t = _switch_grid(32)                         # C(62, 31) ~ 4.7e17 fewest-hop paths: never listed
    index = PathIndex(t.graph, ("nvlink",), frozenset(t.nodes_of_kind("nvswitch")))
    assert index.count("gpu0", "gpu1") == math.comb(62, 31)
    with pytest.raises(TopologyError) as err:
        t.routes(0, 1)
    assert "\n" not in str(err.value) and "gpu0 -> gpu1" in str(err.value) and str(MAX_PATHS) in str(err.value)
    small = _switch_grid(9)                      # C(16, 8) = 12,870 <= MAX_PATHS: listed
    assert len(small.gpu_fabric_paths(0, 1)) == 12_870


def test_topo_probe_on_a_switch_grid_ends_in_one_line(tmp_path, capsys):
    from topo_probe.cli.main import main
    from topo_probe.topology.serialize import save_topology
    save_topology(_switch_grid(16), tmp_path / "grid.json")     # C(30, 15) = 155,117,520 paths
    assert main(["--topology", str(tmp_path / "grid.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "fewest-hop paths" in err


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_stay_far_below_the_bound(name):
    t = get_preset(name)
    ends = t.gpus + t.nodes_of_kind("nic")
    relays = frozenset(n for n, d in t.graph.nodes(data=True) if d["kind"] == "nvswitch")
    index = PathIndex(t.graph, ("nvlink", "xgmi"), relays)
    assert max(index.count(a, b) for a in ends for b in ends) <= 18 < MAX_PATHS


#: NVSwitches drawn twice as often (most graphs relay a lot)
_KINDS = ("gpu", "nvswitch", "nic", "pcie_switch", "nvswitch")


def _graphs():
    return graphs(3, 9, 40, _KINDS)


@settings(max_examples=300, deadline=None)
@given(_graphs())
def test_random_graphs_every_pair_as_networkx(case):
    g, relays, kinds = case
    index = PathIndex(g, kinds, relays, keep=2)  # a small cache: sources searched again
    for a in g:
        for b in g:
            want = _networkx_paths(g, a, b, kinds, relays) if a != b else [(a,)]
            assert index.paths(a, b) == want, (a, b)
            assert index.count(a, b) == len(want), (a, b)


def test_last_hop_in_discovery_order_not_in_edge_order():
    """s reaches a before b; d's in-edge from b was added first: networkx lists s-a-d first."""
    g = nx.DiGraph()
    for n, k in [("s", "gpu"), ("a", "nvswitch"), ("b", "nvswitch"), ("d", "gpu")]:
        g.add_node(n, kind=k)
    for u, v in [("s", "a"), ("s", "b"), ("b", "d"), ("a", "d")]:
        g.add_edge(u, v, kind="nvlink")
    want = [("s", "a", "d"), ("s", "b", "d")]
    assert _networkx_paths(g, "s", "d", ("nvlink",), frozenset("ab")) == want
    assert PathIndex(g, ("nvlink",), frozenset("ab")).paths("s", "d") == want


def test_torus_32x32_searches_never_visit_endpoints():
    """The display's NIC rows: each NIC a new source under one PCIe switch with 2,048 endpoints."""
    t = parse_generator_spec("torus:32x32")
    nics, start = t.nodes_of_kind("nic"), time.perf_counter()
    rows = t.gpus[:128] + nics                  # display.SHOWN_GPUS and their host's NICs, blocks of 16 columns
    classes = {t.pcie_class(a, m) for lo in range(0, 64, 16) for a in rows for m in nics[lo:lo + 16]}
    routes = [t.routes(0, j) for j in range(1, t.num_gpus)] + [t.routes(j, 0) for j in range(1, t.num_gpus)]
    assert time.perf_counter() - start < 60     # each row a new search of 2,048 nodes: topo-probe took 663 s
    assert classes == {"PIX"}
    direct = {1, 31, 32, 992}                                # torus neighbours of GPU 0 (x, y wrap-around)
    assert all(r == [(("gpu0", f"gpu{j}"), 1.0)] for j, r in enumerate(routes[:1023], 1) if j in direct)
    switch, = t.nodes_of_kind("pcie_switch")
    assert all(r == [(("gpu0", switch, f"gpu{j}"), 1.0)] or j in direct
               for j, r in enumerate(routes[:1023], 1)), "non-neighbours go over the one PCIe switch"
    index = t._path_indexes[("pcie", "cpu"), ("pcie_switch", "host_bridge", "cpu")]
    assert max(len(index._search(n).level) for n in nics[:64]) <= 1 + len(index._relays)


@pytest.mark.parametrize("kwargs", [{"nodes": 4}, {"nodes": 4, "rail_optimized": True}])
def test_clusters_stay_far_below_the_bound(kwargs):
    t = cluster("dgx-h100", **kwargs)
    assert max(len(t.network_paths(0, j)) for j in range(8, t.num_gpus)) <= 18
