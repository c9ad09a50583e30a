"""A built topology held to the loaders' limits (:mod:`topo_probe.limits`): :func:`edge_limits` gives an edge
kind's link count and bandwidth range, :func:`check_edge` checks one edge, :func:`check_topology` a whole topology
(every loader calls it before it returns one).  Each failure is one line of the caller's error class naming the
file and the node or link.

>>> from topo_probe.errors import TopologyError
>>> check_edge("nvlink", 65, 25.0, "t.json: link gpu0->gpu1: ", TopologyError)
Traceback (most recent call last):
...
topo_probe.errors.TopologyError: t.json: link gpu0->gpu1: links must be at most 64, got 65
"""

from __future__ import annotations

from typing import Any

from topo_probe.errors import show
from topo_probe.limits import (MAX_BANDWIDTH_GBPS, MAX_EDGES, MAX_GPUS, MAX_LATENCY_US, MAX_LINKS_PER_EDGE,
                               MAX_NETWORK_LINKS_PER_EDGE, MAX_NODES, MAX_OVERSUBSCRIPTION, MIN_BANDWIDTH_GBPS)
from topo_probe.number_checks import check_float, check_int
from topo_probe.number_rules import is_int

__all__ = ["edge_limits", "check_edge", "check_topology"]


def edge_limits(kind: Any) -> tuple[int, float, float]:
    """(most links, least and most GB/s per direction) of an edge of ``kind``; a ``network`` edge's bandwidth is
    bounded per port (``bandwidth_gbps / links``: one NIC over R .. one NIC; a cluster's leaf uplink has
    :data:`MAX_NETWORK_LINKS_PER_EDGE` ports at most)."""
    if kind == "network":
        return MAX_NETWORK_LINKS_PER_EDGE, MIN_BANDWIDTH_GBPS / MAX_OVERSUBSCRIPTION, MAX_BANDWIDTH_GBPS
    return MAX_LINKS_PER_EDGE, MIN_BANDWIDTH_GBPS, MAX_BANDWIDTH_GBPS


def check_edge(kind: Any, links: Any, bw: Any, where: str, error: type[Exception]) -> tuple[int, float]:
    """(links, bandwidth_gbps) of an edge of ``kind`` checked by :func:`edge_limits`; errors start ``where`` + field.
    A network port's upper bound has a rounding's slack: cluster()'s m*S/R GB/s over ceil(m*P/R) ports can pass S
    by an ulp (S = 1e5, R = 2.3, m*P = 23)."""
    most, lo, hi = edge_limits(kind)
    n = check_int(links, f"{where}links", error, lo=1, hi=most)
    if kind != "network":
        return n, check_float(bw, f"{where}bandwidth_gbps", error, lo=lo, hi=hi, unit="GB/s")
    total = check_float(bw, f"{where}bandwidth_gbps", error, lo=lo, hi=hi * n * (1 + 1e-12), unit="GB/s")
    if total < lo * n:
        raise error(f"{where}bandwidth_gbps {total:g} GB/s over {n} links is {total / n:g} GB/s a port, less than "
                    f"the {lo:g} GB/s of a network port")
    return n, total


def check_topology(topo: Any, source: str, error: type[Exception]) -> Any:
    """Refuse a built topology that breaks physics or the size limits: no GPU, more than :data:`MAX_GPUS` GPUs /
    :data:`MAX_NODES` nodes / :data:`MAX_EDGES` edges, GPU indices (ranks) other than 0..n-1, an edge whose ``links``,
    ``bandwidth_gbps`` (:func:`check_edge`) or ``latency_us`` is out of range, a node whose ``numa_node``/``host``/
    ``gpu_numa_id`` is not an integer in -1..:data:`MAX_NODES` or whose NIC ``speed_gbps`` is.  Returns ``topo``."""
    g = topo.graph
    indices = [d.get("index") for _, d in g.nodes(data=True) if d.get("kind") == "gpu"]
    gpus = len(indices)
    if not all(map(is_int, indices)):
        raise error(f"{source}: topology {show(topo.name)}: a GPU index is not an integer: {show(indices)}")
    indices.sort()
    if gpus < 1:
        raise error(f"{source}: topology {show(topo.name)} has no GPU")
    if indices != list(range(gpus)):
        raise error(f"{source}: topology {show(topo.name)}: GPU indices must be 0..{gpus - 1}, got {show(indices)}")
    if gpus > MAX_GPUS or g.number_of_nodes() > MAX_NODES or g.number_of_edges() > MAX_EDGES:
        raise error(f"{source}: topology {show(topo.name)} has {gpus} GPUs, {g.number_of_nodes()} nodes and "
                    f"{g.number_of_edges()} edges; the limits are {MAX_GPUS}, {MAX_NODES} and {MAX_EDGES}")
    for n, d in g.nodes(data=True):
        for key in ("numa_node", "host", "gpu_numa_id"):
            if d.get(key) is not None:
                check_int(d[key], f"{source}: node {n}: {key}", error, lo=-1, hi=MAX_NODES)
        if d.get("speed_gbps") is not None:
            check_float(d["speed_gbps"], f"{source}: node {n}: speed_gbps", error, lo=MIN_BANDWIDTH_GBPS,
                        hi=MAX_BANDWIDTH_GBPS, unit="GB/s")
    for u, v, d in g.edges(data=True):
        where = f"{source}: link {u}->{v}"
        check_edge(d.get("kind"), d.get("links"), d.get("bandwidth_gbps"), f"{where}: ", error)
        check_float(d.get("latency_us"), f"{where}: latency_us", error, lo=0.0, hi=MAX_LATENCY_US, unit="µs")
    return topo
