"""Every fewest-hop path between two nodes of a topology graph whose edges are of given kinds and
whose inner nodes are relays of given kinds (never GPUs), in the order networkx's
``all_shortest_paths`` lists them on that filtered view, so routes and everything computed from
them stay as they were.

One breadth-first search per source, over the relays only, serves every destination: a display
of 8 DGX H100 hosts asks for the routes of 4,032 GPU pairs and their PCIe classes, and one search
per pair over a filtered view took 40 s of CPU (64 hosts: minutes).  Endpoints (GPUs, NICs where
NICs do not relay) are never passed through, so the search never visits them: a destination
looks up its own in-edges from the relays reached (O(in-degree)).  A search that visited them
cost O(endpoints) per source, and ``topo-probe --topology torus:32x32`` (2,048 endpoints under
one PCIe switch, each NIC row of the display a new source) took 663 s.

Paths are counted before they are listed (one sum per relay over its predecessors, the count of
fewest-hop paths by dynamic programming on the search's levels): a pair with more than
:data:`MAX_PATHS` of them is refused in one line rather than listed.  The count grows
exponentially in a grid of switches (C(2k-2, k-1) corner to corner of a k x k one); every preset and generated
cluster has at most 18 over NVLink/NVSwitch and the network (tests/topo_probe/topology/test_path_counts.py checks).

>>> import networkx as nx
>>> g = nx.DiGraph()
>>> for u, v in [("g0", "sw0"), ("g0", "sw1"), ("sw0", "g1"), ("sw1", "g1"), ("g0", "g2"), ("g2", "g1")]:
...     g.add_edge(u, v, kind="nvlink")
>>> for n, k in [("g0", "gpu"), ("g1", "gpu"), ("g2", "gpu"), ("sw0", "nvswitch"), ("sw1", "nvswitch")]:
...     g.nodes[n]["kind"] = k
>>> index = PathIndex(g, ("nvlink",), frozenset({"sw0", "sw1"}))
>>> index.paths("g0", "g1"), index.count("g0", "g1")   # never through g2
([('g0', 'sw0', 'g1'), ('g0', 'sw1', 'g1')], 2)
"""

from __future__ import annotations

from topo_probe.errors import TopologyError

__all__ = ["MAX_PATHS", "PathIndex"]

#: Most fewest-hop paths one pair may have (the presets and clusters: 18 at most, gb200-nvl72's NVSwitch planes).
MAX_PATHS = 65_536
#: Pairs whose path lists an index keeps: a display asks for a GPU pair's fabric paths up to three times (its
#: matrix cell, its bandwidth, its P2P class), each time after all sources of one view (128 GPUs: more sources
#: than the searches kept), so the lists are kept by pair (128 GPUs: 16,256 pairs).
KEPT_PAIRS = 65_536
#: Nodes over all the paths an index keeps (8 bytes of reference each, and about 60 bytes a path: 1,048,576 nodes
#: of 3-node paths, about 30 MB): pairs with many long paths (a grid of switches) would otherwise keep memory
#: without bound.  The display of 2 gb200-nvl72 racks keeps 442,368 in its NVLink index, 16 DGX H100 hosts' 107,520
#: in their network index (the most of any index of either).
KEPT_PATH_NODES = 1 << 20


class _Search:
    """The relays reached from one source: discovery rank, level, predecessors, path counts."""

    __slots__ = ("rank", "level", "pred", "count")

    def __init__(self, src) -> None:
        self.rank, self.level, self.pred, self.count = {src: 0}, {src: 0}, {src: []}, {src: 1}


class PathIndex:
    """Fewest-hop paths of ``graph`` over edges whose ``kind`` is in ``edge_kinds`` and through
    ``relays`` (node ids) only; the searches of the last ``keep`` sources are kept."""

    def __init__(self, graph, edge_kinds: tuple, relays: frozenset, keep: int = 64) -> None:
        self._graph, self._kinds = graph, frozenset(edge_kinds)
        self._relays, self._keep = relays, keep
        self._searches: dict = {}
        self._built: dict = {}                   # (src, dst) -> (tuple of paths, their nodes), first kept dropped first
        self._built_nodes = 0                    # nodes over the kept paths
        self._shape, self._last_src = _shape(graph), None
        self._relay_succ = self._relay_adjacency()

    def valid_for(self, graph) -> bool:
        """Whether this index still describes ``graph``: the same object with as many nodes, checked
        on every call (O(1)), and as many edges, checked when the source asked differs from the last
        one and when a source is searched anew (O(nodes)): a graph changed between two sources gets
        fresh searches and path lists.  (Topologies are built before their paths are asked; nothing
        changes one between two destinations of one source.)"""
        return graph is self._graph and len(graph) == self._shape[0]

    def _check_edges(self, src) -> None:
        """Forget every search and kept list if the graph's edges changed; checked when ``src`` is not the
        source last asked (a kept list outlives its source's search, so a new search alone would miss it)."""
        if src != self._last_src:
            self._last_src = src
            if _shape(self._graph) != self._shape:
                self._forget()

    def _forget(self) -> None:
        """Drop every search and kept list, and take the graph's adjacency again (its edges changed)."""
        self._searches.clear()
        self._built.clear()
        self._built_nodes = 0
        self._shape, self._relay_succ = _shape(self._graph), self._relay_adjacency()

    def _relay_adjacency(self) -> dict:
        """Each relay's relay successors over the edge kinds, in the graph's adjacency order."""
        adj, kinds, relays = self._graph.succ, self._kinds, self._relays
        return {r: [w for w, d in adj[r].items() if d["kind"] in kinds and w in relays]
                for r in relays if r in adj}

    def _search(self, src) -> _Search:
        found = self._searches.get(src)
        if found is not None:
            return found
        if _shape(self._graph) != self._shape:   # edges changed: start again
            self._forget()
        s, kinds, relays, succ = _Search(src), self._kinds, self._relays, self._relay_succ
        level, nextlevel = 1, [w for w, d in self._graph.succ[src].items() if d["kind"] in kinds and w in relays]
        for w in nextlevel:
            s.rank[w], s.level[w], s.pred[w], s.count[w] = len(s.rank), 1, [src], 1
        while nextlevel:                         # networkx's ``predecessor``, level by level, relays only
            level += 1
            thislevel, nextlevel = nextlevel, []
            for v in thislevel:
                for w in succ[v]:
                    seen = s.level.get(w)
                    if seen is None:
                        s.rank[w], s.level[w], s.pred[w], s.count[w] = len(s.rank), level, [v], s.count[v]
                        nextlevel.append(w)
                    elif seen == level:
                        s.pred[w].append(v)
                        s.count[w] += s.count[v]
        if len(self._searches) >= self._keep:
            del self._searches[next(iter(self._searches))]
        self._searches[src] = s
        return s

    def _last_hop(self, s: _Search, dst) -> list:
        """The nodes a fewest-hop path enters ``dst`` from, in the search's discovery order."""
        if dst in s.pred:                        # a relay (or the source) reached: its own predecessors
            return s.pred[dst]
        kinds, level = self._kinds, s.level
        ins = [v for v, d in self._graph.pred[dst].items() if v in level and d["kind"] in kinds]
        if not ins:
            return []
        low = min(level[v] for v in ins)
        return sorted((v for v in ins if level[v] == low), key=s.rank.__getitem__)

    def _counted(self, src, dst) -> tuple[_Search, list, int]:
        """``src``'s search, the nodes fewest-hop paths enter ``dst`` from, and how many such paths there are."""
        s = self._search(src)
        last = self._last_hop(s, dst)
        return s, last, sum(s.count[v] for v in last)

    def count(self, src, dst) -> int:
        """How many fewest-hop ``src`` -> ``dst`` paths there are (0 if none), without listing them."""
        if dst == src:
            return 1
        self._check_edges(src)
        return self._counted(src, dst)[2]

    def paths(self, src, dst) -> list[tuple]:
        """Every fewest-hop ``src`` -> ``dst`` path (tuples of node ids); ``[]`` if there is none;
        :class:`TopologyError` if there are more than :data:`MAX_PATHS`."""
        if dst == src:
            return [(src,)]
        self._check_edges(src)
        kept = self._built.get((src, dst))
        if kept is not None:
            return list(kept[0])
        built = self._build(src, dst)
        nodes = sum(map(len, built))
        if nodes <= KEPT_PATH_NODES:             # kept within both bounds, the first kept dropped first
            while self._built and (len(self._built) >= KEPT_PAIRS or self._built_nodes + nodes > KEPT_PATH_NODES):
                self._built_nodes -= self._built.pop(next(iter(self._built)))[1]
            self._built[src, dst] = (tuple(built), nodes)
            self._built_nodes += nodes
        return built

    def _build(self, src, dst) -> list[tuple]:
        """The paths of :meth:`paths`, from ``src``'s search."""
        s, last, total = self._counted(src, dst)
        if total > MAX_PATHS:
            raise TopologyError(f"{src} -> {dst}: {total} fewest-hop paths over {'/'.join(sorted(self._kinds))} "
                                f"links, more than the {MAX_PATHS} a route may spread over")
        pred = s.pred
        out, stack, top = [], [[dst, 0]], 0      # networkx's ``_build_paths_from_predecessors``
        while top >= 0:
            node, i = stack[top]
            if node == src:
                out.append(tuple(n for n, _ in reversed(stack[: top + 1])))
            ps = last if top == 0 else pred[node]
            if len(ps) > i:
                stack[top][1] = i + 1
                top += 1
                if top == len(stack):
                    stack.append([ps[i], 0])
                else:
                    stack[top][:] = [ps[i], 0]
            else:
                top -= 1
        return out


def _shape(graph) -> tuple[int, int]:
    """Nodes and edges of ``graph``."""
    return len(graph), sum(map(len, graph._succ.values()))
