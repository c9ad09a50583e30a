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

from synth.ir.host_graph import Share
from synth.ir.host_graph import gpu_fabric_connected as _gpu_fabric_connected
from synth.ir.host_graph import merge_parallel_switches as _merge_parallel_switches
from synth.ir.host_graph import parallel_switch_groups
from topo_probe.errors import TopologyError
from topo_probe.topology.model import GPU_LINK_KINDS, Topology

#: :meth:`Fabric.load` reads a cluster's routes as arrays from this many sends on
ARRAY_SENDS = 256

Resource = tuple[str, str]
"""A directed edge (u, v) of the (switch-merged) topology graph."""

#: the share of a channel's only path (one object for the million channels of a big mesh)
_WHOLE = Share(1)


class ResourceLoads(dict):
    """Chunks per resource, a plain dict to its readers, made by :meth:`Fabric.load` from arrays:
    ``arrays`` keeps ``(loads, bandwidth_gbps, fabric)`` as arrays in key order for the capacity
    tests of :mod:`synth.ir.capacity`, and any change of the dict drops them (None)."""

    __slots__ = ("arrays",)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.arrays = None


def _dropping_arrays(name: str):
    method = getattr(dict, name)

    def changed(self, *args, **kwargs):
        self.arrays = None
        return method(self, *args, **kwargs)
    changed.__name__ = name
    return changed


for _name in ("__setitem__", "__delitem__", "__ior__", "update", "pop", "popitem", "clear", "setdefault"):
    setattr(ResourceLoads, _name, _dropping_arrays(_name))


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
    #: the identical hosts of a cluster (:class:`synth.ir.cluster_shape.ClusterShape`), None otherwise
    shape: object | None = field(default=None, repr=False, compare=False)
    #: the Topology it was built from (its GPU architecture and NIC transports choose the link
    #: efficiencies of :func:`synth.model.physics.cost_params_for`), None if unknown
    topology: object | None = field(default=None, repr=False, compare=False)

    # ---------------------------------------------------------------- queries
    def memo(self, kind: str) -> dict:
        """A dict of derived results of ``kind`` (cut tables, lower bounds, rings, delivery bounds)
        kept on this fabric object and dropped with it: the fabric owns what is computed from it.  Only
        immutable results keyed by the fabric's whole structure are also kept across fabrics
        (:mod:`synth.ir.shared_results`: ring search).  Fabrics are treated as immutable once built.

        >>> from topo_probe.machines.generators import ring
        >>> f = build_fabric(ring(4))
        >>> f.memo("rings") is f.memo("rings"), f.memo("rings") is build_fabric(ring(4)).memo("rings")
        (True, False)
        """
        return self.__dict__.setdefault("_memo", {}).setdefault(kind, {})

    def has_channel(self, i: int, j: int) -> bool:
        return (i, j) in self.channels

    def neighbours_out(self, i: int) -> list[int]:
        fast = getattr(self.channels, "neighbours_out", None)
        if fast is not None:
            return fast(i)
        return sorted(j for (a, j) in self.channels if a == i)

    def capacity(self, resource: Resource, rounds: int) -> float:
        """Chunks ``resource`` can carry in a step of ``rounds`` rounds (may be fractional)."""
        return rounds * self.resources[resource].bandwidth_gbps / self.unit_gbps

    def channel_latency_us(self, i: int, j: int) -> float:
        """Latency of channel i->j: the slowest of its routes' summed edge latencies."""
        fast = getattr(self.path_latency_us, "max_latency", None)
        if fast is not None:          # a cluster: from its per-class table
            return fast(i, j)
        return max(self.path_latency_us[(i, j)])

    def channel_bandwidth_gbps(self, i: int, j: int) -> float:
        """Bandwidth i->j if it were alone on the fabric: min over resources of bw / fraction."""
        return min(self.resources[r].bandwidth_gbps / float(f) for r, f in self.channels[(i, j)])

    def load(self, sends: list[tuple[int, int]] | list[tuple[int, int, float]]) -> dict[Resource, float]:
        """Chunks crossing each resource for ``sends`` = [(src, dst[, chunks]), ...]."""
        if len(sends) >= ARRAY_SENDS and (hasattr(self.channels, "route_floats") or type(self.channels) is dict):
            out = self._load_by_arrays(sends)           # the routes as arrays: a cluster's, or every channel's
            if out is not None:
                return out
        out: dict[Resource, float] = {}
        floats = getattr(self.channels, "route_floats", None)      # a cluster: its cached routes
        for s in sends:
            i, j = s[0], s[1]
            amount = s[2] if len(s) > 2 else 1.0
            for r, f in (self.channels[(i, j)] if floats is None else floats(i, j)):
                out[r] = out.get(r, 0.0) + amount * float(f)
        return out

    def route_arrays(self):
        """A cluster's :class:`synth.ir.cluster_routes.RouteArrays` with resources numbered in
        :attr:`resources` order (``.names``: that order), made once; None for other fabrics."""
        if not hasattr(self.channels, "route_floats"):
            return None
        arrays = self.__dict__.get("_route_arrays")
        if arrays is None:
            from synth.ir.cluster_routes import RouteArrays
            names = list(self.resources)
            arrays = RouteArrays(self.channels, None, {r: k for k, r in enumerate(names)})
            arrays.names = names
            self.__dict__["_route_arrays"] = arrays
        return arrays

    def _load_by_arrays(self, sends) -> dict[Resource, float] | None:
        """:meth:`load` of ``sends`` from a cluster's :class:`synth.ir.cluster_routes.RouteArrays` (any
        other fabric's :class:`synth.ir.route_table.RouteTable`):
        the same products ``chunks x fraction`` summed in the same order (``bincount`` adds them in
        array order), resources in the order they are first loaded; None where some pair is not
        a channel (the one-by-one path then raises as usual)."""
        import numpy as np
        if type(self.channels) is dict:
            from synth.ir.route_table import route_table
            arrays = route_table(self)
        else:
            arrays = self.route_arrays()
        got = arrays.entries([s[0] for s in sends], [s[1] for s in sends])
        if got is None:
            return None
        starts, idx, frac = got[:3]
        amount = np.array([s[2] if len(s) > 2 else 1.0 for s in sends], dtype=float)
        total = np.bincount(idx, weights=np.repeat(amount, np.diff(starts)) * frac, minlength=len(arrays.names))
        used, first = np.unique(idx, return_index=True)
        used = used[np.argsort(first)]
        names = arrays.names
        out = ResourceLoads(zip([names[k] for k in used.tolist()], total[used].tolist()))
        out.arrays = (total[used], self._bandwidth_array(names)[used], self)
        return out

    def _bandwidth_array(self, names: list[Resource]):
        """``bandwidth_gbps`` of the resources ``names`` (all of :attr:`resources`, in order), made once."""
        import numpy as np
        kept = self.__dict__.get("_bandwidths")
        if kept is None or len(kept) != len(names):
            kept = self.__dict__["_bandwidths"] = np.array([self.resources[r].bandwidth_gbps for r in names],
                                                           dtype=float)
        return kept

    def describe(self) -> str:
        return (f"fabric of {self.topology_name}: {self.num_ranks} ranks, {len(self.channels)} channels, "
                f"{len(self.resources)} shared links, 1 round = 1 chunk over {self.unit_gbps:g} GB/s")


def build_fabric(topo: Topology, transport: str = "auto", unit_gbps: float | None = None, *,
                 structured: bool = True) -> Fabric:
    """Derive the :class:`Fabric` of ``topo`` (see the module docstring for ``transport``).

    A cluster of identical hosts (:func:`synth.ir.cluster_shape.cluster_shape`) is built from
    route templates, one per pair class and local GPU pair, in ``O(hosts x GPUs per host)``
    (:mod:`synth.ir.cluster_fabric`); its channels are computed when asked for and
    ``Fabric.shape`` describes the hosts.  ``structured=False`` routes every rank pair
    explicitly (the reference the templates are tested against).
    """
    if transport not in ("auto", "all"):
        raise TopologyError(f"transport must be 'auto' or 'all', got {transport!r}")
    topo.check_connected()
    if structured:
        from synth.ir.cluster_shape import cluster_shape
        shape = cluster_shape(topo)
        if shape is not None:
            fab = _build_cluster(topo, shape, transport, unit_gbps)
            if fab is not None:
                fab.topology = topo
                return fab
    # the graph itself where no NVSwitches are parallel (the merge would copy it unchanged; it is only read)
    graph = _merge_parallel_switches(topo.graph) if parallel_switch_groups(topo.graph) else topo.graph
    merged = Topology(topo.name, graph, topo.description)
    n = topo.num_gpus
    hosts = [topo.host_of(i) for i in range(n)]
    fabric_hosts = {h: _gpu_fabric_connected(topo, h) for h in set(hosts)}
    channels: dict[tuple[int, int], list[tuple[Resource, Fraction]]] = {}
    latencies: dict[tuple[int, int], list[float]] = {}
    used: set[Resource] = set()
    direct = _direct_gpu_links(merged)
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            link = direct(i, j) if hosts[i] == hosts[j] else None
            if link is not None:         # the one shortest GPU-fabric path, whole on its one edge
                channels[(i, j)] = [(link[0], _WHOLE)]
                latencies[(i, j)] = [link[1]]
                used.add(link[0])
                continue
            if hosts[i] == hosts[j]:
                paths = merged.gpu_fabric_paths(i, j)
                if not paths and (transport == "all" or not fabric_hosts[hosts[i]]):
                    paths = merged.pcie_paths(i, j)
            else:
                paths = merged.network_paths(i, j)
            if not paths:
                continue
            edges = merged.graph.edges
            bott = [min(edges[u, v]["bandwidth_gbps"] for u, v in zip(p, p[1:])) for p in paths]
            if len(paths) == 1 and bott[0] > 0:      # one path carries all of it: b / b = 1 on each edge
                route = dict.fromkeys(zip(paths[0], paths[0][1:]), _WHOLE)
                channels[(i, j)] = sorted(route.items())
            else:
                total = sum(Fraction(b).limit_denominator(10**6) for b in bott)
                route = {}
                for p, b in zip(paths, bott):
                    share = Fraction(b).limit_denominator(10**6) / total
                    for u, v in zip(p, p[1:]):
                        route[(u, v)] = route.get((u, v), Fraction(0)) + share
                channels[(i, j)] = [(r, Share(f)) for r, f in sorted(route.items())]
            latencies[(i, j)] = [sum(merged.graph.edges[u, v]["latency_us"] for u, v in zip(p, p[1:]))
                                 for p in paths]
            used.update(route)
    resources = {}
    for u, v in sorted(used):
        d = merged.graph.edges[u, v]
        resources[(u, v)] = ResourceInfo(d["kind"], d["bandwidth_gbps"], d["latency_us"], d["links"])
    if unit_gbps is None:
        unit_gbps = _unit(resources, set(merged.gpus))
    fab = Fabric(topo.name, topo.fingerprint(), n, resources, channels, float(unit_gbps), hosts,
                 latencies, topology=topo)
    _check_fabric_connected(fab)
    return fab


def _direct_gpu_links(topo: Topology):
    """``link(i, j)``: ``((gpu_i, gpu_j), latency_us)`` of a direct NVLink/Infinity Fabric edge GPU i -> GPU j
    of positive bandwidth, else None.  Such an edge is the only shortest path
    :meth:`Topology.gpu_fabric_paths` returns, carrying the whole channel: a fully connected box of
    G GPUs then costs G^2 dictionary look-ups instead of G^2 path searches."""
    gpus = topo.gpus
    succ = dict(topo.graph.adjacency())

    def link(i: int, j: int):
        u, v = gpus[i], gpus[j]
        d = succ[u].get(v)
        if d is None or d["kind"] not in GPU_LINK_KINDS or not d["bandwidth_gbps"] > 0:
            return None
        return (u, v), d["latency_us"]
    return link


def _unit(resources: dict[Resource, ResourceInfo], gpu_nodes: set[str]) -> float:
    """The slowest single link leaving a GPU (GB/s), 1.0 when none does."""
    leaving = [info.bandwidth_gbps / info.links for (u, _), info in resources.items() if u in gpu_nodes]
    return min(leaving) if leaving else 1.0


def _build_cluster(topo: Topology, shape, transport: str, unit_gbps: float | None) -> Fabric | None:
    from synth.ir.cluster_fabric import build_cluster_pieces
    got = build_cluster_pieces(topo, shape, transport)
    if got is None:
        return None
    channels, latencies, attrs = got
    resources = {r: ResourceInfo(d["kind"], d["bandwidth_gbps"], d["latency_us"], d["links"])
                 for r, d in sorted(attrs.items())}
    g = shape.gpus_per_host
    gpu_nodes = {f"h{h}.{x}" for h in range(shape.hosts) for x in shape.host.gpus}
    unit = float(unit_gbps) if unit_gbps is not None else _unit(resources, gpu_nodes)
    n = shape.hosts * g
    return Fabric(topo.name, topo.fingerprint(), n, resources, channels, unit, [r // g for r in range(n)],
                  latencies, shape)


def _reaches_all(n: int, a, b) -> bool:
    """Does rank 0 reach every rank over the edges ``a[k] -> b[k]`` (NumPy arrays)?"""
    import numpy as np
    seen = np.zeros(n, dtype=bool)
    seen[0] = True
    while True:
        new = np.unique(b[seen[a] & ~seen[b]])
        if not len(new):
            return bool(seen.all())
        seen[new] = True


def _check_fabric_connected(fab: Fabric) -> None:
    import numpy as np
    n = fab.num_ranks
    pairs = np.array(list(fab.channels), dtype=np.int64).reshape(-1, 2)
    if n <= 1 or (_reaches_all(n, pairs[:, 0], pairs[:, 1]) and _reaches_all(n, pairs[:, 1], pairs[:, 0])):
        return                     # strongly connected: rank 0 reaches all, and all reach rank 0
    g = nx.DiGraph()
    g.add_nodes_from(range(fab.num_ranks))
    g.add_edges_from(fab.channels)
    if fab.num_ranks > 1 and not nx.is_strongly_connected(g):
        comp = max(nx.strongly_connected_components(g), key=len)
        cut = sorted(set(range(fab.num_ranks)) - comp)
        raise TopologyError(f"topology {fab.topology_name!r}: GPUs {cut} cannot exchange data with "
                            f"the others over the chosen transport")
