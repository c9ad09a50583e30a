"""Every channel of a fabric with listed channels as arrays, for whole steps at once.

``slot[src * n + dst]`` is the channel's row (-1: no channel); row ``k``'s route entries are
``idx[start[k]:start[k + 1]]`` (resources numbered in ``fabric.resources`` order) with the float
of each fraction in ``frac``.  :meth:`Fabric.load` and the cost model read a big step's routes
from here instead of one dictionary look-up per transfer (a step of the direct all-reduce on
1,024 fully connected GPUs has a million transfers); the entries and their order are the
channel's route, so sums over them match the one-by-one loops term by term.  A cluster's
channels are computed on demand and never listed (:mod:`synth.ir.cluster_routes` does that).

>>> from synth.ir.fabric import build_fabric
>>> from topo_probe.machines.generators import fully_connected
>>> fab = build_fabric(fully_connected(3))
>>> t = route_table(fab)
>>> starts, idx, frac, rows = t.entries([0, 2], [1, 0])
>>> [t.names[k] for k in idx], frac.tolist(), starts.tolist()
([('gpu0', 'gpu1'), ('gpu2', 'gpu0')], [1.0, 1.0], [0, 1, 2])
>>> t.entries([0], [0]) is None      # not a channel
True
"""

from __future__ import annotations

import numpy as np

__all__ = ["RouteTable", "route_table"]


class RouteTable:
    """The arrays of the module docstring for ``fabric`` (about 40 bytes per route entry)."""

    def __init__(self, fabric) -> None:
        n = self.n = fabric.num_ranks
        self.names = list(fabric.resources)
        index = {r: k for k, r in enumerate(self.names)}
        self.slot = np.full(n * n, -1, dtype=np.int64)
        self.pairs = list(fabric.channels)
        lengths, idx, frac = [], [], []
        for row, (i, j) in enumerate(self.pairs):
            route = fabric.channels[(i, j)]
            self.slot[i * n + j] = row
            lengths.append(len(route))
            idx += [index[r] for r, _ in route]
            frac += [float(f) for _, f in route]
        self.start = np.zeros(len(lengths) + 1, dtype=np.intp)
        np.cumsum(np.asarray(lengths, dtype=np.intp), out=self.start[1:])
        self.idx = np.asarray(idx, dtype=np.intp)
        self.frac = np.asarray(frac, dtype=float)

    def entries(self, src, dst) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """``(starts, resource indices, fractions, rows)`` of the transfers ``src[k] -> dst[k]``: their
        entries concatenated in transfer order, transfer ``k``'s at ``starts[k]:starts[k + 1]``; None
        where some pair is not a channel or has an empty route (the one-by-one path reports it)."""
        i = np.asarray(src, dtype=np.int64)
        j = np.asarray(dst, dtype=np.int64)
        n = self.n
        if len(i) == 0 or ((i < 0) | (i >= n) | (j < 0) | (j >= n)).any():
            return None
        rows = self.slot[i * n + j]
        if (rows < 0).any():
            return None
        lo = self.start[rows]
        lengths = self.start[rows + 1] - lo
        if not lengths.all():
            return None
        starts = np.zeros(len(rows) + 1, dtype=np.intp)
        np.cumsum(lengths, out=starts[1:])
        at = np.arange(starts[-1]) - np.repeat(starts[:-1] - lo, lengths)   # entry e: route entry e - starts[k]
        return starts, self.idx[at], self.frac[at], rows


def route_table(fabric) -> RouteTable | None:
    """``fabric``'s :class:`RouteTable`, made once and kept on it; None for a cluster's fabric."""
    if type(fabric.channels) is not dict:
        return None
    table = fabric.__dict__.get("_route_table")
    if table is None or table.n != fabric.num_ranks or len(table.pairs) != len(fabric.channels):
        table = fabric.__dict__["_route_table"] = RouteTable(fabric)
    return table
