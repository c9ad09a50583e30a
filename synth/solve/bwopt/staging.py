"""Staging: which step each tree level of a whole-chunk batch moves in.

A :class:`synth.solve.bwopt.tree_batch.Batch` says how many chunks per source go down each spanning
arborescence so that one batch fits ``R`` whole rounds of every resource.  Staging gives
every chunk a tree and a delay ``d``: the tree's level ``l`` (the edges leaving nodes at
depth ``l``) moves in step ``d + l``.  :func:`stage` picks trees and delays with CP-SAT so
that the sum over steps of each step's whole rounds (``z_t``, the fewest rounds its exact
loads need) is smallest while the batch still fits ``R`` rounds in all; a perfectly
balanced staging has ``sum z_t = R``.  The result is a :class:`Staged`.  :func:`fits` is the
exact capacity test (loads in chunks, capacities in chunks per round) that staging and
:mod:`synth.solve.bwopt.optimal` share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from synth.solve.budget import SolveBudget, budget_or_new, limit_cp_sat
from synth.solve.bwopt.staging_clock import StagingClock
from synth.solve.bwopt.staging_proofs import perfect_possible, staging_possible
from synth.solve.bwopt.staging_seed import SEED_S, count_seed, place_greedily
from synth.solve.bwopt.tree_batch import Batch, Bundle
from synth.solve.bwopt.trees import ChannelModel, hop_matrix, level_loads, rounds_for, tree_depth
from synth.solve.stoppable import solve_cp_sat

__all__ = ["IMPERFECT_S", "QUICK_S", "Staged", "StagingClock", "fits", "greedy_staging", "stage", "staging_meta"]

#: clock seconds (deterministic CP-SAT time) per step count in the first, ascending pass of :func:`stage`
QUICK_S = 1.0
#: clock seconds of CP-SAT in the descending pass of :func:`stage` where no perfect staging exists
#: (:func:`~synth.solve.bwopt.staging_proofs.perfect_possible`), once, from the best of the seeds
#: (:mod:`synth.solve.bwopt.staging_seed`) at those step counts, over its bundles: small models still
#: find their few-step stagings (pcie-8gpu-2socket broadcast: 3 steps), large ones stop early (2 x dgx-h100
#: rail broadcast: 15 clock s over every bundle found nothing; from the seed, 25 whole rounds in 11 steps,
#: where the greedy staging has 26 in 15)
IMPERFECT_S = 0.3


@dataclass
class Staged:
    """A batch with delays: ``counts[s]`` lists ``(tree, delay, chunks)``; step ``t`` needs at
    most ``z[t]`` whole rounds; the batch needs ``rounds`` in all when steps overlap.

    ``how`` says which search made it: ``cp-sat`` (the best CP-SAT staging found, optimal only
    where ``sum z == lower``), ``seeded`` (:mod:`synth.solve.bwopt.staging_seed`'s exact counts
    with greedy delays, which CP-SAT did not improve on), ``greedy`` (:func:`greedy_staging`: CP-SAT found no staging within
    its quick pass) or ``levels`` (no delays); ``lower`` is a proven lower bound on ``sum z`` of
    any staging of ``chunks`` chunks per source (the LP's rate bound, and at least the fewest
    steps), so ``sum z / lower`` is the staging's largest possible gap (0: not computed)."""

    chunks: int
    rounds: int
    z: list[int]
    counts: dict[int, list[tuple[tuple[int, ...], int, int]]]
    how: str = "cp-sat"
    lower: int = 0

    @property
    def steps(self) -> int:
        return len(self.z)


def fits(model: ChannelModel, load_q: np.ndarray, rounds: int) -> bool:
    """Exact test: loads ``load_q / q`` fit ``rounds`` rounds of every resource."""
    return all(int(load_q[k]) * c.denominator <= rounds * c.numerator * model.q
               for k, c in enumerate(model.cap_exact) if load_q[k])


def _level_batch(model: ChannelModel, batch: Batch) -> Staged:
    """No delays: tree level ``l`` in step ``l``."""
    depth = max(tree_depth(p) for ts in batch.counts.values() for p, _ in ts)
    z = []
    for t in range(depth):
        load = sum((m * lv[t] for ts in batch.counts.values() for p, m in ts
                    for lv in [level_loads(model, p)] if t < len(lv)),
                   np.zeros(len(model.resources), dtype=np.int64))
        z.append(rounds_for(model, load))
    return Staged(batch.chunks, batch.rounds, z,
                  {s: [(p, 0, m) for p, m in ts] for s, ts in batch.counts.items()}, "levels")


def greedy_staging(model: ChannelModel, batch: Batch, mult: int = 1) -> Staged:
    """The batch's own trees, ``mult`` times its counts, with delays chosen greedily within as
    many steps as its deepest tree: deepest trees first, each chunk at the delay that adds the
    fewest whole rounds to the steps it loads (ties: the earliest).  It keeps the batch's trees
    and counts, so its total loads fit ``mult * batch.rounds`` rounds like the batch's; steps
    no chunk loads are left out.  Costs one small array operation per chunk, no solver."""
    counts = {((s, p),): m * mult for s, ts in batch.counts.items() for p, m in ts}
    levels = {b: level_loads(model, b[0][1]) for b in counts}
    z, placed = place_greedily(model, levels, counts, max(map(len, levels.values())))
    return _compacted(Staged(batch.chunks * mult, batch.rounds * mult, z, {}, "greedy"), placed, list(batch.counts))


def _compacted(staged: Staged, placed: dict, sources: list[int]) -> Staged:
    """``staged`` with the chunks of ``placed`` (``(bundle, delay) -> chunks``) as its counts and
    the steps no chunk loads (``z == 0``) left out: a tree loads consecutive steps, so its first
    step keeps its place among the others."""
    used = [t for t, v in enumerate(staged.z) if v]
    index = {t: k for k, t in enumerate(used)}
    counts: dict[int, list] = {s: [] for s in sources}
    for (b, d), k in placed.items():
        for s, p in b:
            counts[s].append((p, index[d], k))
    return replace(staged, z=[staged.z[t] for t in used], counts=counts)


def stage(model: ChannelModel, bundles: list[Bundle], batch: Batch, time_limit_s: float,
          chains: dict[int, list[tuple[int, ...]]] | None = None,
          upper_rate: float | None = None, budget: SolveBudget | None = None,
          clock: "StagingClock | None" = None) -> Staged:
    """Trees and delays for ``batch.chunks`` (then twice that) chunks per source that keep the
    batch within its total ``rounds`` and minimise the sum of per-step whole rounds.

    Columns are (bundle, delay): a bundle's trees all get the same count and delay.  A perfectly
    balanced staging has sum of steps = ``R`` (so at most ``R`` steps).  First, step counts from
    the longest shortest path up to ``min(R, depth + 2)`` get :data:`QUICK_S` clock seconds each;
    the first perfect staging found ends the search (fewest steps); step counts at which
    :func:`~synth.solve.bwopt.staging_proofs.perfect_possible` proves that none exists are
    skipped.  Otherwise step counts are tried from ``min(R, depth + 2)`` down to the longest
    shortest path (:func:`_descend`: those without a perfect staging get a seed each, and every
    seed :data:`IMPERFECT_S` clock seconds of CP-SAT; those where
    :func:`~synth.solve.bwopt.staging_proofs.staging_possible` proves that no staging at all
    exists nothing); the search goes down while stagings stay perfect and ends at the time limit
    (at most 60 clock seconds).  Hints: the batch without delays, or one chunk per ring of ``chains``.  ``upper_rate`` (a proven bound on the LP rate)
    gives CP-SAT the lower bound ``sum z >= c / upper_rate``.  Falls back to
    :func:`greedy_staging` where the quick pass found no staging, else to the batch's own trees
    without delays.  The result carries its proven lower bound (:class:`Staged`).  Time is
    counted on ``budget`` (default: a fresh :class:`~synth.solve.budget.SolveBudget`); ``clock``
    (a :class:`StagingClock`, made here if None) records how the time left was read.
    """
    budget = budget_or_new(budget)
    window = budget.window(min(time_limit_s, 60.0))
    clock = clock if clock is not None else StagingClock()
    clock.window = window
    best = _level_batch(model, batch)
    hops = hop_matrix(model)
    sources = sorted(batch.counts)
    shortest = int(max(hops[s].max() for s in sources))
    counts = {(s, p): k for s, ts in batch.counts.items() for p, k in ts}
    bundles = list(dict.fromkeys(bundles + [((s, p),) for (s, p) in counts if len(bundles[0]) == 1]))
    levels = {b: _bundle_levels(model, b) for b in bundles}
    depth = len(best.z)
    for mult in (1, 2):
        c, R = batch.chunks * mult, batch.rounds * mult
        hint = {(b, 0): min(counts.get(sp, 0) for sp in b) * mult for b in bundles}
        ring_hint = _ring_hint(model, chains, bundles, c, R, levels)
        top = min(R, max(depth, shortest) + 2)
        if ring_hint:                         # the rings are bandwidth-optimal here: offer them
            top = max(top, model.n - 1)
        lb = math.ceil(c / upper_rate * (1 - 1e-9)) if upper_rate else 1
        def hint_at(S: int, ring_hint=ring_hint, hint=hint) -> dict | None:
            return ring_hint if ring_hint and S >= model.n - 1 else hint if S >= depth else None
        quick = _first_perfect(model, levels, sources, c, R, range(max(shortest, 1), top + 1), hint_at,
                               lb, clock, settled := set(), no_perfect := set(), budget)
        for got in quick or [greedy_staging(model, batch, mult)]:     # none found: the greedy one to beat
            best = got if _better(got, best) else best
        if quick and sum(quick[-1].z) == R:     # the fewest steps a perfect staging can have at this batch
            break
        best, timed_out = _descend(model, levels, sources, c, R, range(top, shortest - 1, -1), hint_at, lb, clock,
                                   settled, no_perfect, budget, best)
        if timed_out:
            return _labelled(best, upper_rate, shortest)
        if Fraction(sum(best.z), best.chunks) <= Fraction(batch.rounds, batch.chunks):
            break
    return _labelled(best, upper_rate, shortest)


def _seeded(model: ChannelModel, levels: dict, sources: list[int], c: int, R: int, S: int,
            clock: StagingClock, budget: SolveBudget, known: dict) -> tuple[Staged, dict, list[int]] | None:
    """:mod:`synth.solve.bwopt.staging_seed`'s staging in at most ``S`` steps (exact counts, then
    greedy delays), with its chunks per ``(bundle, delay)`` and whole rounds of each of the ``S``
    steps (at least 1) as CP-SAT's hint; None where the count model found no counts.  ``known``
    keeps the counts per set of columns (bundles no deeper than ``S``) of this ``c`` and ``R``."""
    cols = tuple(b for b, lv in levels.items() if len(lv) <= S)    # the count model's columns
    if cols not in known:                        # the same columns at another step count: same counts
        known[cols] = count_seed(model, levels, sources, c, R, S, clock.share(SEED_S), budget)
    counts = known[cols]
    if not counts:
        return None
    z, placed = place_greedily(model, levels, counts, S)
    return _compacted(Staged(c, R, z, {}, "seeded"), placed, sources), placed, [max(v, 1) for v in z]


def _descend(model: ChannelModel, levels: dict, sources: list[int], c: int, R: int, steps: range, hint_for,
             lower: int, clock: StagingClock, settled: set[int], no_perfect: set[int], budget: SolveBudget,
             best: Staged) -> tuple[Staged, bool]:
    """:func:`stage`'s descending pass over ``steps``: the best of ``best`` and the stagings found,
    and whether the window's time ran out (then CP-SAT polished no seed).

    A step count of ``settled`` is skipped (proven in the quick pass); one where
    :func:`~synth.solve.bwopt.staging_proofs.staging_possible` proves that no staging exists (and
    every step count below it) gets nothing.  One of ``no_perfect`` gets
    :mod:`synth.solve.bwopt.staging_seed`'s staging (:func:`_seeded`), no CP-SAT; after the pass
    CP-SAT starts from every seed, over its bundles at its step count, for :data:`IMPERFECT_S` clock
    seconds each (:func:`_polish`).
    Any other step count gets CP-SAT (15 clock seconds, 5 once a perfect staging was found, with
    ``hint_for(S)``); the pass goes down while stagings stay perfect: the first step count without
    one after a perfect one ends it (its answer could not win)."""
    perfect, none_upto, known, seeds = False, 0, {}, []       # none_upto: no staging at all in this many steps
    for S in steps:
        if not clock.enough(0.5):
            return best, True
        if S in settled or (perfect and S in no_perfect):     # proven in the first pass, or not perfect
            if perfect:
                break
            continue
        limit = None if S in no_perfect else clock.share(5.0 if perfect else 15.0)
        if S <= none_upto or not staging_possible(model, levels, sources, c, R, S, budget):
            none_upto = max(none_upto, S)         # CP-SAT would find none (it answers None then)
            if perfect:
                break
            continue
        if limit is None:
            seed = _seeded(model, levels, sources, c, R, S, clock, budget, known)
            if seed is not None:
                seeds.append((S, seed))
                best = seed[0] if _better(seed[0], best) else best
            continue
        got = _stage_cp(model, levels, sources, c, R, S, hint_for(S), limit, budget, lower)
        if got is None or sum(got.z) > R:
            if perfect:
                break
            if got is None:
                continue
        if _better(got, best):
            best = got
        perfect = perfect or sum(got.z) == R
    got = _polish(model, levels, sources, c, R, seeds, clock, budget, lower) if seeds else None
    return (got if got is not None and _better(got, best) else best), False


def _polish(model: ChannelModel, levels: dict, sources: list[int], c: int, R: int, seeds: list, clock: StagingClock,
            budget: SolveBudget, lower: int) -> Staged | None:
    """CP-SAT (:func:`_stage_cp`, :data:`IMPERFECT_S` clock seconds each) over the bundles of every seed
    (``seeds``: ``(S, seed)`` pairs of :func:`_seeded`), at its ``S`` steps, with the seed as its complete
    hint, in ascending ``S``: the best of them (:func:`_better`), None where the window has no time left or
    CP-SAT found nothing.  A seed's own rounds do not say what it polishes to: more steps leave CP-SAT more
    ways to spread the loads (2 x DGX H100 on rails, broadcast: seeds of 28 rounds at 10, 11 and 12 steps
    polish to 24, 23 and 22), and a seed that is not the fewest can polish below them all (the same
    broadcast after the model's constants moved: only the tied seeds polished kept a staging that CP-SAT
    from the 10-step seed beats)."""
    best = None
    for S, (_, placed, z_hint) in sorted(seeds, key=lambda e: e[0]):
        if not clock.enough(0.5):
            continue
        got = _stage_cp(model, {b: levels[b] for b, _ in placed}, sources, c, R, S, placed,
                        clock.share(IMPERFECT_S), budget, lower, z_hint=z_hint)
        best = got if got is not None and (best is None or _better(got, best)) else best
    return best


def _bundle_levels(model: ChannelModel, bundle: Bundle) -> list[np.ndarray]:
    """A bundle's loads per tree level: its trees' level loads summed."""
    per = [level_loads(model, p) for _, p in bundle]
    return [sum(lv[i] for lv in per if i < len(lv)) for i in range(max(map(len, per)))]


def _ring_hint(model: ChannelModel, chains, bundles: list[Bundle], c: int, R: int, levels: dict) -> dict | None:
    """``c`` chunks per source spread over every other ring chain of ``chains`` (delay 0), where
    those rings fit the batch's ``R`` rounds (their one-tree bundles then join ``levels``); None
    where they do not, or the columns are not single trees."""
    rings = [ch[::2] for ch in (chains or {}).values()]
    if not (rings and len(bundles[0]) == 1 and all(len(r) == len(rings[0]) for r in rings)
            and c % len(rings[0]) == 0 and model.n - 1 <= R):
        return None
    hint = {(((s, p),), 0): c // len(ch[::2]) for s, ch in chains.items() for p in ch[::2]}
    load = sum(k * model.tree_load(b[0][1], exact_q=True) for (b, _), k in hint.items())
    if not fits(model, load, R):
        return None
    for key in hint:
        levels.setdefault(key[0], level_loads(model, key[0][0][1]))
    return hint


def _labelled(staged: Staged, upper_rate: float | None, shortest: int) -> Staged:
    """``staged`` with its proven lower bound on ``sum z`` (see :class:`Staged`): every step needs
    a whole round and a chunk crosses at least ``shortest`` steps; the batch's loads need at least
    ``chunks / upper_rate`` rounds (``upper_rate``: a proven bound on the LP's rate)."""
    rate = math.ceil(staged.chunks / upper_rate * (1 - 1e-9)) if upper_rate else 1
    return replace(staged, lower=max(rate, shortest, 1))


def staging_meta(stagings: list[Staged]) -> dict:
    """Schedule metadata on how its phases' steps were found: ``staging`` (each phase's
    :attr:`Staged.how`, comma-separated) and ``staging_gap``, the largest ratio of a phase's
    whole rounds (``sum z``) to its proven lower bound (1.0: proven optimal; None: no bound)."""
    gaps = [sum(st.z) / st.lower for st in stagings if st.lower]
    return {"staging": ",".join(st.how for st in stagings), "staging_gap": round(max(gaps), 4) if gaps else None}


def _better(a: Staged, b: Staged) -> bool:
    """``a`` needs fewer rounds per chunk (sum of step rounds over chunks) than ``b``, or as few
    in fewer steps."""
    ra, rb = Fraction(sum(a.z), a.chunks), Fraction(sum(b.z), b.chunks)
    return ra < rb or (ra == rb and a.steps < b.steps)


def _first_perfect(model: ChannelModel, levels: dict, sources: list[int], c: int, R: int, steps: range,
                   hint_for, lower: int, clock: "StagingClock", settled: set[int], no_perfect: set[int],
                   budget: SolveBudget) -> list[Staged]:
    """Stagings for the step counts of ``steps`` in ascending order, each searched for
    :data:`QUICK_S` clock seconds (of what ``clock``'s window has left), up to the first
    perfect one (``sum z = R``, then last);
    step counts whose answer was proven join ``settled``; step counts at which
    :func:`~synth.solve.bwopt.staging_proofs.perfect_possible` proves that no perfect staging
    exists join ``no_perfect`` unsearched.

    Few steps make a small model in which CP-SAT finds a perfect staging at once where one
    exists, whereas many steps can spend the whole budget a round or two above ``R``."""
    out = []
    for S in steps:
        if not clock.enough(0.5):
            break
        limit = clock.share(QUICK_S)              # read before the proof's LP charges the clock
        if not perfect_possible(model, levels, sources, c, R, S, budget):
            no_perfect.add(S)
            continue
        got = _stage_cp(model, levels, sources, c, R, S, hint_for(S), limit, budget, lower, settled=settled)
        if got is not None:
            out.append(got)
            if sum(got.z) == R:
                break
    return out


def _stage_cp(model: ChannelModel, levels: dict, sources: list[int], c: int, R: int, S: int,
              hint: dict | None, time_limit_s: float, budget: SolveBudget, lower: int = 1,
              max_terms: int = 600_000, settled: set[int] | None = None, z_hint: list[int] | None = None) -> Staged | None:
    """CP-SAT: counts per (bundle, delay) summing to ``c`` per source, total loads within ``R``
    rounds, step ``t``'s loads within ``z_t`` rounds; minimise ``sum z_t``.  ``S`` joins
    ``settled`` when the search proves its answer (optimal or infeasible)."""
    from ortools.sat.python import cp_model

    unit = [c_.numerator * model.q for c_ in model.cap_exact]        # loads scaled by cap.denominator
    dens = [c_.denominator for c_ in model.cap_exact]
    m = cp_model.CpModel()
    cols = [(b, d, m.NewIntVar(0, c, "")) for b, lv in levels.items() for d in range(S - len(lv) + 1)]
    if not cols or sum(int(np.count_nonzero(lv)) for b, _, _ in cols for lv in levels[b]) > max_terms:
        return None
    cover: dict[int, list] = {}
    for b, _, x in cols:
        for s, _ in b:
            cover.setdefault(s, []).append(x)
    if set(cover) != set(sources):
        return None
    rows: dict[tuple[int, ...], list] = {}    # by variable index, in source order: a set of the
    for xs in cover.values():                 # variables themselves would order the constraints by
        rows.setdefault(tuple(x.Index() for x in xs), xs)    # memory address, differently each run
    for xs in rows.values():
        m.Add(sum(xs) == c)
    z = [m.NewIntVar(1, R, f"z{t}") for t in range(S)]
    step: dict[tuple[int, int], list] = {}
    for b, d, x in cols:
        for lvl, load in enumerate(levels[b]):
            for r in np.flatnonzero(load):
                step.setdefault((int(r), d + lvl), []).append((int(load[r]) * dens[r], x))
    total: dict[int, list] = {}
    added: set[tuple] = set()      # rows repeated by resources with the same loads and capacity (about
    for (r, t), ts in step.items():      # 4 in 10 on 2 x dgx-h100 rail): each once, for presolve
        if _new_row(added, ts, (t, unit[r])):
            m.Add(sum(a * x for a, x in ts) <= z[t] * unit[r])
        total.setdefault(r, []).extend(ts)
    for r, ts in total.items():
        if _new_row(added, ts, R * unit[r]):
            m.Add(sum(a * x for a, x in ts) <= R * unit[r])
    if hint:
        for b, d, x in cols:
            m.AddHint(x, hint.get((b, d), 0))
    for v, h in zip(z, z_hint or []):
        m.AddHint(v, max(h, 1))
    m.Add(sum(z) >= lower)
    m.Minimize(sum(z))
    solver = cp_model.CpSolver()
    limit_cp_sat(solver, max(0.5, time_limit_s))
    status = solve_cp_sat(solver, m, budget)
    if settled is not None and status in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
        settled.add(S)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    counts: dict[int, list] = {s: [] for s in sources}
    for b, d, x in cols:
        if solver.Value(x):
            for s, p in b:
                counts[s].append((p, d, int(solver.Value(x))))
    return Staged(c, R, [int(solver.Value(v)) for v in z], counts)


def _new_row(added: set[tuple], terms: list, bound) -> bool:
    """Whether the row of ``terms`` (``(coefficient, variable)``) within ``bound`` is not in
    ``added`` yet (then it is added): the same constraint twice only slows CP-SAT's presolve."""
    key = (bound, tuple(sorted((x.Index(), a) for a, x in terms)))
    if key in added:
        return False
    added.add(key)
    return True
