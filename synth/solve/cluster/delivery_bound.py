"""A lower bound on the bandwidth term from the deliveries every GPU must receive or send.

In an allgather every rank receives each of the other ``n - 1`` blocks at least once, each
arrival over some channel ``(i, r)`` (a pair the fabric connects) whose route loads its resources (the fabric's fractions).
Whatever the schedule, the arrivals at the ranks of one host alone load the fabric at least as
a fractional choice of channels ``x[i, r] >= 0`` with ``sum_i x[i, r] >= n - 1`` can, so

    T >= min over such x of  max over resources q of  sum_(i, r) frac_q(i, r) x[i, r] / cap_q

(a small LP).  Unlike the cut bound (:mod:`synth.model.cuts`), which sees one cut at a time,
it charges a GPU's NVLink, PCIe and its host's NICs together: on a host whose GPUs can each
take more over PCIe than the host's NICs bring in (dgx-a100's two GPUs per NIC pair, or rail
fabrics whose cross-rail routes fan out over the CPU), the arrivals through the NICs are
limited by the NICs, and the bound rises to what the tree packing and the hierarchy reach
(2 x dgx-a100 allgather: 15 / 13 rounds per block, cut bound 250 / 221).

Reducescatter counts departures instead (every rank sends a partial sum of each other block
at least once); allreduce, phased like every schedule of :mod:`synth.solve`, the sum of the two
over the ``n`` pieces per block (as the phased cut bound); broadcast the arrivals of one piece at every
non-root rank (the root's host and one other), reduce the departures.  The bound is a float
from GLOP (the LP's optimum, to its tolerance).
"""

from __future__ import annotations

from fractions import Fraction

from ortools.linear_solver import pywraplp

from synth.ir.collectives import canonical
from synth.ir.fabric import Fabric
from synth.solve.budget import SolveBudget, budget_or_new
from synth.solve.stoppable import solve_lp
from topo_probe.errors import UnsupportedCollective

#: collectives the bound covers
DELIVERY_COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")


def _demands(fabric: Fabric, name: str, root: int) -> list[tuple[int, int, bool]]:
    """``(rank, deliveries, arriving)`` of the ranks the LP charges: those of host 0 (and of
    the next host for rooted collectives, whose root's host differs from the others)."""
    n = fabric.num_ranks
    g = fabric.shape.gpus_per_host if fabric.shape is not None else n
    if name in ("broadcast", "reduce"):
        host = root // g
        ranks = [r for h in sorted({host, (host + 1) % max(1, n // g)}) for r in range(h * g, (h + 1) * g)]
        return [(r, 1, name == "broadcast") for r in ranks if r != root]
    ranks = [(root // g) * g + b for b in range(g)] if fabric.shape is not None else list(range(n))
    out = []
    return [(r, n - 1, name == "allgather") for r in ranks]


def delivery_bound(fabric: Fabric, collective: str, root: int | None = None, efficiency=None,
                   budget: SolveBudget | None = None) -> float:
    """Rounds per block no schedule of ``collective`` on ``fabric`` can beat (see the module
    docstring); ``efficiency`` (link kind -> achieved fraction) scales the capacities.  Its LP
    solves charge ``budget`` (default: a fresh :class:`~synth.solve.budget.SolveBudget`).

    Raises
    ------
    UnsupportedCollective
        A collective outside :data:`DELIVERY_COLLECTIVES`.
    """
    name = canonical(collective)
    if name not in DELIVERY_COLLECTIVES:
        raise UnsupportedCollective(f"delivery_bound: {name} is not supported "
                                    f"(supported: {', '.join(DELIVERY_COLLECTIVES)})")
    n = fabric.num_ranks
    if n < 2:
        return 0.0
    budget = budget_or_new(budget)
    if name == "allreduce":
        return sum(delivery_bound(fabric, half, None, efficiency, budget)
                   for half in ("reducescatter", "allgather")) / n
    known = fabric.memo("delivery_bound")       # nominal capacities only: kept on the fabric
    key = (name, root or 0)
    if efficiency is None and key in known:
        return known[key]
    got = _solve(fabric, name, root or 0, efficiency, budget)
    if efficiency is None:
        known[key] = got
    return got


def _solve(fabric: Fabric, name: str, root: int, efficiency, budget: SolveBudget) -> float:
    """The LP of :func:`delivery_bound` for a collective other than allreduce."""
    n = fabric.num_ranks
    lp = pywraplp.Solver.CreateSolver("GLOP")
    T = lp.NumVar(0.0, lp.infinity(), "T")
    use: dict = {}                                   # resource -> [(fraction, variable)]
    for r, need, arriving in _demands(fabric, name, root):
        xs = []
        for other in range(n):
            pair = (other, r) if arriving else (r, other)
            if other == r or pair not in fabric.channels:      # no channel: nothing moves that way
                continue
            x = lp.NumVar(0.0, lp.infinity(), "")
            xs.append(x)
            for q, frac in fabric.channels[pair]:
                use.setdefault(q, []).append((float(frac), x))
        lp.Add(lp.Sum(xs) >= need)
    for q, terms in use.items():
        info = fabric.resources[q]
        cap = info.bandwidth_gbps * (efficiency(info.kind) if efficiency else 1.0) / fabric.unit_gbps
        lp.Add(lp.Sum([f * x for f, x in terms]) <= cap * T)
    lp.Minimize(T)
    if solve_lp(lp, budget) != pywraplp.Solver.OPTIMAL:
        return 0.0                                    # no certificate: the trivial bound
    return T.solution_value()


def cut_bound(fabric: Fabric, collective: str, root: int | None = None, params=None) -> Fraction:
    """The cut bound (:func:`synth.model.bounds.lower_bounds`; allreduce: the phased bound) at
    nominal capacities, or at ``params``'s effective ones (a :class:`synth.model.cost.CostParams`)."""
    from synth.solve.bounds_cache import fabric_bounds
    name = canonical(collective)
    if name == "allreduce":
        return sum((fabric_bounds(fabric, half).rounds_per_block(params) for half in ("allgather", "reducescatter")),
                   Fraction(0)) / fabric.num_ranks
    return Fraction(fabric_bounds(fabric, name, root).rounds_per_block(params))


def certified_bound(fabric: Fabric, collective: str, root: int | None = None, params=None,
                    budget: SolveBudget | None = None) -> float:
    """The larger of :func:`cut_bound` and :func:`delivery_bound` (rounds per block), at
    ``params``'s effective capacities where given: no schedule's bandwidth term is below it.
    The LP solves charge ``budget`` (default: a fresh one)."""
    eff = params.efficiency if params is not None else None
    return max(float(cut_bound(fabric, collective, root, params)),
               delivery_bound(fabric, collective, root, eff, budget))


__all__ = ["DELIVERY_COLLECTIVES", "certified_bound", "cut_bound", "delivery_bound"]
