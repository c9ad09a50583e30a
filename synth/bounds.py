"""Lower bounds on the time of any schedule of a collective on a fabric.

Latency
-------
Within a step a transfer moves data one channel hop, so a chunk needed by rank ``q`` from rank
``p`` (``p`` in the chunk's ``pre``, ``q`` in its ``post``) takes at least ``hops(p, q)`` steps in
the channel graph and at least the smallest summed channel latency of a ``p -> q`` path.
``latency_steps`` and ``latency_us`` are the maxima over needed pairs.

Bandwidth (cut bound)
---------------------
On the *resource graph* (GPUs, NVSwitches, PCIe switches, CPUs, NICs as nodes; the fabric's
resources as edges with capacity ``bandwidth_gbps / unit_gbps`` blocks per round), any set of
edges separating GPU set A from GPU set B carries everything that must flow from A to B.  For a
GPU subset ``S`` let ``in(S)`` be the min cut from the GPUs outside ``S`` to those inside (switches
may fall on either side: a min s-t cut) and ``out(S) = in(V \\ S)``.  Rounds per block, maximised
over proper subsets ``S`` (``s = |S|``):

============== ====================================================================
allgather      ``(n - s) / in(S)``: each outside block must enter S once (copies inside are free)
reducescatter  ``(n - s) / out(S)``: one partial per outside owner must leave S
allreduce      ``1 / min(in(S), out(S))``: both sides of every cut hold contributions and need the
               whole result, so a full block must cross each cut in each direction.  The
               familiar ``(RS + AG) / n`` (Patarasuk & Yuan) bounds only schedules that finish
               the reduce-scatter before the all-gather starts; pipelined tree schedules beat
               it on uneven fabrics (a verified 1/2 against its 4/5 on DGX-1 GPUs 0-4), so it is
               reported separately as ``Bounds.phased_rounds_per_block``.
alltoall       ``s (n - s) / in(S)``: the blocks are all distinct
gather         ``(n - s) / in(S)`` with the root in S;  scatter ``(n - s) / out(S)``, root in S
broadcast      ``1 / min_p maxflow(root -> p)``; reduce ``1 / min_p maxflow(p -> root)`` (Edmonds)
============== ====================================================================

Up to :data:`ENUMERATE_MAX_RANKS` GPUs every subset is enumerated (after series-reducing
pass-through nodes and grouping interchangeable GPUs, so 16 GPUs take about a second).  Beyond
that the maximum ratio is found exactly by Dinkelbach's method: each iteration is ``n`` max-flow
problems (``rho * cut(S) + |S|`` is a cut function).  Alltoall beyond 16 GPUs uses the best of
the subsets those searches and the singletons/hosts give (``exact=False``).  All cuts are
routing-agnostic, so they bound schedules over any routing.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from fractions import Fraction

import networkx as nx
import numpy as np
from ortools.graph.python import max_flow

from synth.collectives import CollectiveSpec, canonical
from synth.fabric import Fabric
from topo_probe.errors import TopologyError

#: exhaustive subset enumeration up to this many GPUs; Dinkelbach max-flow beyond
ENUMERATE_MAX_RANKS = 16


@dataclass(frozen=True)
class Bounds:
    """Lower bounds for one collective instance on one fabric (see module docstring).

    ``bandwidth_rounds_per_block`` is in fabric rounds (1 chunk over ``unit_gbps``) per block of
    ``count`` elements (SCCL's link-rounds per chunk at 1 chunk per block).  ``pairs`` lists
    ``(hops, latency_us)`` of the needed rank pairs; ``witness`` is a GPU subset attaining the
    bandwidth bound.
    """

    collective: str
    ranks: int
    root: int | None
    latency_steps: int
    latency_us: float
    bandwidth_rounds_per_block: Fraction
    unit_gbps: float
    exact: bool = True
    method: str = "enumeration"
    witness: tuple[int, ...] = ()
    pairs: tuple[tuple[int, float], ...] = ()
    #: allreduce only: the (RS + AG) / n bound of schedules whose two phases do not overlap
    phased_rounds_per_block: Fraction | None = None
    fabric: Fabric | None = field(default=None, compare=False, repr=False)
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def block_bytes(self, nbytes: float) -> float:
        """Bytes of one block for an nccl-tests ``size`` of ``nbytes``."""
        spec = CollectiveSpec(self.collective, self.ranks, 1, self.root)
        return float(nbytes) / max(spec.input_blocks(), spec.output_blocks())

    def rounds_per_block(self, params=None) -> Fraction:
        """Bandwidth bound in rounds per block, with ``params`` efficiency factors if given."""
        if params is None or self.fabric is None:
            return self.bandwidth_rounds_per_block
        key = tuple(params.efficiency(k) for k in ("nvlink", "pcie", "cpu", "network", "infinity_fabric"))
        if key not in self._cache:
            self._cache[key] = _bandwidth(self.fabric, self._spec(), params)[0]
        return self._cache[key]

    def time_us(self, nbytes: float, params=None) -> float:
        """Lower bound (µs) for an nccl-tests size of ``nbytes`` bytes.

        Without ``params``: hardware latency plus the cut bound at nominal bandwidth.  With a
        :class:`synth.cost.CostParams`: launch + per-step overheads along the longest needed
        path + latency, plus the cut bound at effective bandwidth ``T``, plus the model's
        least slicing cost ``2 sqrt(slice_overhead_us * T)`` (the model charges
        ``2 sqrt(slice_overhead_us * t_w)`` per wavefront, the ``t_w`` sum to at least ``T``,
        and a sum of square roots is at least the square root of the sum): a lower bound of
        :meth:`synth.cost.CostModel.schedule_time_us` for every correct schedule.
        """
        bw = float(self.rounds_per_block(params)) * self.block_bytes(nbytes) / (self.unit_gbps * 1e3)
        if params is None:
            return self.latency_us + bw
        lat = max((h * params.step_overhead_us + us for h, us in self.pairs), default=0.0)
        return params.launch_us + lat + bw + 2.0 * math.sqrt(params.slice_overhead_us * bw)

    def _spec(self) -> CollectiveSpec:
        return CollectiveSpec(self.collective, self.ranks, 1, self.root)


# ---------------------------------------------------------------------------- public entry
def lower_bounds(fabric: Fabric, collective: str, root: int | None = None, *, method: str = "auto") -> Bounds:
    """Latency and bandwidth lower bounds of ``collective`` on ``fabric``.

    Parameters
    ----------
    fabric : Fabric
        From :func:`synth.fabric.build_fabric`.
    collective : str
        Any accepted spelling; rooted collectives need ``root`` (default 0).
    method : {"auto", "enumeration", "maxflow"}
        ``auto`` enumerates up to :data:`ENUMERATE_MAX_RANKS` GPUs and uses Dinkelbach max-flow
        beyond.

    Examples
    --------
    >>> from topo_probe.generators import ring
    >>> from synth.fabric import build_fabric
    >>> b = lower_bounds(build_fabric(ring(8)), "allgather")
    >>> b.latency_steps, b.bandwidth_rounds_per_block
    (4, Fraction(7, 2))
    """
    name = canonical(collective)
    if method not in ("auto", "enumeration", "maxflow"):
        raise ValueError(f"method must be auto, enumeration or maxflow, got {method!r}")
    spec = CollectiveSpec(name, fabric.num_ranks, 1, (0 if root is None else root) if name in
                          ("broadcast", "reduce", "gather", "scatter") else root)
    steps, lat_us, pairs = _latency(fabric, spec)
    rounds, exact, used, witness = _bandwidth(fabric, spec, None, method)
    phased = phased_allreduce_bound(fabric) if name == "allreduce" else None
    return Bounds(name, spec.ranks, spec.root, steps, lat_us, rounds, fabric.unit_gbps, exact, used,
                  witness, pairs, phased, fabric)


# ---------------------------------------------------------------------------- latency
def _latency(fabric: Fabric, spec: CollectiveSpec) -> tuple[int, float, tuple[tuple[int, float], ...]]:
    g = nx.DiGraph()
    g.add_nodes_from(range(spec.ranks))
    g.add_weighted_edges_from((i, j, fabric.channel_latency_us(i, j)) for (i, j) in fabric.channels)
    needed = {(p, q) for c in spec.chunks() for p in c.pre for q in c.post if p != q}
    hops = {p: nx.single_source_shortest_path_length(g, p) for p, _ in needed}
    lat = {p: nx.single_source_dijkstra_path_length(g, p) for p, _ in needed}
    pairs = sorted({(hops[p][q], round(lat[p][q], 9)) for p, q in needed})
    frontier = tuple(pr for pr in pairs if not any(o != pr and o[0] >= pr[0] and o[1] >= pr[1] for o in pairs))
    return max((h for h, _ in pairs), default=0), max((u for _, u in pairs), default=0.0), frontier


# ---------------------------------------------------------------------------- resource graph
class _Graph:
    """Resource graph with integer capacities (``cap / denom`` blocks per round)."""

    def __init__(self, fabric: Fabric, params=None) -> None:
        caps: dict[tuple[str, str], Fraction] = {}
        for (u, v), info in fabric.resources.items():
            eff = params.efficiency(info.kind) if params is not None else 1.0
            caps[(u, v)] = Fraction(info.bandwidth_gbps * eff / fabric.unit_gbps).limit_denominator(10**6)
        self.gpu = _rank_nodes(fabric)
        _series_reduce(caps, set(self.gpu))
        self.denom = math.lcm(*(c.denominator for c in caps.values())) if caps else 1
        names = list(self.gpu) + sorted({x for e in caps for x in e} - set(self.gpu))
        self.index = {x: k for k, x in enumerate(names)}
        self.names = names
        self.cap = {(self.index[u], self.index[v]): int(c * self.denom) for (u, v), c in caps.items() if c > 0}
        self.n = len(self.gpu)

    def switches_are_stars(self) -> bool:
        return all(u < self.n or v < self.n for u, v in self.cap)

    def flow_net(self, scale: int = 1) -> tuple[max_flow.SimpleMaxFlow, np.ndarray, np.ndarray, int, int]:
        """Max-flow network: graph arcs (x scale), then arcs src->gpu_i and gpu_i->sink."""
        m = max_flow.SimpleMaxFlow()
        s, t = len(self.names), len(self.names) + 1
        if self.cap:
            us, vs = zip(*self.cap)
            m.add_arcs_with_capacity(np.array(us), np.array(vs), np.array(list(self.cap.values())) * scale)
        gi = np.arange(self.n)
        a_in = m.add_arcs_with_capacity(np.full(self.n, s), gi, np.zeros(self.n, dtype=np.int64))
        a_out = m.add_arcs_with_capacity(gi, np.full(self.n, t), np.zeros(self.n, dtype=np.int64))
        return m, np.asarray(a_in), np.asarray(a_out), s, t

    def inf(self, scale: int = 1) -> int:
        return (sum(self.cap.values()) + 1) * scale + 10 * self.n * self.denom


def _rank_nodes(fabric: Fabric) -> list[str]:
    """Graph node of each rank: the node without incoming edge on its channels' routes."""
    out = {}
    for (i, _), route in fabric.channels.items():
        if i not in out:
            heads = {v for (_, v), _ in route}
            out[i] = next(u for (u, _), _ in route if u not in heads)
    if len(out) != fabric.num_ranks:
        raise TopologyError(f"fabric {fabric.topology_name!r}: some ranks have no channel")
    return [out[i] for i in range(fabric.num_ranks)]


def _series_reduce(caps: dict[tuple[str, str], Fraction], keep: set[str]) -> None:
    """Remove dead-end non-GPU nodes and bypass pass-through ones (exact for s-t cuts)."""
    changed = True
    while changed:
        changed = False
        nb: dict[str, set[str]] = {}
        for u, v in caps:
            nb.setdefault(u, set()).add(v)
            nb.setdefault(v, set()).add(u)
        for w, around in nb.items():
            if w in keep or len(around) > 2:
                continue
            if len(around) == 2:
                a, b = sorted(around)
                for x, y in ((a, b), (b, a)):
                    c = min(caps.get((x, w), Fraction(0)), caps.get((w, y), Fraction(0)))
                    if c:
                        caps[(x, y)] = caps.get((x, y), Fraction(0)) + c
            for e in [e for e in caps if w in e]:
                del caps[e]
            changed = True
            break


# ---------------------------------------------------------------------------- in-cut tables
def _twin_classes(g: _Graph) -> list[list[int]]:
    """Group GPUs whose swap is an automorphism of the capacity graph."""
    def swappable(i: int, j: int) -> bool:
        if g.cap.get((i, j), 0) != g.cap.get((j, i), 0):
            return False
        others = {x for e in g.cap for x in e if i in e or j in e} - {i, j}
        return all(g.cap.get((i, x), 0) == g.cap.get((j, x), 0) and g.cap.get((x, i), 0) == g.cap.get((x, j), 0)
                   for x in others)
    classes: list[list[int]] = []
    for i in range(g.n):
        for c in classes:
            if all(swappable(i, j) for j in c):
                c.append(i)
                break
        else:
            classes.append([i])
    return classes


def _cut_table(g: _Graph) -> tuple[list[list[int]], dict[tuple[int, ...], int]]:
    """``in(S) * denom`` for every subset up to symmetry: ``{class counts: cut}``."""
    n = g.n
    if g.switches_are_stars():
        masks = np.arange(1 << n, dtype=np.int64)
        inside = [(masks >> i) & 1 for i in range(n)]
        cut = np.zeros(1 << n, dtype=np.int64)
        sw_in: dict[int, np.ndarray] = {}
        sw_out: dict[int, np.ndarray] = {}
        for (u, v), c in g.cap.items():
            if u < n and v < n:
                cut += c * (1 - inside[u]) * inside[v]
            elif v >= n:   # GPU u -> switch v: cut when u outside and v placed inside
                sw_in[v] = sw_in.get(v, 0) + c * (1 - inside[u])
            else:          # switch u -> GPU v: cut when u placed outside and v inside
                sw_out[u] = sw_out.get(u, 0) + c * inside[v]
        for w in set(sw_in) | set(sw_out):
            cut += np.minimum(sw_in.get(w, 0), sw_out.get(w, 0))
        bits = np.stack(inside, axis=1).tolist()
        return [[i] for i in range(n)], dict(zip(map(tuple, bits), cut.tolist()))
    classes = _twin_classes(g)
    m, a_in, a_out, s, t = g.flow_net()
    inf = g.inf()
    table = {}
    for vec in itertools.product(*(range(len(c) + 1) for c in classes)):
        members = {x for c, k in zip(classes, vec) for x in c[:k]}
        ins = np.array([0 if i in members else inf for i in range(n)], dtype=np.int64)
        m.set_arcs_capacity(a_in, ins)
        m.set_arcs_capacity(a_out, inf - ins)
        m.solve(s, t)
        table[vec] = int(m.optimal_flow())
    return classes, table


def _best_ratio(classes, table, n, num, allow, denom) -> tuple[Fraction, tuple[int, ...]]:
    """max over vectors with ``allow(vec)`` of ``num(s) / in`` (``in = table / denom``)."""
    best, arg = None, None
    for vec, cut in table.items():
        s = sum(vec)
        if 0 < s < n and allow(vec):
            if cut == 0:
                raise TopologyError(f"GPU subset {_members(classes, vec)} cannot be reached from the others")
            if best is None or num(s) * best[1] > best[0] * cut:
                best, arg = (num(s), cut), vec
    return Fraction(best[0] * denom, best[1]), arg


def _members(classes, vec, first_root: int | None = None, root_inside: bool = True) -> tuple[int, ...]:
    out = []
    for c, k in zip(classes, vec):
        order = list(c)
        if first_root in order:
            order.remove(first_root)
            order = [first_root] + order if root_inside else order + [first_root]
        out += order[:k]
    return tuple(sorted(out))


def _enumerate(g: _Graph, spec: CollectiveSpec) -> tuple[Fraction, tuple[int, ...]]:
    n, name, root = g.n, spec.name, spec.root
    classes, table = _cut_table(g)
    full = tuple(len(c) for c in classes)
    comp = {vec: table[tuple(f - k for f, k in zip(full, vec))] for vec in table}   # out(S) = in(V \ S)
    rc = next((k for k, c in enumerate(classes) if root in c), None)
    yes = lambda v: True  # noqa: E731
    if name in ("allgather", "reducescatter", "allreduce"):
        ag, v1 = _best_ratio(classes, table, n, lambda s: n - s, yes, g.denom)
        rs, v2 = _best_ratio(classes, comp, n, lambda s: n - s, yes, g.denom)
        if name == "allreduce":
            return _global_cut_bound(g), _members(classes, v1)
        return (ag, _members(classes, v1)) if name == "allgather" else (rs, _members(classes, v2))
    if name == "alltoall":
        r, v = _best_ratio(classes, table, n, lambda s: s * (n - s), yes, g.denom)
        return r, _members(classes, v)
    tab = table if name == "gather" else comp
    r, v = _best_ratio(classes, tab, n, lambda s: n - s, lambda vec: vec[rc] >= 1, g.denom)
    return r, _members(classes, v, root, True)


# ---------------------------------------------------------------------------- max-flow methods
def _cut(g: _Graph, sources, sinks) -> Fraction:
    """Min cut (blocks per round) from GPUs ``sources`` to GPUs ``sinks``, other nodes free."""
    m, a_in, a_out, s, t = g.flow_net()
    inf = g.inf()
    m.set_arcs_capacity(a_in, np.array([inf if i in sources else 0 for i in range(g.n)], dtype=np.int64))
    m.set_arcs_capacity(a_out, np.array([inf if i in sinks else 0 for i in range(g.n)], dtype=np.int64))
    m.solve(s, t)
    return Fraction(int(m.optimal_flow()), g.denom)


def _in_cut(g: _Graph, inside: set[int]) -> Fraction:
    return _cut(g, set(range(g.n)) - set(inside), inside)


def _dinkelbach(g: _Graph, outside_costs: bool, forced: list[int]) -> tuple[Fraction, set[int]]:
    """max over S of ``(n - |S|) / in(S)`` (``outside_costs=False``, some ``a`` in ``forced`` inside
    S) or ``|S| / in(S)`` (``outside_costs=True``, some ``b`` in ``forced`` outside S)."""
    n = g.n
    def ratio(S: set[int]) -> Fraction:
        return Fraction(n - len(S) if not outside_costs else len(S)) / _in_cut(g, S)
    start = [{a} for a in forced] if not outside_costs else [set(range(n)) - {b} for b in forced]
    best_s = max(start, key=ratio)
    rho = ratio(best_s)
    while True:
        m, a_in, a_out, s, t = g.flow_net(rho.numerator)
        unit = rho.denominator * g.denom
        inf = g.inf(rho.numerator) + n * unit
        improved = None
        for f in forced:
            caps_in = np.full(n, 0 if outside_costs else unit, dtype=np.int64)    # s->i: cost if i inside
            caps_out = np.full(n, unit if outside_costs else 0, dtype=np.int64)   # i->t: cost if i outside
            if outside_costs:
                caps_in[f] = inf
            else:
                caps_out[f] = inf
            m.set_arcs_capacity(a_in, caps_in)
            m.set_arcs_capacity(a_out, caps_out)
            m.solve(s, t)
            if m.optimal_flow() < n * unit:
                S = {i for i in m.get_sink_side_min_cut() if i < n}
                if 0 < len(S) < n and ratio(S) > rho:
                    improved = S
                    break
        if improved is None:
            return rho, best_s
        best_s, rho = improved, ratio(improved)


def _global_cut_bound(g: _Graph) -> Fraction:
    """``1 / min over proper GPU subsets S of min(in(S), out(S))``: every directed cut separates
    GPU 0 from some GPU v one way or the other, so 2(n - 1) max-flows find the smallest."""
    smallest = min(min(_cut(g, {0}, {v}), _cut(g, {v}, {0})) for v in range(1, g.n))
    if smallest == 0:
        raise TopologyError("some GPUs cannot exchange data with the others")
    return 1 / smallest


def phased_allreduce_bound(fabric: Fabric, params=None) -> Fraction:
    """``(RS + AG) / n`` rounds per block: the bound of allreduce schedules that run a complete
    reduce-scatter, then an all-gather (NCCL's rings, SCCL's compositions)."""
    n = fabric.num_ranks
    if n < 2:
        return Fraction(0)
    ag = _bandwidth(fabric, CollectiveSpec("allgather", n, 1), params)[0]
    rs = _bandwidth(fabric, CollectiveSpec("reducescatter", n, 1), params)[0]
    return (ag + rs) / n


def _by_maxflow(g: _Graph, spec: CollectiveSpec, hosts: list[int]) -> tuple[Fraction, bool, tuple[int, ...]]:
    n, name, root = g.n, spec.name, spec.root
    everyone = list(range(n))
    if name in ("allgather", "reducescatter", "allreduce", "alltoall"):
        ag, s_ag = _dinkelbach(g, False, everyone)
        rs, s_rs = _dinkelbach(g, True, everyone)
        if name == "allgather":
            return ag, True, tuple(sorted(s_ag))
        if name == "reducescatter":
            return rs, True, tuple(sorted(set(everyone) - s_rs))
        if name == "allreduce":
            return _global_cut_bound(g), True, tuple(sorted(s_ag))
        cands = [s_ag, s_rs, set(everyone) - s_ag, set(everyone) - s_rs] + [{i} for i in everyone]
        cands += [{i for i in everyone if hosts[i] == h} for h in set(hosts) if len(set(hosts)) > 1]
        best = max(cands, key=lambda S: Fraction(len(S) * (n - len(S))) / _in_cut(g, S))
        return Fraction(len(best) * (n - len(best))) / _in_cut(g, best), False, tuple(sorted(best))
    if name == "gather":
        r, S = _dinkelbach(g, False, [root])
        return r, True, tuple(sorted(S))
    r, T = _dinkelbach(g, True, [root])       # scatter: |T| / in(T), root outside T
    return r, True, tuple(sorted(set(everyone) - T))


def _bandwidth(fabric: Fabric, spec: CollectiveSpec, params=None, method: str = "auto"):
    """``(rounds per block, exact, method, witness subset)``."""
    n = spec.ranks
    if n < 2:
        return Fraction(0), True, "trivial", ()
    g = _Graph(fabric, params)
    if spec.name in ("broadcast", "reduce"):
        flows = [(_cut(g, {spec.root}, {p}) if spec.name == "broadcast" else _cut(g, {p}, {spec.root}), p)
                 for p in range(n) if p != spec.root]
        f, p = min(flows)
        return 1 / f, True, "maxflow", (p,)
    if method == "enumeration" or (method == "auto" and n <= ENUMERATE_MAX_RANKS):
        r, w = _enumerate(g, spec)
        return r, True, "enumeration", w
    r, exact, w = _by_maxflow(g, spec, fabric.hosts or [0] * n)
    return r, exact, "maxflow", w
