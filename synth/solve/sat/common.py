"""Pieces shared by the CP-SAT models of :mod:`synth.solve.sat.model` and :mod:`synth.solve.sat.flow`.

Hop distances (which sends can be part of a minimal schedule), the fabric capacity
constraints (per step and shared resource, chunks weighted by the fraction of each channel's
traffic that crosses the resource must fit in ``r_s * bandwidth / unit_gbps``; see
:mod:`synth.ir.fabric`), decoding a solution into a :class:`~synth.ir.schedule.Schedule`, and one
solver call with an explicit time limit and worker count.
"""

from __future__ import annotations

import math
import time
from collections import deque
from fractions import Fraction

from ortools.sat.python import cp_model

from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule, Step, Transfer
from synth.solve.budget import SolveBudget, limit_cp_sat, limit_step_search
from synth.solve.stoppable import solve_cp_sat
from topo_probe.errors import SolverError, SynthesisInfeasible, SynthesisTimeout

Sum = cp_model.LinearExpr.sum
NEVER = 10**9
"""Hop distance of an unreachable rank."""


def hop_distances(fabric: Fabric) -> list[list[int]]:
    """Fewest channels from rank i to rank j (``NEVER`` if unreachable), by BFS.

    >>> from synth.ir.fabric import build_fabric
    >>> from topo_probe.machines.generators import line
    >>> hop_distances(build_fabric(line(3)))[0]
    [0, 1, 2]
    """
    n = fabric.num_ranks
    out = [[NEVER] * n for _ in range(n)]
    nbrs = {i: fabric.neighbours_out(i) for i in range(n)}
    for a in range(n):
        out[a][a] = 0
        todo = deque([a])
        while todo:
            u = todo.popleft()
            for v in nbrs[u]:
                if out[a][v] == NEVER:
                    out[a][v] = out[a][u] + 1
                    todo.append(v)
    return out


def capacity_ratio(fabric: Fabric, resource) -> Fraction:
    """Chunks per round resource ``resource`` carries, as a Fraction never above the exact value."""
    exact = Fraction(fabric.resources[resource].bandwidth_gbps) / Fraction(fabric.unit_gbps)
    nice = exact.limit_denominator(10**4)
    return nice if nice <= exact else Fraction(math.floor(exact * 10**4), 10**4)


def add_capacity(model: cp_model.CpModel, fabric: Fabric, sends, r: list, rmax: int) -> None:
    """Per step and resource: sum of route fractions times ``var`` <= capacity ratio * r[step].

    ``sends`` yields (src, dst, step, var) where var counts chunks (Bool or Int); ``rmax`` is
    the most rounds a step can have.  Loads are scaled to integers by the lcm of the fractions'
    denominators; a fractional capacity ``floor(ratio * r_s)`` is spelled out exactly through
    one-hot Booleans for r_s (its LP relaxation is much tighter than ``ratio * r_s``).
    """
    table = _resource_table(fabric)
    users: dict = {}
    cache: dict = {}
    for i, j, s, v in sends:
        for res, _ in fabric.channels[i, j]:
            users.setdefault((res, s), ([], []))
            users[res, s][0].append(v)
            users[res, s][1].append(table[res][0][i, j])
    for (res, s), (vars_, coefs) in users.items():
        per_round = table[res][1]  # capacity per round in units of the integer coefficients
        lhs = cp_model.LinearExpr.weighted_sum(vars_, coefs)
        if per_round.denominator == 1:
            model.add(lhs <= int(per_round) * r[s - 1])
        else:  # integral load <= floor(per_round * r_s), exact through a one-hot r_s
            onehot = _onehot(model, r, s, rmax, cache)
            model.add(lhs <= sum(math.floor(per_round * k) * z for k, z in onehot.items()))


def _resource_table(fabric: Fabric) -> dict:
    """resource -> ({channel: integer coefficient}, capacity per round in those units)."""
    users: dict = {}
    for ch, route in fabric.channels.items():
        for res, frac in route:
            users.setdefault(res, []).append((ch, frac))
    table = {}
    for res, items in users.items():
        scale = math.lcm(*(f.denominator for _, f in items))
        g = math.gcd(*(int(f * scale) for _, f in items))
        table[res] = ({ch: int(f * scale) // g for ch, f in items}, capacity_ratio(fabric, res) * scale / g)
    return table


def _onehot(model: cp_model.CpModel, r: list, s: int, rmax: int, cache: dict) -> dict:
    """Booleans z[k] <=> (r_s == k), k = 1..rmax, made once per step."""
    if s not in cache:
        z = {k: model.new_bool_var(f"r[{s}]=={k}") for k in range(1, rmax + 1)}
        model.add_exactly_one(z.values())
        model.add(r[s - 1] == sum(k * v for k, v in z.items()))
        cache[s] = z
    return cache[s]


def decode_schedule(sm, solver: cp_model.CpSolver, per_step: list[list[Transfer]], meta: dict) -> Schedule:
    """The Schedule ``sat-S{S}-R{R}-C{C}`` of model ``sm`` (its ``spec``, ``fabric``, ``S``,
    ``R`` and rounds variables ``r``): ``per_step`` transfers sorted by chunk, src, dst."""
    steps = tuple(Step(int(solver.value(sm.r[s])), tuple(sorted(ts, key=lambda t: (t.chunk, t.src, t.dst))))
                  for s, ts in enumerate(per_step))
    spec = sm.spec
    return Schedule(spec.name, spec.ranks, spec.chunks_per_rank, steps, spec.root, False,
                    f"sat-S{sm.S}-R{sm.R}-C{spec.chunks_per_rank}", sm.fabric.topology_name,
                    sm.fabric.fingerprint, meta)


#: clock seconds of a step solve's opening (``workers > 1``): CP-SAT's five-strategy interleave on
#: :data:`OPENING_WORKERS` threads, the search every synthesized schedule came from before the opening was added
OPENING_S = 0.1
#: threads of the opening, whatever ``workers`` says (so that ``workers`` does not change the answer)
OPENING_WORKERS = 2


def run_cp_sat(model: cp_model.CpModel, time_limit_s: float, workers: int,
               where: str, budget: SolveBudget) -> tuple[cp_model.CpSolver, str]:
    """Solve within ``time_limit_s`` clock seconds (charged to ``budget``); return (solver, status
    name) when it found a schedule, else raise Infeasible / Timeout.

    ``workers > 1``: an opening of :data:`OPENING_S` clock seconds of ``limit_cp_sat(OPENING_WORKERS)``,
    which settles the small instances as it always did (the committed presets' plans stay as they
    were), then the rest of the budget for :func:`synth.solve.budget.limit_step_search`,
    many times faster on the hard ones.  Both are deterministic and neither depends on ``workers``,
    so neither does the answer.
    """
    t0, start = time.perf_counter(), budget.now()
    phases = [lambda s, b: limit_cp_sat(s, b, OPENING_WORKERS if workers > 1 else 1)]
    if workers > 1 and time_limit_s > OPENING_S:
        phases.append(limit_step_search)
    for k, limit in enumerate(phases):
        solver = cp_model.CpSolver()
        left = float(time_limit_s) - (budget.now() - start)
        limit(solver, min(left, OPENING_S) if k + 1 < len(phases) else left)   # deterministic budget
        # measured: probing and CP-SAT's own symmetry detection cost more than they save on these
        # models (DGX-1 pareto solves 35 % less CPU, cluster proofs 2-3x faster without them)
        solver.parameters.cp_model_probing_level = 0
        solver.parameters.symmetry_level = 0
        status = solve_cp_sat(solver, model, budget)
        if status != cp_model.UNKNOWN:
            break
    if status == cp_model.INFEASIBLE:
        raise SynthesisInfeasible(f"{where}: CP-SAT proved no schedule exists ({time.perf_counter() - t0:.2f} s)")
    if status == cp_model.UNKNOWN:
        raise SynthesisTimeout(f"{where}: no schedule found within {time_limit_s:g} s")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise SolverError(f"{where}: CP-SAT returned {solver.status_name(status)}")
    return solver, solver.status_name(status)
