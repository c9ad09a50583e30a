"""Channel routes as the cost model reads them: resource indices, float fractions and latency (µs).

:class:`ChannelRoutes` answers one channel at a time (a dictionary filled on first use);
:class:`RouteTable` answers a whole step at once from arrays over every channel of a fabric
(``src * n + dst`` -> the channel's entries), built on the first big step: a step of the
direct all-reduce on 1,024 fully connected GPUs has a million transfers, and looking each up
in a dictionary cost more than the rest of the model.  Both give the same entries, in route
order, with the same arithmetic (``float`` of each fraction, the channel's latency plus the
network's extra where the route crosses it), so the model's numbers do not depend on the path.

>>> from synth.ir.fabric import build_fabric
>>> from topo_probe.machines.generators import fully_connected
>>> fab = build_fabric(fully_connected(3))
>>> index = {r: k for k, r in enumerate(fab.resources)}
>>> one = ChannelRoutes(fab, index, np.zeros(len(index), dtype=bool), 0.0)
>>> table = RouteTable(fab, index, np.zeros(len(index), dtype=bool), 0.0)
>>> starts, idx, frac, lat = table.entries([0, 2], [1, 0])
>>> [int(v) for v in idx] == [int(one.get((0, 1))[0][0]), int(one.get((2, 0))[0][0])], frac.tolist()
(True, [1.0, 1.0])
"""

from __future__ import annotations

import numpy as np

__all__ = ["ChannelRoutes", "RouteTable"]


class ChannelRoutes(dict):
    """Channel -> ``(resource indices, fractions, latency in µs)``: the route as two NumPy arrays
    (in route order) and the channel's latency plus ``extra_us`` where the route crosses the
    network; filled on first use (a cluster's fabric computes its million routes on demand;
    caching all of them would cost gigabytes)."""

    LIMIT = 300_000

    def __init__(self, fabric, index: dict, network: np.ndarray, extra_us: float) -> None:
        super().__init__()
        self.fabric, self.channels, self.index = fabric, fabric.channels, index
        self.network, self.extra_us = network, extra_us

    def get(self, key, default=None):
        hit = dict.get(self, key)
        if hit is not None:
            return hit
        route = self.channels.get(key)
        if route is None:
            return default
        idx = np.array([self.index[r] for r, _ in route], dtype=np.intp)
        frac = np.array([float(f) for _, f in route], dtype=float)
        crosses = bool(self.network[idx].any()) if len(idx) else False
        lat = self.fabric.channel_latency_us(*key) + (self.extra_us if crosses else 0.0)
        hit = (idx, frac, lat)
        if len(self) < self.LIMIT:
            self[key] = hit
        return hit


class RouteTable:
    """Every channel of a (non-cluster) fabric as arrays: ``slot[src * n + dst]`` is the channel's
    row (-1: no channel), its entries ``idx/frac[start[row]:start[row + 1]]``, its latency
    ``lat[row]`` (µs, network extra included).  Built once from ``fabric.channels`` (about 40
    bytes per route entry: 40 MiB for 1,024 fully connected GPUs)."""

    def __init__(self, fabric, index: dict, network: np.ndarray, extra_us: float) -> None:
        n = self.n = fabric.num_ranks
        self.slot = np.full(n * n, -1, dtype=np.int64)
        lengths, idx, frac, lat = [], [], [], []
        latency = fabric.channel_latency_us
        for row, ((i, j), route) in enumerate(fabric.channels.items()):
            self.slot[i * n + j] = row
            lengths.append(len(route))
            ks = [index[r] for r, _ in route]
            idx += ks
            frac += [float(f) for _, f in route]
            crosses = any(network[k] for k in ks)
            lat.append(latency(i, j) + (extra_us if crosses else 0.0))
        self.start = np.zeros(len(lengths) + 1, dtype=np.intp)
        np.cumsum(np.asarray(lengths, dtype=np.intp), out=self.start[1:])
        self.idx = np.asarray(idx, dtype=np.intp)
        self.frac = np.asarray(frac, dtype=float)
        self.lat = np.asarray(lat, dtype=float)

    def entries(self, src, dst) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """``(starts, resource indices, fractions, latency of each transfer in µs)`` of the
        transfers ``src[k] -> dst[k]``, their entries concatenated in transfer order; None where
        some pair is not a channel or has an empty route (the one-by-one path reports it)."""
        i = np.asarray(src, dtype=np.int64)
        j = np.asarray(dst, dtype=np.int64)
        n = self.n
        if len(i) == 0 or ((i < 0) | (i >= n) | (j < 0) | (j >= n)).any():
            return None
        rows = self.slot[i * n + j]
        if (rows < 0).any():
            return None
        lo, hi = self.start[rows], self.start[rows + 1]
        lengths = hi - lo
        if not lengths.all():
            return None
        starts = np.zeros(len(rows) + 1, dtype=np.intp)
        np.cumsum(lengths, out=starts[1:])
        # entry e of the answer is entry (e - starts[k]) of transfer k's route
        at = np.arange(starts[-1]) - np.repeat(starts[:-1] - lo, lengths)
        return starts, self.idx[at], self.frac[at], self.lat[rows]
