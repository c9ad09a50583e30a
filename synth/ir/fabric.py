"""The communication fabric a schedule runs on: rank-to-rank channels and the shared links they load.

A :class:`Fabric` is derived from a :class:`topo_probe.Topology` and is what the verifier,
cost model, lower bounds and solver all read, so they agree on capacities:

* **Resources** are the topology's directed edges (an NVLink bundle, a GPU's port into an
  NVSwitch, a PCIe uplink, the CPU interconnect, a NIC's network port).  NVSwitches that
  have exactly the same neighbours are merged into one switch whose ports carry the summed
  bandwidth: NVSwitch spreads a GPU's traffic evenly over all its switch planes, so the
  merged view is exact and much smaller.
* **Channels** are ordered rank pairs (i, j) that can exchange data without relaying through
  another GPU.  Each channel has a route: ``[(resource, fraction), ...]`` saying which share
  of a chunk sent i->j crosses which resource.
* **Policy** (``transport``): ``"auto"`` uses, like NCCL, the GPU fabric (NVLink / Infinity
  Fabric, incl. NVSwitch) for pairs on one host whose GPUs that fabric connects (directly or by
  relaying through GPUs), PCIe/CPU routes for the other same-host pairs, and the network for
  pairs on different hosts.  ``"all"`` keeps every channel any route class offers.

Capacity unit: one **round** is the time one chunk takes to cross a link of ``unit_gbps``
(default: the slowest edge leaving any GPU).  In a step of R rounds, resource e can carry
``R * bandwidth_gbps(e) / unit_gbps`` chunks (the solver uses the floor of that).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import networkx as nx

from topo_probe.errors import TopologyError
from topo_probe.topology.model import GPU_LINK_KINDS, Topology

Resource = tuple[str, str]
"""A directed edge (u, v) of the (switch-merged) topology graph."""


@dataclass(frozen=True)
class ResourceInfo:
    """One shared link: ``kind`` (link kind), ``bandwidth_gbps`` (per direction), ``latency_us``."""

    kind: str
    bandwidth_gbps: float
    latency_us: float
    links: int


@dataclass
class Fabric:
    """Rank channels with their routes over shared resources (see module docstring)."""

    topology_name: str
    fingerprint: str
    num_ranks: int
    resources: dict[Resource, ResourceInfo]
    #: (src rank, dst rank) -> [(resource, fraction of each chunk crossing it), ...]
    channels: dict[tuple[int, int], list[tuple[Resource, Fraction]]]
    unit_gbps: float
    hosts: list[int] = field(default_factory=list)
    #: (src, dst) -> summed edge latency (µs) of each parallel path of the channel
    path_latency_us: dict[tuple[int, int], list[float]] = field(default_factory=dict, repr=False)

    # ---------------------------------------------------------------- queries
    def has_channel(self, i: int, j: int) -> bool:
        return (i, j) in self.channels

    def neighbours_out(self, i: int) -> list[int]:
        return sorted(j for (a, j) in self.channels if a == i)

    def capacity(self, resource: Resource, rounds: int) -> float:
        """Chunks ``resource`` can carry in a step of ``rounds`` rounds (may be fractional)."""
        return rounds * self.resources[resource].bandwidth_gbps / self.unit_gbps

    def channel_latency_us(self, i: int, j: int) -> float:
        """Latency of channel i->j: the slowest of its routes' summed edge latencies."""
        return max(self.path_latency_us[(i, j)])

    def channel_bandwidth_gbps(self, i: int, j: int) -> float:
        """Bandwidth i->j if it were alone on the fabric: min over resources of bw / fraction."""
        return min(self.resources[r].bandwidth_gbps / float(f) for r, f in self.channels[(i, j)])

    def load(self, sends: list[tuple[int, int]] | list[tuple[int, int, float]]) -> dict[Resource, float]:
        """Chunks crossing each resource for ``sends`` = [(src, dst[, chunks]), ...]."""
        out: dict[Resource, float] = {}
        for s in sends:
            i, j = s[0], s[1]
            amount = s[2] if len(s) > 2 else 1.0
            for r, f in self.channels[(i, j)]:
                out[r] = out.get(r, 0.0) + amount * float(f)
        return out

    def describe(self) -> str:
        return (f"fabric of {self.topology_name}: {self.num_ranks} ranks, {len(self.channels)} channels, "
                f"{len(self.resources)} shared links, 1 round = 1 chunk over {self.unit_gbps:g} GB/s")


def _merge_parallel_switches(g: nx.DiGraph) -> nx.DiGraph:
    """Merge NVSwitch nodes with identical in- and out-neighbour sets (bandwidths add up)."""
    groups: dict[tuple[frozenset, frozenset], list[str]] = {}
    for n, d in g.nodes(data=True):
        if d["kind"] == "nvswitch":
            key = (frozenset(g.predecessors(n)), frozenset(g.successors(n)))
            groups.setdefault(key, []).append(n)
    h = g.copy()
    for members in groups.values():
        if len(members) < 2:
            continue
        members = sorted(members)
        keep = members[0]
        merged = "+".join(members) if len(members) <= 3 else f"{members[0]}..{members[-1]}({len(members)})"
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
        h = nx.relabel_nodes(h, {keep: merged})
    return h


def _gpu_fabric_connected(topo: Topology, host: int) -> bool:
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


def build_fabric(topo: Topology, transport: str = "auto", unit_gbps: float | None = None) -> Fabric:
    """Derive the :class:`Fabric` of ``topo`` (see the module docstring for ``transport``)."""
    if transport not in ("auto", "all"):
        raise TopologyError(f"transport must be 'auto' or 'all', got {transport!r}")
    topo.check_connected()
    merged = Topology(topo.name, _merge_parallel_switches(topo.graph), topo.description)
    n = topo.num_gpus
    hosts = [topo.host_of(i) for i in range(n)]
    fabric_hosts = {h: _gpu_fabric_connected(topo, h) for h in set(hosts)}
    channels: dict[tuple[int, int], list[tuple[Resource, Fraction]]] = {}
    latencies: dict[tuple[int, int], list[float]] = {}
    used: set[Resource] = set()
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            if hosts[i] == hosts[j]:
                paths = merged.gpu_fabric_paths(i, j)
                if not paths and (transport == "all" or not fabric_hosts[hosts[i]]):
                    paths = merged.pcie_paths(i, j)
            else:
                paths = merged.network_paths(i, j)
            if not paths:
                continue
            bott = [min(merged.graph.edges[u, v]["bandwidth_gbps"] for u, v in zip(p, p[1:])) for p in paths]
            total = sum(Fraction(b).limit_denominator(10**6) for b in bott)
            route: dict[Resource, Fraction] = {}
            for p, b in zip(paths, bott):
                share = Fraction(b).limit_denominator(10**6) / total
                for u, v in zip(p, p[1:]):
                    route[(u, v)] = route.get((u, v), Fraction(0)) + share
            channels[(i, j)] = sorted(route.items())
            latencies[(i, j)] = [sum(merged.graph.edges[u, v]["latency_us"] for u, v in zip(p, p[1:]))
                                 for p in paths]
            used.update(route)
    resources = {}
    for u, v in sorted(used):
        d = merged.graph.edges[u, v]
        resources[(u, v)] = ResourceInfo(d["kind"], d["bandwidth_gbps"], d["latency_us"], d["links"])
    if unit_gbps is None:
        gpu_nodes = set(merged.gpus)
        leaving = [info.bandwidth_gbps / info.links for (u, _), info in resources.items() if u in gpu_nodes]
        unit_gbps = min(leaving) if leaving else 1.0
    fab = Fabric(topo.name, topo.fingerprint(), n, resources, channels, float(unit_gbps), hosts,
                 latencies)
    _check_fabric_connected(fab)
    return fab


def _check_fabric_connected(fab: Fabric) -> None:
    g = nx.DiGraph()
    g.add_nodes_from(range(fab.num_ranks))
    g.add_edges_from(fab.channels)
    if fab.num_ranks > 1 and not nx.is_strongly_connected(g):
        comp = max(nx.strongly_connected_components(g), key=len)
        cut = sorted(set(range(fab.num_ranks)) - comp)
        raise TopologyError(f"topology {fab.topology_name!r}: GPUs {cut} cannot exchange data with "
                            f"the others over the chosen transport")
