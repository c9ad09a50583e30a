"""The machine topology: a directed networkx graph of GPUs, switches, CPUs and NICs.

Nodes are strings (``"gpu0"``, ``"nvswitch2"``, ``"pcie1"``, ``"hb0"``, ``"cpu1"``,
``"nic3"``, ``"netswitch0"``; any unique string works).  Every node has ``kind`` in
:data:`NODE_KINDS`; GPU nodes also carry ``index`` (the rank, 0..n-1, unique) and
optionally ``name``, ``pci_bus_id``, ``numa_node``, ``compute_capability`` and ``host``
(which machine of a cluster, default 0).  NICs carry ``name``, ``pci_bus_id``,
``numa_node``, ``speed_gbps`` and optionally ``transport`` (one of :data:`NIC_TRANSPORTS`; NCCL's
network model assumes InfiniBand without it).

Directed edges carry:

``kind``
    one of :data:`LINK_KINDS`: ``nvlink``, ``pcie``, ``cpu`` (QPI/UPI/xGMI/Infinity Fabric
    between sockets, or a CPU to its host bridge), ``network`` (NIC to network switch),
    ``infinity_fabric`` (AMD GPU-to-GPU links).
``links``
    how many physical links are bonded in this edge (>= 1).
``bandwidth_gbps``
    total bandwidth of the edge in GB/s (1e9 bytes/s) per direction, all links together.
``latency_us``
    one-way latency of the edge in microseconds.

Links are usually symmetric; :meth:`Topology.add_link` adds both directions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise, product

import networkx as nx

from topo_probe.errors import TopologyError
from topo_probe.topology.host_assumption import assumed_pcie_class, fingerprint_part
from topo_probe.topology.shortest_paths import PathIndex

NODE_KINDS = ("gpu", "nvswitch", "pcie_switch", "host_bridge", "cpu", "nic", "net_switch")
SWITCH_KINDS = ("nvswitch", "pcie_switch", "host_bridge", "cpu", "net_switch")
LINK_KINDS = ("nvlink", "infinity_fabric", "pcie", "cpu", "network")
GPU_LINK_KINDS = ("nvlink", "infinity_fabric")
#: what a NIC's ``transport`` may be: InfiniBand, RoCE, AWS EFA (p4d/p4de), EFA v2 (p5-class),
#: GCP GPUDirect-TCPX(O), plain sockets
NIC_TRANSPORTS = ("ib", "roce", "efa", "efa2", "tcpxo", "socket")
"""Link kinds of GPU-to-GPU fabrics (NVLink/NVSwitch, AMD Infinity Fabric)."""

#: NCCL path classes, best first (src/graph/topo.h), plus nvidia-smi's NODE.
PATH_CLASSES = ("LOC", "NVL", "NVB", "PIX", "PXB", "PHB", "NODE", "SYS", "NET")


@dataclass(frozen=True)
class P2PCapability:
    """Peer-to-peer capability of an ordered GPU pair.

    ``read``/``write``/``atomics`` say what the hardware path allows; ``reason`` says why
    not when any is False (e.g. ``"crosses CPU sockets"``, ``"disabled"``).
    """

    read: bool
    write: bool
    atomics: bool
    reason: str = ""

    @property
    def supported(self) -> bool:
        return self.read and self.write


class Topology:
    """A machine (or cluster) interconnect.

    Parameters
    ----------
    name : str
        Short name, e.g. ``"dgx1-v100"``.
    graph : networkx.DiGraph, optional
        An existing graph with the documented node and edge attributes.
    description : str
        Where the figures come from (for presets: the published source).

    Examples
    --------
    >>> t = Topology("two")
    >>> t.add_gpu(0); t.add_gpu(1)
    'gpu0'
    'gpu1'
    >>> t.add_link("gpu0", "gpu1", kind="nvlink", links=2, bandwidth_gbps=50.0)
    >>> t.num_gpus, t.path_class(0, 1), t.smi_label(0, 1)
    (2, 'NVL', 'NV2')
    """

    def __init__(self, name: str, graph: nx.DiGraph | None = None, description: str = "") -> None:
        self.name = name
        self.description = description
        self.graph: nx.DiGraph = graph if graph is not None else nx.DiGraph()
        #: explicit P2P overrides {(i, j): P2PCapability} from probes or ``nvidia-smi topo -p2p``.
        self.p2p_overrides: dict[tuple[int, int], P2PCapability] = {}
        #: free-form notes on assumptions made while building (e.g. guessed NVLink speed).
        self.assumptions: list[str] = []

    # ------------------------------------------------------------------ building
    def add_node(self, node_id: str, kind: str, **attrs) -> str:
        if kind not in NODE_KINDS:
            raise TopologyError(f"node {node_id!r}: kind {kind!r} is not one of {', '.join(NODE_KINDS)}")
        if node_id in self.graph:
            raise TopologyError(f"node {node_id!r} is defined twice")
        self.graph.add_node(node_id, kind=kind, **attrs)
        return node_id

    def add_gpu(self, index: int, node_id: str | None = None, **attrs) -> str:
        """Add GPU (rank) ``index``; returns its node id (default ``gpu{index}``)."""
        return self.add_node(node_id or f"gpu{index}", "gpu", index=int(index), **attrs)

    def add_link(self, a: str, b: str, *, kind: str, links: int = 1, bandwidth_gbps: float,
                 latency_us: float = 0.0, both: bool = True) -> None:
        """Add the directed edge a->b (and b->a when ``both``); bandwidth is per direction."""
        for u, v in ((a, b), (b, a)) if both else ((a, b),):
            if u not in self.graph or v not in self.graph:
                missing = u if u not in self.graph else v
                raise TopologyError(f"link {a}->{b}: node {missing!r} does not exist")
            if self.graph.has_edge(u, v):
                e = self.graph.edges[u, v]
                if e["kind"] != kind:
                    raise TopologyError(f"link {u}->{v}: kind {kind!r} conflicts with existing {e['kind']!r}")
                e["links"] += int(links)
                e["bandwidth_gbps"] += float(bandwidth_gbps)
                e["latency_us"] = max(e["latency_us"], float(latency_us))
            else:
                self.graph.add_edge(u, v, kind=kind, links=int(links),
                                    bandwidth_gbps=float(bandwidth_gbps), latency_us=float(latency_us))

    # ------------------------------------------------------------------ basic queries
    def _gpu_table(self) -> tuple[list[str], dict[int, str]]:
        """(GPU node ids by index, index -> node id), kept while the graph and its size stay."""
        key = (id(self.graph), self.graph.number_of_nodes())
        kept = self.__dict__.get("_gpus_kept")
        if kept is None or kept[0] != key:
            g = sorted((n for n, d in self.graph.nodes(data=True) if d["kind"] == "gpu"), key=self._index)
            kept = self.__dict__["_gpus_kept"] = (key, g, {self._index(n): n for n in g})
        return kept[1], kept[2]

    def _index(self, node: str) -> int:
        return self.graph.nodes[node]["index"]

    @property
    def gpus(self) -> list[str]:
        """GPU node ids ordered by rank index."""
        return list(self._gpu_table()[0])

    @property
    def num_gpus(self) -> int:
        return len(self._gpu_table()[0])

    def gpu(self, index: int) -> str:
        """Node id of GPU (rank) ``index``."""
        node = self._gpu_table()[1].get(index)
        if node is None or self.graph.nodes[node].get("index") != index:
            raise TopologyError(f"topology {self.name!r} has no GPU {index} (it has {self.num_gpus})")
        return node

    def nodes_of_kind(self, kind: str) -> list[str]:
        return sorted(n for n, d in self.graph.nodes(data=True) if d["kind"] == kind)

    def kind(self, node: str) -> str:
        return self.graph.nodes[node]["kind"]

    def host_of(self, index: int) -> int:
        return int(self.graph.nodes[self.gpu(index)].get("host", 0))

    def gpu_bandwidth_gbps(self, index: int, kinds: Iterable[str] = GPU_LINK_KINDS) -> float:
        """Total egress bandwidth (GB/s per direction) of GPU ``index`` over links of ``kinds``."""
        kinds = tuple(kinds)
        node = self.gpu(index)
        return sum(d["bandwidth_gbps"] for _, _, d in self.graph.out_edges(node, data=True)
                   if d["kind"] in kinds)

    def nvlink_count(self, i: int, j: int) -> int:
        """Direct NVLink (or Infinity Fabric) links from GPU i to GPU j (0 if none)."""
        a, b = self.gpu(i), self.gpu(j)
        if self.graph.has_edge(a, b) and self.graph.edges[a, b]["kind"] in GPU_LINK_KINDS:
            return int(self.graph.edges[a, b]["links"])
        return 0

    def _paths(self, src: str, dst: str, edge_kinds: tuple[str, ...], relay_kinds: tuple[str, ...]):
        """Shortest (fewest hops) simple paths src->dst whose edges have ``edge_kinds`` and
        whose intermediate nodes have ``relay_kinds`` (never GPUs): :class:`.shortest_paths.PathIndex`."""
        if self.graph.has_edge(src, dst) and self.graph.edges[src, dst]["kind"] in edge_kinds:
            return [(src, dst)]                # one hop: the only shortest path
        kept = self.__dict__.setdefault("_path_indexes", {})
        index = kept.get((edge_kinds, relay_kinds))
        if index is None or not index.valid_for(self.graph):   # never through a GPU
            relays = frozenset(n for n, d in self.graph.nodes(data=True)
                               if d["kind"] != "gpu" and d["kind"] in relay_kinds)
            index = kept[edge_kinds, relay_kinds] = PathIndex(self.graph, edge_kinds, relays)
        return index.paths(src, dst)

    def gpu_fabric_paths(self, i: int, j: int) -> list[tuple[str, ...]]:
        """Shortest GPU i -> GPU j paths over NVLink/Infinity Fabric, through NVSwitches only."""
        return self._paths(self.gpu(i), self.gpu(j), GPU_LINK_KINDS, ("nvswitch",))

    def pcie_paths(self, i: int, j: int) -> list[tuple[str, ...]]:
        """Shortest GPU i -> GPU j paths over PCIe / CPU links (never through another GPU)."""
        return self._paths(self.gpu(i), self.gpu(j), ("pcie", "cpu"),
                           ("pcie_switch", "host_bridge", "cpu"))

    def network_paths(self, i: int, j: int) -> list[tuple[str, ...]]:
        """Shortest paths GPU i -> NIC -> network -> NIC -> GPU j (for GPUs on different hosts)."""
        return self._paths(self.gpu(i), self.gpu(j), ("pcie", "cpu", "network"),
                           ("pcie_switch", "host_bridge", "cpu", "nic", "net_switch"))

    def routes(self, i: int, j: int) -> list[tuple[tuple[str, ...], float]]:
        """How traffic from GPU i to GPU j is routed: ``[(path, fraction), ...]``.

        Like NCCL, the best available class is used: the NVLink fabric (direct or through
        NVSwitches) when it joins i and j, else PCIe/CPU within a host, else the network.
        Traffic is spread over all equal-hop paths of that class in proportion to their
        bottleneck bandwidth (NVSwitch planes, several NICs).  Empty if unreachable.
        """
        if i == j:
            return []
        paths = self.gpu_fabric_paths(i, j)
        if not paths:
            paths = self.pcie_paths(i, j) if self.host_of(i) == self.host_of(j) else []
        if not paths:
            paths = self.network_paths(i, j)
        if not paths:
            return []
        bott = [min(self.graph.edges[u, v]["bandwidth_gbps"] for u, v in pairwise(p)) for p in paths]
        total = sum(bott)
        return [(p, b / total) for p, b in zip(paths, bott)]

    def path_class(self, i: int, j: int) -> str:
        """NCCL path class of GPU i -> GPU j: LOC, NVL, NVB, PIX, PXB, PHB, NODE, SYS or NET."""
        if i == j:
            return "LOC"
        if self.gpu_fabric_paths(i, j):
            return "NVL"
        if self.host_of(i) != self.host_of(j):
            return "NET"
        a, b = self.gpu(i), self.gpu(j)
        for mid in self.graph.successors(a):
            if (self.kind(mid) == "gpu" and self.graph.edges[a, mid]["kind"] in GPU_LINK_KINDS
                    and self.graph.has_edge(mid, b)
                    and self.graph.edges[mid, b]["kind"] in GPU_LINK_KINDS):
                return "NVB"
        return self.pcie_class(a, b)

    def pcie_class(self, a: str, b: str) -> str:
        """nvidia-smi PCIe class between any two PCIe endpoints (GPU or NIC node ids); an
        endpoint in no PCIe tree gets the host assumption (:mod:`.host_assumption`)."""
        paths = self._paths(a, b, ("pcie", "cpu"), ("pcie_switch", "host_bridge", "cpu"))
        if not paths:
            if self.graph.nodes[a].get("host", 0) != self.graph.nodes[b].get("host", 0):
                return "NET"
            return assumed_pcie_class(self.graph, a, b)      # no PCIe tree: the stated host assumption
        mids = [self.kind(n) for n in paths[0][1:-1]]
        cpus = mids.count("cpu")
        if cpus >= 2:
            return "SYS"
        bridges = mids.count("host_bridge")
        if bridges >= 2:
            return "NODE"
        if bridges == 1 or cpus == 1:
            return "PHB"
        return "PIX" if mids.count("pcie_switch") <= 1 else "PXB"

    def smi_label(self, i: int, j: int) -> str:
        """The cell ``nvidia-smi topo -m`` prints for GPU i, GPU j: X, NV#, PIX, PXB, PHB, NODE, SYS."""
        if i == j:
            return "X"
        direct = self.nvlink_count(i, j)
        if direct:
            return f"NV{direct}"
        paths = self.gpu_fabric_paths(i, j)
        if paths:  # through NVSwitches: nvidia-smi counts the GPU's links into the fabric
            a = self.gpu(i)
            n = sum(d["links"] for _, v, d in self.graph.out_edges(a, data=True)
                    if d["kind"] in GPU_LINK_KINDS and self.kind(v) == "nvswitch")
            return f"NV{n}"
        a, b = self.gpu(i), self.gpu(j)
        return self.pcie_class(a, b)

    # ------------------------------------------------------------------ capabilities
    def p2p(self, i: int, j: int) -> P2PCapability:
        """P2P capability of GPU i -> GPU j (explicit overrides first, then the path class).

        Over NVLink: read, write and atomics.  Within a PCIe tree up to PXB: read and write,
        atomics only under one switch.  Through a host bridge: allowed by the hardware, but
        NCCL does not use it by default ("through host bridge").  Across sockets: not
        supported ("crosses CPU sockets").  Different hosts: "different hosts".
        """
        if (i, j) in self.p2p_overrides:
            return self.p2p_overrides[(i, j)]
        cls = self.path_class(i, j)
        if cls in ("LOC", "NVL", "NVB", "PIX"):
            return P2PCapability(True, True, True)
        if cls == "PXB":
            return P2PCapability(True, True, False, "atomics need a common PCIe switch")
        if cls in ("PHB", "NODE"):
            return P2PCapability(False, False, False, "through host bridge (NCCL P2P level PXB)")
        if cls == "SYS":
            return P2PCapability(False, False, False, "crosses CPU sockets")
        return P2PCapability(False, False, False, "different hosts")

    def gdr(self, gpu_index: int, nic: str) -> tuple[bool, str]:
        """GPUDirect RDMA between GPU and NIC node: (supported, reason).

        Like NCCL's default (NCCL_NET_GDR_LEVEL=PXB): supported when GPU and NIC share a PCIe
        switch tree without crossing a host bridge, and the NIC is not marked ``gdr=False``.
        """
        if self.kind(nic) != "nic":
            raise TopologyError(f"{nic!r} is not a NIC")
        if self.graph.nodes[nic].get("gdr") is False:
            return False, "nvidia_peermem not loaded"
        a = self.gpu(gpu_index)
        if self.graph.nodes[a].get("host", 0) != self.graph.nodes[nic].get("host", 0):
            return False, "different hosts"
        cls = self.pcie_class(a, nic)
        if cls in ("PIX", "PXB"):
            return True, ""
        return False, f"path {cls} crosses a host bridge"

    # ------------------------------------------------------------------ structure
    def check_connected(self) -> None:
        """Raise TopologyError naming the GPUs that cannot reach (or be reached from) GPU 0."""
        gpus = self.gpus
        if not gpus:
            raise TopologyError(f"topology {self.name!r} has no GPUs")
        reach = nx.descendants(self.graph, gpus[0]) | {gpus[0]}
        back = nx.ancestors(self.graph, gpus[0]) | {gpus[0]}
        cut = [self.graph.nodes[g]["index"] for g in gpus if g not in reach or g not in back]
        if cut:
            raise TopologyError(f"topology {self.name!r}: GPUs {cut} are cut off from GPU "
                                f"{self.graph.nodes[gpus[0]]['index']}")
        indices = sorted(self.graph.nodes[g]["index"] for g in gpus)
        if indices != list(range(len(gpus))):
            raise TopologyError(f"topology {self.name!r}: GPU indices must be 0..{len(gpus) - 1}, "
                                f"got {indices}")

    def fingerprint(self) -> str:
        """Stable hash (16 hex digits) of the structure: node kinds/ranks, NIC transports and a host
        path class where set, edges with their kind, links, bandwidth and latency.  Names,
        descriptions and bus ids do not count."""
        nodes = sorted((n, d["kind"], d.get("index", -1), d.get("host", 0))
                       + ((d["transport"],) if d.get("transport") else ()) for n, d in self.graph.nodes(data=True))
        edges = sorted((u, v, d["kind"], d["links"], round(d["bandwidth_gbps"], 6),
                        round(d["latency_us"], 6)) for u, v, d in self.graph.edges(data=True))
        blob = json.dumps([nodes, edges] + fingerprint_part(self.graph), separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def subset(self, gpus: Iterable[int], name: str | None = None) -> Topology:
        """A partial allocation: keep GPUs ``gpus`` (renumbered 0.. in the given order) and
        every non-GPU node and link of the machine."""
        keep = [int(g) for g in gpus]
        if len(set(keep)) != len(keep):
            raise TopologyError(f"--gpus {keep}: a GPU is listed twice")
        old = {self.graph.nodes[n]["index"]: n for n in self.gpus}
        bad = [g for g in keep if g not in old]
        if bad:
            raise TopologyError(f"--gpus: GPU {bad[0]} does not exist (topology {self.name!r} "
                                f"has GPUs 0-{self.num_gpus - 1})")
        drop = [n for i, n in old.items() if i not in keep]
        g = self.graph.copy()
        g.remove_nodes_from(drop)
        for new, oldi in enumerate(keep):
            g.nodes[old[oldi]]["index"] = new
        sub = Topology(name or f"{self.name}[{','.join(map(str, keep))}]", g, self.description)
        sub.p2p_overrides = {(keep.index(a), keep.index(b)): c for (a, b), c in self.p2p_overrides.items()
                             if a in keep and b in keep}
        sub.assumptions = list(self.assumptions)
        return sub

    def copy(self) -> Topology:
        t = Topology(self.name, self.graph.copy(), self.description)
        t.p2p_overrides = dict(self.p2p_overrides)
        t.assumptions = list(self.assumptions)
        return t

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Topology):
            return NotImplemented
        return (self.name == other.name and dict(self.graph.nodes(data=True)) == dict(other.graph.nodes(data=True))
                and {(u, v): d for u, v, d in self.graph.edges(data=True)}
                == {(u, v): d for u, v, d in other.graph.edges(data=True)}
                and self.p2p_overrides == other.p2p_overrides)

    def __repr__(self) -> str:
        return (f"Topology({self.name!r}, gpus={self.num_gpus}, nodes={self.graph.number_of_nodes()}, "
                f"edges={self.graph.number_of_edges()})")

    def gpu_pairs(self) -> Iterable[tuple[int, int]]:
        n = self.num_gpus
        return ((i, j) for i, j in product(range(n), range(n)) if i != j)
