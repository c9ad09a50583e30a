"""Randomized irregular single-host topologies for property tests (not a test module).

Three classes, each built from a few integers so that Hypothesis can draw and shrink them:

* :func:`uneven_mesh`: GPUs joined pairwise by direct links of uneven counts (0 to 7 per pair,
  a ring of at least one link keeps them connected), NVLink or Infinity Fabric;
* :func:`partial_allocation`: a preset (``dgx1-v100``, ``mi300x``, ...) restricted to some of its
  GPUs (:meth:`topo_probe.topology.model.Topology.subset`), so pairs without a direct link go
  through the preset's PCIe tree;
* :func:`mixed_nvlink_pcie`: a sparse NVLink graph (possibly disconnected) with every GPU also
  under a PCIe tree of one or two sockets, so some pairs talk only over PCIe.
"""

from __future__ import annotations

from topo_probe import get_preset
from topo_probe.machines.generators import add_pcie_tree
from topo_probe.topology.model import Topology

__all__ = ["uneven_mesh", "partial_allocation", "mixed_nvlink_pcie", "PARTIAL_PRESETS"]

#: presets whose partial allocations the tests draw
PARTIAL_PRESETS = ("dgx1-v100", "mi300x", "pcie-8gpu-2socket")


def _pairs(n: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(n) for j in range(i + 1, n)]


def uneven_mesh(n: int, counts: list[int], kind: str = "nvlink", bandwidth_gbps: float = 25.0) -> Topology:
    """``n`` GPUs; pair ``(i, j)`` (in ``_pairs`` order) gets ``counts[k] % 8`` links of
    ``bandwidth_gbps`` GB/s each, ring pairs ``(i, i+1 mod n)`` at least one."""
    t = Topology(f"mesh{n}-" + "".join(str(c % 8) for c in counts))
    for i in range(n):
        t.add_gpu(i, host=0)
    ring = {tuple(sorted((i, (i + 1) % n))) for i in range(n)}
    for k, (i, j) in enumerate(_pairs(n)):
        links = counts[k % len(counts)] % 8 if counts else 0
        if (i, j) in ring:
            links = max(links, 1)
        if links:
            t.add_link(f"gpu{i}", f"gpu{j}", kind=kind, links=links, bandwidth_gbps=links * bandwidth_gbps)
    return t


def partial_allocation(preset: str, gpus: list[int]) -> Topology:
    """``preset`` restricted to ``gpus`` (renumbered 0.. in that order)."""
    return get_preset(preset).subset(gpus)


def mixed_nvlink_pcie(n: int, links: list[int], sockets: int = 1, nvlink_gbps: float = 25.0,
                      pcie_gbps: float = 31.5) -> Topology:
    """``n`` GPUs; pair ``k`` gets ``links[k] % 3`` NVLinks (none for most pairs once ``links``
    runs out); every GPU hangs under a PCIe switch, the first half under socket 0 and the rest
    under socket 1 when ``sockets == 2`` (joined by a 62.4 GB/s inter-socket link)."""
    t = Topology(f"mixed{n}s{sockets}-" + "".join(str(c % 3) for c in links))
    for i in range(n):
        t.add_gpu(i, host=0)
    for k, (i, j) in enumerate(_pairs(n)):
        m = links[k] % 3 if k < len(links) else 0
        if m:
            t.add_link(f"gpu{i}", f"gpu{j}", kind="nvlink", links=m, bandwidth_gbps=m * nvlink_gbps)
    gpus = [f"gpu{i}" for i in range(n)]
    if sockets == 2:
        half = n // 2
        add_pcie_tree(t, [[[gpus[:half]]], [[gpus[half:]]]], pcie_gbps=pcie_gbps, inter_socket_gbps=62.4)
    else:
        add_pcie_tree(t, [[[gpus]]], pcie_gbps=pcie_gbps, inter_socket_gbps=0.0)
    return t
