"""Minimum-cost spanning arborescences (Chu-Liu/Edmonds) on dense cost matrices.

:func:`min_cost_arborescence` is the pricing step of the tree packing LP
(:func:`synth.solve.bwopt.trees.pack_trees`) and the source of seed and random trees: given the cost of
every directed edge i -> j (any unit, e.g. an LP's resource prices times the edge's loads;
``INF`` where there is no edge) it returns the cheapest spanning arborescence rooted at a
given node as a parent list.  The recursion contracts one cycle of cheapest in-edges at a
time (:func:`_edmonds`, :func:`_find_cycle`), O(n^3) for n nodes.

:func:`exact` turns the float figures of a fabric (bandwidths in GB/s per direction, route
fractions) into fractions, so capacities and loads computed from them are exact.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from topo_probe.errors import SynthesisInfeasible

INF = float("inf")


def exact(value: float) -> Fraction:
    """A float figure (GB/s, fraction) as the nearest fraction with denominator <= 10**6.

    >>> exact(31.5), exact(0.1)
    (Fraction(63, 2), Fraction(1, 10))
    """
    return Fraction(value).limit_denominator(10**6)


def min_cost_arborescence(cost: np.ndarray, root: int) -> list[int]:
    """Minimum-cost spanning arborescence rooted at ``root`` (Chu-Liu/Edmonds).

    Parameters
    ----------
    cost : numpy.ndarray
        (n, n) edge costs, ``cost[i, j]`` for the edge i -> j; ``inf`` where there is no edge.
    root : int
        The root node.

    Returns
    -------
    list of int
        ``parent[v]`` for every node (``-1`` for the root).

    Raises
    ------
    SynthesisInfeasible
        If some node cannot be reached from ``root``.

    Examples
    --------
    >>> c = np.array([[INF, 1, 5], [INF, INF, 1], [INF, 9, INF]])
    >>> min_cost_arborescence(c, 0)
    [-1, 0, 1]
    """
    w = np.array(cost, dtype=float)
    n = w.shape[0]
    np.fill_diagonal(w, INF)
    w[:, root] = INF
    parent = _edmonds(w, root)
    if parent is None:
        raise SynthesisInfeasible(f"trees: some rank cannot be reached from rank {root} over the channels")
    parent[root] = -1
    return [int(p) for p in parent[:n]]


def _edmonds(w: np.ndarray, root: int) -> np.ndarray | None:
    """Recursive Chu-Liu/Edmonds on a dense matrix (diagonal and root column are inf)."""
    n = w.shape[0]
    best = np.argmin(w, axis=0)
    bestc = w[best, np.arange(n)]
    bestc[root] = 0.0
    best[root] = root
    if np.isinf(bestc).any():
        return None
    cycle = _find_cycle(best, root)
    if cycle is None:
        return best
    inc = np.zeros(n, dtype=bool)
    inc[cycle] = True
    rest = np.flatnonzero(~inc)
    m = len(rest)                     # contracted node gets index m
    sub = np.full((m + 1, m + 1), INF)
    sub[:m, :m] = w[np.ix_(rest, rest)]
    into = w[np.ix_(rest, cycle)] - bestc[cycle][None, :]        # rest -> cycle, reduced
    enter = np.argmin(into, axis=1)
    sub[:m, m] = into[np.arange(m), enter]
    outof = w[np.ix_(cycle, rest)]                                  # cycle -> rest
    leave = np.argmin(outof, axis=0)
    sub[m, :m] = outof[leave, np.arange(m)]
    new_root = int(np.searchsorted(rest, root))
    p = _edmonds(sub, new_root)
    if p is None:
        return None
    parent = best.copy()
    for k in range(m):
        v = rest[k]
        parent[v] = cycle[leave[k]] if p[k] == m else rest[p[k]]
    u = int(p[m])                     # the edge entering the cycle
    parent[cycle[enter[u]]] = rest[u]
    return parent


def _find_cycle(parent: np.ndarray, root: int) -> np.ndarray | None:
    n = len(parent)
    color = np.zeros(n, dtype=np.int64)   # 0 new, >0 id of the walk that visited it
    for start in range(n):
        if color[start]:
            continue
        v, walk = start, start + 1
        while not color[v] and v != root:
            color[v] = walk
            v = int(parent[v])
        if v != root and color[v] == walk:
            cyc = [v]
            u = int(parent[v])
            while u != v:
                cyc.append(u)
                u = int(parent[u])
            return np.array(sorted(cyc))
        color[start] = color[start] or walk
    return None
