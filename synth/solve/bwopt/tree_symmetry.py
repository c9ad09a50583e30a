"""Rank symmetries of a channel model and what they do to spanning arborescences.

A symmetry is a rank permutation ``sig`` (a list, ``sig[r]`` is the image of rank ``r``)
that maps the channel model (:class:`synth.solve.bwopt.trees.ChannelModel`) onto itself: some bijection
of resources with equal capacities (chunks per round) carries every channel's loads onto
its image's.  An arborescence's image under a symmetry then loads the fabric exactly as the
original does, moved.  :func:`symmetries` finds a few such permutations cheaply,
:func:`permute_tree` maps one tree (a parent tuple, ``-1`` at the root),
:func:`symmetric_pool` closes a pool of trees under them and :func:`transversal` picks, for
every rank ``s``, a permutation that takes rank 0 to ``s``.  The bandwidth-optimal
synthesis (:mod:`synth.solve.bwopt.optimal`) uses them to widen its tree pools and to build symmetric
bundles of trees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from synth.solve.bwopt.trees import ChannelModel


def symmetries(model: ChannelModel) -> list[list[int]]:
    """Rank permutations that map the channel model onto itself (a few cheap candidates).

    Candidates: shifting every rank by one host (clusters of identical hosts, ranks numbered
    host by host), and, inside every host at once, a cyclic shift, a reversal and XOR with
    each power of two.  A candidate is kept when some resource bijection with equal
    capacities maps every channel's loads onto its image's (resources are matched by the
    set of (channel, load) pairs they carry).
    """
    fab, n = model.fabric, model.n
    hosts = fab.hosts or [0] * n
    g = hosts.count(hosts[0])
    if n % g or any(hosts[r] != hosts[(r // g) * g] for r in range(n)) or len(set(hosts)) != n // g:
        g = n
    cands = [[(r + g) % n for r in range(n)]] if n > g else []
    local = [lambda i: (i + 1) % g, lambda i: g - 1 - i]
    local += [lambda i, k=1 << b: i ^ k for b in range(g.bit_length()) if (1 << b) < g and g % (2 << b) == 0]
    cands += [[(r // g) * g + f(r % g) for r in range(n)] for f in local]
    inc: list[list[tuple[int, int, int]]] = [[] for _ in model.resources]
    for u, v, r in zip(*np.nonzero(model.load_q)):
        inc[r].append((int(u), int(v), int(model.load_q[u, v, r])))
    keys = {(model.cap_exact[r], frozenset(inc[r])) for r in range(len(inc))}
    out = []
    for sig in cands:
        if sig != list(range(n)) and all(
                (model.cap_exact[r], frozenset((sig[u], sig[v], q) for u, v, q in inc[r])) in keys
                for r in range(len(inc))):
            out.append(sig)
    return out


def symmetric_pool(trees: dict[int, list[tuple[int, ...]]], gens: list[list[int]],
                   per_source: int = 48) -> dict[int, list[tuple[int, ...]]]:
    """``trees`` closed under the permutations ``gens`` (at most ``per_source`` trees a source)."""
    pool = {s: list(ts) for s, ts in trees.items()}
    seen = {(s, t) for s, ts in pool.items() for t in ts}
    queue = sorted(seen)
    while queue:
        s, t = queue.pop(0)
        for sig in gens:
            image = [0] * len(t)
            for v, p in enumerate(t):
                image[sig[v]] = -1 if p < 0 else sig[p]
            key = (sig[s], tuple(image))
            if key not in seen and len(pool.setdefault(sig[s], [])) < per_source:
                seen.add(key)
                pool[sig[s]].append(key[1])
                queue.append(key)
    return pool


def permute_tree(parent: tuple[int, ...], sig: list[int]) -> tuple[int, ...]:
    """The image of arborescence ``parent`` under the rank permutation ``sig``.

    >>> permute_tree((-1, 0, 1), [2, 0, 1])
    (2, 0, -1)
    """
    image = [0] * len(parent)
    for v, p in enumerate(parent):
        image[sig[v]] = -1 if p < 0 else sig[p]
    return tuple(image)


def transversal(gens: list[list[int]], n: int, limit: int = 20000) -> list[list[int]] | None:
    """For every rank ``s`` a product ``sigma_s`` of ``gens`` with ``sigma_s(0) = s`` (breadth
    first, shortest products first), or None if the group is not transitive.

    >>> transversal([[1, 2, 0]], 3)
    [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    """
    ident = tuple(range(n))
    found, seen, queue = {0: ident}, {ident}, [ident]
    while queue and len(found) < n and len(seen) < limit:
        g = queue.pop(0)
        for h in gens:
            gh = tuple(h[g[i]] for i in range(n))
            if gh not in seen:
                seen.add(gh)
                queue.append(gh)
                found.setdefault(gh[0], gh)
    return [list(found[s]) for s in range(n)] if len(found) == n else None
