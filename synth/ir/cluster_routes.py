"""The routes of many channels of a cluster fabric at once, as NumPy arrays.

:class:`synth.ir.cluster_fabric.ClusterChannels` computes one channel's route from its template
on demand; a step of a 1,024-rank schedule asks for a million of them.  :class:`RouteArrays`
reads the same templates for a whole step at once: each transfer's template (pair class and
local GPUs), its route entries laid out one transfer after another (resource index, fraction),
and each channel's latency (µs, its slowest path) plus an extra latency (µs) where its route
crosses a network resource.  The entries are exactly those of ``channels[(i, j)]``, in the same
order, so sums over them in array order equal sums over the channels one by one.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from synth.ir.cluster_fabric import ClusterChannels, ClusterLatencies

__all__ = ["RouteArrays"]


class RouteArrays:
    """Vectorised routes of ``channels`` with resources numbered by ``index`` (resource -> int);
    ``network[k]``: resource ``k`` is a network link, adding ``extra_us`` µs to a channel's
    latency."""

    def __init__(self, channels: ClusterChannels, latencies: ClusterLatencies | None, index: dict,
                 network: np.ndarray | None = None, extra_us: float = 0.0) -> None:
        g = channels.g
        self.g, self.n = g, channels.n
        self.groups = np.asarray(channels.groups, dtype=np.intp)
        self.network = np.zeros(len(index), dtype=bool) if network is None else np.asarray(network, dtype=bool)
        self.extra_us = float(extra_us)
        width = max((len(t) for t in channels.tables), default=0)
        self.res = np.full((channels.H, max(width, 1)), -1, dtype=np.intp)     # [host, pattern] -> index
        for h, table in enumerate(channels.tables):
            for pid, r in enumerate(table):
                k = index.get(r)
                if k is not None:
                    self.res[h, pid] = k
        count = 3 * g * g
        self.valid = np.zeros(count, dtype=bool)
        self.length = np.zeros(count, dtype=np.intp)
        self.latency = np.zeros(count)
        self.routes: list = [None] * count          # template -> (sides, pattern ids, fractions, fraction ids)
        #: the distinct route fractions (exact), numbered as the fraction ids of the routes
        self.fractions: list[Fraction] = []
        ids: dict[tuple[int, int], int] = {}
        for c in range(3):
            tpl = channels.templates[c]
            if tpl is None:
                continue
            for a in range(g):
                for b in range(g):
                    route = tpl[a][b]
                    slowest = None if latencies is None or latencies._max[c] is None else latencies._max[c][a][b]
                    if route is None or (latencies is not None and slowest is None):
                        continue
                    t = (c * g + a) * g + b
                    self.valid[t] = True
                    self.length[t] = len(route)
                    self.latency[t] = 0.0 if slowest is None else slowest
                    fids = [ids.setdefault((Fraction(f).numerator, Fraction(f).denominator), len(ids))
                            for _, _, f in route]
                    self.routes[t] = ([side for side, _, _ in route], [pid for _, pid, _ in route],
                                      [float(f) for _, _, f in route], fids)
        self.fractions = [Fraction(num, den) for num, den in ids]

    def transfer_latencies(self, idx: np.ndarray, starts: np.ndarray, t: np.ndarray) -> np.ndarray:
        """µs of each transfer of :meth:`entries`' answer: its channel's latency, plus the extra
        where its route crosses the network."""
        crosses = np.logical_or.reduceat(self.network[idx], starts[:-1])
        return np.maximum(0.0, self.latency[t] + np.where(crosses, self.extra_us, 0.0))

    def entries(self, src, dst) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """``(starts, resource indices, fractions, templates, fraction ids)``: transfer ``k``'s
        route entries are ``starts[k]:starts[k + 1]`` of the indices, fractions (floats) and
        fraction ids (into :attr:`fractions`, exact); None where some pair is not a channel (or a route
        has no entries), for the caller's one-by-one path to report."""
        i = np.asarray(src, dtype=np.intp)
        j = np.asarray(dst, dtype=np.intp)
        if len(i) == 0 or ((i < 0) | (i >= self.n) | (j < 0) | (j >= self.n) | (i == j)).any():
            return None
        h, a = np.divmod(i, self.g)
        h2, b = np.divmod(j, self.g)
        c = np.where(h == h2, 0, np.where(self.groups[h] == self.groups[h2], 1, 2))
        t = (c * self.g + a) * self.g + b
        if not self.valid[t].all():
            return None
        lengths = self.length[t]
        if not lengths.all():
            return None
        starts = np.zeros(len(t) + 1, dtype=np.intp)
        np.cumsum(lengths, out=starts[1:])
        idx = np.empty(starts[-1], dtype=np.intp)
        frac = np.empty(starts[-1])
        fid = np.empty(starts[-1], dtype=np.intp)
        order = np.argsort(t, kind="stable")
        kinds, first = np.unique(t[order], return_index=True)
        bounds = np.append(first, len(t))
        for u, lo, hi in zip(kinds.tolist(), bounds[:-1].tolist(), bounds[1:].tolist()):
            at = order[lo:hi]
            base = starts[at]
            sides, pids, fracs, fids = self.routes[u]
            hs, hd = h[at], h2[at]
            for e, (side, pid, f, q) in enumerate(zip(sides, pids, fracs, fids)):
                idx[base + e] = self.res[hd if side else hs, pid]
                frac[base + e] = f
                fid[base + e] = q
        if (idx < 0).any():
            return None
        return starts, idx, frac, t, fid

    def exact_loads(self, src, dst, counts) -> dict[int, Fraction] | None:
        """Chunks (exact) per resource index of ``counts[k]`` transfers over channel ``src[k] ->
        dst[k]``: the counts summed per (resource, fraction) in integers, then one Fraction
        product per pair; None as for :meth:`entries`."""
        got = self.entries(src, dst)
        if got is None:
            return None
        starts, idx, _, _, fid = got
        per = np.repeat(np.asarray(counts, dtype=np.int64), np.diff(starts))
        F = max(len(self.fractions), 1)
        keys, inverse = np.unique(idx.astype(np.int64) * F + fid, return_inverse=True)
        sums = np.zeros(len(keys), dtype=np.int64)
        np.add.at(sums, inverse, per)                       # integer sums, exact
        out: dict[int, Fraction] = {}
        for key, k in zip(keys.tolist(), sums.tolist()):
            r, q = divmod(key, F)
            f = self.fractions[q]
            out[r] = out.get(r, Fraction(0)) + Fraction(k * f.numerator, f.denominator)
        return out
