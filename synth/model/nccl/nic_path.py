"""NCCL's path type from a GPU to its NIC: the ``typeInter`` of a ring graph across hosts, which gates LL128
(tuning.cc ``typeInter <= PATH_PXB``, ``<= PATH_PXN`` from compute capability 90).

NCCL's names, nearest first (NVIDIA/nccl v2.27.3-1 src/graph/topo.h lines 74-89): PIX (one PCIe switch), PXB
(several), PHB (through the CPU's root complex; NCCL has no NODE path, paths.cc line 97 calls any PCIe hop into a CPU
PHB), SYS (across CPU sockets).  :attr:`.machine.NcclMachine.nic_path` states it (PXB by default);
:func:`topology_nic_path` reads it from a topology with one GPU a host; :func:`graph_nic_path` is what the graph gets;
:func:`net_path_gbs` the bandwidth NCCL's search sees on it (GB/s).
"""

from __future__ import annotations

from synth.model.nccl.constants import CPU_LINK_BW, PCI_BW_BY_GEN
from synth.model.nccl.versions_patch import row_from

#: NCCL's GPU-to-NIC path types, nearest first
NIC_PATHS = ("PIX", "PXB", "PHB", "SYS")
#: nvidia-smi's PCIe classes (:meth:`topo_probe.topology.model.Topology.pcie_class`) as NCCL's path types
_FROM_SMI = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}
#: the transports that never have GPUDirect RDMA: the socket transport registers host memory only
#: (NVIDIA/nccl src/transport/net_socket.cc ``props->ptrSupport = NCCL_PTR_HOST``, v2.16.5-1 line 98, v2.27.3-1 108)
HOST_MEMORY_ONLY = ("socket",)


def through_cpu(path: str) -> str:
    """``path`` once NCCL sends GPU <-> NIC traffic through the GPU's local CPU, as it does without GPUDirect RDMA
    (paths.cc: v2.16.5-1 lines 609-617, v2.27.3-1 lines 714-723, ``addInterStep(system, CPU, localCpu, ...)``): PHB
    at best.

    >>> through_cpu("PIX"), through_cpu("PXB"), through_cpu("PHB"), through_cpu("SYS")
    ('PHB', 'PHB', 'PHB', 'SYS')
    """
    return NIC_PATHS[max(NIC_PATHS.index(path), NIC_PATHS.index("PHB"))]


def graph_nic_path(machine) -> str:
    """The ring graph's ``typeInter`` across hosts for an :class:`~.machine.NcclMachine`: its ``nic_path``, taken
    through the CPU where its transport has no GPUDirect RDMA (``net_kind`` ``socket``).

    >>> from types import SimpleNamespace as M
    >>> graph_nic_path(M(nic_path="PXB", net_kind="ib")), graph_nic_path(M(nic_path="PXB", net_kind="socket"))
    ('PXB', 'PHB')
    """
    return through_cpu(machine.nic_path) if machine.net_kind in HOST_MEMORY_ONLY else machine.nic_path


def topology_nic_path(topo, local: list[int]) -> str:
    """NCCL's path from a host's only GPU (``local``: the host's GPU indices) to its nearest NIC in ``topo`` (a
    :class:`~topo_probe.topology.model.Topology`): the PCIe class, taken through the CPU where
    :meth:`~topo_probe.topology.model.Topology.gdr` finds no GPUDirect RDMA (a NIC marked ``gdr=False``, or a path
    beyond PXB, NCCL's default ``NCCL_NET_GDR_LEVEL``); ``PXB``, the default, on a host of several GPUs or without
    a NIC (their path is not read from the topology)."""
    if len(local) != 1:
        return "PXB"
    g, gpu = topo.graph, topo.gpu(local[0])
    host = int(g.nodes[gpu].get("host", 0))
    nics = [n for n, d in g.nodes(data=True) if d["kind"] == "nic" and int(d.get("host", 0)) == host]
    paths = []
    for nic in nics:
        path = _FROM_SMI.get(topo.pcie_class(gpu, nic), "SYS")
        paths.append(path if topo.gdr(local[0], nic)[0] else through_cpu(path))
    return min(paths, key=NIC_PATHS.index, default="PXB")


#: NCCL's rating of a link it has no figure for (``LOC_BW`` 5000 GB/s, topo.h line 13 from v2.14.3-1 on;
#: ``LOC_WIDTH`` before): no cap
LOC_GBS = 5000.0
#: AMD's socket link from each release (``ncclTopoGetInterCpuBw``'s AMD case, ``AMD_BW`` 16): v2.16.2-1 topo.h line 21,
#: topo.cc lines 75-77; gone from v2.16.5-1 through v2.18.6-1 (no AMD case, so ``LOC_BW``); back in v2.19.1-1
#: (topo.h line 21, topo.cc lines 75-77) and on (v2.26.2-1 topo.h line 21, topo.cc lines 87-89).  A bare minor
#: reads as its first release (:func:`.versions_patch.release`, patch 0): 2.16 as 2.16.2, 2.19 as 2.19.1
AMD_LINK_BY_RELEASE = (((2, 16, 0), CPU_LINK_BW["amd"]), ((2, 16, 5), LOC_GBS), ((2, 19, 0), CPU_LINK_BW["amd"]))
#: Skylake's (the Intel model the model assumes): ``SKL_QPI_WIDTH`` 12 in v2.5.6-1 (topo.h line 18), 9.0 from
#: v2.6.4-1 (topo.h line 19; ``SKL_QPI_BW`` 9.0 v2.14.3-1 .. v2.17.1-1, line 20), ``SKL_QPI_BW`` 10.0 from v2.18.1-1
#: (topo.h line 21; v2.26.2-1 line 23)
SKL_LINK_BY_RELEASE = (((2, 6, 0), 9.0), ((2, 18, 0), CPU_LINK_BW["intel_skl"]))


def cpu_link_gbs(m, version: tuple) -> float:
    """NCCL ``version``'s rating of the link between two CPU sockets (GB/s; src/graph/topo.cc
    ``ncclTopoGetInterCpuBw``, v2.26.2-1 lines 70-92): :data:`AMD_LINK_BY_RELEASE` for an AMD CPU (no cap,
    ``LOC_BW``, where the release has no AMD case), else :data:`SKL_LINK_BY_RELEASE`.  ASSUMED for Intel: a
    Skylake-class CPU.  The machine carries no CPU model, and NCCL rates Intel by it: from v2.26.2-1 Emerald Rapids
    (family 6, model >= 0xCF) ``ERP_QPI_BW`` 40, Sapphire Rapids (>= 0x8F) ``SRP_QPI_BW`` 22, Skylake (>= 0x55)
    ``SKL_QPI_BW`` 10, older ``BDW_QPI_BW`` 6 (topo.h lines 22-25, topo.cc lines 80-86 and 516-523); before
    2.26 Skylake or newer 9-10, older ``QPI_BW`` 6.

    >>> from types import SimpleNamespace as M
    >>> [cpu_link_gbs(M(cpu_vendor="amd"), v) for v in ((2, 16, 2), (2, 18, 6), (2, 19), (2, 26, 2))]
    [16.0, 5000.0, 16.0, 16.0]
    >>> [cpu_link_gbs(M(cpu_vendor="intel"), v) for v in ((2, 5), (2, 17, 1), (2, 18, 1), (2, 26, 2))]
    [12.0, 9.0, 10.0, 10.0]
    """
    if m.cpu_vendor == "amd":
        return row_from(AMD_LINK_BY_RELEASE, version, LOC_GBS)
    return row_from(SKL_LINK_BY_RELEASE, version, 12.0)


def net_path_gbs(m, version: tuple) -> float:
    """The bandwidth NCCL ``version``'s search sees on a GPU's path to its NIC (GB/s): the GPU's PCIe x16 link,
    and on a ``SYS`` path (the NIC behind the other CPU socket) also the link between the sockets
    (:func:`cpu_link_gbs`).  NCCL rates a path at its narrowest link (NVIDIA/nccl v2.26.2-1 src/graph/paths.cc
    ``ncclTopoSetPaths``, line 67: a path's bw is the min of its own and each link's) and connects the two
    sockets by a link of that rating (topo.cc ``ncclTopoConnectCpus``, lines 262-275: one ``LINK_SYS`` each way
    between a pair of CPUs); each channel the search places on the path takes its speed off every link
    (search.cc ``followPath``, lines 79-118), so a 16 GB/s path holds one channel of at most 15 GB/s (sm90's
    speeds, line 919).  The link is the host's, not the GPU's: every GPU whose channels cross it shares it
    (:func:`.graphs._ring_graph` caps the host's channels by it).

    >>> from types import SimpleNamespace as M
    >>> [net_path_gbs(M(pcie_gen=5, net_path=p, cpu_vendor="amd"), (2, 26, 2)) for p in ("PXB", "SYS")]
    [48.0, 16.0]
    """
    bw = PCI_BW_BY_GEN[m.pcie_gen]
    return min(bw, cpu_link_gbs(m, version)) if m.net_path == "SYS" else bw
