"""The fabric of a cluster of identical hosts, built from route templates (no all-pairs routing).

:func:`synth.ir.fabric.build_fabric` calls :func:`build_cluster_fabric` when the topology has a
:class:`~synth.ir.cluster_shape.ClusterShape`.  Routes are computed once per *pair class*
(:data:`~synth.ir.cluster_shape.PAIR_CLASSES`) and local GPU pair ``(a, b)``:

* same host: on host 0 alone, exactly as for a single host (NVLink fabric, else PCIe);
* two hosts: on a graph of just the source host, the destination host and the network
  (a path through a third host leaves the network and comes back, so it is never among the
  shortest).

Every resource of a template is a *pattern* naming its ends relative to one host (a local
node, the network node a local NIC hangs on, or a fixed network node) and whether it is read
at the source or the destination host.  :class:`ClusterChannels` turns a template into the
route of any rank pair on demand, from per-host tables of resource names, so building costs
``O(classes * g^2)`` path searches plus ``O(hosts * patterns)`` names, and the channels of a
1,024-GPU cluster take no memory until asked for.  The result equals the explicit all-pairs
construction (tests compare them route by route).  Every pair of ranks on different hosts
has a route (or the explicit builder is used), so the fabric is strongly connected: two
ranks of one host reach each other through any other host.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

import networkx as nx

from synth.ir.cluster_shape import ClusterShape
from synth.ir.host_graph import Share, gpu_fabric_connected, merge_parallel_switches, merged_name, parallel_switch_groups
from topo_probe.number_rules import is_int
from topo_probe.topology.model import Topology

#: pair class -> index in templates
_CLS = {"host": 0, "group": 1, "other": 2}
#: channels whose float routes :meth:`ClusterChannels.route_floats` keeps (about 100 bytes a route entry)
FLOATS_LIMIT = 300_000


class ClusterChannels(Mapping):
    """``(src rank, dst rank) -> [(resource, fraction), ...]`` computed from templates on access."""

    def __init__(self, shape: ClusterShape, templates: list, tables: list[list[tuple]], count: int) -> None:
        self.g, self.H = shape.gpus_per_host, shape.hosts
        self.n = self.g * self.H
        self.groups = shape.groups
        self.templates = templates          # [class][a][b] -> tuple of (side, pattern id, fraction) | None
        self.tables = tables                # [host][pattern id] -> resource
        self.count = count
        self._floats: dict = {}             # (i, j) -> route with float fractions, up to FLOATS_LIMIT

    def _template(self, key):
        try:
            i, j = key
        except (TypeError, ValueError):
            raise KeyError(key) from None
        if not (is_int(i) and is_int(j)):        # the project's one integer rule: NumPy integers too, not bool
            raise KeyError(key)
        i, j = int(i), int(j)
        if not (0 <= i < self.n and 0 <= j < self.n) or i == j:
            raise KeyError(key)
        h, a = divmod(i, self.g)
        h2, b = divmod(j, self.g)
        c = 0 if h == h2 else (1 if self.groups[h] == self.groups[h2] else 2)
        tpl = self.templates[c][a][b] if self.templates[c] is not None else None
        if tpl is None:
            raise KeyError(key)
        return h, h2, tpl

    def __getitem__(self, key):
        h, h2, tpl = self._template(key)
        ts, td = self.tables[h], self.tables[h2]
        return [((td if side else ts)[pid], f) for side, pid, f in tpl]

    def route_floats(self, i: int, j: int) -> tuple:
        """``((resource, float(fraction)), ...)`` of channel ``(i, j)`` (KeyError: none), kept for
        the first :data:`FLOATS_LIMIT` channels asked about: loads are summed over the same
        channels step after step (a ring's steps all use its ring edges)."""
        hit = self._floats.get((i, j))
        if hit is None:
            hit = tuple((r, float(f)) for r, f in self[(i, j)])
            if len(self._floats) < FLOATS_LIMIT:
                self._floats[(i, j)] = hit
        return hit

    def __contains__(self, key) -> bool:
        if type(key) is tuple and len(key) == 2 and type(key[0]) is int and type(key[1]) is int:
            i, j = key                     # the usual key, without _template's checks and exceptions
            n = self.n
            if not (0 <= i < n and 0 <= j < n) or i == j:
                return False
            h, a = divmod(i, self.g)
            h2, b = divmod(j, self.g)
            c = 0 if h == h2 else (1 if self.groups[h] == self.groups[h2] else 2)
            tpl = self.templates[c]
            return tpl is not None and tpl[a][b] is not None
        try:
            self._template(key)
        except KeyError:
            return False
        return True

    def __iter__(self):
        for i in range(self.n):
            for j in range(self.n):
                if i != j and (i, j) in self:
                    yield (i, j)

    def __len__(self) -> int:
        return self.count

    def neighbours_out(self, i: int) -> list[int]:
        return [j for j in range(self.n) if j != i and (i, j) in self]


class ClusterLatencies(Mapping):
    """``(src, dst) -> [latency (µs) of each parallel path]`` from the templates."""

    def __init__(self, channels: ClusterChannels, latencies: list) -> None:
        self.ch, self.lat = channels, latencies
        #: [class][a][b] -> the slowest path's latency (None: no channel)
        self._max = [None if t is None else [[max(v) if v else None for v in row] for row in t] for t in latencies]

    def max_latency(self, i: int, j: int) -> float:
        """``max(self[(i, j)])`` without building the key's list (hot in the cost model)."""
        ch = self.ch
        if not (0 <= i < ch.n and 0 <= j < ch.n) or i == j:
            raise KeyError((i, j))
        h, a = divmod(i, ch.g)
        h2, b = divmod(j, ch.g)
        c = 0 if h == h2 else (1 if ch.groups[h] == ch.groups[h2] else 2)
        table = self._max[c]
        m = table[a][b] if table is not None else None
        if m is None or ch.templates[c] is None or ch.templates[c][a][b] is None:
            raise KeyError((i, j))
        return m

    def __getitem__(self, key):
        i, j = key
        self.ch._template(key)
        h, a = divmod(i, self.ch.g)
        h2, b = divmod(j, self.ch.g)
        c = 0 if h == h2 else (1 if self.ch.groups[h] == self.ch.groups[h2] else 2)
        return self.lat[c][a][b]

    def __iter__(self):
        return iter(self.ch)

    def __len__(self) -> int:
        return len(self.ch)


# ---------------------------------------------------------------------------- templates
class _Patterns:
    """Resource patterns: ``((kind, name), (kind, name))`` with kind L (local node of the host),
    N (the network node of the host's local NIC ``name``) or G (a fixed network node)."""

    def __init__(self) -> None:
        self.ids: dict[tuple, int] = {}

    def id(self, pattern: tuple) -> int:
        return self.ids.setdefault(pattern, len(self.ids))


def _bottleneck_route(graph: nx.DiGraph, paths: list[tuple]) -> tuple[dict, list[float]]:
    """Route fractions as :func:`synth.ir.fabric.build_fabric` computes them, and path latencies."""
    bott = [min(graph.edges[u, v]["bandwidth_gbps"] for u, v in zip(p, p[1:])) for p in paths]
    total = sum(Fraction(b).limit_denominator(10**6) for b in bott)
    route: dict = {}
    for p, b in zip(paths, bott):
        share = Fraction(b).limit_denominator(10**6) / total
        for u, v in zip(p, p[1:]):
            route[(u, v)] = route.get((u, v), Fraction(0)) + share
    lats = [sum(graph.edges[u, v]["latency_us"] for u, v in zip(p, p[1:])) for p in paths]
    return route, lats


def _host_templates(host: Topology, transport: str, patterns: _Patterns, gpus: list[str]):
    """Same-host templates on the merged host graph."""
    connected = gpu_fabric_connected(host, 0)
    g = len(gpus)
    tpl = [[None] * g for _ in range(g)]
    lat = [[None] * g for _ in range(g)]
    for a in range(g):
        for b in range(g):
            if a == b:
                continue
            paths = host.gpu_fabric_paths(a, b)
            if not paths and (transport == "all" or not connected):
                paths = host.pcie_paths(a, b)
            if not paths:
                continue
            route, lats = _bottleneck_route(host.graph, paths)
            tpl[a][b] = tuple((0, patterns.id((("L", u), ("L", v))), Share(f)) for (u, v), f in sorted(route.items()))
            lat[a][b] = lats
    return tpl, lat


def _pair_graph(shape: ClusterShape, merged: nx.DiGraph, h: int, h2: int) -> Topology:
    """Source host (nodes ``("S", local)``), destination host (``("D", local)``) and the network."""
    g = nx.DiGraph()
    for side, host in (("S", h), ("D", h2)):
        for x, d in merged.nodes(data=True):
            attrs = dict(d)
            if d["kind"] == "gpu":
                attrs["index"] = d["index"] + (shape.gpus_per_host if side == "D" else 0)
                attrs["host"] = 0 if side == "S" else 1
            g.add_node((side, x), **attrs)
        for u, v, d in merged.edges(data=True):
            g.add_edge((side, u), (side, v), **d)
        for loc, net in shape.attach[host].items():
            out, back = shape.attach_edges[loc]
            for (a, b), key in ((((side, loc), net), out), ((net, (side, loc)), back)):
                g.add_node(net, **shape.network.nodes[net])
                g.add_edge(a, b, kind=key[0], links=key[1], bandwidth_gbps=key[2], latency_us=key[3])
    g.add_nodes_from(shape.network.nodes(data=True))
    g.add_edges_from(shape.network.edges(data=True))
    return Topology("pair", g)


def _end_sides(end, serve_s: dict, serve_d: dict) -> dict[str, tuple]:
    """The patterns an edge end can take, by the side it is read at."""
    if isinstance(end, tuple):
        return {end[0]: ("L", end[1])}
    out = {}
    if end in serve_s:
        out["S"] = ("N", serve_s[end])
    if end in serve_d:
        out["D"] = ("N", serve_d[end])
    if not out:
        out = {"S": ("G", end), "D": ("G", end)}
    return out


def _pair_templates(shape: ClusterShape, merged: nx.DiGraph, cls: str, patterns: _Patterns):
    """Templates of the two-host class ``cls``; None if some route mixes both hosts' network nodes."""
    h, h2 = shape.representative(cls)
    topo = _pair_graph(shape, merged, h, h2)
    serve_s = {net: min(l for l, n2 in shape.attach[h].items() if n2 == net) for net in shape.attach[h].values()}
    serve_d = {net: min(l for l, n2 in shape.attach[h2].items() if n2 == net) for net in shape.attach[h2].values()}
    g = shape.gpus_per_host
    tpl = [[None] * g for _ in range(g)]
    lat = [[None] * g for _ in range(g)]
    for a in range(g):
        for b in range(g):
            paths = topo.network_paths(a, g + b)
            if not paths:
                continue
            route, lats = _bottleneck_route(topo.graph, paths)
            entries = []
            for (u, v), f in route.items():
                su, sv = _end_sides(u, serve_s, serve_d), _end_sides(v, serve_s, serve_d)
                both = [s for s in ("S", "D") if s in su and s in sv]
                if not both:
                    return None
                side = both[0]
                entries.append((0 if side == "S" else 1, patterns.id((su[side], sv[side])), Share(f)))
            tpl[a][b] = tuple(entries)
            lat[a][b] = lats
    return tpl, lat


# ---------------------------------------------------------------------------- naming
def _host_names(members: dict[str, list[str]], h: int):
    """local merged node -> its name in the cluster's merged graph, for host ``h``."""
    def name(x: str) -> str:
        if x in members:
            return merged_name([f"h{h}.{m}" for m in members[x]])
        return f"h{h}.{x}"
    return name


def _instantiate(shape: ClusterShape, patterns: _Patterns, members: dict[str, list[str]]) -> list[list[tuple]]:
    """Per host, the resource (edge of the merged cluster graph) of every pattern id."""
    order = [p for p, _ in sorted(patterns.ids.items(), key=lambda kv: kv[1])]
    tables = []
    for h in range(shape.hosts):
        ends = {"L": _host_names(members, h), "N": shape.attach[h].__getitem__, "G": str}
        tables.append([(ends[ku](u), ends[kv](v)) for (ku, u), (kv, v) in order])
    return tables


def _used(shape: ClusterShape, templates: list) -> list[set[int]]:
    """Pattern ids each host's resources take part in (as source or destination of its classes)."""
    per_cls = []
    for tpl in templates:
        sides: tuple[set, set] = (set(), set())
        for row in tpl or []:
            for entries in row:
                for side, pid, _ in entries or ():
                    sides[side].add(pid)
        per_cls.append(sides)
    sizes = shape.group_sizes()
    out = []
    for h in range(shape.hosts):
        mine: set[int] = set()
        roles = [0] + ([1] if sizes[shape.groups[h]] > 1 else []) + ([2] if len(sizes) > 1 else [])
        for c in roles:
            if templates[c] is not None:
                mine |= per_cls[c][0] | per_cls[c][1]
        out.append(mine)
    return out


def build_cluster_pieces(topo: Topology, shape: ClusterShape, transport: str):
    """``(channels, latencies, resources)`` of the cluster fabric, or None if a route cannot be
    written as a template (the caller then routes all pairs explicitly).  ``resources`` maps each
    used edge of the merged cluster graph to its attribute dict (kind, links, bandwidth_gbps,
    latency_us)."""
    members = {m[0]: m for m in parallel_switch_groups(shape.host.graph)}
    merged = merge_parallel_switches(shape.host.graph)
    back = {merged_name(m): first for first, m in members.items()}
    merged = nx.relabel_nodes(merged, back) if back else merged
    host = Topology("host", merged)
    patterns = _Patterns()
    templates: list = [None, None, None]
    latencies: list = [None, None, None]
    if shape.gpus_per_host > 1:
        templates[0], latencies[0] = _host_templates(host, transport, patterns, host.gpus)
    for cls in shape.classes_present():
        if cls != "host":
            got = _pair_templates(shape, merged, cls, patterns)
            if got is None:
                return None
            templates[_CLS[cls]], latencies[_CLS[cls]] = got
    if any(t is not None and any(e is None for row in t for e in row) for t in templates[1:]):
        return None              # some pair of hosts lacks a route: let the explicit builder explain
    tables = _instantiate(shape, patterns, members)
    kinds = {pid: (ku, kv, u, v) for ((ku, u), (kv, v)), pid in patterns.ids.items()}
    resources = {}
    for h, pids in enumerate(_used(shape, templates)):
        for pid in pids:
            res = tables[h][pid]
            if res not in resources:
                ku, kv, u, v = kinds[pid]
                resources[res] = merged.edges[u, v] if ku == kv == "L" else topo.graph.edges[res]
    g = shape.gpus_per_host
    local = sum(e is not None for row in templates[0] or [] for e in row)
    count = shape.hosts * local + (shape.hosts * g) ** 2 - shape.hosts * g * g
    channels = ClusterChannels(shape, templates, tables, count)
    return channels, ClusterLatencies(channels, latencies), resources


__all__ = ["ClusterChannels", "ClusterLatencies", "build_cluster_pieces"]
