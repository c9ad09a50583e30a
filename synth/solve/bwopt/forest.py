"""The trees of one collective on one orientation: LP packing, tree pool, whole-chunk batch, stage bundles."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from synth.ir.fabric import Fabric
from synth.solve.budget import SolveBudget, budget_or_new
from synth.solve.bwopt.stage_reuse import staged_once
from synth.solve.bwopt.staging import Staged, fits
from synth.solve.bwopt.tree_batch import Batch, Bundle, dive_batch, integer_batch, rational_batch
from synth.solve.bwopt.tree_symmetry import permute_tree, symmetric_pool, symmetries, transversal
from synth.solve.bwopt.trees import (
    ChannelModel,
    Packing,
    level_loads,
    pack_trees,
    random_trees,
    tree_depth,
)

__all__ = ["EXACT_MAX_CHUNKS", "NEAR", "Forest", "batch_limit", "ring_chains"]

#: largest batch (chunks per source) tried to meet the LP optimum exactly: the denominator of the
#: target (rounds per chunk) when it is at most this, or the common denominator of the LP's weights
#: (:func:`synth.solve.bwopt.tree_batch.rational_batch`)
EXACT_MAX_CHUNKS = 256
#: where no batch of at most EXACT_MAX_CHUNKS meets the target exactly, the batch limit is raised to
#: the smallest batch whose whole rounds are within this factor of it
NEAR = Fraction(1001, 1000)


def batch_limit(target: Fraction, max_chunks: int) -> int:
    """The largest batch (chunks per source) the whole-chunk search tries for ``target`` rounds
    per chunk: ``max_chunks``, raised to ``target``'s denominator where that is at most
    :data:`EXACT_MAX_CHUNKS` (a batch of that size can meet the target exactly), else to the
    smallest batch ``c <= EXACT_MAX_CHUNKS`` with ``ceil(c * target) / c <= NEAR * target`` (if any).

    >>> batch_limit(Fraction(7, 38), 32), batch_limit(Fraction(7, 81), 32), batch_limit(Fraction(1, 2), 32)
    (38, 81, 32)
    >>> batch_limit(Fraction(7, 283), 32)
    202
    """
    if target.denominator <= max_chunks:
        return max_chunks
    if target.denominator <= EXACT_MAX_CHUNKS:
        return target.denominator
    near = (c for c in range(max_chunks + 1, EXACT_MAX_CHUNKS + 1)
            if Fraction(math.ceil(c * target), c) <= NEAR * target)
    return next(near, max_chunks)


def ring_chains(model: ChannelModel, sources: list[int]) -> dict[int, list[tuple[int, ...]]]:
    """Hamiltonian chains from each source along the rings of :mod:`synth.baselines` (both
    directions), where every hop is a tree edge of ``model``: rings are the balanced answer
    on fabrics that pack into rings (full DGX-1), so the step search should be able to use them."""
    try:
        from synth.baselines.ringsearch import find_rings
        rings = find_rings(model.fabric, 16).rings
    except Exception:           # noqa: BLE001 - rings are an optional hint
        return {}
    out: dict[int, list[tuple[int, ...]]] = {}
    n = model.n
    for ring in rings:
        for order in (list(ring), list(reversed(ring))):
            if len(order) != n:
                continue
            for s in sources:
                k = order.index(s)
                path = order[k:] + order[:k]
                if all(model.edge[a, b] for a, b in zip(path, path[1:])):
                    parent = [-1] * n
                    for a, b in zip(path, path[1:]):
                        parent[b] = a
                    out.setdefault(s, []).append(tuple(parent))
    return out


class Forest:
    """One collective's trees on one orientation: LP packing, tree pool, whole-chunk batch, steps."""

    def __init__(self, fabric: Fabric, reverse: bool, sources: list[int], efficiency=None,
                 budget: SolveBudget | None = None) -> None:
        self.model = ChannelModel(fabric, reverse, efficiency)
        self.budget = budget_or_new(budget)     # the clock every solve of this forest charges
        self.sources = sources
        self.packing: Packing | None = None
        self.target: Fraction | None = None
        self.batch: Batch | None = None
        self.staged: Staged | None = None
        self.pool: dict[int, list[tuple[int, ...]]] = {}
        self.chains: dict[int, list[tuple[int, ...]]] = {}
        self.gens: list[list[int]] = []
        self.trans: list[list[int]] | None = None
        self.orbit: list[Bundle] = []
        self.solve_s = 0.0

    def solve(self, bound: Fraction | None, max_chunks: int, time_limit_s: float) -> None:
        """LP packing, tree pool, whole chunk counts, then balanced steps, within ``time_limit_s``
        clock seconds of the forest's budget."""
        window = self.budget.window(time_limit_s)
        target_rate = float(1 / bound) if bound else None
        self.packing = pack_trees(self.model, self.sources, time_limit_s=0.5 * time_limit_s,
                                  target_rate=target_rate, budget=self.budget)
        lp = 1.0 / self.packing.rate
        near = bound is not None and lp <= float(bound) * (1 + 1e-7)
        self.target = bound if near else Fraction(lp).limit_denominator(10**4)
        self.pool = self._pool()
        self.batch = self._integer(batch_limit(self.target, max_chunks), max(1.0, 0.4 * window.left_s()))
        self.staged = staged_once(self.model, self._stage_bundles(), self.batch, max(1.0, window.left_s()),
                                  self.chains, self.packing.upper, self.budget)
        self.solve_s = window.spent_s()

    def _pool(self) -> dict[int, list[tuple[int, ...]]]:
        """Trees for the whole-chunk search: the LP's trees and their images under the fabric's
        symmetries, ring chains (up to 16 ranks), every generated column (up to 4000 in all)
        and random-price trees.  When the symmetries move rank 0 to every source, also
        ``self.orbit``: all these trees moved to source 0 plus random ones, each as a bundle
        of its images, one per source (see :func:`synth.solve.bwopt.tree_symmetry.transversal`)."""
        self.gens = symmetries(self.model)
        support = {s: list(ts) for s, ts in self.packing.trees.items()}
        pool = {s: ts for s, ts in symmetric_pool(support, self.gens, 64).items() if s in support}
        n, k = self.model.n, len(self.sources)
        self.chains = ring_chains(self.model, self.sources) if n <= 16 else {}
        extra = random_trees(self.model, self.sources, max(4, 1600 // (n * k) + 4))
        cols = self.packing.columns if sum(map(len, self.packing.columns.values())) <= 4000 else {}
        for s in self.sources:
            more = self.chains.get(s, []) + list(cols.get(s, [])) + extra.get(s, [])
            pool[s] = list(dict.fromkeys(pool.get(s, []) + more))
        self.trans = transversal(self.gens, n) if k == n > 1 else None
        if self.trans:
            inv = [[0] * n for _ in range(n)]
            for s, sig in enumerate(self.trans):
                for i, j in enumerate(sig):
                    inv[s][j] = i
            mapped = [permute_tree(p, inv[s]) for s in self.sources for p in list(support.get(s, [])) + pool[s]]
            base = list(dict.fromkeys(mapped + random_trees(self.model, [0], 300, seed=1)[0]))
            self.orbit = [tuple((s, permute_tree(p, self.trans[s])) for s in self.sources)
                          for p in base[:max(200, 40000 // n)]]
        return pool

    def _integer(self, max_chunks: int, time_limit_s: float) -> Batch:
        """Whole chunk counts: symmetric bundles first (when there are), then per-tree, then the LP's
        weights as exact fractions, then diving."""
        window = self.budget.window(time_limit_s)
        exact_ = lambda b: Fraction(b.rounds, b.chunks) <= self.target  # noqa: E731
        best = None
        if self.orbit:            # shallowest trees first: fewer steps later
            depths = sorted({tree_depth(b[0][1]) for b in self.orbit})
            for cap in [d for d in (3, 5, 8) if d < depths[-1]] + [depths[-1]]:
                some = [b for b in self.orbit if tree_depth(b[0][1]) <= cap]
                if not some or len({s for b in some for s, _ in b}) < len(self.sources):
                    continue
                got = integer_batch(self.model, self.packing, self.target, max_chunks=max_chunks,
                                    time_limit_s=max(1.0, time_limit_s / 8), bundles=some, budget=self.budget)
                if best is None or Fraction(got.rounds, got.chunks) < Fraction(best.rounds, best.chunks):
                    best = got
                if exact_(best):
                    return best
        plain = integer_batch(self.model, self.packing, self.target, max_chunks=max_chunks,
                              time_limit_s=window.left_s() / 2, pool=self.pool, budget=self.budget)
        if best is None or Fraction(plain.rounds, plain.chunks) < Fraction(best.rounds, best.chunks):
            best = plain
        if not exact_(best):      # the LP's own weights as exact fractions: a batch of their common denominator
            ratio = rational_batch(self.model, self.packing, self.target, max_chunks=EXACT_MAX_CHUNKS)
            if ratio is not None:
                return ratio
        sizes = sorted(range(1, max_chunks + 1), key=lambda c: (Fraction(math.ceil(c * self.target), c), c))
        for c in sizes[:4]:
            rounds = math.ceil(c * self.target)
            left = window.left_s()
            if Fraction(rounds, c) >= Fraction(best.rounds, best.chunks) or left < 1:
                break
            dived = dive_batch(self.model, self.packing, c, rounds, time_limit_s=left / 2, budget=self.budget)
            if dived is not None:
                return dived
        return best

    def _stage_bundles(self) -> list[Bundle]:
        """Columns for the step search: with symmetric bundles, those whose source-0 tree is in
        the batch and the shallowest others; else the batch's trees, their symmetric images,
        ring chains and then the whole-chunk pool, up to a size budget per source."""
        used = {s: [p for p, _ in ts] for s, ts in self.batch.counts.items()}
        budget = max(8, 6000 // (self.model.n * len(self.sources)))
        if self.orbit:
            mine = [b for b in self.orbit if b[0][1] in used.get(b[0][0], [])]
            if sum(len(ts) for ts in used.values()) == len(mine) * len(self.sources):
                shallow = sorted(self.orbit, key=lambda b: tree_depth(b[0][1]))[:max(24, 2400 // self.model.n)]
                return list(dict.fromkeys(mine + shallow))
        pool = {s: ts for s, ts in symmetric_pool(used, self.gens, 16).items() if s in used}
        out = []
        for s in self.sources:
            first = list(dict.fromkeys(used[s] + pool.get(s, []) + self.chains.get(s, [])))
            out += [((s, p),) for p in list(dict.fromkeys(first + self.pool.get(s, [])))[:max(budget, len(first))]]
        return out

    def reuse(self, other: "Forest") -> bool:
        """Adopt ``other``'s trees when they fit this orientation step by step in as many rounds
        (on a fabric whose links are the same both ways a broadcast forest, run backwards,
        is as good a reduce forest)."""
        st = other.staged
        total = np.zeros(len(self.model.resources), dtype=np.int64)
        for t, zt in enumerate(st.z):
            load = sum((m * lv[t - d] for ts in st.counts.values() for p, d, m in ts
                        for lv in [level_loads(self.model, p)] if 0 <= t - d < len(lv)),
                       np.zeros(len(self.model.resources), dtype=np.int64))
            if not fits(self.model, load, zt):
                return False
            total += load
        if not fits(self.model, total, st.rounds):
            return False
        self.packing, self.target, self.batch, self.staged = other.packing, other.target, other.batch, st
        return True

    @property
    def depth(self) -> int:
        return max(tree_depth(p) for ts in self.batch.counts.values() for p, _ in ts)
