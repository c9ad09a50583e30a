"""What NCCL's tuner sees of a machine: GPU architecture, ranks and nodes, the intra-node fabric
(NVSwitch, NVLink mesh, xGMI mesh or PCIe), NICs per node and their speed and kind, and how
many GPUs one process drives.

>>> from topo_probe import get_preset, cluster
>>> m = NcclMachine.from_topology(get_preset("dgx-h100"))
>>> m.arch, m.intra, m.links_per_gpu, m.nvls, m.ranks, m.nodes
('sm90', 'nvswitch', 18, True, 8, 1)
>>> c = NcclMachine.from_topology(cluster("dgx-a100", nodes=2))
>>> c.nodes, c.gpus_per_node, c.nics_per_node, c.nic_gbps
(2, 8, 8, 25.0)
>>> arch_of_gpu_name("NVIDIA A100-SXM4-80GB"), arch_of_gpu_name("AMD Instinct MI300X")
('sm80', 'gfx942')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from topo_probe.errors import InvalidArgument
from topo_probe.topology.model import Topology

#: GPU name patterns -> architecture (first match wins)
_NAMES = [(r"\bB(100|200)\b|GB200|Blackwell", "sm100"), (r"\bH(100|200|800|20)\b|GH200|Hopper", "sm90"),
          (r"\bA(100|800|30)\b", "sm80"), (r"\bA(10|40|6000)\b|RTX 30|L40|L4\b", "sm86"),
          (r"V100|Volta|TITAN V", "sm70"), (r"P100", "sm60"),
          (r"MI300|MI325|gfx942", "gfx942"), (r"MI350|MI355|gfx950", "gfx950"), (r"MI2[05]0|gfx90a", "gfx90a")]
ARCH_FAMILY = {"sm60": "volta", "sm70": "volta", "sm80": "ampere", "sm86": "ampere", "sm90": "hopper",
               "sm100": "blackwell", "gfx90a": "cdna", "gfx942": "cdna", "gfx950": "cdna"}
NET_KINDS = ("ib", "efa", "efa2", "tcpxo")


def arch_of_gpu_name(name: str) -> str | None:
    """The architecture (``sm80``, ``gfx942``...) of a GPU by its marketing name, else None."""
    for pattern, arch in _NAMES:
        if re.search(pattern, name or ""):
            return arch
    return None


def _arch(topo: Topology) -> str:
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

    ``intra`` is ``nvswitch``, ``nvlink`` (point-to-point NVLink mesh), ``xgmi`` or ``pcie``;
    ``links_per_gpu`` the GPU's NVLink / xGMI links; ``nic_gbps`` the line rate of one NIC (GB/s
    per direction) and ``net_kind`` one of ``ib``, ``efa``, ``efa2``, ``tcpxo``;
    ``gpus_per_process`` how many GPUs one thread drives (nccl-tests ``-g``).
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

    def __post_init__(self) -> None:
        if self.arch not in ARCH_FAMILY:
            raise InvalidArgument(f"GPU architecture {self.arch!r} is not one of {', '.join(ARCH_FAMILY)}")
        if self.net_kind not in NET_KINDS:
            raise InvalidArgument(f"NIC kind {self.net_kind!r} is not one of {', '.join(NET_KINDS)}")
        if self.ranks < 1 or self.nodes < 1 or self.ranks % self.nodes:
            raise InvalidArgument(f"{self.ranks} ranks do not split over {self.nodes} nodes")

    @property
    def family(self) -> str:
        return ARCH_FAMILY[self.arch]

    @property
    def amd(self) -> bool:
        return self.arch.startswith("gfx")

    @property
    def gpus_per_node(self) -> int:
        return self.ranks // self.nodes

    @property
    def nvls(self) -> bool:
        """NVLink SHARP: Hopper or newer GPUs behind NVSwitches."""
        return self.nvls_switch and self.family in ("hopper", "blackwell")

    def with_(self, **changes) -> "NcclMachine":
        return replace(self, **changes)

    @classmethod
    def from_topology(cls, topo: Topology, *, gpus_per_process: int = 1, net_kind: str = "ib",
                      collnet: bool = False) -> "NcclMachine":
        """The machine of a :class:`Topology` (hosts, links and NICs counted from its graph)."""
        g = topo.graph
        gpu0 = topo.gpu(0)
        hosts = {int(d.get("host", 0)) for _, d in g.nodes(data=True) if d["kind"] == "gpu"}
        links = sum(int(d.get("links", 1)) for _, v, d in g.out_edges(gpu0, data=True)
                    if d["kind"] in ("nvlink", "infinity_fabric"))
        kinds = {d["kind"] for _, _, d in g.out_edges(gpu0, data=True)}
        switch = any(g.nodes[v]["kind"] == "nvswitch" for v in g.successors(gpu0))
        intra = ("nvswitch" if switch else "xgmi" if "infinity_fabric" in kinds
                 else "nvlink" if "nvlink" in kinds else "pcie")
        host0 = int(g.nodes[gpu0].get("host", 0))
        nics = [n for n, d in g.nodes(data=True) if d["kind"] == "nic" and int(d.get("host", 0)) == host0]
        speeds = [float(g.nodes[n].get("speed_gbps") or 0.0) for n in nics]
        pcie = max((d["bandwidth_gbps"] for _, _, d in g.edges(data=True) if d["kind"] == "pcie"), default=31.5)
        gen = 5 if pcie > 40 else 4 if pcie > 20 else 3
        local = [k for k in range(topo.num_gpus) if topo.host_of(k) == topo.host_of(0)]
        p2p = all(topo.p2p(0, k).read for k in local[1:])
        return cls(topo.name, _arch(topo), topo.num_gpus, max(1, len(hosts)), intra, links, gen, bool(p2p),
                   len(nics), max(speeds, default=0.0), net_kind, gpus_per_process, switch, collnet)


__all__ = ["NcclMachine", "arch_of_gpu_name", "ARCH_FAMILY", "NET_KINDS"]
