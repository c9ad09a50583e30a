"""Cut bounds on a fabric's resource graph: max-flow cuts, enumeration over rank classes, Dinkelbach."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from ortools.graph.python import max_flow

from synth.ir.collectives import CollectiveSpec
from synth.ir.fabric import Fabric
from synth.model.cut_table import CutTable, best_ratio, host_swaps, index_swaps, maxflow_table
from topo_probe.errors import TopologyError

#: exhaustive subset enumeration up to this many GPUs; Dinkelbach max-flow beyond
ENUMERATE_MAX_RANKS = 16


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
    """Graph node of each rank: the node without incoming edge on its channels' routes (one
    channel per rank is enough; a cluster's GPUs are named by its shape)."""
    shape = fabric.shape
    if shape is not None:
        local = shape.host.gpus
        g = shape.gpus_per_host
        return [f"h{r // g}.{local[r % g]}" for r in range(fabric.num_ranks)]
    out = {}
    for (i, _), route in fabric.channels.items():
        if i not in out:
            heads = {v for (_, v), _ in route}
            out[i] = next(u for (u, _), _ in route if u not in heads)
    if len(out) != fabric.num_ranks:
        raise TopologyError(f"fabric {fabric.topology_name!r}: some ranks have no channel")
    return [out[i] for i in range(fabric.num_ranks)]


def rank_representatives(fabric: Fabric) -> list[int]:
    """Ranks that every rank is the image of under some symmetry of the fabric (all ranks
    unless the fabric is a cluster of identical hosts: then every GPU of one host per class of
    equally sized groups, since hosts of one group, and whole groups of one size, can be
    swapped together with their leaf switches)."""
    shape = fabric.shape
    if shape is None:
        return list(range(fabric.num_ranks))
    sizes = shape.group_sizes()
    first: dict[int, int] = {}
    for h, q in enumerate(shape.groups):
        first.setdefault(sizes[q], h)
    g = shape.gpus_per_host
    return [h * g + a for h in sorted(first.values()) for a in range(g)]


def _series_reduce(caps: dict[tuple[str, str], Fraction], keep: set[str]) -> None:
    """Remove dead-end non-GPU nodes and bypass pass-through ones (exact for s-t cuts); a worklist,
    so linear in the graph size."""
    out: dict[str, set[str]] = {}
    inn: dict[str, set[str]] = {}
    for u, v in caps:
        out.setdefault(u, set()).add(v)
        inn.setdefault(v, set()).add(u)

    def around(w: str) -> set[str]:
        return out.get(w, set()) | inn.get(w, set())

    def drop(u: str, v: str) -> None:
        del caps[(u, v)]
        out[u].discard(v)
        inn[v].discard(u)

    work = [w for w in set(out) | set(inn) if w not in keep]
    while work:
        w = work.pop()
        nbs = around(w)
        if w in keep or len(nbs) > 2 or (not nbs and w not in out and w not in inn):
            continue
        if len(nbs) == 2:
            a, b = sorted(nbs)
            for x, y in ((a, b), (b, a)):
                c = min(caps.get((x, w), Fraction(0)), caps.get((w, y), Fraction(0)))
                if c:
                    if (x, y) not in caps:
                        caps[(x, y)] = Fraction(0)
                        out.setdefault(x, set()).add(y)
                        inn.setdefault(y, set()).add(x)
                    caps[(x, y)] += c
        for v in list(out.get(w, ())):
            drop(w, v)
        for u in list(inn.get(w, ())):
            drop(u, w)
        out.pop(w, None)
        inn.pop(w, None)
        work.extend(x for x in nbs if x not in keep)


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


def _cut_table(g: _Graph, perms: list[list[int]] | None = None) -> CutTable:
    """``in(S) * denom`` for every subset up to twin classes (:class:`synth.model.cut_table.CutTable`):
    one vectorised sum where the switches are stars (rows in bit order), else max-flows (rows in
    ``itertools.product`` order; ``perms``: host and index swaps that share cuts, see
    :func:`synth.model.cut_table.host_swaps` and :func:`~synth.model.cut_table.index_swaps`)."""
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
        return CutTable([[i] for i in range(n)], np.stack(inside, axis=1), cut, (1 << n) - 1 - masks)
    return maxflow_table(g, _twin_classes(g), perms or [])


def _members(classes, vec, first_root: int | None = None, root_inside: bool = True) -> tuple[int, ...]:
    out = []
    for c, k in zip(classes, vec):
        order = list(c)
        if first_root in order:
            order.remove(first_root)
            order = [first_root] + order if root_inside else order + [first_root]
        out += order[:k]
    return tuple(sorted(out))


def _tables(g: _Graph, fabric: Fabric | None) -> CutTable:
    """:func:`_cut_table` of ``g``, made once per fabric object and capacity graph (kept on the
    fabric: every collective's enumeration at the same capacities reads the same cuts)."""
    tables = fabric.memo("cut_tables") if fabric is not None else {}
    key = (g.n, g.denom, tuple(sorted(g.cap.items())))
    if key not in tables:
        perms = host_swaps(g.names, g.cap, g.n) + index_swaps(g.names, g.cap, g.n) if fabric is not None and fabric.shape \
            else None
        tables[key] = _cut_table(g, perms)
    return tables[key]


def _enumerate(g: _Graph, spec: CollectiveSpec, fabric: Fabric | None = None) -> tuple[Fraction, tuple[int, ...]]:
    n, name, root = g.n, spec.name, spec.root
    table = _tables(g, fabric)
    classes = table.classes
    rc = next((k for k, c in enumerate(classes) if root in c), None)

    def ratio(out: bool, num=lambda s: n - s, allow=None) -> tuple[Fraction, tuple[int, ...]]:
        return best_ratio(table, out, n, num, allow, g.denom, lambda vec: _members(classes, vec))
    if name in ("allgather", "reducescatter", "allreduce"):
        ag, v1 = ratio(False)
        if name == "allreduce":
            return _global_cut_bound(g, list(range(1, g.n))), _members(classes, v1)
        if name == "allgather":
            return ag, _members(classes, v1)
        rs, v2 = ratio(True)
        return rs, _members(classes, v2)
    if name == "alltoall":
        r, v = ratio(False, lambda s: s * (n - s))
        return r, _members(classes, v)
    r, v = ratio(name != "gather", allow=table.vecs[:, rc] >= 1)
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


def targets_by_symmetry(fabric: Fabric, root: int) -> list[int]:
    """Ranks other than ``root`` such that every other rank is the image of one of them under a
    symmetry fixing ``root`` (all of them without a cluster shape): the root host's GPUs, and
    every GPU of one host per relation to the root's host (same group; each other group size)."""
    shape = fabric.shape
    n = fabric.num_ranks
    if shape is None:
        return [v for v in range(n) if v != root]
    g = shape.gpus_per_host
    home = root // g
    sizes = shape.group_sizes()
    reps: dict[tuple, int] = {}
    for h in range(shape.hosts):
        if h != home:
            same = shape.groups[h] == shape.groups[home]
            reps.setdefault((same, sizes[shape.groups[h]]), h)
    hosts = [home] + sorted(reps.values())
    return [h * g + a for h in hosts for a in range(g) if h * g + a != root]


def _global_cut_bound(g: _Graph, targets: list[int]) -> Fraction:
    """``1 / min over proper GPU subsets S of min(in(S), out(S))``: every directed cut separates
    GPU 0 from some GPU v one way or the other, so 2(n - 1) max-flows find the smallest (fewer
    by symmetry: ``targets`` from :func:`targets_by_symmetry`)."""
    smallest = min(min(_cut(g, {0}, {v}), _cut(g, {v}, {0})) for v in targets)
    if smallest == 0:
        raise TopologyError("some GPUs cannot exchange data with the others")
    return 1 / smallest


def _alltoall_candidates(fabric: Fabric, reps: list[int], found: list[set[int]]) -> list[set[int]]:
    """GPU subsets worth trying for the alltoall cut (``s (n - s) / in(S)`` is not a Dinkelbach
    ratio): the allgather/reducescatter optima and their complements, single GPUs, and for a
    cluster whole hosts and groups: the first k hosts of a group, the first k groups."""
    n = fabric.num_ranks
    everyone = set(range(n))
    cands = found + [everyone - S for S in found] + [{i} for i in reps]
    hosts = fabric.hosts or [0] * n
    if len(set(hosts)) > 1:
        members: dict[int, set[int]] = {}
        for r, h in enumerate(hosts):
            members.setdefault(h, set()).add(r)
        shape = fabric.shape
        groups = shape.groups if shape is not None else tuple(range(len(members)))
        order: dict[int, list[int]] = {}
        for h in sorted(members):
            order.setdefault(groups[h], []).append(h)
        first = next(iter(order.values()))
        cands += [set().union(*(members[h] for h in first[:k])) for k in range(1, len(first) + 1)]
        grp = list(order.values())
        cands += [set().union(*(members[h] for q in grp[:k] for h in q)) for k in range(1, len(grp))]
    return [S for S in cands if 0 < len(S) < n]


def _by_maxflow(g: _Graph, spec: CollectiveSpec, fabric: Fabric) -> tuple[Fraction, bool, tuple[int, ...]]:
    n, name, root = g.n, spec.name, spec.root
    everyone = list(range(n))
    reps = rank_representatives(fabric)
    if name in ("allgather", "reducescatter", "allreduce", "alltoall"):
        if name == "allreduce":
            return _global_cut_bound(g, targets_by_symmetry(fabric, 0)), True, ()
        ag, s_ag = _dinkelbach(g, False, reps) if name != "reducescatter" else (None, set())
        rs, s_rs = _dinkelbach(g, True, reps) if name != "allgather" else (None, set())
        if name == "allgather":
            return ag, True, tuple(sorted(s_ag))
        if name == "reducescatter":
            return rs, True, tuple(sorted(set(everyone) - s_rs))
        cands = _alltoall_candidates(fabric, reps, [s_ag, s_rs])
        best = max(cands, key=lambda S: Fraction(len(S) * (n - len(S))) / _in_cut(g, S))
        return Fraction(len(best) * (n - len(best))) / _in_cut(g, best), False, tuple(sorted(best))
    if name == "gather":
        r, S = _dinkelbach(g, False, [root])
        return r, True, tuple(sorted(S))
    r, T = _dinkelbach(g, True, [root])       # scatter: |T| / in(T), root outside T
    return r, True, tuple(sorted(set(everyone) - T))


def bandwidth_rounds(fabric: Fabric, spec: CollectiveSpec, params=None, method: str = "auto"):
    """``(rounds per block, exact, method, witness subset)``."""
    n = spec.ranks
    if n < 2:
        return Fraction(0), True, "trivial", ()
    g = _Graph(fabric, params)
    if spec.name in ("broadcast", "reduce"):
        flows = [(_cut(g, {spec.root}, {p}) if spec.name == "broadcast" else _cut(g, {p}, {spec.root}), p)
                 for p in targets_by_symmetry(fabric, spec.root)]
        f, p = min(flows)
        return 1 / f, True, "maxflow", (p,)
    if method == "enumeration" or (method == "auto" and n <= ENUMERATE_MAX_RANKS):
        r, w = _enumerate(g, spec, fabric)
        return r, True, "enumeration", w
    r, exact, w = _by_maxflow(g, spec, fabric)
    return r, exact, "maxflow", w
