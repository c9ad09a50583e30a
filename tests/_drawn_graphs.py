"""A hypothesis strategy the path tests share: a small random directed graph of GPU, NVSwitch, NIC and PCIe-switch
nodes joined by NVLink and PCIe edges, its relays (NVSwitches and some drawn kinds) and the edge kinds asked for."""

from __future__ import annotations

import networkx as nx
from hypothesis import strategies as st

#: node kinds drawn for a node; the relays are the NVSwitches plus a drawn set of ``kinds[2:]``
KINDS = ("gpu", "nvswitch", "nic", "pcie_switch")


@st.composite
def graphs(draw, min_nodes: int = 3, max_nodes: int = 9, max_edges: int = 40, kinds: tuple = KINDS):
    """``(graph, relays, edge_kinds)`` with ``min_nodes``..``max_nodes`` nodes and up to ``max_edges`` edges drawn
    (self-loops dropped)."""
    n = draw(st.integers(min_nodes, max_nodes))
    g = nx.DiGraph()
    for v in range(n):
        g.add_node(f"n{v}", kind=draw(st.sampled_from(kinds)))
    for u, v in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), min_size=n,
                              max_size=max_edges)):
        if u != v:
            g.add_edge(f"n{u}", f"n{v}", kind=draw(st.sampled_from(("nvlink", "pcie"))))
    relay_kinds = {"nvswitch"} | draw(st.sets(st.sampled_from(kinds[2:])))
    relays = frozenset(v for v, d in g.nodes(data=True) if d["kind"] in relay_kinds)
    return g, relays, tuple(draw(st.sets(st.sampled_from(("nvlink", "pcie")), min_size=1)))
