"""Bandwidth-optimal AllToAll on clusters of identical hosts: a multicommodity-flow LP on the quotient.

Every rank sends a distinct block to every other rank, so copies never help and the best
schedule is a multicommodity flow (as in TE-CCL).  On a cluster the flow can be taken
symmetric (averaging any optimal flow over the cluster's symmetries keeps it optimal), so one
variable set per *commodity class* suffices: pair class ``k`` (same host, same group, other
group; :data:`synth.ir.cluster_shape.PAIR_CLASSES`) and local GPUs ``(a, b)``.  A block from
``(h, a)`` to ``(h', b)`` on another host may take any *option* ``(c, c')``: a hop inside the
source host ``a -> c`` (none if ``c = a``), the network channel ``(h, c) -> (h', c')``, a hop
inside the destination host ``c' -> b`` (none if ``c' = b``) -- PXN-style rail changes on
NVLink included.  Blocks between GPUs of one host go direct or through one local GPU.

The LP (OR-Tools GLOP through ``pywraplp``) minimises ``T`` (rounds per block) subject to: the
options of each commodity class carry the whole block, and every resource's load, summed over
all host pairs of each class (from the fabric's route templates: a pattern read at host ``h``
collects ``N_k(h)`` pairs), is at most ``T x`` its capacity.  Constraints are written for the
resources of one host per orbit and the shared network links only.  Whole chunks: with ``C``
chunks per block, the ``N_k C`` chunks a source GPU sends to one local GPU of its class-``k``
peers are apportioned to the options by largest remainder and dealt out over the peer hosts,
so every host sees the same mix.  Steps: source-host hops, network hops (and direct hops
inside a host), destination-host hops; empty steps are dropped.

The lower bound is :func:`synth.model.bounds.lower_bounds` (``s (n - s) / in(S)`` over cut
candidates: single GPUs, hosts, groups); ``meta`` reports the LP optimum, the schedule's
bandwidth term and both ratios.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

import numpy as np
from ortools.linear_solver import pywraplp

from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule, Transfer
from synth.ir.verifier import check, sized_steps
from synth.model.physics import cost_params_for
from synth.solve.bwopt.arborescence import exact
from synth.solve.bwopt.bandwidth_term import bandwidth_term
from synth.solve.budget import SolveBudget, budget_or_new
from synth.solve.stoppable import solve_lp
from topo_probe.errors import SolverError, UnsupportedCollective
from topo_probe.number_rules import is_int


def _partners(shape, h: int, cls: int) -> list[int]:
    """Hosts of class ``cls`` (1 group, 2 other) relative to ``h``, cyclically after ``h``."""
    H = shape.hosts
    out = []
    for k in range(1, H):
        h2 = (h + k) % H
        same = shape.groups[h2] == shape.groups[h]
        if (cls == 1) == same:
            out.append(h2)
    return out


class _Quotient:
    """Commodity classes, their options and each option's load entries ``(side, pattern, fraction)``."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric, self.shape = fabric, fabric.shape
        ch = fabric.channels
        self.tpl, self.tables = ch.templates, ch.tables
        g = self.g = self.shape.gpus_per_host
        local = self.tpl[0] or [[None] * g for _ in range(g)]
        self.local = local
        self.options: dict[tuple[int, int, int], list[tuple]] = {}
        for a in range(g):
            for b in range(g):
                if a != b:
                    opts = ([(b,)] if local[a][b] else []) + [(c, b) for c in range(g)
                                                              if c not in (a, b) and local[a][c] and local[c][b]]
                    self.options[(0, a, b)] = opts
        for cls in (1, 2):
            if self.tpl[cls] is None:
                continue
            for a in range(g):
                for b in range(g):
                    self.options[(cls, a, b)] = [(c, c2) for c in range(g) for c2 in range(g)
                                                 if (c == a or local[a][c]) and (c2 == b or local[c2][b])]
        for key, opts in self.options.items():
            if not opts:
                raise UnsupportedCollective(f"alltoall: local GPU {key[1]} cannot reach local GPU {key[2]} "
                                            f"in two hops on {fabric.topology_name!r}")

    def entries(self, cls: int, a: int, b: int, opt: tuple) -> list[tuple[int, int, Fraction]]:
        """Load entries of one block on option ``opt``: side 0 source host, 1 destination host."""
        if cls == 0:
            hops = [a] + list(opt)
            return [(0, pid, f) for u, v in zip(hops, hops[1:]) for _, pid, f in self.local[u][v]]
        c, c2 = opt
        out = [(0, pid, f) for _, pid, f in self.local[a][c]] if c != a else []
        out += list(self.tpl[cls][c][c2])
        out += [(1, pid, f) for _, pid, f in self.local[c2][b]] if c2 != b else []
        return out


def _rep_hosts(shape) -> list[int]:
    sizes = shape.group_sizes()
    first: dict[int, int] = {}
    for h, q in enumerate(shape.groups):
        first.setdefault(sizes[q], h)
    return sorted(first.values())


def _multiplicity(q: _Quotient) -> dict:
    """``(cls, pattern) -> {resource: pairs}``: how many (source, destination) host pairs of class
    ``cls`` put that pattern's load on each resource (class 0: one per host); side-independent
    because the class relation is symmetric."""
    shape = q.shape
    counts = {0: [1] * shape.hosts, 1: [len(_partners(shape, h, 1)) for h in range(shape.hosts)],
              2: [len(_partners(shape, h, 2)) for h in range(shape.hosts)]}
    out: dict = {}
    npat = len(q.tables[0])
    for cls, per_host in counts.items():
        for pid in range(npat):
            d: dict = {}
            for h in range(shape.hosts):
                if per_host[h]:
                    r = q.tables[h][pid]
                    d[r] = d.get(r, 0) + per_host[h]
            out[(cls, pid)] = d
    return out


def _solve_lp(q: _Quotient, time_limit_s: float, budget: SolveBudget):
    """(T, {commodity: weights per option}) of the symmetric multicommodity flow LP (its solves
    stoppable by a signal and charged to ``budget``)."""
    fab = q.fabric
    unit = exact(fab.unit_gbps)
    cap = {r: float(exact(info.bandwidth_gbps) / unit) for r, info in fab.resources.items()}
    reps = {q.tables[h][pid] for h in _rep_hosts(q.shape) for pid in range(len(q.tables[0]))}
    mult = _multiplicity(q)
    lp = pywraplp.Solver.CreateSolver("GLOP")
    if lp is None:                                      # pragma: no cover - GLOP ships with OR-Tools
        raise SolverError("alltoall: OR-Tools has no GLOP solver")
    lp.SetTimeLimit(int(time_limit_s * 1000))
    T = lp.NumVar(0.0, lp.infinity(), "T")
    rows = {r: lp.Constraint(-lp.infinity(), 0.0, f"cap[{r[0]}>{r[1]}]") for r in sorted(reps)}
    for r, row in rows.items():
        row.SetCoefficient(T, -cap[r])
    x = {}
    for (cls, a, b), opts in q.options.items():
        one = lp.Constraint(1.0, 1.0, f"block[{cls},{a},{b}]")
        for k, opt in enumerate(opts):
            var = lp.NumVar(0.0, 1.0, f"x[{cls},{a},{b},{k}]")
            one.SetCoefficient(var, 1.0)
            x[(cls, a, b, k)] = var
            entries = q.entries(cls, a, b, opt)          # fractions (rationals)
            den = math.lcm(*(f.denominator for _, _, f in entries))
            coef: dict = {}                 # exact sums (integers over den), set in name order: the same
            for _, pid, f in entries:       # LP whatever order the fabric lists its routes in
                step = f.numerator * (den // f.denominator)
                for r, m in mult[(cls, pid)].items():
                    if r in rows:
                        coef[r] = coef.get(r, 0) + step * m
            for r in sorted(coef):          # int / int is correctly rounded, as float(Fraction) is
                rows[r].SetCoefficient(var, coef[r] / den)
    lp.Minimize(T)
    status = solve_lp(lp, budget)
    if status != pywraplp.Solver.OPTIMAL:
        raise SolverError(f"alltoall: the multicommodity flow LP (GLOP) ended with status {status}, not optimal")
    best = T.solution_value()
    # second stage: as fast, with the least link time at the links' achievable rates (NVLink
    # relays rather than PCIe/CPU crossings, few relays: simple whole-chunk splits)
    T.SetUb(best * (1 + 1e-9))
    obj = lp.Objective()
    obj.Clear()
    eff = cost_params_for(fab).efficiency
    rep = q.tables[_rep_hosts(q.shape)[0]]
    slow = {pid: 1.0 / (cap[r] * eff(fab.resources[r].kind)) if r in cap else 0.0 for pid, r in enumerate(rep)}
    for (cls, a, b, k), var in x.items():
        opt = q.options[(cls, a, b)][k]
        obj.SetCoefficient(var, 1e-3 + math.fsum(float(f) * slow[pid] for _, pid, f in q.entries(cls, a, b, opt)))
    obj.SetMinimization()
    if solve_lp(lp, budget) != pywraplp.Solver.OPTIMAL:          # keep the first solution's values
        T.SetUb(lp.infinity())
        lp.Minimize(T)
        solve_lp(lp, budget)
    weights = {key: [max(0.0, x[(*key, k)].solution_value()) for k in range(len(opts))]
               for key, opts in q.options.items()}
    return T.solution_value(), weights


def _deal(weights: list[float], total: int) -> list[int]:
    """Largest-remainder counts of ``total`` items in proportion to ``weights``."""
    w = np.asarray(weights)
    share = w / w.sum() * total
    base = np.floor(share + 1e-9).astype(int)
    for j in np.argsort(-(share - base), kind="stable")[: total - int(base.sum())]:
        base[j] += 1
    return [k for k, m in enumerate(base) for _ in range(m)]


def _transfers(q: _Quotient, weights: dict, C: int) -> list[list[Transfer]]:
    """Transfers per step (source-host hop, network hop, destination-host hop)."""
    shape, g = q.shape, q.g
    H, n = shape.hosts, shape.hosts * shape.gpus_per_host
    steps: list[list[Transfer]] = [[], [], []]
    for h in range(H):
        peers = {cls: _partners(shape, h, cls) for cls in (1, 2)}
        for a in range(g):
            s = h * g + a
            for b in range(g):
                for cls, hosts in ((0, [h]), (1, peers[1]), (2, peers[2])):
                    key = (cls, a, b)
                    if key not in weights or not hosts or (cls == 0 and a == b):
                        continue
                    deal = _deal(weights[key], len(hosts) * C)
                    for t, h2 in enumerate(hosts):
                        d = h2 * g + b
                        for j in range(C):
                            chunk = (s * n + d) * C + j
                            opt = q.options[key][deal[t * C + j]]
                            hops = [a] + list(opt) if cls == 0 else None
                            if cls == 0:           # direct: with the network hops; relayed: one step before
                                for k, (u, v) in enumerate(zip(hops, hops[1:])):
                                    steps[k + 3 - len(hops)].append(Transfer(chunk, h * g + u, h * g + v))
                                continue
                            c, c2 = opt
                            path = [s] + ([h * g + c] if c != a else []) + ([h2 * g + c2] if c2 != b else []) + [d]
                            first = 0 if c != a else 1
                            for k, (u, v) in enumerate(zip(path, path[1:])):
                                steps[first + k].append(Transfer(chunk, u, v))
    return steps


def cluster_alltoall(fabric: Fabric, *, max_chunks: int = 4, time_limit_s: float = 120.0,
                     budget: SolveBudget | None = None) -> Schedule:
    """A verified AllToAll schedule of a cluster fabric from the symmetric multicommodity-flow LP.

    Parameters
    ----------
    fabric : Fabric
        A cluster of identical hosts (``fabric.shape``).
    max_chunks : int
        Largest chunk count per block tried; the smallest ``C`` whose whole-chunk schedule is
        within 0.5 % of the LP optimum is kept (else the best one).
    time_limit_s : float
        Budget (s) of the LP.
    budget : SolveBudget, optional
        The clock its LP solves are charged to (:mod:`synth.solve.budget`; default: a fresh one).

    Returns
    -------
    Schedule
        ``meta``: ``method`` ``"mcf-lp"``, ``lp_rounds_per_block`` (the LP optimum),
        ``bound_rounds_per_block`` (the cut bound), ``achieved_rounds_per_block``
        (:func:`bandwidth_term`), ``ratio_to_bound``, ``ratio_to_lp``, ``solve_s``.

    Raises
    ------
    UnsupportedCollective
        The fabric is not a cluster of identical hosts, or some local GPU pair is more than two
        hops apart.
    SolverError
        The LP did not reach optimality.
    """
    from synth.solve.bounds_cache import fabric_bounds
    t0 = time.monotonic()
    if fabric.shape is None:
        raise UnsupportedCollective(f"alltoall LP: fabric {fabric.topology_name!r} is not a cluster of identical hosts")
    if not is_int(max_chunks) or max_chunks < 1:
        raise UnsupportedCollective(f"alltoall LP: max_chunks must be an integer >= 1, got {max_chunks!r}")
    max_chunks = int(max_chunks)
    q = _Quotient(fabric)
    lp_T, weights = _solve_lp(q, time_limit_s, budget_or_new(budget))
    n = fabric.num_ranks
    best = None
    for C in range(1, max_chunks + 1):
        steps, loads = sized_steps(fabric, _transfers(q, weights, C))
        sched = Schedule("alltoall", n, C, steps, None, False, "mcf-lp", fabric.topology_name, fabric.fingerprint)
        term = bandwidth_term(sched, fabric)
        if best is None or term < best[1]:
            best = (sched, term, loads)
        if float(term) <= lp_T * 1.005:
            break
    sched, term, loads = best
    check(sched, fabric, loads=loads)
    bound = Fraction(fabric_bounds(fabric, "alltoall").bandwidth_rounds_per_block)
    return sched.with_(meta={
        "method": "mcf-lp", "lp_rounds_per_block": lp_T, "bound_rounds_per_block": float(bound),
        "bound_exact": str(bound), "achieved_rounds_per_block": float(term), "achieved_exact": str(term),
        "ratio_to_bound": float(term / bound) if bound else None, "ratio_to_lp": float(term) / lp_T if lp_T else None,
        "batch_chunks": sched.chunks_per_rank, "transfers": sum(len(s.transfers) for s in sched.steps),
        "solve_s": round(time.monotonic() - t0, 3)})


__all__ = ["cluster_alltoall"]
