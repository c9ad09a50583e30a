"""Host-level graph helpers shared by the fabric builders: NVSwitch merging, GPU-fabric connectivity, route shares."""

from __future__ import annotations

from fractions import Fraction

import networkx as nx

from topo_probe.topology.model import GPU_LINK_KINDS, Topology


class Share(Fraction):
    """A route fraction (a :class:`fractions.Fraction`) that knows its float value: loads are
    summed in floats millions of times (verifier, cost model), and ``float(Fraction)`` is slow.

    >>> s = Share(1, 3)
    >>> s == Fraction(1, 3), float(s), type(s + 1) is Fraction, s
    (True, 0.3333333333333333, True, Fraction(1, 3))
    """

    __slots__ = ("_float",)

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls, *args, **kwargs)
        self._float = self._numerator / self._denominator
        return self

    def __float__(self) -> float:
        return self._float

    def __repr__(self) -> str:          # it is a Fraction to every reader
        return f"Fraction({self._numerator}, {self._denominator})"


def merged_name(members: list[str]) -> str:
    """Name of the switch that merges NVSwitch nodes ``members`` (sorted)."""
    members = sorted(members)
    return "+".join(members) if len(members) <= 3 else f"{members[0]}..{members[-1]}({len(members)})"


def parallel_switch_groups(g: nx.DiGraph) -> list[list[str]]:
    """NVSwitch nodes with identical in- and out-neighbour sets, two or more per group (sorted)."""
    groups: dict[tuple[frozenset, frozenset], list[str]] = {}
    for n, d in g.nodes(data=True):
        if d["kind"] == "nvswitch":
            key = (frozenset(g.predecessors(n)), frozenset(g.successors(n)))
            groups.setdefault(key, []).append(n)
    return [sorted(m) for m in groups.values() if len(m) > 1]


def merge_parallel_switches(g: nx.DiGraph) -> nx.DiGraph:
    """Merge NVSwitch nodes with identical in- and out-neighbour sets (bandwidths add up)."""
    h = g.copy()
    rename = {}
    for members in parallel_switch_groups(g):
        keep = members[0]
        for other in members[1:]:
            for u, _, d in g.in_edges(other, data=True):
                e = h.edges[u, keep]
                e["links"] += d["links"]
                e["bandwidth_gbps"] += d["bandwidth_gbps"]
            for _, v, d in g.out_edges(other, data=True):
                e = h.edges[keep, v]
                e["links"] += d["links"]
                e["bandwidth_gbps"] += d["bandwidth_gbps"]
            h.remove_node(other)
        rename[keep] = merged_name(members)
    return nx.relabel_nodes(h, rename) if rename else h


def gpu_fabric_connected(topo: Topology, host: int) -> bool:
    """True when the GPUs of ``host`` are connected by NVLink/Infinity Fabric alone (relays allowed)."""
    gpus = [g for g in topo.gpus if topo.graph.nodes[g].get("host", 0) == host]
    if len(gpus) <= 1:
        return True
    view = nx.subgraph_view(
        topo.graph,
        filter_node=lambda n: topo.kind(n) in ("gpu", "nvswitch"),
        filter_edge=lambda u, v: topo.graph.edges[u, v]["kind"] in GPU_LINK_KINDS)
    comp = nx.node_connected_component(view.to_undirected(as_view=True), gpus[0])
    return all(g in comp for g in gpus)


__all__ = ["Share", "gpu_fabric_connected", "merge_parallel_switches", "merged_name", "parallel_switch_groups"]
