"""The PCIe rate a host's GPUs stream at, read from the Topology's own links, as NCCL's topology rates them: each
PCIe link at its own lanes x speed (NVIDIA/nccl v2.28.9-1 src/graph/topo.cc lines 482-492, ``width*speed/80.0``
from the device's ``link_width`` / ``link_speed``), a path at its slowest link (src/graph/paths.cc line 67,
``bw = std::min(path->bw, link->bw)``), and a channel's bandwidth taken from every link its path crosses, the
search refusing a path where one link has less left (src/graph/search.cc ``followPath`` lines 79-112, line 110
``link->bw < fwBw``; ``ncclTopoFollowPath`` lines 120-162).  So no ring between the host's GPUs streams faster than
the slowest PCIe link between them: the GPU's own link (its generation and width: Gen3 x8 is 7.88 GB/s), a
switch uplink narrower than it, or the link between two CPU sockets; not a ``<pcilink>`` between two switches, which
NCCL rates at ``LOC_BW`` (topo.cc line 637).  GB/s per direction (1e9 bytes/s).

>>> from topo_probe import get_preset
>>> t = get_preset("l40s-8gpu-pcie")
>>> gpu_pcie_gen(t), pcie_path_gbs(t, list(range(t.num_gpus)), 4)
(4, 0.0)
"""

from __future__ import annotations

import math

from synth.model.nccl.constants import PCIE_X16_GBS
from topo_probe.topology.model import Topology


def _gen_of(gbs: float) -> int:
    """The PCIe generation whose x16 rate ``gbs`` (GB/s per direction) reaches: the rule the model always used."""
    return 6 if gbs > 80 else 5 if gbs > 40 else 4 if gbs > 20 else 3


def gpu_pcie_gen(topo: Topology, gpu: int = 0) -> int:
    """The generation of GPU ``gpu``'s own PCIe link (its PCIe edges), not of the fastest PCIe link anywhere in the
    topology (a Gen5 switch uplink or NIC above Gen4 GPUs made the GPUs Gen5 before): the link's rate (lanes x speed)
    mapped to the generation whose x16 rate it reaches (:func:`_gen_of`), so a Gen4 x8 GPU (15.75 GB/s) reads as Gen3,
    as NCCL rates it (v2.28.9-1 src/graph/topo.cc lines 423-426 ``kvDictPciGen`` and 491 ``width*speed/80``: Gen4 x8
    and Gen3 x16 are both 12 GB/s); a topology whose GPU has no PCIe edge (a link matrix) keeps the old reading, the
    fastest PCIe link, else Gen4.  ``NcclMachine.from_topology`` takes the least over the host's GPUs."""
    g = topo.graph
    own = [d["bandwidth_gbps"] for _, _, d in g.out_edges(topo.gpu(gpu), data=True) if d["kind"] == "pcie"]
    if own:
        return _gen_of(max(own))
    return _gen_of(max((d["bandwidth_gbps"] for _, _, d in g.edges(data=True) if d["kind"] == "pcie"), default=31.5))


def _pcilink(g, u: str, v: str) -> bool:
    """Whether ``u``-``v`` is a ``<pcilink>`` between two PCIe switches (the parser's ``pcilink_to``), which NCCL joins
    with ``LINK_LOC`` at ``LOC_BW``, 5000 GB/s (v2.28.9-1 src/graph/topo.cc line 637, topo.h line 15): it never limits
    a GPU-GPU path (the parser rates it at ``LOC_BW`` too, so the bound's fabric does not limit it either)."""
    a, b = g.nodes[u], g.nodes[v]
    return a.get("pcilink_to") == b.get("pci_bus_id", "") or b.get("pcilink_to") == a.get("pci_bus_id", "")


def counted_link(g, u: str, v: str) -> bool:
    """A PCIe link but a ``<pcilink>`` (:func:`_pcilink`), or the link between two CPU sockets (NCCL's ``LINK_SYS``:
    v2.28.9-1 src/graph/topo.cc ``ncclTopoConnectCpus`` lines 264-277, line 273; here at the Topology's own rate),
    which a ring across the sockets crosses in each direction (its host-bridge-to-CPU links are the CPU's own, not
    counted)."""
    if g.edges[u, v]["kind"] == "pcie":
        return not _pcilink(g, u, v)
    return g.nodes[u].get("kind") == g.nodes[v].get("kind") == "cpu"


def slowest_pcie_link_gbs(topo: Topology, local: list[int]) -> float:
    """The slowest PCIe or socket-to-socket link (GB/s per direction) on the PCIe paths from GPU ``local[0]`` to the
    host's other GPUs (:meth:`Topology.pcie_paths`: through switches, host bridges and CPUs; :func:`counted_link`);
    ``inf`` where there is none."""
    g, slowest = topo.graph, math.inf
    for k in local[1:]:
        for path in topo.pcie_paths(local[0], k):
            for u, v in zip(path, path[1:]):
                if counted_link(g, u, v):
                    slowest = min(slowest, g.edges[u, v]["bandwidth_gbps"])
    return slowest


def pcie_path_gbs(topo: Topology, local: list[int], gen: int) -> float:
    """:attr:`.machine.NcclMachine.pcie_path_gbs`: the slowest PCIe link between the host's GPUs where it is below
    the x16 rate of ``gen`` (a narrower GPU link, switch uplink or socket link), else 0.0 (none narrower)."""
    slowest = slowest_pcie_link_gbs(topo, local)
    return float(slowest) if slowest < PCIE_X16_GBS[gen] - 1e-9 else 0.0


def nic_gbs(topo: Topology, nic: str) -> float:
    """NIC ``nic``'s rate (GB/s per direction): its line rate (``speed_gbps``; 0 where none is stated), at most its own
    PCIe link's, which every GPU-to-NIC path crosses (v2.28.9-1 src/graph/topo.cc lines 482-492 rate the NIC's link
    by its lanes x speed like any other; a path is its slowest link, src/graph/paths.cc line 67)."""
    g = topo.graph
    speed = float(g.nodes[nic].get("speed_gbps") or 0.0)
    own = [d["bandwidth_gbps"] for _, _, d in g.out_edges(nic, data=True) if d["kind"] == "pcie"]
    return min([speed] + own) if speed and own else speed


def pcie_stream_gbs(m) -> float:
    """GB/s per direction a GPU's PCIe stream can reach on machine ``m`` before efficiency: the x16 rate of its
    generation (``PCIE_X16_GBS``), capped by :attr:`.machine.NcclMachine.pcie_path_gbs` where that is stated.

    >>> from synth.model.nccl import NcclMachine
    >>> m = NcclMachine("l40s", "sm89", 4, 1, "pcie", 0, pcie_gen=4)
    >>> pcie_stream_gbs(m), pcie_stream_gbs(m.with_(pcie_path_gbs=7.875))
    (31.5, 7.875)
    """
    x16 = PCIE_X16_GBS.get(m.pcie_gen, PCIE_X16_GBS[5])
    return min(x16, m.pcie_path_gbs) if m.pcie_path_gbs > 0 else x16


def run_nic_share(m) -> tuple[tuple[float, str], ...]:
    """The ``((GB/s, link kind), ...)`` of :attr:`.machine.NcclMachine.nic_shares` for machine ``m``'s GPUs per node,
    which are the host's first ones (``()``: no shared link narrower than their generation's x16 rate)."""
    k = min(m.gpus_per_node, len(m.nic_shares))
    return tuple(m.nic_shares[k - 1]) if k else ()


def pcie_rate_gbs(m, params, to_nic: bool = False) -> float:
    """GB/s per direction a GPU's PCIe stream achieves on machine ``m``: :func:`pcie_stream_gbs` times
    ``link_eff[arch, pcie]`` of ``params`` (a :class:`.params.ModelParams`); with ``to_nic`` also at most its share
    of each narrow link on its way to its NIC (:func:`run_nic_share`, :mod:`.pcie_share`), derated by that link's
    own ``link_eff`` kind (the slowest after efficiency, not in GB/s).

    >>> from synth.model.nccl import DEFAULT_PARAMS, NcclMachine
    >>> m = NcclMachine("l40s", "sm89", 8, 2, "pcie", 0, pcie_gen=4, pcie_path_gbs=7.875,
    ...                  nic_shares=(((7.875, "pcie"),),) * 3 + (((3.9375, "pcie"),),))
    >>> round(pcie_rate_gbs(m, DEFAULT_PARAMS), 4), round(pcie_rate_gbs(m, DEFAULT_PARAMS, to_nic=True), 4)
    (6.3, 3.15)
    """
    rate = pcie_stream_gbs(m) * params.link_efficiency(m.arch, "pcie")
    for share, kind in run_nic_share(m) if to_nic else ():   # at its own kind's efficiency (a socket link: shm's)
        rate = min(rate, share * params.link_efficiency(m.arch, kind))
    return rate


def nic_efficiency(m, params, net_eff: float) -> float:
    """The fraction of :attr:`.machine.NcclMachine.nic_gbps` a NIC delivers, given the network's ``net_eff``: where
    that rate is the NIC's own PCIe link's (``nic_pcie_limited``: a 50 GB/s NIC in a Gen3 x16 slot moves 15.75), the
    link moves data as a PCIe link does, so at most ``link_eff[arch, pcie]`` of it (a path is its slowest link:
    v2.28.9-1 src/graph/paths.cc line 67; the NIC's link is rated by lanes x speed like any, topo.cc lines 482-492).

    >>> from synth.model.nccl import DEFAULT_PARAMS, NcclMachine
    >>> m = NcclMachine("vm", "sm80", 4, 2, "nvlink", 12, pcie_gen=3, nics_per_node=1, nic_gbps=15.75)
    >>> nic_efficiency(m, DEFAULT_PARAMS, 0.96), nic_efficiency(m.with_(nic_pcie_limited=True), DEFAULT_PARAMS, 0.96)
    (0.96, 0.8)
    """
    return min(net_eff, params.link_efficiency(m.arch, "pcie")) if m.nic_pcie_limited else net_eff


__all__ = ["gpu_pcie_gen", "slowest_pcie_link_gbs", "pcie_path_gbs", "nic_gbs", "pcie_stream_gbs", "pcie_rate_gbs",
           "nic_efficiency", "counted_link", "run_nic_share"]
