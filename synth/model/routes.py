"""Channel routes as the cost model reads them: resource indices, float fractions and latency (µs).

:class:`ChannelRoutes` answers one channel at a time (a dictionary filled on first use);
:class:`StepRoutes` answers a whole step at once from the fabric's
:class:`synth.ir.route_table.RouteTable` (arrays over every channel): a step of the direct
all-reduce on 1,024 fully connected GPUs has a million transfers, and looking each up in a
dictionary cost more than the rest of the model.  Both give the same entries, in route order,
with the same arithmetic (``float`` of each fraction, the channel's latency plus the network's
extra where the route crosses it), so the model's numbers do not depend on the path.

>>> from synth.ir.fabric import build_fabric
>>> from topo_probe.machines.generators import fully_connected
>>> fab = build_fabric(fully_connected(3))
>>> index = {r: k for k, r in enumerate(fab.resources)}
>>> one = ChannelRoutes(fab, index, np.zeros(len(index), dtype=bool), 0.0)
>>> from synth.ir.route_table import route_table
>>> steps = StepRoutes(route_table(fab), fab, np.zeros(len(index), dtype=bool), 0.0)
>>> idx, frac, lat = steps.entries([0, 2], [1, 0])
>>> [int(v) for v in idx] == [int(one.get((0, 1))[0][0]), int(one.get((2, 0))[0][0])], frac.tolist()
(True, [1.0, 1.0])
>>> lat.tolist() == [one.get((0, 1))[2], one.get((2, 0))[2]]
True
"""

from __future__ import annotations

import numpy as np

__all__ = ["ChannelRoutes", "StepRoutes"]


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


class StepRoutes:
    """A whole step's route entries from the fabric's :class:`synth.ir.route_table.RouteTable`, and
    each transfer's latency: its channel's, plus ``extra_us`` where its route crosses the network."""

    def __init__(self, table, fabric, network: np.ndarray, extra_us: float) -> None:
        self.table = table
        hops = np.concatenate([[0], np.cumsum(network[table.idx])]) if len(table.idx) else np.zeros(1)
        crosses = hops[table.start[1:]] > hops[table.start[:-1]]
        latency = np.array([fabric.channel_latency_us(i, j) for i, j in table.pairs], dtype=float)
        self.lat = latency + np.where(crosses, extra_us, 0.0)

    def entries(self, src, dst) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``(resource indices, fractions, latency of each transfer in µs)``, entries in transfer and
        route order; None where some pair is not a channel (the one-by-one path reports it)."""
        got = self.table.entries(src, dst)
        return None if got is None else (got[1], got[2], self.lat[got[3]])
