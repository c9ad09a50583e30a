"""Relaying a hierarchical collective's rails through the hosts of each leaf of a leaf-spine network.

On a leaf-spine network (:func:`topo_probe.machines.clusters.cluster` with
``spine_oversubscription``), sending a chunk to every other host directly crosses the spine once
per host of another leaf.  The rails steps of :mod:`synth.solve.cluster.compose` can instead send
it to a few hosts of each other leaf, which relay it to the rest of their leaf: the leaf's
uplink then carries what the leaf cut needs.  This module plans who sends what: which hosts of
a leaf get a chunk first (:func:`relay_plan`), how many per chunk on average for each pair of
leaf sizes (:func:`relay_choices`, :func:`best_relay`), and which groups of hosts are leaves
(:func:`leaf_partners`).  Loads are counted in chunks per rail; every rail does the same.
"""

from __future__ import annotations

import math
from fractions import Fraction

from synth.ir.fabric import Fabric
from synth.solve.bwopt.bandwidth_term import capacities

def leaf_partners(groups: tuple[int, ...]) -> list[list[int]] | None:
    """Hosts of each network group (leaf), in host order, when there are several groups and
    one of them holds ``L >= 2`` hosts (the shape :func:`synth.solve.cluster.compose._rails`
    relays over); None otherwise.

    >>> leaf_partners((0, 0, 1, 1)), leaf_partners((0, 0, 0, 0)), leaf_partners((0, 1, 2))
    ([[0, 1], [2, 3]], None, None)
    """
    members: dict[int, list[int]] = {}
    for h, q in enumerate(groups):
        members.setdefault(q, []).append(h)
    if len(members) < 2 or max(len(m) for m in members.values()) < 2:
        return None
    return [members[q] for q in sorted(members)]


def relay_plan(H: int, per_rank: int, leaves: list[list[int]], direct: dict | None) -> dict:
    """Host-level plan of :func:`synth.solve.cluster.compose._rails` with leaves, the same on every rail: ``(host, chunk
    index) -> (hosts it sends to first, [(relaying host, host) ...])``.

    Chunk ``n`` of a host goes straight to ``k_n`` hosts of each other leaf, ``k_n`` spreading
    the table's mean ``kappa`` over the chunks (``floor((n + 1) kappa) - floor(n kappa)``); the
    hosts chosen, and the one relaying to each other host of the leaf, are those with the
    fewest sends so far (then the next in turn from the source's position), so the relaying is
    spread over the leaf's NICs.
    """
    where = {h: (q, i) for q, hs in enumerate(leaves) for i, h in enumerate(hs)}
    sent = [0] * H
    for hs in leaves:
        for h in hs:
            sent[h] = per_rank * (len(hs) - 1)
    plan: dict = {}
    turn = {}
    for h in range(H):
        q, i = where[h]
        size = len(leaves[q])
        firsts = {n: [h2 for h2 in leaves[q] if h2 != h] for n in range(per_rank)}
        relays: dict[int, list] = {n: [] for n in range(per_rank)}
        for q2, hs in enumerate(leaves):
            if q2 == q:
                continue
            L2 = len(hs)
            kappa = min(Fraction(L2), Fraction((direct or {}).get((size, L2), 1)))
            for n in range(per_rank):
                k = math.floor((n + 1) * kappa) - math.floor(n * kappa)
                off = turn.get((q2, q, i), i)
                order = {x: (t - off) % L2 for t, x in enumerate(hs)}
                ds = sorted(hs, key=lambda x: (sent[x], order[x]))[:k]
                turn[(q2, q, i)] = off + k
                sent[h] += k
                firsts[n].extend(ds)
                for x in hs:
                    if x in ds:
                        continue
                    u = min(ds, key=lambda y: (sent[y], order[y]))
                    sent[u] += 1
                    relays[n].append((u, x))
        for n in range(per_rank):
            plan[(h, n)] = (firsts[n], relays[n])
    return plan


def relay_choices(g: int, H: int, leaves: list[list[int]], pieces: int = 1) -> list[dict | None]:
    """The ``direct`` tables :func:`best_relay` tries with ``pieces`` chunks per block: None (one
    direct host per other leaf) when the leaves are of one size, else, for each ordered pair of
    different leaf sizes ``(a, b)``, every mean number of direct hosts ``k`` from 1 to ``b`` that
    ``pieces`` chunks can make exactly (``k * pieces`` whole), up to 4, and the powers of two
    and ``b`` above that (between leaves of one size: one host).

    >>> relay_choices(8, 4, [[0, 1], [2, 3]])
    [None]
    >>> [str(t[(3, 4)]) for t in relay_choices(8, 7, [[0, 1, 2, 3], [4, 5, 6]], 3) if t[(4, 3)] == 1]
    ['1', '4/3', '5/3', '2', '7/3', '8/3', '3', '10/3', '11/3', '4']
    """
    sizes = sorted({len(hs) for hs in leaves})
    if len(sizes) == 1:
        return [None]
    tables: list[dict] = [{}]
    for a in sizes:
        for b in sizes:
            if a == b:
                continue
            ks = {Fraction(x, pieces) for x in range(pieces, min(b, 4) * pieces + 1)}
            ks |= {Fraction(1 << i) for i in range(b.bit_length()) if 1 << i <= b} | {Fraction(b)}
            tables = [{**t, (a, b): k} for t in tables for k in sorted(ks)]
    return tables


#: pieces per block :func:`best_relay` tries for leaves of different sizes
RELAY_PIECES = (1, 2, 3, 4, 6, 8, 12)
#: work (pieces x hosts^2 per table tried) :func:`best_relay` may spend before it stops trying more pieces
RELAY_BUDGET = 500_000


def best_relay(fabric: Fabric, leaves: list[list[int]], efficiency=None) -> tuple[int, dict | None]:
    """``(pieces per block C, direct table)`` whose rails steps load the network least per block
    (:func:`synth.solve.cluster.compose._rails`, :func:`relay_choices`; fewest pieces, then the
    first table, on ties), counted from the rails' host-level plan (:func:`relay_plan`, the same on
    every rail); leaves of one size: ``(1, None)``.  Stops trying more pieces once
    :data:`RELAY_BUDGET` is spent.  Computed once per fabric and efficiency (an allreduce and its
    phases share it)."""
    cache = fabric.memo("best_relay")
    key = id(efficiency)
    if key not in cache or cache[key][0] is not efficiency:
        cache[key] = (efficiency, _best_relay(fabric, leaves, efficiency))
    return cache[key][1]


def _best_relay(fabric: Fabric, leaves: list[list[int]], efficiency) -> tuple[int, dict | None]:
    g, H = fabric.shape.gpus_per_host, fabric.shape.hosts
    if relay_choices(g, H, leaves) == [None]:
        return 1, None
    caps = {r: float(c) for r, c in capacities(fabric, efficiency).items()}
    best, counted = None, 0
    for C in RELAY_PIECES:
        tables = relay_choices(g, H, leaves, C)
        if counted + C * H * H * len(tables) > RELAY_BUDGET and best is not None:
            break
        for table in tables:
            pairs: dict[tuple[int, int], int] = {}
            for (h, _), (firsts, relays) in relay_plan(H, C, leaves, table).items():
                for u, v in [(h, d) for d in firsts] + relays:
                    pairs[(u, v)] = pairs.get((u, v), 0) + 1
            load = fabric.load([(u * g + b, v * g + b, m) for (u, v), m in pairs.items() for b in range(g)])
            term = max(v / caps[r] for r, v in load.items()) / C
            counted += C * H * H
            if best is None or term < best[0] * (1 - 1e-9):
                best = (term, C, table)
    return best[1], best[2]


__all__ = ["RELAY_BUDGET", "RELAY_PIECES", "best_relay", "leaf_partners", "relay_choices", "relay_plan"]
