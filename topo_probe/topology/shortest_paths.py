"""Every fewest-hop path between two nodes of a topology graph whose edges are of given kinds and
whose inner nodes are relays of given kinds (never GPUs), in the order networkx's
``all_shortest_paths`` lists them on that filtered view, so routes and everything computed from
them stay as they were.

One breadth-first search per source serves every destination: a display of 8 DGX H100 hosts
asks for the routes of 4,032 GPU pairs and their PCIe classes, and one search per pair over a
filtered view took 40 s of CPU (64 hosts: minutes).  The search expands the source and relay
nodes only; an endpoint it reaches (another GPU, a NIC where NICs do not relay) is recorded but
not expanded, which is what leaving it out of the view did for every path to a destination.

>>> import networkx as nx
>>> g = nx.DiGraph()
>>> for u, v in [("g0", "sw0"), ("g0", "sw1"), ("sw0", "g1"), ("sw1", "g1"), ("g0", "g2"), ("g2", "g1")]:
...     g.add_edge(u, v, kind="nvlink")
>>> for n, k in [("g0", "gpu"), ("g1", "gpu"), ("g2", "gpu"), ("sw0", "nvswitch"), ("sw1", "nvswitch")]:
...     g.nodes[n]["kind"] = k
>>> PathIndex(g, ("nvlink",), frozenset({"sw0", "sw1"})).paths("g0", "g1")   # never through g2
[('g0', 'sw0', 'g1'), ('g0', 'sw1', 'g1')]
"""

from __future__ import annotations

__all__ = ["PathIndex"]


class PathIndex:
    """Fewest-hop paths of ``graph`` over edges whose ``kind`` is in ``edge_kinds`` and through
    ``relays`` (node ids) only; the searches of the last ``keep`` sources are kept."""

    def __init__(self, graph, edge_kinds: tuple, relays: frozenset, keep: int = 64) -> None:
        self._graph, self._adj, self._kinds = graph, graph.succ, frozenset(edge_kinds)
        self._relays, self._keep = relays, keep
        self._preds: dict = {}
        self._shape = _shape(graph)

    def valid_for(self, graph) -> bool:
        """Whether this index still describes ``graph``: the same object with as many nodes, checked
        on every call (O(1)), and as many edges, checked when a source is searched anew (O(edges),
        the order of the search itself): a graph changed between two sources gets a new index.
        (Topologies are built before their paths are asked; nothing changes one between two
        destinations of one source.)"""
        return graph is self._graph and len(graph) == self._shape[0]

    def _predecessors(self, src) -> dict:
        pred = self._preds.get(src)
        if pred is not None:
            return pred
        if _shape(self._graph) != self._shape:   # edges changed: start again
            self._preds.clear()
            self._shape = _shape(self._graph)
        adj, kinds, relays = self._adj, self._kinds, self._relays
        level, nextlevel, seen, pred = 0, [src], {src: 0}, {src: []}
        while nextlevel:                         # networkx's ``predecessor``, level by level
            level += 1
            thislevel, nextlevel = nextlevel, []
            for v in thislevel:
                if v != src and v not in relays:
                    continue                     # an endpoint: reached, never passed through
                for w, data in adj[v].items():
                    if data["kind"] not in kinds:
                        continue
                    if w not in seen:
                        pred[w], seen[w] = [v], level
                        nextlevel.append(w)
                    elif seen[w] == level:
                        pred[w].append(v)
        if len(self._preds) >= self._keep:
            del self._preds[next(iter(self._preds))]
        self._preds[src] = pred
        return pred

    def paths(self, src, dst) -> list[tuple]:
        """Every fewest-hop ``src`` -> ``dst`` path (tuples of node ids); ``[]`` if there is none."""
        pred = self._predecessors(src)
        if dst == src:
            return [(src,)]
        if dst not in pred:
            return []
        out, stack, top = [], [[dst, 0]], 0      # networkx's ``_build_paths_from_predecessors``
        while top >= 0:
            node, i = stack[top]
            if node == src:
                out.append(tuple(n for n, _ in reversed(stack[: top + 1])))
            if len(pred[node]) > i:
                stack[top][1] = i + 1
                top += 1
                if top == len(stack):
                    stack.append([pred[node][i], 0])
                else:
                    stack[top][:] = [pred[node][i], 0]
            else:
                top -= 1
        return out


def _shape(graph) -> tuple[int, int]:
    """Nodes and edges of ``graph``."""
    return len(graph), sum(map(len, graph._succ.values()))
