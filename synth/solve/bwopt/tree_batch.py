"""Whole chunks: integer chunk counts per spanning arborescence, batch by batch.

The tree packing LP (:func:`synth.solve.bwopt.trees.pack_trees`) gives each source's trees real weights
(chunks per round).  A schedule moves whole chunks, so a *batch* of ``chunks`` chunks per
source is spread over the trees with integer counts such that the batch's exact rational
resource loads fit ``rounds`` whole rounds of every resource (:class:`Batch`); the batch time
per chunk, ``rounds / chunks`` (rounds per chunk), is what the bandwidth term of the
schedule will be.  :func:`integer_batch` searches batch sizes with CP-SAT over single trees
or :data:`Bundle` s of trees that always carry the same count (e.g. one tree's images under a
symmetry, :mod:`synth.solve.bwopt.tree_symmetry`); :func:`rational_batch` reads the LP's weights as exact
fractions and takes their common denominator as the batch size; :func:`dive_batch` rounds the LP by
diving, for a given batch size and round count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from synth.solve.budget import SolveBudget, budget_or_new, limit_cp_sat
from synth.solve.bwopt.trees import ChannelModel, Packing, pack_trees, rounds_for, tree_depth
from synth.solve.cp_sat_once import solve_cp_sat_once
from topo_probe.errors import SynthesisInfeasible

__all__ = ["Batch", "Bundle", "dive_batch", "integer_batch", "rational_batch"]


@dataclass
class Batch:
    """Integer version of a packing: each source sends ``chunks`` chunks per batch, ``counts[s]``
    says how many go down each tree; one batch fits ``rounds`` rounds of every resource."""

    chunks: int
    rounds: int
    counts: dict[int, list[tuple[tuple[int, ...], int]]]


Bundle = tuple[tuple[int, tuple[int, ...]], ...]
"""Trees that always carry the same number of chunks: ``((source, tree), ...)``."""


def integer_batch(model: ChannelModel, packing: Packing, target: Fraction, *, max_chunks: int,
                  time_limit_s: float = 20.0, pool: dict[int, list[tuple[int, ...]]] | None = None,
                  bundles: list[Bundle] | None = None, budget: SolveBudget | None = None) -> Batch:
    """Whole chunk counts per tree with the smallest batch time per chunk, ``rounds / chunks``.

    Batch sizes ``c <= max_chunks`` are tried in order of the best ratio they allow,
    ``ceil(c * target) / c`` (``target``: rounds per chunk of the LP optimum or a lower
    bound).  For each, CP-SAT minimises the integer ``R`` such that each source's counts sum
    to ``c`` and every resource's exact load is at most ``R`` times its capacity, breaking
    ties towards shallow trees.  Columns are the trees of ``pool`` (default: every generated
    column) or ``bundles`` (e.g. one tree's images under a symmetry, one per source); the
    largest-remainder rounding of the LP weights is the hint and the fallback.  Stops when
    no untried ``c`` can beat the best ratio found, or at the time limit (on ``budget``'s clock;
    default: a fresh :class:`~synth.solve.budget.SolveBudget`).
    """
    from ortools.sat.python import cp_model

    if bundles is None:
        columns = pool if pool is not None else packing.columns
        bundles = [((s, p),) for s in sorted(columns) for p in columns[s]]
    sources = sorted({s for b in bundles for s, _ in b})
    loads = np.array([sum(model.tree_load(p, exact_q=True) for _, p in b) for b in bundles])   # times q
    depth = [max(tree_depth(p) for _, p in b) for b in bundles]
    cover = {s: [k for k, b in enumerate(bundles) if any(t == s for t, _ in b)] for s in sources}
    sizes = sorted(range(1, max_chunks + 1), key=lambda c: (Fraction(math.ceil(c * target), c), c))
    best: Batch | None = None
    budget = budget_or_new(budget)
    window = budget.window(time_limit_s)
    for c in sizes:
        floor = Fraction(math.ceil(c * target), c)
        if best is not None and Fraction(best.rounds, best.chunks) <= floor:
            break
        hint = _apportion(packing, bundles, cover, c)
        if hint is None and best is None:      # bundles: any one covering all sources will do
            hint = [0] * len(bundles)
            for s, ks in cover.items():
                if not any(hint[k] for k in ks):
                    hint[ks[0]] = c
        if hint is not None:
            rounds = rounds_for(model, (np.array(hint)[:, None] * loads).sum(axis=0))
            if best is None or Fraction(rounds, c) < Fraction(best.rounds, best.chunks):
                best = _batch(bundles, hint, c, rounds)
        left = window.left_s()
        if left <= 0.5 or (best is not None and Fraction(best.rounds, best.chunks) <= floor):
            break
        lo = math.ceil(c * target)
        hi = math.ceil(Fraction(best.rounds, best.chunks) * c) - 1 if best else lo + 4 * c
        if hi < lo:
            continue
        m = cp_model.CpModel()
        R = m.NewIntVar(lo, hi, "R")
        w = [m.NewIntVar(0, c, f"m{k}") for k in range(len(bundles))]
        for ks in {tuple(v) for v in cover.values()}:
            m.Add(sum(w[k] for k in ks) == c)
        for r, cap in enumerate(model.cap_exact):
            ks = np.flatnonzero(loads[:, r])
            if len(ks):            # one weighted sum: the very row sum(a * w) <= R * b gives, built faster
                coeffs = [int(a) * cap.denominator for a in loads[ks, r].tolist()]
                m.Add(cp_model.LinearExpr.WeightedSum([w[k] for k in ks], coeffs) - R * (cap.numerator * model.q) <= 0)
        for k, v in enumerate(hint or []):
            m.AddHint(w[k], v)
        m.Minimize(R * (c * len(bundles) * max(depth) + 1) + sum(d * x for d, x in zip(depth, w)))
        solver = cp_model.CpSolver()
        limit_cp_sat(solver, max(0.5, min(left, time_limit_s / 4)))
        status, values = solve_cp_sat_once(solver, m, budget, model.fabric.memo("cp_sat"))
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            best = _batch(bundles, [int(values[x.Index()]) for x in w], c, int(values[R.Index()]))
    if best is None:
        raise SynthesisInfeasible("trees: no whole-chunk assignment of the trees fits")
    return best


def _batch(bundles: list[Bundle], counts: list[int], c: int, rounds: int) -> Batch:
    out: dict[int, dict[tuple[int, ...], int]] = {s: {} for b in bundles for s, _ in b}
    for b, m in zip(bundles, counts):
        for s, p in b:
            if m:
                out[s][p] = out[s].get(p, 0) + int(m)
    return Batch(c, rounds, {s: list(d.items()) for s, d in out.items()})


def _apportion(packing: Packing, bundles: list[Bundle], cover: dict[int, list[int]], c: int) -> list[int] | None:
    """Largest-remainder rounding of the LP weights to ``c`` chunks per source (single-tree
    bundles only; None otherwise)."""
    if any(len(b) != 1 for b in bundles):
        return None
    out = [0] * len(bundles)
    for s, ks in cover.items():
        w = np.array([packing.trees.get(s, {}).get(bundles[k][0][1], 0.0) for k in ks])
        share = w / w.sum() * c if w.sum() > 0 else np.eye(len(ks))[0] * c
        base = np.floor(share).astype(int)
        for j in np.argsort(-(share - base), kind="stable")[: c - int(base.sum())]:
            base[j] += 1
        for k, v in zip(ks, base):
            out[k] = int(v)
    return out


def rational_batch(model: ChannelModel, packing: Packing, target: Fraction, *, max_chunks: int,
                   max_denominator: int = 1000) -> Batch | None:
    """Exact rational rounding of the LP: a batch that needs exactly ``target`` rounds per chunk,
    or None.

    Each source's LP weights, as shares of the rate, are read as fractions of denominator at most
    ``max_denominator`` (an LP vertex has rational weights; GLOP returns them as floats).  If
    every source's shares sum to exactly 1, a batch of ``c`` chunks per source, ``c`` the lcm of
    the shares' denominators and of ``target``'s, sends ``c * share`` chunks down each tree.
    Its exact loads decide: the batch is returned only when ``c <= max_chunks`` and it fits
    ``c * target`` whole rounds of every resource (then its time per chunk is ``target``).
    """
    shares: dict[int, dict[tuple[int, ...], Fraction]] = {}
    for s, ts in sorted(packing.trees.items()):
        total = sum(ts.values())
        if total <= 0:
            return None
        got = {p: Fraction(w / total).limit_denominator(max_denominator) for p, w in sorted(ts.items())}
        got = {p: f for p, f in got.items() if f}
        if sum(got.values()) != 1:
            return None
        shares[s] = got
    c = math.lcm(target.denominator, *(f.denominator for fs in shares.values() for f in fs.values()))
    if c > max_chunks:
        return None
    counts = {s: [(p, int(f * c)) for p, f in fs.items()] for s, fs in shares.items()}
    load = sum((m * model.tree_load(p, exact_q=True) for ts in counts.values() for p, m in ts),
               np.zeros(len(model.resources), dtype=np.int64))
    rounds = rounds_for(model, load)
    if Fraction(rounds, c) > target:
        return None
    return Batch(c, rounds, counts)


def dive_batch(model: ChannelModel, packing: Packing, chunks: int, rounds: int, *,
               time_limit_s: float = 20.0, budget: SolveBudget | None = None) -> Batch | None:
    """Whole chunk counts for a batch of ``chunks`` per source in ``rounds`` rounds, by diving.

    Repeatedly solves the LP for the chunks still unassigned within the capacity left
    (exact), commits ``floor(w)`` copies of every tree with LP weight ``w >= 1`` (that keeps
    the LP feasible), or else one copy of the heaviest tree, and re-solves; gives up
    (returns None) when the LP can no longer place the rest or time runs out (on ``budget``'s
    clock; default: a fresh :class:`~synth.solve.budget.SolveBudget`).
    """
    budget = budget_or_new(budget)
    window = budget.window(time_limit_s)
    den = math.lcm(*(c.denominator for c in model.cap_exact))   # exact units: 1 / (q * den) chunk
    left = np.array([int(rounds * c * model.q * den) for c in model.cap_exact], dtype=np.int64)
    need = {s: chunks for s in packing.trees}
    counts: dict[int, dict[tuple[int, ...], int]] = {s: {} for s in need}
    pool = {s: list(packing.columns.get(s, [])) for s in need}
    while any(need.values()):
        if window.spent_s() > window.limit_s:
            return None
        cap = left / (model.q * den)
        part = pack_trees(model, list(need), demand={s: float(v) for s, v in need.items()},
                          capacity=cap, initial=pool, target_rate=1.0,
                          time_limit_s=max(0.5, window.left_s()), budget=budget)
        if part.rate < 1 - 1e-7:
            return None
        for s, ts in part.columns.items():
            pool[s] = list(dict.fromkeys(pool[s] + ts))
        picks = [(s, p, int(math.floor(w + 1e-9))) for s, ts in part.trees.items() for p, w in ts.items()
                 if w >= 1 - 1e-9]
        if not picks:
            s, p, _ = max(((s, p, w) for s, ts in part.trees.items() for p, w in ts.items()),
                          key=lambda t: t[2])
            picks = [(s, p, 1)]
        placed = 0
        for s, p, m in picks:
            m = min(m, need[s])
            load = model.tree_load(p, exact_q=True) * den
            if m <= 0 or np.any(m * load > left):
                continue
            left = left - m * load
            need[s] -= m
            counts[s][p] = counts[s].get(p, 0) + m
            placed += m
        if not placed:
            return None
    return Batch(chunks, rounds, {s: list(c.items()) for s, c in counts.items()})
