"""Presets for current hardware (2024-2025): ``hgx-h200``, ``hgx-b200``, ``gb200-nvl72``,
``mi325x``, ``mi355x`` and ``l40s-8gpu-pcie``, registered in
:data:`topo_probe.machines.presets.PRESETS` (``get_preset(name)`` builds them).

:data:`CURRENT_PRESETS` maps each name to ``(builder, doc)``; the doc names the published source
of every figure.  Bandwidths are theoretical GB/s (1e9 bytes/s) per direction: NVLink4 25 GB/s
per link, NVLink5 50 GB/s per link, AMD Infinity Fabric per link as AMD's data sheets give it
halved (their figures are bidirectional), PCIe x16 Gen4 31.5 / Gen5 63 GB/s, NIC line rate / 8.
Latencies as in :mod:`topo_probe.machines.generators`.

>>> t = get_current("hgx-b200")
>>> t.smi_label(0, 7), t.gpu_bandwidth_gbps(0), t.graph.nodes["gpu0"]["compute_capability"]
('NV18', 900.0, '10.0')
"""

from __future__ import annotations

from typing import Callable

from topo_probe.machines.generators import (
    CPU_LATENCY_US,
    NVLINK_LATENCY_US,
    NVSWITCH_LATENCY_US,
    PCIE_X16_GBPS,
    add_pcie_tree,
)
from topo_probe.parsers.hardware import CPU_LINK_GBPS
from topo_probe.topology.model import Topology

#: NVLink4 (H100/H200) and NVLink5 (B200/GB200) per link per direction, GB/s
NVLINK4_GBPS, NVLINK5_GBPS = 25.0, 50.0
#: Infinity Fabric per link per direction, GB/s: MI300X/MI325X 128 GB/s and MI355X 153.6 GB/s
#: peak bidirectional per link (AMD data sheets), halved
XGMI_MI325X_GBPS, XGMI_MI355X_GBPS = 64.0, 76.8
#: 400 Gb/s NIC (ConnectX-7 NDR, AMD Pensando Pollara 400), GB/s per direction
NIC_400G_GBPS = 50.0
_HGX_BUS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")  # HGX H100/H200 GPU bus numbers


def _gpus(t: Topology, names: list[str], numa: list[int], bus: list[str], **attrs) -> None:
    for i, b in enumerate(bus):
        t.add_gpu(i, name=names[i] if isinstance(names, list) else names, pci_bus_id=f"0000:{b}:00.0",
                  numa_node=numa[i], host=0, **attrs)


def _nics(t: Topology, n: int, gbps: float, numa: list[int], bus: list[str] | None = None) -> None:
    for k in range(n):
        extra = {"pci_bus_id": f"0000:{bus[k]}:00.0"} if bus else {}
        t.add_node(f"nic{k}", "nic", name=f"mlx5_{k}", numa_node=numa[k], speed_gbps=gbps, gdr=True, **extra)


def _switched(t: Topology, n: int, links: list[int], gbps: float) -> None:
    """``len(links)`` NVSwitch chips; GPU i has ``links[k]`` NVLinks to chip k."""
    for k in range(len(links)):
        t.add_node(f"nvswitch{k}", "nvswitch")
    for i in range(n):
        for k, m in enumerate(links):
            t.add_link(f"gpu{i}", f"nvswitch{k}", kind="nvlink", links=m, bandwidth_gbps=m * gbps,
                       latency_us=NVSWITCH_LATENCY_US)


def _cpus(name: str, affinity: list[str]) -> list[dict]:
    return [{"name": name, "affinity": a, "numa_node": s} for s, a in enumerate(affinity)]


def _gpu_nic_pairs(t: Topology, cpu: str, affinity: list[str], inter_gbps: float, links: int) -> None:
    """Each GPU k and NIC k on one PCIe Gen5 switch (PIX), four per socket, two sockets."""
    pairs = [[[f"gpu{k}", f"nic{k}"]] for k in range(8)]
    add_pcie_tree(t, [pairs[:4], pairs[4:]], pcie_gbps=PCIE_X16_GBPS[5], inter_socket_gbps=inter_gbps,
                  inter_socket_links=links, cpu_attrs=_cpus(cpu, affinity))


def hgx_h200() -> Topology:
    """HGX H200 board (DGX H200): 8 H200 SXM on 4 NVSwitch chips, 18 NVLink4 per GPU.

    Sources: NVIDIA H200 Tensor Core GPU data sheet (NVLink 900 GB/s bidirectional per GPU =
    18 links x 25 GB/s per direction = 450 GB/s; compute capability 9.0); DGX H200 user guide
    (8 single-port ConnectX-7 400 Gb/s compute NICs, 2 Xeon Platinum 8480C, 4 NVSwitch chips).
    """
    t = Topology("hgx-h200", description=CURRENT_PRESETS["hgx-h200"][1])
    numa = [0] * 4 + [1] * 4
    _gpus(t, "NVIDIA H200", numa, list(_HGX_BUS), compute_capability="9.0")
    _switched(t, 8, [5, 4, 4, 5], NVLINK4_GBPS)
    _nics(t, 8, NIC_400G_GBPS, numa, ["19", "29", "3B", "5E", "9B", "AC", "BB", "DC"])
    _gpu_nic_pairs(t, "Intel Xeon Platinum 8480C", ["0-55,112-167", "56-111,168-223"], 96.0, 4)
    t.assumptions.append("NVLinks split 5+4+4+5 over the 4 NVSwitch chips as on HGX H100 (same baseboard)")
    t.assumptions.append("UPI: 4 links x 24 GB/s (16 GT/s) = 96 GB/s per direction")
    return t


def hgx_b200() -> Topology:
    """HGX B200 board (DGX B200): 8 B200 on 2 NVLink5 switch chips, 18 NVLink5 per GPU.

    Sources: NVIDIA DGX B200 user guide / data sheet (8 B200, 2 fifth-generation NVLink switches,
    14.4 TB/s aggregate = 8 x 1.8 TB/s bidirectional per GPU = 18 links x 50 GB/s per direction =
    900 GB/s; 8 single-port ConnectX-7 up to 400 Gb/s for the compute network; 2 Xeon Platinum
    8570, PCIe Gen5); NVIDIA Blackwell architecture brief (compute capability 10.0).
    """
    t = Topology("hgx-b200", description=CURRENT_PRESETS["hgx-b200"][1])
    numa = [0] * 4 + [1] * 4
    _gpus(t, "NVIDIA B200", numa, list(_HGX_BUS), compute_capability="10.0")
    _switched(t, 8, [9, 9], NVLINK5_GBPS)
    _nics(t, 8, NIC_400G_GBPS, numa)
    _gpu_nic_pairs(t, "Intel Xeon Platinum 8570", ["0-55,112-167", "56-111,168-223"], 96.0, 4)
    t.assumptions.append("each GPU's 18 NVLinks split 9+9 over the 2 NVLink switch chips")
    t.assumptions.append("GPU k and ConnectX-7 k share a PCIe Gen5 switch (as on DGX H100); PCI bus ids "
                         "follow the HGX H100 numbering")
    t.assumptions.append("UPI: 4 links x 24 GB/s = 96 GB/s per direction")
    return t


def gb200_nvl72() -> Topology:
    """GB200 NVL72 rack: 72 B200 in one NVLink5 domain, 18 compute trays of 2 Grace + 4 GPUs.

    Sources: NVIDIA GB200 NVL72 product page and multi-node NVLink tuning guide (72x1: 18 compute
    trays of 4 GPUs, 9 NVLink switch trays of 2 switch chips, 1.8 TB/s bidirectional per GPU =
    18 links x 50 GB/s per direction, 130 TB/s aggregate; 36 Grace CPUs, one per 2 GPUs over
    NVLink-C2C; ConnectX-7 for the compute network); compute capability 10.0.
    """
    t = Topology("gb200-nvl72", description=CURRENT_PRESETS["gb200-nvl72"][1])
    numa = [i // 2 for i in range(72)]
    _gpus(t, "NVIDIA GB200", numa, [f"{i:02X}" for i in range(72)], compute_capability="10.0")
    _switched(t, 72, [1] * 18, NVLINK5_GBPS)
    for k in range(18):
        t.graph.nodes[f"nvswitch{k}"]["tray"] = k // 2
    _nics(t, 72, NIC_400G_GBPS, numa)
    for tray in range(18):
        g = [4 * tray + j for j in range(4)]
        add_pcie_tree(t, [[[[f"gpu{g[0]}", f"nic{g[0]}"]], [[f"gpu{g[1]}", f"nic{g[1]}"]]],
                          [[[f"gpu{g[2]}", f"nic{g[2]}"]], [[f"gpu{g[3]}", f"nic{g[3]}"]]]],
                      pcie_gbps=PCIE_X16_GBPS[5], inter_socket_gbps=CPU_LINK_GBPS,
                      cpu_attrs=[{"name": "NVIDIA Grace", "numa_node": 2 * tray + s, "tray": tray} for s in (0, 1)])
    for tray in range(17):  # nominal: the trays share no CPU link (see the assumption below)
        t.add_link(f"cpu{2 * tray + 1}", f"cpu{2 * tray + 2}", kind="cpu", bandwidth_gbps=CPU_LINK_GBPS,
                   latency_us=CPU_LATENCY_US)
    t.assumptions.append("one ConnectX-7 400 Gb/s NIC per GPU (4 per compute tray), each sharing a PCIe "
                         "Gen5 switch with its GPU; NVLink-C2C to Grace modelled as that PCIe path")
    t.assumptions.append(f"the 36 Grace CPUs joined in a chain of nominal {CPU_LINK_GBPS} GB/s links (in a "
                         "tray and between trays) so that every GPU-NIC pair has a PCIe class (SYS); the trays "
                         "have no such link: GPUs of different trays meet over NVLink only")
    t.assumptions.append("one host: the 72 GPUs are one NVLink domain (NCCL multi-node NVLink)")
    return t


def _xgmi_platform(name: str, gpu: str, arch: str, gbps: float, cpu: str) -> Topology:
    """8 AMD Instinct OAM GPUs fully meshed by one Infinity Fabric link per pair; each GPU with one
    400 Gb/s NIC on a PCIe Gen5 switch, 4 per socket (as :func:`~topo_probe.machines.presets.mi300x`)."""
    t = Topology(name, description=CURRENT_PRESETS[name][1])
    numa = [0] * 4 + [1] * 4
    _gpus(t, gpu, numa, ["05", "15", "65", "75", "85", "95", "E5", "F5"], compute_capability=None, gcn_arch=arch)
    for i in range(8):
        for j in range(i + 1, 8):
            t.add_link(f"gpu{i}", f"gpu{j}", kind="infinity_fabric", links=1, bandwidth_gbps=gbps,
                       latency_us=NVLINK_LATENCY_US)
    _nics(t, 8, NIC_400G_GBPS, numa, ["06", "16", "66", "76", "86", "96", "E6", "F6"])
    _gpu_nic_pairs(t, cpu, ["0-95,192-287", "96-191,288-383"], 128.0, 4)
    t.assumptions.append("GPU-NIC pairs share a PCIe Gen5 switch; 400 Gb/s NICs")
    t.assumptions.append("xGMI: 4 links x 32 GB/s = 128 GB/s per direction between sockets")
    return t


def mi325x() -> Topology:
    """AMD Instinct MI325X platform (see :data:`CURRENT_PRESETS`)."""
    return _xgmi_platform("mi325x", "AMD Instinct MI325X", "gfx942", XGMI_MI325X_GBPS, "AMD EPYC 9005")


def mi355x() -> Topology:
    """AMD Instinct MI355X platform (see :data:`CURRENT_PRESETS`)."""
    return _xgmi_platform("mi355x", "AMD Instinct MI355X", "gfx950", XGMI_MI355X_GBPS, "AMD EPYC 9005")


def l40s_8gpu_pcie() -> Topology:
    """8 L40S on PCIe, no NVLink: per socket one PCIe switch with 4 GPUs and 2 NICs.

    Sources: NVIDIA L40S data sheet (PCIe Gen4 x16, 64 GB/s bidirectional = 31.5 GB/s per
    direction; no NVLink; Ada, compute capability 8.9); typical 2-socket 8-GPU L40S server
    block diagrams (one PCIe switch per socket).  P2P: data-center Ada GPUs report PCIe peer
    access (an L4 in NVIDIA/cuda-samples issue 284), so GPUs under one switch (PIX) have P2P and
    GPUs on different sockets (SYS) do not, as NCCL's default P2P level (PXB) decides.
    """
    t = Topology("l40s-8gpu-pcie", description=CURRENT_PRESETS["l40s-8gpu-pcie"][1])
    numa = [0] * 4 + [1] * 4
    _gpus(t, "NVIDIA L40S", numa, ["1B", "1C", "1D", "1E", "9B", "9C", "9D", "9E"], compute_capability="8.9")
    _nics(t, 4, 25.0, [0, 0, 1, 1], ["1F", "20", "9F", "A0"])
    add_pcie_tree(t, [[[["gpu0", "gpu1", "gpu2", "gpu3", "nic0", "nic1"]]],
                      [[["gpu4", "gpu5", "gpu6", "gpu7", "nic2", "nic3"]]]],
                  pcie_gbps=PCIE_X16_GBPS[4], inter_socket_gbps=96.0, inter_socket_links=4,
                  cpu_attrs=_cpus("Intel Xeon (Sapphire Rapids)", ["0-47,96-143", "48-95,144-191"]))
    t.assumptions.append("switch uplinks modelled at the GPUs' Gen4 x16 rate (31.5 GB/s per direction)")
    t.assumptions.append("4 ConnectX-7 NICs at 200 Gb/s, 2 per switch (a common L40S server choice)")
    t.assumptions.append("UPI: 4 links x 24 GB/s = 96 GB/s per direction")
    return t


CURRENT_PRESETS: dict[str, tuple[Callable[..., Topology], str]] = {
    "hgx-h200": (hgx_h200, (
        "NVIDIA HGX H200 (DGX H200): 8 H200 SXM (compute capability 9.0), 18 NVLink4 per GPU at 25 GB/s "
        "per link per direction (450 GB/s; H200 data sheet: 900 GB/s bidirectional) into 4 NVSwitch chips "
        "(5+4+4+5); 8 ConnectX-7 400 Gb/s NICs (50 GB/s), each on a PCIe Gen5 x16 (63 GB/s) switch with "
        "one GPU; 2 Xeon Platinum 8480C (DGX H200 user guide).")),
    "hgx-b200": (hgx_b200, (
        "NVIDIA HGX B200 (DGX B200): 8 B200 (compute capability 10.0), 18 NVLink5 per GPU at 50 GB/s per "
        "link per direction (900 GB/s; 1.8 TB/s bidirectional) into 2 NVLink5 switch chips (14.4 TB/s "
        "aggregate); 8 single-port ConnectX-7 400 Gb/s NICs, PCIe Gen5; 2 Xeon Platinum 8570 (DGX B200 "
        "user guide).")),
    "gb200-nvl72": (gb200_nvl72, (
        "NVIDIA GB200 NVL72: 72 B200 (compute capability 10.0) in one NVLink5 domain, 18 compute trays of "
        "2 Grace CPUs + 4 GPUs, 9 NVLink switch trays of 2 chips (18 chips); each GPU has one 50 GB/s link "
        "to every chip (18 x 50 = 900 GB/s per direction, 1.8 TB/s bidirectional, 130 TB/s per rack); one "
        "ConnectX-7 400 Gb/s NIC per GPU (NVIDIA GB200 NVL72 page, multi-node NVLink tuning guide).")),
    "mi325x": (mi325x, (
        "AMD Instinct MI325X platform: 8 GPUs (gfx942) fully connected by Infinity Fabric, one link of "
        "128 GB/s bidirectional (64 GB/s per direction) to each of 7 peers, 896 GB/s aggregate per GPU as "
        "on MI300X (AMD MI325X data sheet); each GPU with one 400 Gb/s NIC on a PCIe Gen5 switch, 4 per "
        "socket, 2 AMD EPYC 9005 sockets.")),
    "mi355x": (mi355x, (
        "AMD Instinct MI355X platform: 8 GPUs (gfx950, CDNA 4) fully connected by 4th-generation Infinity "
        "Fabric, one link of 153.6 GB/s bidirectional (76.8 GB/s per direction) to each of 7 peers, "
        "1075.2 GB/s aggregate per GPU (AMD MI355X data sheet); each GPU with one 400 Gb/s NIC (AMD "
        "Pensando Pollara 400) on a PCIe Gen5 switch, 2 AMD EPYC 9005 sockets.")),
    "l40s-8gpu-pcie": (l40s_8gpu_pcie, (
        "8 x NVIDIA L40S (compute capability 8.9) on PCIe Gen4 x16 (31.5 GB/s per direction; L40S data "
        "sheet: 64 GB/s bidirectional, no NVLink): per socket one PCIe switch with 4 GPUs and 2 ConnectX-7 "
        "200 Gb/s NICs, two Xeon sockets joined by UPI; P2P under one switch, none across sockets.")),
}


def get_current(name: str) -> Topology:
    """Build current preset ``name`` (use :func:`topo_probe.machines.presets.get_preset`)."""
    return CURRENT_PRESETS[name][0]()


__all__ = ["CURRENT_PRESETS", "get_current", "hgx_h200", "hgx_b200", "gb200_nvl72", "mi325x", "mi355x",
           "l40s_8gpu_pcie", "NVLINK4_GBPS", "NVLINK5_GBPS", "XGMI_MI325X_GBPS", "XGMI_MI355X_GBPS"]
