"""Find NCCL-style rings on a fabric: directed Hamiltonian cycles of the channel graph, packed
so that together they fit the fabric's resource capacities.

A ring is a rank order ``(r0, r1, ..., r{n-1})``: ``r_k`` sends to ``r_{k+1}`` and the last to
``r0``.  One ring moving one chunk over every hop loads each resource with the sum of the
hops' route fractions (:meth:`synth.ir.fabric.Fabric.load`).  The search:

1. enumerates Hamiltonian cycles from rank 0 (neighbour ``i+1`` first, so the natural order
   comes first), at most ``MAX_CYCLES`` of them within ``BUDGET`` search nodes;
2. packs as many cycles (repeats allowed) as fit ``capacity(resource, 1)`` together: exact
   branch and bound when the enumeration was complete, else the best of a greedy pass, rings
   that visit the hosts of a cluster in turn with each host's ranks rotated (so rings leave a
   host through different GPUs and NICs), the rotations ``i -> i+k`` and seeded randomized
   searches in the residual capacity (deterministic: fixed seeds and node budgets);
3. if not even one ring fits one round (a link slower than the unit), packs within the rounds
   the best single ring needs.

When the channel graph has no Hamiltonian cycle (e.g. GPUs 0-4 of a DGX-1, where GPU 4's
only NVLink peer is GPU 0), one ring is formed over all ranks in the order with the shortest
relays, and each ring hop whose ranks share no channel follows a shortest channel path
through intermediate GPUs (``relayed=True``).  All search loops are bounded.

Every command builds its own fabric, often of one topology again (``synthesize``, ``simulate`` and
``sweep`` of one machine; each collective's baselines), so searched plans are also kept across
fabrics, in a bounded cache keyed by everything the search reads
(:func:`synth.ir.shared_results.structure_key`: rank count, hosts, round unit, resource
bandwidths, every channel's route, ``max_rings``); each fabric gets its own :class:`RingPlan` of
the same immutable tuples.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from dataclasses import dataclass

import networkx as nx

from synth.ir.fabric import Fabric
from synth.ir.shared_results import SharedResults, structure_key
from synth.ir.verifier import CAPACITY_EPS, required_rounds
from topo_probe.errors import UnsupportedCollective

MAX_CYCLES = 2000
BUDGET = 200_000
PACK_BUDGET = 60_000
SEARCH_BUDGET = 30_000
RESTARTS = 12
#: the cycle search (recursive, exponential) runs up to this many ranks
SEARCH_MAX_RANKS = 64
#: searched plans kept across fabrics (least recently used dropped first)
SHARED_PLANS = 64
_shared: SharedResults = SharedResults(SHARED_PLANS)


@dataclass(frozen=True)
class RingPlan:
    """Rings found on a fabric.

    ``rings[i]`` is a rank order; ``hops[i][k]`` is the channel path (ranks, both ends
    included) from ``rings[i][k]`` to the next rank of ring ``i``; ``relayed`` says whether any
    hop relays through other GPUs; ``rounds`` is what one step of all rings (one chunk each)
    needs; ``complete`` whether the cycle enumeration finished (so the packing is optimal).
    """

    rings: tuple[tuple[int, ...], ...]
    hops: tuple[tuple[tuple[int, ...], ...], ...]
    relayed: bool
    rounds: int
    complete: bool


def find_rings(fabric: Fabric, max_rings: int = 64) -> RingPlan:
    """Rings for ``fabric`` (kept on it; a searched plan is shared by fabrics of one structure); see
    the module docstring.  A cluster of identical hosts with more than :data:`SEARCH_MAX_RANKS`
    ranks gets rail-aligned rings built from its shape
    (:func:`synth.baselines.cluster_rings.cluster_rings`) instead.

    Raises
    ------
    UnsupportedCollective
        A fabric of more than :data:`SEARCH_MAX_RANKS` ranks without such rings.
    """
    plans = fabric.memo("rings")                 # kept on the fabric, and searched plans across fabrics
    if max_rings not in plans:
        plans[max_rings] = (_cluster_plan(fabric, max_rings) if fabric.num_ranks > SEARCH_MAX_RANKS
                            else _shared_search(fabric, max_rings))
    return plans[max_rings]


def _shared_search(fabric: Fabric, max_rings: int) -> RingPlan:
    """:func:`_search`, its plan kept for every fabric of the same structure (the last
    :data:`SHARED_PLANS` structures); a fresh :class:`RingPlan` of the same tuples per call."""
    plan = _shared.get(structure_key(fabric, "rings", max_rings), lambda: _search(fabric, max_rings))
    return dataclasses.replace(plan)


def _cluster_plan(fabric: Fabric, max_rings: int) -> RingPlan:
    from synth.baselines.cluster_rings import cluster_rings
    rings = cluster_rings(fabric) or _natural_ring(fabric)
    if not rings:
        raise UnsupportedCollective(f"ring: no ring search beyond {SEARCH_MAX_RANKS} ranks, and fabric "
                                    f"{fabric.topology_name!r} ({fabric.num_ranks} ranks) has no rail-aligned "
                                    f"rings of identical hosts")
    rings = rings[:max(1, max_rings)]
    n = fabric.num_ranks
    hops = tuple(tuple((r[k], r[(k + 1) % n]) for k in range(n)) for r in rings)
    rounds = required_rounds(fabric, [h for hs in hops for h in hs])
    return RingPlan(tuple(rings), hops, False, rounds, False)


def _natural_ring(fabric: Fabric) -> list[tuple[int, ...]]:
    """Rank order 0, 1, ..., n-1 where every consecutive pair is a channel (one NVLink domain of
    72 GPUs behind switches, for instance), else none."""
    n = fabric.num_ranks
    ok = all(fabric.has_channel(k, (k + 1) % n) for k in range(n))
    return [tuple(range(n))] if ok else []


def _adjacency(fabric: Fabric) -> list[list[int]]:
    n = fabric.num_ranks
    return [sorted(fabric.neighbours_out(i), key=lambda j, i=i: (j - i) % n) for i in range(n)]


def _enumerate(n: int, adj: list[list[int]]) -> tuple[list[tuple[int, ...]], bool]:
    """Directed Hamiltonian cycles from rank 0: (cycles, enumeration finished)."""
    cycles: list[tuple[int, ...]] = []
    path, used = [0], [False] * n
    used[0] = True
    nodes = 0
    closes = set(v for v in range(n) if 0 in adj[v])

    def dfs() -> bool:
        nonlocal nodes
        u = path[-1]
        if len(path) == n:
            if u in closes:
                cycles.append(tuple(path))
            return len(cycles) < MAX_CYCLES
        for v in adj[u]:
            if not used[v]:
                nodes += 1
                if nodes > BUDGET:
                    return False
                used[v] = True
                path.append(v)
                ok = dfs()
                path.pop()
                used[v] = False
                if not ok:
                    return False
        return True

    if n == 1:
        return [(0,)], True
    complete = dfs()
    return cycles, complete


class _Packer:
    """Packs ring loads into resource capacities (repeats allowed)."""

    def __init__(self, fabric: Fabric, rounds: int) -> None:
        self.f = fabric
        #: resources by their index in ``fabric.resources`` (loads and residuals are keyed by
        #: index: a list lookup, not a hash of the resource's name pair, in the searches' inner loops)
        index = {r: k for k, r in enumerate(fabric.resources)}
        self.cap = [fabric.capacity(r, rounds) for r in fabric.resources]
        self.nodes = 0  # search nodes spent by residual searches (bounded by SEARCH_BUDGET)
        self.route = {c: {index[r]: float(fr) for r, fr in route} for c, route in fabric.channels.items()}
        self._loads: dict[tuple[int, ...], dict[int, float]] = {}

    def load(self, ring: tuple[int, ...]) -> dict[int, float]:
        """Chunks per resource index of one chunk over every hop of ``ring`` (kept: the greedy
        passes over the rotations and the enumerated cycles ask again for the same cycles)."""
        out = self._loads.get(ring)
        if out is None:
            out = self._loads[ring] = {}
            n = len(ring)
            for k in range(n if n > 1 else 0):
                for r, x in self.route[(ring[k], ring[(k + 1) % n])].items():
                    out[r] = out.get(r, 0.0) + x
        return out

    @staticmethod
    def fits(load: dict, residual: list) -> bool:
        for r, x in load.items():         # a loop, not all(...): no generator per call
            if not residual[r] - x >= -CAPACITY_EPS:
                return False
        return True

    @staticmethod
    def take(load: dict, residual: list, sign: int = -1) -> None:
        for r, x in load.items():
            residual[r] += sign * x

    def greedy(self, cands: list, max_rings: int) -> list:
        residual, out = list(self.cap), []
        for c in cands:
            load = self.load(c)
            while len(out) < max_rings and self.fits(load, residual):
                self.take(load, residual)
                out.append(c)
        return out

    def upper(self, residual: list) -> float:
        """More rings cannot exceed, for any rank, what its out-channels can still carry, nor
        what a resource shared by all of a rank's out- (or in-) channels can carry."""
        best = math.inf
        for i in range(self.f.num_ranks):
            outs = [self.route[(i, j)] for j in self.f.neighbours_out(i)]
            ins = [self.route[(j, i)] for j in range(self.f.num_ranks) if (j, i) in self.route]
            total = sum(min(math.floor(residual[r] / fr + CAPACITY_EPS) for r, fr in o.items())
                        for o in outs)
            best = min(best, total)
            for group in (outs, ins):
                if not group:
                    return 0
                for r in set(group[0]).intersection(*group[1:]):
                    least = min(g[r] for g in group)
                    best = min(best, math.floor(residual[r] / least + CAPACITY_EPS))
        return best

    def branch_and_bound(self, cands: list, max_rings: int, start: list) -> list:
        loads = [self.load(c) for c in cands]
        best = list(start)
        chosen: list[int] = []
        nodes = 0
        residual = list(self.cap)

        def dfs(first: int) -> None:
            nonlocal best, nodes
            if len(chosen) > len(best):
                best = [cands[k] for k in chosen]
            if nodes > PACK_BUDGET or len(chosen) >= max_rings:
                return
            if len(chosen) + self.upper(residual) <= len(best):
                return
            for k in range(first, len(cands)):
                if self.fits(loads[k], residual):
                    nodes += 1
                    self.take(loads[k], residual)
                    chosen.append(k)
                    dfs(k)
                    chosen.pop()
                    self.take(loads[k], residual, +1)
                    if nodes > PACK_BUDGET:
                        return

        dfs(0)
        return best

    def residual_search(self, adj: list[list[int]], max_rings: int, rng: random.Random | None) -> list:
        """Repeatedly find one more ring within the residual capacity (DFS, bounded)."""
        n = self.f.num_ranks
        residual, out = list(self.cap), []
        while len(out) < max_rings:
            ring = self._one_ring(adj, residual, rng)
            if ring is None:
                break
            self.take(self.load(ring), residual)
            out.append(ring)
        return out if n > 1 else []

    def _one_ring(self, adj, residual, rng) -> tuple[int, ...] | None:
        n = self.f.num_ranks
        path, used, nodes = [0], [False] * n, 0
        used[0] = True

        def hop_load(u, v):
            return self.route[(u, v)]

        def dfs() -> bool:
            nonlocal nodes
            u = path[-1]
            if len(path) == n:
                return 0 in adj[u] and self.fits(hop_load(u, 0), residual)
            order = [v for v in adj[u] if not used[v]]
            if rng is not None:
                rng.shuffle(order)
            for v in order:
                load = hop_load(u, v)
                if not self.fits(load, residual):
                    continue
                nodes += 1
                self.nodes += 1
                if nodes > SEARCH_BUDGET // 10 or self.nodes > SEARCH_BUDGET:
                    return False
                self.take(load, residual)
                used[v] = True
                path.append(v)
                if dfs():
                    self.take(load, residual, +1)
                    return True
                path.pop()
                used[v] = False
                self.take(load, residual, +1)
            return False

        return tuple(path) if dfs() else None


def _rotations(fabric: Fabric) -> list[tuple[int, ...]]:
    n = fabric.num_ranks
    out = []
    for k in range(1, n):
        if math.gcd(k, n) == 1 and all(fabric.has_channel(i, (i + k) % n) for i in range(n)):
            out.append(tuple((i * k) % n for i in range(n)))
    return out


def _host_rotations(fabric: Fabric) -> list[tuple[int, ...]]:
    """Multi-host fabrics: rings that visit the hosts in turn, each host's ranks rotated by k,
    so different rings cross between hosts at different GPUs (and NICs)."""
    hosts = sorted(set(fabric.hosts))
    groups = [[r for r in range(fabric.num_ranks) if fabric.hosts[r] == h] for h in hosts]
    if len(groups) < 2 or len({len(g) for g in groups}) != 1:
        return []
    out = []
    for k in range(len(groups[0])):
        order = [r for g in groups for r in g[k:] + g[:k]]
        shift = order.index(0)
        order = order[shift:] + order[:shift]
        n = len(order)
        if all(fabric.has_channel(order[i], order[(i + 1) % n]) for i in range(n)):
            out.append(tuple(order))
    return out


def _pack(fabric: Fabric, cands: list, complete: bool, adj, max_rings: int, rounds: int) -> list:
    p = _Packer(fabric, rounds)
    best = p.greedy(cands, max_rings)
    if complete:
        return p.branch_and_bound(cands, max_rings, best)
    bound = p.upper(list(p.cap))
    tries = [lambda: p.greedy(_host_rotations(fabric), max_rings),
             lambda: p.greedy(_rotations(fabric) + cands, max_rings),
             lambda: p.residual_search(adj, max_rings, None)]
    tries += [lambda s=s: p.residual_search(adj, max_rings, random.Random(s)) for s in range(RESTARTS)]
    for attempt in tries:
        if len(best) >= min(bound, max_rings) or p.nodes > SEARCH_BUDGET:
            break
        got = attempt()
        if len(got) > len(best):
            best = got
    return best


def _search(fabric: Fabric, max_rings: int) -> RingPlan:
    n = fabric.num_ranks
    adj = _adjacency(fabric)
    cands, complete = _enumerate(n, adj)
    if n <= 1:
        return RingPlan((tuple(range(n)),), ((),), False, 1, True)
    if not cands and not complete:
        ring = _Packer(fabric, 1)._one_ring(adj, [math.inf] * len(fabric.resources), None)
        cands = [ring] if ring else []
    if not cands:
        return _relay_plan(fabric)
    rings = _pack(fabric, cands, complete, adj, max_rings, 1)
    if not rings:  # not even one ring fits one round: pack within what the best ring needs
        need = [required_rounds(fabric, [(c[k], c[(k + 1) % n]) for k in range(n)]) for c in cands]
        rounds = min(need)
        rings = _pack(fabric, [c for c, r in zip(cands, need) if r == rounds], complete, adj, max_rings, rounds)
        rings = rings or [cands[need.index(rounds)]]
    hops = tuple(tuple((r[k], r[(k + 1) % n]) for k in range(n)) for r in rings)
    rounds = required_rounds(fabric, [(r[k], r[(k + 1) % n]) for r in rings for k in range(n)])
    return RingPlan(tuple(rings), hops, False, rounds, complete)


def _relay_plan(fabric: Fabric) -> RingPlan:
    """One ring over all ranks whose hops follow shortest channel paths (see module docstring)."""
    n = fabric.num_ranks
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(sorted(fabric.channels))
    paths = {(i, j): tuple(nx.shortest_path(g, i, j)) for i in range(n) for j in range(n) if i != j}

    def cost(order):
        lens = [len(paths[(order[k], order[(k + 1) % n])]) - 1 for k in range(n)]
        return (max(lens), sum(lens))

    if n <= 9:
        best = min(((0,) + p for p in itertools.permutations(range(1, n))), key=cost)
    else:  # nearest neighbour, bounded
        best, left = [0], set(range(1, n))
        while left:
            u = best[-1]
            v = min(left, key=lambda v: (len(paths[(u, v)]), v))
            best.append(v)
            left.remove(v)
        best = tuple(best)
    hops = tuple(paths[(best[k], best[(k + 1) % n])] for k in range(n))
    rounds = required_rounds(fabric, [(p[h], p[h + 1]) for p in hops for h in range(len(p) - 1)])
    return RingPlan((best,), (hops,), True, rounds, True)
