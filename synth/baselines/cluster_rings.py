"""NCCL-style rings on a cluster of identical hosts, built from the hosts' structure (no search).

NCCL's multi-node rings visit the hosts in turn and cross between hosts on one NIC rail at a
time.  Ring ``k`` of ``g`` (``g`` GPUs per host) enters host ``h`` at local GPU
``e_h = (k - h) mod g``, walks the host along a Hamiltonian path of its channel graph and leaves
it from ``e_{h+1}``, so the hop to the next host joins GPU ``e_{h+1}`` to the same local GPU:
the same rail on both sides, a different rail for every ring at every host boundary.  The
hop closing the ring joins rails ``(k - H) mod g`` and ``k``: the same rail when ``g``
divides ``H``.  Used by :func:`synth.baselines.ringsearch.find_rings` for clusters of more than
:data:`synth.baselines.ringsearch.SEARCH_MAX_RANKS` ranks, where the cycle search cannot go.
"""

from __future__ import annotations

from synth.ir.fabric import Fabric


def _host_path(adj: list[set[int]], start: int, end: int, g: int) -> list[int] | None:
    """A Hamiltonian path of the host's channel graph from ``start`` to ``end`` (depth-first,
    neighbour ``i + 1`` first; at most ``g! `` tiny for hosts of up to 16 GPUs, bounded anyway)."""
    budget = [200_000]
    path, seen = [start], {start}

    def dfs() -> bool:
        budget[0] -= 1
        if budget[0] < 0:
            return False
        u = path[-1]
        if len(path) == g:
            return u == end
        for v in sorted(adj[u], key=lambda v: (v - u) % g):
            if v not in seen and (v != end or len(path) == g - 1):
                path.append(v)
                seen.add(v)
                if dfs():
                    return True
                path.pop()
                seen.discard(v)
        return False
    if g == 1:
        return [start] if start == end else None
    return list(path) if dfs() else None


def cluster_rings(fabric: Fabric) -> list[tuple[int, ...]] | None:
    """``g`` rail-aligned rings of a cluster fabric (see the module docstring), or None when a
    host has no suitable Hamiltonian path (or a needed hop is not a channel)."""
    shape = fabric.shape
    if shape is None:
        return None
    g, H = shape.gpus_per_host, shape.hosts
    adj = [{b for b in range(g) if b != a and (a, b) in fabric.channels} for a in range(g)]
    rings = []
    for k in range(g):
        order = []
        for h in range(H):
            start, end = (k - h) % g, (k - h - 1) % g
            path = _host_path(adj, start, end, g) if g > 1 else [0]
            if path is None:
                return None
            order += [h * g + b for b in path]
        if not all((order[i], order[(i + 1) % len(order)]) in fabric.channels for i in range(len(order))):
            return None
        rings.append(tuple(order))
    return rings


__all__ = ["cluster_rings"]
