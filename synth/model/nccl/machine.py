"""What NCCL's topology detection finds on a machine: GPU architecture, ranks and nodes, the
intra-node fabric (NVSwitch, point-to-point NVLink mesh, xGMI mesh or PCIe), the data-sheet link
speed, the NICs and their transport, the CPU vendor, and how many GPUs one process drives.

Bandwidths are GB/s per direction (1e9 bytes/s).

>>> from topo_probe import get_preset, cluster
>>> m = NcclMachine.from_topology(get_preset("dgx-h100"))
>>> m.arch, m.intra, m.links_per_gpu, m.link_gbs, m.nvls, m.ranks, m.nodes, m.cpu_vendor
('sm90', 'nvswitch', 18, 25.0, True, 8, 1, 'intel')
>>> c = NcclMachine.from_topology(cluster("dgx-a100", nodes=2))
>>> c.nodes, c.gpus_per_node, c.nics_per_node, c.nic_gbps, c.cpu_vendor
(2, 8, 8, 25.0, 'amd')
>>> arch_of_gpu_name("NVIDIA A100-SXM4-80GB"), arch_of_gpu_name("AMD Instinct MI300X")
('sm80', 'gfx942')
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields, replace

from synth.model.nccl.constants import NCCL_VERSION, PCI_BW_BY_GEN, PCIE_X16_GBS
from synth.model.nccl.nic_path import NIC_PATHS, graph_nic_path, topology_nic_path
from synth.model.nccl.pcie_path import gpu_pcie_gen, nic_gbs, pcie_path_gbs, pcie_stream_gbs
from synth.model.nccl.pcie_share import nic_pcie_limited, nic_shares, restated_nic, uplink_gpus
from topo_probe.errors import InvalidArgument, show
from topo_probe.number_rules import is_real
from topo_probe.topology.model import NIC_TRANSPORTS, Topology

#: GPU name patterns -> architecture (first match wins)
_NAMES = [(r"RTX 50[5-9]0|RTX PRO [0-9]+ Blackwell", "sm120"), (r"\bB(100|200|300)\b|GB[23]00|Blackwell", "sm100"), (r"\bH(100|200|800|20)\b|GH200|Hopper", "sm90"),
          (r"\bA(100|800|30)\b", "sm80"), (r"\bA(10|40|6000)\b|RTX 30", "sm86"), (r"L40|L4\b|RTX 40|Ada", "sm89"),
          (r"V100|Volta|TITAN V", "sm70"), (r"P100", "sm60"),
          (r"MI300|MI325|gfx942", "gfx942"), (r"MI350|MI355|gfx950", "gfx950"), (r"MI2[05]0|gfx90a", "gfx90a")]
#: sm89 (Ada: L40S, L4) is read as Ampere, as NCCL's tuning tables do (compCapIndex: 80 <= cc < 90 -> 1)
ARCH_FAMILY = {"sm60": "volta", "sm70": "volta", "sm80": "ampere", "sm86": "ampere", "sm89": "ampere", "sm90": "hopper",
               "sm100": "blackwell", "sm120": "blackwell", "gfx90a": "cdna", "gfx942": "cdna", "gfx950": "cdna"}
#: network transports: InfiniBand, RoCE, AWS EFA (p4d/p4de), EFA v2 (p5), GCP GPUDirect-TCPXO, sockets
NET_KINDS = NIC_TRANSPORTS
INTRA_KINDS = ("nvswitch", "nvlink", "xgmi", "pcie")


def arch_of_gpu_name(name: str) -> str | None:
    """The architecture (``sm80``, ``gfx942``...) of a GPU by its marketing name, else None."""
    for pattern, arch in _NAMES:
        if re.search(pattern, name or ""):
            return arch
    return None


def arch_of_topology(topo: Topology) -> str:
    """The GPU architecture (``sm90``, ``gfx942``...) of a topology's GPUs: compute capability, else
    the GPU name, else the link kinds."""
    attrs = topo.graph.nodes[topo.gpu(0)]
    cc = attrs.get("compute_capability")
    if cc:
        major, _, minor = str(cc).partition(".")
        arch = f"sm{major}{minor or 0}" if f"sm{major}{minor or 0}" in ARCH_FAMILY else f"sm{major}0"
        if arch in ARCH_FAMILY:
            return arch
    kinds = {d["kind"] for _, _, d in topo.graph.edges(data=True)}
    return arch_of_gpu_name(attrs.get("name", "")) or ("gfx942" if "infinity_fabric" in kinds else "sm80")


@dataclass(frozen=True)
class NcclMachine:
    """A machine as NCCL's tuner models it (see the module docstring).

    ``intra`` is ``nvswitch``, ``nvlink`` (point-to-point NVLink mesh, ``link_matrix`` gives the link counts between
    GPUs), ``xgmi`` or ``pcie``; ``links_per_gpu`` the GPU's NVLink / xGMI links, ``link_gbs`` the data-sheet GB/s per
    direction of one link; ``nic_gbps`` the line rate of one NIC (GB/s per direction) and ``net_kind`` one of
    :data:`NET_KINDS`; ``cpu_vendor`` ``intel`` or ``amd`` (NCCL's llMaxBws row and net overhead across nodes);
    ``cpu_arch`` ``x86`` or ``arm`` (Grace: NCCL's ``cpuArch``, which gates a Blackwell NVLS-tree factor);
    ``gpus_per_process`` how many GPUs one process drives (nccl-tests ``-t`` x ``-g``), ``threads_per_process`` over how
    many threads (``-t``; each enqueues its own ``-g`` GPUs: :func:`.latency.host_time_us`); ``nic_dma_gbs``
    the GB/s per direction at which one NIC moves GPU memory over its PCIe path when a measurement of the host states it
    (0: not stated, the line rate; :attr:`gpu_net_gbps`); ``plugin_latency_us`` the µs of inter-node latency the run's
    network plugin reported to NCCL's tuner where its release differs from today's table (aws-ofi-nccl before v1.7.0:
    150 µs on every EFA platform; -1: the table, :func:`.net_transport.plugin_latency_us`; NCCL's choice only,
    :func:`.net_transport.tuner_inter_latency_us`);
    ``gpu_name`` the GPU's name where known (its part's SM clock: :func:`.constants.sm_clock_ghz`);
    ``pcie_path_gbs`` the slowest PCIe or CPU-to-CPU link between the host's GPUs where narrower than the x16 rate
    of ``pcie_gen`` (0: none; :mod:`.pcie_path`, which caps every PCIe / host-memory stream by it); ``nic_shares``
    per count of the host's first GPUs in use, ``((GB/s, link kind), ...)``: per ``link_eff`` kind, ``pcie`` or
    ``shm``, a GPU's least share of a link on their PCIe paths to the NIC (:mod:`.pcie_share`; empty: none,
    :func:`.pcie_path.run_nic_share`); ``nic_pcie_limited`` whether the NICs' rate is their PCIe slot's, below line;
    ``gpus_per_uplink`` how many of a host's GPUs without P2P between them sit behind the PCIe switch whose one
    uplink joins GPU 0 to the CPU (1: its own link; through host memory they share it, :mod:`.shm_uplink`);
    ``p2p_write_gbs`` the GB/s per direction of the slowest hop of the ring NCCL builds when a measurement of the
    host states it (CUDA's p2pBandwidthLatencyTest, unidirectional, P2P writes, rows = senders; 0: not stated).  With
    every GPU pair alike in NCCL's search (NCCL joins every pair of CPU nodes, NVIDIA/nccl v2.28.9-1
    src/graph/topo.cc lines 264-277) ties go by start index (search.cc lines 191-200 and 242-254), so the ring is in
    index order, 0->1->...->n-1->0.  A ring runs at its slowest hop (search.cc ``followPath`` lines 94-117, line 110
    stops the path where ``link->bw < fwBw``; each GPU forwards each chunk), so a ring of P2P over PCIe streams at
    most at that rate (:func:`.runtime.ring_capacity_gbs`; the search never sees the figure).  It is an achieved
    rate, so it caps the ring after the link efficiency and is not derated itself.  P2P rings only: a ring through
    host memory (SHM) is not capped, so a host whose NCCL ring is SHM (the 4 x A100 PCIe page states P2P-on
    figures, but NCCL's default P2P level stops below its SYS pairs) is given none.  ``nic_path`` is NCCL's path type
    from a GPU to its NIC (:mod:`.nic_path`), its ring graph's ``typeInter`` across hosts (:attr:`net_path`): ``PIX``,
    ``PXB`` (PCIe switches only, the default), ``PHB`` (through the CPU's root complex, where a log's topology shows
    it; LL128 then stays off: NVIDIA/nccl v2.26.6-1 src/graph/tuning.cc line 429, ``typeInter <= PATH_PXB``) or
    ``SYS``.  The default assumes GPUDirect RDMA at NCCL's default level (``NCCL_NET_GDR_LEVEL`` PXB); without it NCCL
    sends through the CPU (PHB or worse), which :attr:`net_path` applies for the socket transport only.
    :meth:`from_topology` reads it for a host of one GPU (:func:`.nic_path.topology_nic_path`), not for hosts of
    several GPUs (their NICs' paths are not read: PXB).  ``gpu_numa_nodes`` how many NUMA nodes of one host the
    communicator's GPUs sit on, where a source states it (a0008's host has 8 NUMA nodes, its 4 ranks sit on 4; 0: one
    per socket): NCCL makes one CPU node per NUMA node (NVIDIA/nccl v2.29.3-1 src/graph/topo.cc lines 524-529,
    ``numaid``) and joins every pair by a ``LINK_SYS`` at ``ncclTopoGetInterCpuBw`` (lines 265-277; AMD_BW 16 GB/s,
    topo.h line 24), so GPUs on several NUMA nodes of one socket meet through that link as across sockets
    (:func:`.graphs.intra_capacity_gbs`).  Not versioned (``cpu_link_gbs(m, NCCL_VERSION)``): a 2.16.5-2.18.x case,
    with no AMD cap, would get 16 GB/s too (none does); Intel sub-NUMA too (:func:`.nic_path.cpu_link_gbs`).
    """

    name: str
    arch: str
    ranks: int
    nodes: int
    intra: str
    links_per_gpu: int
    pcie_gen: int = 4
    p2p: bool = True
    nics_per_node: int = 0
    nic_gbps: float = 0.0
    net_kind: str = "ib"
    gpus_per_process: int = 1
    nvls_switch: bool = False
    collnet: bool = False
    link_gbs: float = 25.0
    link_matrix: tuple | None = None
    cpu_vendor: str = "intel"
    sockets: int = 2
    cpu_arch: str = "x86"
    nic_dma_gbs: float = 0.0
    plugin_latency_us: float = -1.0
    gpu_name: str = ""
    gpus_per_uplink: int = 1
    p2p_write_gbs: float = 0.0
    gpu_numa_nodes: int = 0
    nic_path: str = "PXB"
    threads_per_process: int = 1
    pcie_path_gbs: float = 0.0
    nic_shares: tuple = ()
    nic_pcie_limited: bool = False

    def __post_init__(self) -> None:
        for f in (f for f in fields(self) if f.type == "float"):    # NumPy as its float: float32 * float stays float32
            if not is_real(value := getattr(self, f.name)):
                raise InvalidArgument(f"NcclMachine {f.name} must be a real number, got {show(value)}")
            object.__setattr__(self, f.name, float(value))
        checks = [(self.arch in ARCH_FAMILY, f"GPU architecture {self.arch!r} is not one of {', '.join(ARCH_FAMILY)}"),
                  (self.net_kind in NET_KINDS, f"NIC kind {self.net_kind!r} is not one of {', '.join(NET_KINDS)}"),
                  (self.intra in INTRA_KINDS, f"intra-node fabric {self.intra!r} is not one of {', '.join(INTRA_KINDS)}"),
                  (self.ranks >= 1 and self.nodes >= 1 and self.ranks % self.nodes == 0,
                   f"{self.ranks} ranks do not split over {self.nodes} nodes"),
                  (self.cpu_vendor in ("intel", "amd"), f"CPU vendor {self.cpu_vendor!r} is not intel or amd"),
                  (self.cpu_arch in ("x86", "arm"), f"CPU architecture {self.cpu_arch!r} is not x86 or arm"),
                  (self.pcie_gen in PCI_BW_BY_GEN,
                   f"PCIe generation {self.pcie_gen} is not one of {', '.join(map(str, PCI_BW_BY_GEN))}"),
                  (self.nic_path in NIC_PATHS, f"NIC path {self.nic_path!r} is not one of {', '.join(NIC_PATHS)}"),
                  (self.gpus_per_process >= 1, f"gpus_per_process {self.gpus_per_process} must be >= 1"),
                  (self.threads_per_process >= 1 and self.gpus_per_process % self.threads_per_process == 0,
                   f"gpus_per_process {self.gpus_per_process} do not split evenly over threads_per_process "
                   f"{self.threads_per_process}"),
                  (self.link_gbs > 0 and min(self.nic_gbps, self.nic_dma_gbs, self.p2p_write_gbs, self.pcie_path_gbs)
                   >= 0, "link and NIC bandwidths must be positive"),
                  (all(isinstance(e, tuple) and all(isinstance(x, tuple) and len(x) == 2 and x[1] in ("pcie", "shm")
                                                     and is_real(x[0]) and 0 <= x[0] < math.inf for x in e)
                       for e in self.nic_shares),
                   f"nic_shares {self.nic_shares!r} must be tuples of (GB/s >= 0, 'pcie' or 'shm') pairs")]
        for ok, message in checks:
            if not ok:
                raise InvalidArgument(message)
        object.__setattr__(self, "nic_shares", tuple(tuple((float(s), k) for s, k in e) for e in self.nic_shares))

    @property
    def family(self) -> str:
        return ARCH_FAMILY[self.arch]

    @property
    def amd(self) -> bool:
        return self.arch.startswith("gfx")

    @property
    def sm(self) -> int:
        """Compute capability as NCCL writes it (70, 80, 90, 100); 0 for AMD GPUs."""
        return 0 if self.amd else int(self.arch[2:])

    @property
    def gpus_per_node(self) -> int:
        return self.ranks // self.nodes

    @property
    def nvls(self) -> bool:
        """NVLink SHARP: Hopper or newer GPUs behind third-generation NVSwitches."""
        return self.nvls_switch and self.family in ("hopper", "blackwell")

    @property
    def shared_uplink_gpus(self) -> int:
        """GPUs of this run behind GPU 0's switch uplink (``gpus_per_uplink``, at most the GPUs per node)."""
        return max(1, min(self.gpus_per_uplink, self.gpus_per_node))

    @property
    def node_net_gbps(self) -> float:
        """All NICs of one node together, GB/s per direction."""
        return self.nics_per_node * self.nic_gbps

    @property
    def used_net_gbps(self) -> float:
        """What a node's GPUs send through its NICs together (GB/s per direction): every NIC when there are no more
        NICs than GPUs; else a GPU reaches only as many NICs as NCCL's graph search needs to carry its PCIe link at
        NCCL's rating of it (topo.cc: lanes x speed / 80, 48 GB/s for Gen5 x16: ``PCI_BW_BY_GEN``), never more than
        its path carries (:func:`.pcie_path.pcie_stream_gbs`).  One GPU of an 8 x 400 Gb/s host runs on its own NIC
        (the search's first try, a PIX path at 48 GB/s, fills the GPU's link), not on all eight up to its PCIe link.

        >>> one = NcclMachine("h200", "sm90", 2, 2, "nvswitch", 18, pcie_gen=5, nics_per_node=8, nic_gbps=50.0)
        >>> one.used_net_gbps, one.with_(ranks=16).used_net_gbps, one.with_(nic_gbps=12.5).used_net_gbps
        (50.0, 400.0, 50.0)
        """
        if self.nics_per_node == 0:
            return 0.0
        per_gpu = min(pcie_stream_gbs(self), self._nics_per_gpu() * self.nic_gbps)
        return min(self.node_net_gbps, self.gpus_per_node * per_gpu)

    def _nics_per_gpu(self) -> int:
        """NICs one GPU's traffic spreads over: as many as carry its PCIe link at NCCL's rating of it."""
        link = PCIE_X16_GBS.get(self.pcie_gen, PCIE_X16_GBS[5])
        return math.ceil(PCI_BW_BY_GEN.get(self.pcie_gen, link) / self.nic_gbps - 1e-9)

    @property
    def used_nics(self) -> int:
        """Physical NICs of a node its GPUs move data through (those :attr:`used_net_gbps` counts): every NIC when
        there are no more NICs than GPUs, else each GPU's few (4 of an AWS p5's 32 for each of its 8 GPUs).

        >>> NcclMachine("p5", "sm90", 16, 2, "nvswitch", 18, pcie_gen=5, nics_per_node=32, nic_gbps=12.5).used_nics
        32
        """
        return min(self.nics_per_node, self.gpus_per_node * self._nics_per_gpu()) if self.nics_per_node else 0

    @property
    def gpu_net_gbps(self) -> float:
        """GB/s per direction the node's NICs move between GPU memory and the network together: the line
        rate they carry (:attr:`used_net_gbps`), or, where the machine states how fast one NIC moves GPU
        memory over its PCIe path (``nic_dma_gbs``, a measured figure of the host), that many GB/s on each
        physical NIC in use (:attr:`used_nics`: all 32 of an AWS p5, not the 8 fused ones NCCL's search
        sees), whichever is lower.  NCCL's search never sees the figure (it rates the path by PCIe widths:
        NVIDIA/nccl v2.8.4-1 src/graph/topo.cc ``ncclTopoAddPci`` lines 311-370), so only transfers slow:
        with GPU Direct RDMA the NIC reads and writes GPU memory itself (v2.8.4-1 src/transport/net.cc
        lines 68-94, 121-148).  ABCI 2.0's A nodes state it: 39.0 GB/s per host over 4 HDR HCAs for GPU
        buffers in the OSU runs of aistabci/abci2.0benchmark f0aa27f pt2pt/inter_anode (95 for host
        buffers), 9.75 per HCA (docs/nccl-model.md, *A host's GPU-memory network rate*).

        >>> abci = NcclMachine("abci", "sm80", 16, 2, "nvswitch", 12, nics_per_node=4, nic_gbps=25.0, nic_dma_gbs=9.75)
        >>> abci.gpu_net_gbps, abci.with_(nic_dma_gbs=0.0).gpu_net_gbps
        (39.0, 100.0)
        """
        if self.nic_dma_gbs > 0:
            return min(self.used_net_gbps, self.used_nics * self.nic_dma_gbs)
        return self.used_net_gbps

    def visible_nics(self) -> tuple[int, float]:
        """NICs as NCCL's search sees them, ``(count, GB/s each)``: at most one per GPU (NICs on
        one PCIe switch are fused: NCCL virtual NICs, aws-ofi-nccl multi-rail), carrying what the
        GPUs reach of them (:attr:`used_net_gbps`)."""
        if self.nics_per_node == 0:
            return 0, 0.0
        count = min(self.nics_per_node, self.gpus_per_node)
        return count, self.used_net_gbps / count

    @property
    def reported_plugin_latency_us(self) -> float:
        """µs of inter-node latency the run's network plugin reports to NCCL's tuner: the machine's own
        ``plugin_latency_us`` where its release is stated, else today's figure for its transport and GPU
        (:func:`.net_transport.plugin_latency_us`; p3dn 150 µs); 0 on one host.

        >>> from topo_probe import cluster
        >>> two = cluster("dgx-a100", nodes=2, nics_per_node=4, nic_gbps=12.5)
        >>> p4d = NcclMachine.from_topology(two).with_(net_kind="efa")
        >>> p4d.reported_plugin_latency_us, p4d.with_(plugin_latency_us=150.0).reported_plugin_latency_us
        (75.0, 150.0)
        """
        if self.nodes <= 1:
            return 0.0
        if self.plugin_latency_us >= 0:
            return self.plugin_latency_us
        from synth.model.nccl.net_transport import plugin_latency_us
        return plugin_latency_us(self.net_kind, self.arch)

    @property
    def net_path(self) -> str:
        """The ring graph's ``typeInter`` across hosts: ``nic_path``, PHB at best over sockets (no GPUDirect RDMA)."""
        return graph_nic_path(self)

    def platform_env(self, version: tuple = NCCL_VERSION) -> dict:
        """NCCL variables the platform's network plugin sets by itself under NCCL ``version`` (the user's
        win): aws-ofi-nccl forces ``NCCL_PROTO=simple`` on first-generation EFA (p4d/p4de,
        ``platform-aws.c`` configure_nccl_proto) and sets ``NCCL_NVLSTREE_MAX_CHUNKSIZE=524288``
        on p5 (EFA v2; the p5 log's NCCL INFO lines); GPUDirect-TCPXO's runs source Google's
        ``nccl-env-profile.sh`` of their NCCL build (:func:`.net_transport.tcpxo_profile`: Simple, Ring and
        Tree, NVLS off up to NCCL 2.23; Simple and LL128 with NVLS from 2.26)."""
        if self.nodes > 1 and self.net_kind == "tcpxo":
            from synth.model.nccl.net_transport import tcpxo_profile
            return tcpxo_profile(version)
        if self.nodes > 1 and self.net_kind == "efa":
            return {"NCCL_PROTO": "simple"}
        if self.nodes > 1 and self.net_kind == "efa2":
            return {"NCCL_NVLSTREE_MAX_CHUNKSIZE": "524288"}
        return {}

    def with_(self, **changes) -> "NcclMachine":
        """A copy with ``changes``.  Fewer GPUs per host on a full xGMI mesh (every pair of GPUs
        joined by the same number of links: MI300X, MI325X, MI355X, 7 links to 7 peers) keep only
        the links to the GPUs they run with: 4 GPUs of such a host reach each other over 3 links
        each, not 7 (an NVSwitch host keeps every link: each goes to the switches).  The count only
        shrinks: a machine already cut to fewer GPUs no longer knows its host's whole mesh.
        A new ``nic_gbps`` without ``nic_pcie_limited``: rated as :meth:`from_topology` does (:func:`.restated_nic`).

        >>> m = NcclMachine("mi300x", "gfx942", 8, 1, "xgmi", 7)
        >>> m.with_(ranks=4).links_per_gpu, m.with_(ranks=16, nodes=2).links_per_gpu
        (3, 7)
        """
        new = replace(self, **{**changes, **restated_nic(self, changes)})
        mesh = self.gpus_per_node - 1
        if (self.intra == "xgmi" and "links_per_gpu" not in changes and mesh > 0 and self.links_per_gpu % mesh == 0
                and 2 <= new.gpus_per_node < self.gpus_per_node):
            new = replace(new, links_per_gpu=self.links_per_gpu // mesh * (new.gpus_per_node - 1))
        return new

    @classmethod
    def from_topology(cls, topo: Topology, *, gpus_per_process: int = 1, net_kind: str | None = None,
                      collnet: bool = False) -> "NcclMachine":
        """The machine of a :class:`Topology` (hosts, links, NICs and CPUs counted from its graph;
        ``net_kind`` default: the NICs' ``transport``, else ``ib``)."""
        g = topo.graph
        gpu0 = topo.gpu(0)
        hosts = {int(d.get("host", 0)) for _, d in g.nodes(data=True) if d["kind"] == "gpu"}
        fabric = [d for _, _, d in g.out_edges(gpu0, data=True) if d["kind"] in ("nvlink", "infinity_fabric")]
        links = sum(int(d.get("links", 1)) for d in fabric)
        kinds = {d["kind"] for d in fabric}
        switch = any(g.nodes[v]["kind"] == "nvswitch" for v in g.successors(gpu0))
        intra = ("nvswitch" if switch else "xgmi" if "infinity_fabric" in kinds
                 else "nvlink" if "nvlink" in kinds else "pcie")
        link_gbs = fabric[0]["bandwidth_gbps"] / max(1, int(fabric[0].get("links", 1))) if fabric else 25.0
        host0 = int(g.nodes[gpu0].get("host", 0))
        local = [k for k in range(topo.num_gpus) if topo.host_of(k) == topo.host_of(0)]
        matrix = None
        if intra == "nvlink":             # NVLinks between each pair of the host's GPUs (one look-up each)
            nodes = [topo.gpu(k) for k in local]

            def count(d) -> int:
                return int(d.get("links", 1)) if d is not None and d.get("kind") == "nvlink" else 0
            matrix = tuple(tuple(count(g.adj[u].get(v)) if u != v else 0 for v in nodes) for u in nodes)
        nics = [n for n, d in g.nodes(data=True) if d["kind"] == "nic" and int(d.get("host", 0)) == host0]
        speeds = [nic_gbs(topo, n) for n in nics]                  # line rate, at most its PCIe link
        if net_kind is None:
            net_kind = next((g.nodes[n]["transport"] for n in nics if g.nodes[n].get("transport")), "ib")
        cpus = [d for _, d in g.nodes(data=True) if d["kind"] == "cpu" and int(d.get("host", 0)) == host0]
        vendor = "amd" if any(re.search(r"AMD|EPYC", str(c.get("name", ""))) for c in cpus) else "intel"
        arm = any(re.search(r"Grace|Neoverse|ARM|aarch64", str(c.get("name", ""))) for c in cpus)
        cpu_arch = "arm" if arm else "x86"
        gen = min(gpu_pcie_gen(topo, k) for k in local)       # the host's slowest GPU link
        p2p = all(topo.p2p(0, k).read for k in _ring_peers(topo, local))
        return cls(topo.name, arch_of_topology(topo), topo.num_gpus, max(1, len(hosts)), intra, links, gen, bool(p2p),
                   len(nics), max(speeds, default=0.0), net_kind, gpus_per_process, switch, collnet,
                   float(link_gbs), matrix, vendor, max(1, len(cpus)), cpu_arch,
                   gpu_name=str(g.nodes[gpu0].get("name") or ""), gpus_per_uplink=uplink_gpus(topo, local),
                   nic_path=topology_nic_path(topo, local), pcie_path_gbs=pcie_path_gbs(topo, local, gen),
                   nic_shares=nic_shares(topo, local, gen), nic_pcie_limited=nic_pcie_limited(topo, nics, speeds))


def _ring_peers(topo: Topology, local: list[int]) -> list[int]:
    """The GPUs whose P2P with GPU 0 decides NCCL's rings: where the GPU fabric (NVLink, xGMI,
    NVSwitches) joins all of the host's GPUs, the rings run over it and only the peers it reaches
    in NCCL's GPU-to-GPU path classes (NVL, NVB: NCCL 2.30.7 src/graph/paths.cc, P2P over NVLink
    at any P2P level) count; a pair it does not reach (a PCIe or assumed-host path,
    :mod:`topo_probe.topology.host_assumption`) carries only point-to-point sends.  Elsewhere every
    peer counts."""
    g = topo.graph
    gpus = [topo.gpu(k) for k in local]
    if len(local) > 1 and set(gpus) <= _fabric_component(g, gpus[0]):
        return [k for k in local[1:] if topo.path_class(local[0], k) in ("NVL", "NVB")]
    return local[1:]


def _fabric_component(g, start: str) -> set:
    """The nodes ``start`` reaches over NVLink / xGMI links in either direction (``start``
    itself included)."""
    seen, todo = {start}, [start]
    while todo:
        u = todo.pop()
        for nbrs in (g.succ[u], g.pred[u]):
            for v, d in nbrs.items():
                if v not in seen and d["kind"] in ("nvlink", "infinity_fabric"):
                    seen.add(v)
                    todo.append(v)
    return seen


__all__ = ["NcclMachine", "arch_of_gpu_name", "arch_of_topology", "ARCH_FAMILY", "NET_KINDS", "INTRA_KINDS"]
