"""Clusters of identical hosts: recognise the repeated structure of a topology.

A topology is a *cluster shape* when (as :func:`topo_probe.machines.clusters.cluster` builds them)

* every non-network node belongs to a host ``h`` (``host`` attribute, default 0) and is named
  ``"h{h}.{local}"``; network switches have ``host=-1``;
* all ``H >= 2`` hosts are copies of host 0: the same local node names and kinds, the same
  internal edges (kind, links, bandwidth, latency), GPU ``local`` of host ``h`` is rank
  ``h * g + local``;
* every host node with a network edge (a NIC) has exactly one network neighbour, joined both
  ways with the same edge figures on every host; hosts whose NICs reach the same network
  nodes form a *group* (one leaf switch, or one switch per rail), and different groups share
  no such node;
* network nodes next to hosts ("leaves") have no edges to each other, and leaves serving
  the same local NICs have the same uplinks (to the same other network nodes, same figures).

Then a host pair's routes depend only on whether the two hosts are the same host, in the same
group, or in different groups (:data:`PAIR_CLASSES`), with every node named relative to the
source or the destination host: :mod:`synth.ir.cluster_fabric` builds the fabric from one
template per class instead of enumerating all rank pairs.

>>> from topo_probe.machines.clusters import cluster
>>> s = cluster_shape(cluster("dgx-h100", 3, rail_optimized=True))
>>> s.hosts, s.gpus_per_host, s.groups, s.attach[2]["nic5"]
(3, 8, (0, 0, 0), 'netswitch5')
>>> cluster_shape(cluster("dgx-h100", 1)) is None   # one host: nothing repeats
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import networkx as nx

from topo_probe.topology.model import Topology

PAIR_CLASSES = ("host", "group", "other")
"""Relation of a (source, destination) host pair: the same host, two hosts of one group, two groups."""

_PREFIX = re.compile(r"h(\d+)\.(.+)\Z", re.S)


@dataclass(frozen=True)
class ClusterShape:
    """``hosts`` copies of ``host`` (host 0 with its ``"h0."`` prefixes removed) and their network.

    ``attach[h]`` maps each local NIC of host ``h`` to its network node; ``groups[h]`` is host
    ``h``'s group; ``network`` is the subgraph of network nodes and the edges between them.
    """

    hosts: int
    gpus_per_host: int
    host: Topology = field(repr=False, compare=False)
    attach: tuple[dict[str, str], ...] = field(repr=False)
    groups: tuple[int, ...]
    network: nx.DiGraph = field(repr=False, compare=False)
    #: (local node, network node) -> attributes of the edge local -> network and network -> local
    attach_edges: dict = field(repr=False, compare=False, default_factory=dict)

    def pair_class(self, h: int, h2: int) -> str:
        """``"host"``, ``"group"`` or ``"other"`` for source host ``h`` and destination host ``h2``."""
        if h == h2:
            return "host"
        return "group" if self.groups[h] == self.groups[h2] else "other"

    def group_sizes(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for q in self.groups:
            out[q] = out.get(q, 0) + 1
        return out

    def classes_present(self) -> list[str]:
        """The pair classes some host pair of the cluster has."""
        sizes = self.group_sizes()
        out = ["host"] if self.gpus_per_host > 1 else []
        if max(sizes.values()) > 1:
            out.append("group")
        if len(sizes) > 1:
            out.append("other")
        return out

    def representative(self, cls: str) -> tuple[int, int]:
        """A (source host, destination host) pair of class ``cls``."""
        if cls == "host":
            return 0, 0
        for h in range(self.hosts):
            for h2 in range(self.hosts):
                if h != h2 and self.pair_class(h, h2) == cls:
                    return h, h2
        raise KeyError(f"no host pair of class {cls!r}")

    def host_name(self, h: int, local: str) -> str:
        return f"h{h}.{local}"


def _edge_key(d: dict) -> tuple:
    return (d["kind"], int(d["links"]), float(d["bandwidth_gbps"]), float(d["latency_us"]))


def _split_nodes(topo: Topology):
    """(per-host {local: data}, network node set) or None when the naming does not fit."""
    per_host: dict[int, dict[str, dict]] = {}
    network = set()
    for n, d in topo.graph.nodes(data=True):
        host = int(d.get("host", 0))
        if host < 0:
            if d["kind"] != "net_switch":
                return None
            network.add(n)
            continue
        m = _PREFIX.match(n) if isinstance(n, str) else None
        if m is None or int(m.group(1)) != host:
            return None
        per_host.setdefault(host, {})[m.group(2)] = d
    return per_host, network


def _hosts_alike(per_host: dict[int, dict[str, dict]]) -> int | None:
    """GPUs per host when every host has host 0's local nodes, kinds and GPU numbering."""
    H = len(per_host)
    if sorted(per_host) != list(range(H)):
        return None
    base = per_host[0]
    gpus = sorted((d["index"], loc) for loc, d in base.items() if d["kind"] == "gpu")
    g = len(gpus)
    if g == 0 or [i for i, _ in gpus] != list(range(g)):
        return None
    for h in range(1, H):
        nodes = per_host[h]
        if nodes.keys() != base.keys():
            return None
        for loc, d in nodes.items():
            if d["kind"] != base[loc]["kind"]:
                return None
            if d["kind"] == "gpu" and d["index"] != h * g + base[loc]["index"]:
                return None
    return g


def _classify_edges(topo: Topology, network: set[str], H: int):
    """Internal edges per host, attachments per host, network edges; None if hosts touch directly."""
    inner: list[set] = [set() for _ in range(H)]
    attach: list[dict[str, dict[str, tuple]]] = [{} for _ in range(H)]
    net_edges = []
    for u, v, d in topo.graph.edges(data=True):
        nu, nv = u in network, v in network
        if nu and nv:
            net_edges.append((u, v, d))
            continue
        if not nu and not nv:
            mu, mv = _PREFIX.match(u), _PREFIX.match(v)
            if mu.group(1) != mv.group(1):
                return None
            inner[int(mu.group(1))].add((mu.group(2), mv.group(2), _edge_key(d)))
            continue
        host_node, net_node = (v, u) if nu else (u, v)
        m = _PREFIX.match(host_node)
        slot = attach[int(m.group(1))].setdefault(m.group(2), {})
        slot.setdefault(net_node, [None, None])[0 if not nu else 1] = _edge_key(d)
    return inner, attach, net_edges


def _attachments(attach: list[dict[str, dict]]):
    """Per host {local NIC: network node}, and the shared edge figures; None if irregular."""
    out = []
    figures: dict[str, tuple] = {}
    base_locals = set(attach[0])
    for h, slots in enumerate(attach):
        if set(slots) != base_locals:
            return None
        mine = {}
        for loc, nets in slots.items():
            if len(nets) != 1:
                return None
            (net, keys), = nets.items()
            if None in keys or figures.setdefault(loc, tuple(keys)) != tuple(keys):
                return None
            mine[loc] = net
        out.append(mine)
    return out, figures


def _groups(attach: list[dict[str, str]]) -> list[int] | None:
    """Group id per host (same attachments); None if two groups share a network node."""
    ids: dict[tuple, int] = {}
    groups = []
    owner: dict[str, int] = {}
    for mine in attach:
        key = tuple(sorted(mine.items()))
        q = ids.setdefault(key, len(ids))
        groups.append(q)
        for net in mine.values():
            if owner.setdefault(net, q) != q:
                return None
    return groups


def _leaves_alike(attach: list[dict[str, str]], groups: list[int], network: nx.DiGraph) -> bool:
    """Leaves have no leaf-leaf edges, and leaves serving the same local NICs have equal uplinks."""
    serves: dict[str, set] = {}
    for mine in attach:
        for loc, net in mine.items():
            serves.setdefault(net, set()).add(loc)
    leaves = set(serves)
    by_role: dict[frozenset, set] = {}
    for leaf, locs in serves.items():
        up = set()
        for _, v, d in network.out_edges(leaf, data=True):
            if v in leaves:
                return False
            up.add(("out", v, _edge_key(d)))
        for u, _, d in network.in_edges(leaf, data=True):
            if u in leaves:
                return False
            up.add(("in", u, _edge_key(d)))
        by_role.setdefault(frozenset(locs), set()).add(frozenset(up))
    return all(len(ups) == 1 for ups in by_role.values())


def _host_topology(topo: Topology, per_host: dict[int, dict[str, dict]], inner: set) -> Topology:
    """Host 0 as a single-host topology (local names, ``host=0``)."""
    t = Topology(f"{topo.name}:host", description=topo.description)
    for loc, d in per_host[0].items():
        attrs = {k: v for k, v in d.items() if k != "kind"}
        attrs["host"] = 0
        t.graph.add_node(loc, kind=d["kind"], **attrs)
    for u, v, (kind, links, bw, lat) in inner:
        t.graph.add_edge(u, v, kind=kind, links=links, bandwidth_gbps=bw, latency_us=lat)
    return t


def cluster_shape(topo: Topology) -> ClusterShape | None:
    """The :class:`ClusterShape` of ``topo``, or None when it is not a cluster of >= 2 identical
    hosts with a regular network (see the module docstring).  Cost: one pass over nodes and edges."""
    split = _split_nodes(topo)
    if split is None:
        return None
    per_host, network_nodes = split
    H = len(per_host)
    if H < 2 or not network_nodes:
        return None
    g = _hosts_alike(per_host)
    if g is None:
        return None
    edges = _classify_edges(topo, network_nodes, H)
    if edges is None:
        return None
    inner, attach_raw, net_edges = edges
    if any(inner[h] != inner[0] for h in range(1, H)):
        return None
    got = _attachments(attach_raw)
    if got is None or not got[0]:
        return None
    attach, figures = got
    groups = _groups(attach)
    network = nx.DiGraph()
    network.add_nodes_from((n, topo.graph.nodes[n]) for n in network_nodes)
    network.add_edges_from(net_edges)
    if groups is None or not _leaves_alike(attach, groups, network):
        return None
    return ClusterShape(H, g, _host_topology(topo, per_host, inner[0]), tuple(attach), tuple(groups), network,
                        figures)


__all__ = ["PAIR_CLASSES", "ClusterShape", "cluster_shape"]
