"""Latency bounds on a cluster of identical hosts without an all-pairs channel graph.

:func:`synth.model.bounds.lower_bounds` needs, for every rank pair a collective must join, the
fewest channel hops and the smallest summed channel latency between them.  On a cluster
(:class:`synth.ir.cluster_shape.ClusterShape`) the channel latencies form an ``n x n`` matrix
assembled from ``g x g`` blocks, one per host pair class, and the needed pairs are invariant
under the cluster's symmetries, so shortest paths from the representative ranks
(:func:`synth.model.cuts.rank_representatives`, or the root) cover every needed pair.  Dense
Dijkstra in NumPy: ``O(n^2)`` per source, a few milliseconds at 1,024 ranks.
"""

from __future__ import annotations

import numpy as np

from synth.ir.collectives import CollectiveSpec
from synth.ir.fabric import Fabric
from synth.model.cuts import rank_representatives


def latency_matrix(fabric: Fabric) -> np.ndarray:
    """``W[i, j]``: latency (µs) of channel i -> j (its slowest parallel path), ``inf`` if none."""
    shape = fabric.shape
    g, H = shape.gpus_per_host, shape.hosts
    blocks = []
    for c in range(3):
        b = np.full((g, g), np.inf)
        rows = fabric.path_latency_us.lat[c]
        for a in range(g):
            for k in range(g):
                if rows is not None and rows[a][k] is not None:
                    b[a, k] = max(rows[a][k])
        blocks.append(b)
    groups = np.array(shape.groups)
    cls = np.where(groups[:, None] == groups[None, :], 1, 2)
    np.fill_diagonal(cls, 0)
    stacked = np.stack(blocks)[cls]                      # (H, H, g, g)
    return stacked.transpose(0, 2, 1, 3).reshape(H * g, H * g)


def dense_dijkstra(W: np.ndarray, source: int) -> np.ndarray:
    """Shortest distances from ``source`` over the dense weight matrix ``W`` (``inf``: no edge)."""
    n = len(W)
    dist = np.full(n, np.inf)
    dist[source] = 0.0
    done = np.zeros(n, dtype=bool)
    for _ in range(n):
        u = int(np.argmin(np.where(done, np.inf, dist)))
        if done[u] or not np.isfinite(dist[u]):
            break
        done[u] = True
        np.minimum(dist, dist[u] + W[u], out=dist)
    return dist


def cluster_latency(fabric: Fabric, spec: CollectiveSpec) -> tuple[int, float, tuple[tuple[int, float], ...]]:
    """``(max hops, max latency µs, Pareto frontier of (hops, latency) pairs)`` over the rank pairs
    ``spec`` needs (as :func:`synth.model.bounds._latency`)."""
    W = latency_matrix(fabric)
    hop = np.where(np.isfinite(W), 1.0, np.inf)
    name, root = spec.name, spec.root
    if name in ("broadcast", "scatter"):
        runs = [(W, hop, root, None)]
    elif name in ("reduce", "gather"):
        runs = [(W.T.copy(), hop.T.copy(), root, None)]
    else:
        runs = [(W, hop, s, None) for s in rank_representatives(fabric)]
    pairs = set()
    for w, h, s, _ in runs:
        lat, hops = dense_dijkstra(w, s), dense_dijkstra(h, s)
        keep = np.arange(len(w)) != s
        pairs |= set(zip(hops[keep].astype(int).tolist(), np.round(lat[keep], 9).tolist()))
    pairs = sorted(pairs)
    frontier = tuple(pr for pr in pairs if not any(o != pr and o[0] >= pr[0] and o[1] >= pr[1] for o in pairs))
    return max((h for h, _ in pairs), default=0), max((u for _, u in pairs), default=0.0), frontier


__all__ = ["cluster_latency", "dense_dijkstra", "latency_matrix"]
