"""NCCL-style double binary tree baselines.

Two binary trees, each carrying every other chunk (chunk ``g`` on tree ``g % 2``):

* NCCL's trees (``ncclGetBtree``/``ncclGetDtree``): tree 1 over ranks 0..n-1 where a rank's
  level is its lowest set bit (rank 0 the root with one child); tree 2 is its mirror
  ``n-1-r`` (even n) or its shift ``r+1`` (odd n), so the leaves of one are the inner nodes of
  the other.  For rooted collectives both trees are built over rank orders that start at the
  root (``root, root+1, ...`` and the same with the non-root ranks rotated by one).
* When a tree edge is not a channel in both directions (DGX-1, rings, tori), both trees are
  built over the channel graph instead: breadth-first spanning trees (shortest channel paths
  to the root) where each rank attaches to the candidate parent with the fewest children,
  tree 2 preferring as parents the leaves of tree 1 (``meta["trees"] = "bfs"``).

Schedules (pipelined; ``m`` is a chunk's index on its tree, ``h(v)`` the height of v with
leaves at 0, ``d(v)`` its depth, ``H`` the root's height):

* allreduce: v reduces into its parent at step ``m + h(v)``; after the root has everything, a
  node at depth d copies to its children at step ``m + H + d`` (the trees have different
  roots, so the chunks of one tree reduce into one root and those of the other into another);
* broadcast: a node at depth d copies to its children at step ``m + d``;
* reduce: v reduces into its parent at step ``m + h(v)``;
* gather: every block moves up one hop per step from step 0;
* scatter: the block of a rank at depth d leaves the root at step ``D - d`` (``D`` the tree's
  depth), so all arrive at the last step.

allgather, reducescatter and alltoall are not tree algorithms in NCCL: not available.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from synth.baselines._common import Builder, block_chunks, make_spec
from synth.ir.collectives import canonical
from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule
from topo_probe.errors import UnsupportedCollective

COLLECTIVES = ("allreduce", "broadcast", "reduce", "gather", "scatter")


@dataclass(frozen=True)
class Tree:
    """A spanning tree: ``parent[v]`` (None at the root)."""

    root: int
    parent: tuple[int | None, ...]

    def children(self, v: int) -> list[int]:
        return [u for u, p in enumerate(self.parent) if p == v]

    def depth(self, v: int) -> int:
        d = 0
        while self.parent[v] is not None:
            v, d = self.parent[v], d + 1
        return d

    def height(self, v: int) -> int:
        return max((1 + self.height(c) for c in self.children(v)), default=0)

    def path_to_root(self, v: int) -> list[int]:
        out = [v]
        while self.parent[out[-1]] is not None:
            out.append(self.parent[out[-1]])
        return out

    def inner(self) -> set[int]:
        return {p for p in self.parent if p is not None}


def btree_parents(n: int) -> list[int | None]:
    """Parent of each position in NCCL's binary tree over ``n`` ranks (``ncclGetBtree``).

    >>> btree_parents(8)
    [None, 2, 4, 2, 0, 6, 4, 6]
    """
    parent: list[int | None] = [None] * n
    for rank in range(1, n):
        bit = 1
        while bit < n and not bit & rank:
            bit <<= 1
        up = (rank ^ bit) | (bit << 1)
        parent[rank] = up if up < n else rank ^ bit
    return parent


def _over(order: list[int]) -> Tree:
    pos = btree_parents(len(order))
    parent: list[int | None] = [None] * len(order)
    for p, q in enumerate(pos):
        parent[order[p]] = None if q is None else order[q]
    return Tree(order[0], tuple(parent))


def nccl_trees(n: int, root: int | None = None) -> tuple[Tree, Tree]:
    """NCCL's double binary tree (``root=None``) or the rooted variant described above."""
    if root is None:
        second = [(p + 1) % n for p in range(n)] if n % 2 else [n - 1 - p for p in range(n)]
        return _over(list(range(n))), _over(second)
    first = [(root + k) % n for k in range(n)]
    others = first[1:]
    return _over(first), _over([root] + others[1:] + others[:1])


def _bfs_tree(fabric: Fabric, root: int, avoid: set[int]) -> Tree:
    n = fabric.num_ranks
    parent: list[int | None] = [None] * n
    placed, kids, layer = {root}, [0] * n, [root]
    while layer:
        nxt = []
        cands = sorted({v for u in layer for v in fabric.neighbours_out(u)
                        if v not in placed and fabric.has_channel(v, u)})
        for v in cands:
            opts = [u for u in layer if fabric.has_channel(u, v) and fabric.has_channel(v, u)]
            u = min(opts, key=lambda u: (u in avoid, kids[u] >= 2, kids[u], u))
            parent[v], kids[u] = u, kids[u] + 1
            placed.add(v)
            nxt.append(v)
        layer = nxt
    if len(placed) < n:
        raise UnsupportedCollective(f"tree: ranks {sorted(set(range(n)) - placed)} cannot reach rank {root} over "
                                    f"two-way channels of fabric {fabric.topology_name!r}")
    return Tree(root, tuple(parent))


def double_tree(fabric: Fabric, root: int | None = None) -> tuple[Tree, Tree, str]:
    """The two trees used on ``fabric`` and how they were made (``"nccl"`` or ``"bfs"``)."""
    n = fabric.num_ranks
    trees = nccl_trees(n, root)
    if all(fabric.has_channel(v, p) and fabric.has_channel(p, v)
           for t in trees for v, p in enumerate(t.parent) if p is not None):
        return trees[0], trees[1], "nccl"
    t1 = _bfs_tree(fabric, 0 if root is None else root, set())
    leaves = sorted(set(range(n)) - t1.inner() - {t1.root})
    root2 = (leaves[-1] if leaves else t1.root) if root is None else root
    t2 = _bfs_tree(fabric, root2, t1.inner() - {root2})
    return t1, t2, "bfs"


def _heights(t: Tree) -> list[int]:
    """:meth:`Tree.height` of every rank, deepest ranks first (one pass, not one search per rank)."""
    n = len(t.parent)
    depth = [t.depth(v) for v in range(n)]
    h = [0] * n
    for v in sorted(range(n), key=lambda v: -depth[v]):
        p = t.parent[v]
        if p is not None:
            h[p] = max(h[p], h[v] + 1)
    return h


def _allreduce(b: Builder, trees: tuple[Tree, Tree]) -> None:
    """Chunk ``g`` on tree ``g % 2`` entering at ``m = g // 2``: each rank ``v`` below the root
    reduces into its parent ``p`` at step ``m + h(v)``, then ``p`` copies the result back at step
    ``m + h(root) + depth(p)``; transfers listed chunk by chunk, rank by rank (reduce, copy)."""
    per_tree = []
    for t in trees:
        h = _heights(t)
        vs = [v for v, p in enumerate(t.parent) if p is not None]
        ps = [t.parent[v] for v in vs]
        per_tree.append((vs, ps, [h[v] for v in vs], [h[t.root] + t.depth(p) for p in ps]))
    v, p, up, down = (np.array([x[i] for x in per_tree], dtype=np.int64) for i in range(4))   # (tree, rank)
    g = np.arange(b.spec.num_chunks, dtype=np.int64)
    k, m = g % 2, (g // 2)[:, None]
    pairs = np.stack(((m + up[k], v[k], p[k]), (m + down[k], p[k], v[k])), axis=-1)   # (3, chunk, rank, op)
    step, src, dst = (a.reshape(-1) for a in pairs)
    chunk = np.broadcast_to(g[:, None, None], pairs.shape[1:]).reshape(-1)
    reduce = np.broadcast_to(np.array([True, False]), pairs.shape[1:]).reshape(-1)
    b.add_steps(step, chunk, src, dst, reduce)


def _rooted(b: Builder, trees: tuple[Tree, Tree]) -> None:
    spec = b.spec
    n = spec.ranks
    if spec.name in ("broadcast", "reduce"):
        for c in range(spec.num_chunks):
            t, m = trees[c % 2], c // 2
            for v, p in enumerate(t.parent):
                if p is None:
                    continue
                if spec.name == "broadcast":
                    b.add(m + t.depth(p), c, p, v)
                else:
                    b.add(m + t.height(v), c, v, p, "reduce")
        return
    for g, r, c in block_chunks(spec):
        if r == spec.root:
            continue
        t = trees[g % 2]
        up = t.path_to_root(r)
        if spec.name == "gather":
            b.path(g, up, list(range(len(up) - 1)))
        else:
            deepest = max(t.depth(v) for v in range(n))
            start = deepest - (len(up) - 1)
            b.path(g, up[::-1], [start + i for i in range(len(up) - 1)])


def build(fabric: Fabric, collective: str, *, root: int | None = None, chunks: int | None = None) -> Schedule:
    """Double-binary-tree schedule (see the module docstring).

    Default chunks per rank: 2 for broadcast/reduce (one per tree), else 1 (allreduce then has
    n chunks, half on each tree).  ``meta["trees"]`` is ``"nccl"`` or ``"bfs"`` and
    ``meta["parents"]`` the two parent lists.

    Raises
    ------
    UnsupportedCollective
        For allgather, reducescatter and alltoall, or when the channels do not span the ranks.
    """
    spec = make_spec("tree", fabric, collective, root, chunks,
                     2 if canonical(collective) in ("broadcast", "reduce") else 1)
    if spec.name not in COLLECTIVES:
        raise UnsupportedCollective(f"tree: {spec.name} is not available (tree builds {', '.join(COLLECTIVES)}; "
                                    f"use ring, direct, rhd or bruck)")
    t1, t2, how = double_tree(fabric, spec.root)
    b = Builder("tree", spec, fabric)
    if spec.ranks > 1:
        (_allreduce if spec.name == "allreduce" else _rooted)(b, (t1, t2))
    meta = {"trees": how, "parents": [list(t1.parent), list(t2.parent)], "roots": [t1.root, t2.root]}
    return b.finish("tree", meta)

