"""Published machine topologies as ready-made :class:`~topo_probe.topology.model.Topology` objects.

``get_preset(name)`` builds one; :data:`PRESETS` maps each name to ``(builder, doc)`` where
the doc says what is modelled and where the figures come from.  All bandwidths are
theoretical GB/s (1e9 bytes/s) per direction: NVLink2/3/4 25 GB/s per link, PCIe x16
Gen3 15.75 / Gen4 31.5 / Gen5 63 GB/s, NIC line rate / 8.  Latencies follow
:mod:`topo_probe.machines.generators` (NVLink hop 0.7 µs, PCIe edge 0.5 µs, CPU edge 0.5 µs).

Node names: ``gpuI``, ``nvswitchK``, ``pcieK``, ``hbK``, ``cpuK``, ``nicK``.

>>> sorted(PRESETS)  # doctest: +NORMALIZE_WHITESPACE
['dgx-a100', 'dgx-h100', 'dgx1-v100', 'dgx2', 'gb200-nvl72', 'hgx-b200', 'hgx-h200', 'l40s-8gpu-pcie',
 'mi300x', 'mi325x', 'mi355x', 'pcie-8gpu-2socket']
>>> t = get_preset("dgx1-v100")
>>> t.smi_label(0, 1), t.smi_label(0, 5), t.path_class(0, 5), t.gpu_bandwidth_gbps(0)
('NV2', 'SYS', 'NVB', 150.0)
"""

from __future__ import annotations

from typing import Callable

from topo_probe.errors import TopologyError
from topo_probe.limits import MAX_BANDWIDTH_GBPS
from topo_probe.machines.generators import NVLINK_LATENCY_US, NVSWITCH_LATENCY_US, PCIE_X16_GBPS, add_pcie_tree
from topo_probe.machines.presets_current import CURRENT_PRESETS
from topo_probe.number_checks import check_float
from topo_probe.topology.model import Topology

NVLINK_GBPS = 25.0
"""NVLink2/3/4 per link per direction (GB/s)."""

#: DGX-1 (V100) hybrid cube-mesh: NVLink2 links between GPU i and GPU j.
DGX1_LINKS = (
    (0, 2, 1, 1, 2, 0, 0, 0), (2, 0, 1, 2, 0, 1, 0, 0), (1, 1, 0, 2, 0, 0, 2, 0),
    (1, 2, 2, 0, 0, 0, 0, 1), (2, 0, 0, 0, 0, 2, 1, 1), (0, 1, 0, 0, 2, 0, 1, 2),
    (0, 0, 2, 0, 1, 1, 0, 2), (0, 0, 0, 1, 1, 2, 2, 0),
)


def _gpus(t: Topology, n: int, name: str, cc: str | None, bus_ids: list[str],
          numa: list[int]) -> None:
    for i in range(n):
        t.add_gpu(i, name=name, pci_bus_id=bus_ids[i], numa_node=numa[i],
                  compute_capability=cc, host=0)


def _nics(t: Topology, n: int, speed_gbps: float, bus_ids: list[str], numa: list[int],
          first: int = 0) -> None:
    for k in range(n):
        t.add_node(f"nic{first + k}", "nic", name=f"mlx5_{first + k}", pci_bus_id=bus_ids[k],
                   numa_node=numa[k], speed_gbps=speed_gbps, gdr=True)


def _cpus(name: str, affinity: list[str], numa: list[int]) -> list[dict]:
    return [{"name": name, "affinity": a, "numa_node": m} for a, m in zip(affinity, numa)]


def _nvswitch_fabric(t: Topology, gpus: range, switches: list[str], links_per_switch: list[int]) -> None:
    for g in gpus:
        for sw, k in zip(switches, links_per_switch):
            t.add_link(f"gpu{g}", sw, kind="nvlink", links=k, bandwidth_gbps=k * NVLINK_GBPS,
                       latency_us=NVSWITCH_LATENCY_US)


def dgx1_v100() -> Topology:
    """DGX-1 with 8 Tesla V100-SXM2 (see :data:`PRESETS` for the sources)."""
    t = Topology("dgx1-v100", description=PRESETS["dgx1-v100"][1])
    _gpus(t, 8, "Tesla V100-SXM2-32GB", "7.0",
          [f"0000:{b}:00.0" for b in ("06", "07", "0A", "0B", "85", "86", "89", "8A")], [0] * 4 + [1] * 4)
    for i in range(8):
        for j in range(i + 1, 8):
            if DGX1_LINKS[i][j]:
                t.add_link(f"gpu{i}", f"gpu{j}", kind="nvlink", links=DGX1_LINKS[i][j],
                           bandwidth_gbps=DGX1_LINKS[i][j] * NVLINK_GBPS, latency_us=NVLINK_LATENCY_US)
    _nics(t, 4, 12.5, ["0000:05:00.0", "0000:0C:00.0", "0000:84:00.0", "0000:8B:00.0"], [0, 0, 1, 1])
    add_pcie_tree(t, [[[["gpu0", "gpu1", "nic0"]], [["gpu2", "gpu3", "nic1"]]],
                      [[["gpu4", "gpu5", "nic2"]], [["gpu6", "gpu7", "nic3"]]]],
                  pcie_gbps=PCIE_X16_GBPS[3], inter_socket_gbps=38.4, inter_socket_links=2,
                  cpu_attrs=_cpus("Intel Xeon E5-2698 v4", ["0-19,40-59", "20-39,60-79"], [0, 1]))
    t.assumptions.append("QPI: 2 links x 19.2 GB/s (9.6 GT/s) = 38.4 GB/s per direction")
    return t


def dgx2() -> Topology:
    """DGX-2: 16 Tesla V100-SXM3 on two NVSwitch baseboards (see :data:`PRESETS`)."""
    t = Topology("dgx2", description=PRESETS["dgx2"][1])
    bus = ["34", "36", "39", "3B", "57", "59", "5C", "5E", "B7", "B9", "BC", "BE", "E0", "E2", "E5", "E7"]
    _gpus(t, 16, "Tesla V100-SXM3-32GB", "7.0", [f"0000:{b}:00.0" for b in bus], [0] * 8 + [1] * 8)
    for k in range(12):
        t.add_node(f"nvswitch{k}", "nvswitch", baseboard=k // 6)
    for board in range(2):
        _nvswitch_fabric(t, range(8 * board, 8 * board + 8),
                         [f"nvswitch{6 * board + k}" for k in range(6)], [1] * 6)
    for k in range(6):
        t.add_link(f"nvswitch{k}", f"nvswitch{k + 6}", kind="nvlink", links=8,
                   bandwidth_gbps=8 * NVLINK_GBPS, latency_us=NVSWITCH_LATENCY_US)
    _nics(t, 8, 12.5, [f"0000:{b}:00.0" for b in ("35", "3A", "58", "5D", "B8", "BD", "E1", "E6")],
          [0] * 4 + [1] * 4)

    def leaf(k: int) -> list[str]:
        return [f"gpu{2 * k}", f"gpu{2 * k + 1}", f"nic{k}"]
    add_pcie_tree(t, [[[[leaf(0), leaf(1)]], [[leaf(2), leaf(3)]]],
                      [[[leaf(4), leaf(5)]], [[leaf(6), leaf(7)]]]],
                  pcie_gbps=PCIE_X16_GBPS[3], inter_socket_gbps=41.6, inter_socket_links=2,
                  cpu_attrs=_cpus("Intel Xeon Platinum 8168", ["0-23,48-71", "24-47,72-95"], [0, 1]))
    t.assumptions.append("UPI: 2 links x 20.8 GB/s (10.4 GT/s) = 41.6 GB/s per direction")
    return t


def dgx_a100() -> Topology:
    """DGX A100: 8 A100-SXM4 on 6 NVSwitches (see :data:`PRESETS`)."""
    t = Topology("dgx-a100", description=PRESETS["dgx-a100"][1])
    numa = [3, 3, 1, 1, 7, 7, 5, 5]
    _gpus(t, 8, "NVIDIA A100-SXM4-40GB", "8.0",
          [f"0000:{b}:00.0" for b in ("07", "0F", "47", "4E", "87", "90", "B7", "BD")], numa)
    switches = [t.add_node(f"nvswitch{k}", "nvswitch") for k in range(6)]
    _nvswitch_fabric(t, range(8), switches, [2] * 6)
    _nics(t, 8, 25.0, [f"0000:{b}:00.0" for b in ("0C", "12", "4B", "54", "8D", "94", "BA", "CC")], numa)

    def complex_(k: int) -> list:  # one PEX switch complex: every endpoint behind its own port bridge
        return [[[f"gpu{2 * k}"], [f"gpu{2 * k + 1}"], [f"nic{2 * k}"], [f"nic{2 * k + 1}"]]]
    add_pcie_tree(t, [[complex_(0), complex_(1)], [complex_(2), complex_(3)]],
                  pcie_gbps=PCIE_X16_GBPS[4], inter_socket_gbps=128.0, inter_socket_links=4,
                  cpu_attrs=_cpus("AMD EPYC 7742", ["0-63,128-191", "64-127,192-255"], [0, 4]))
    t.assumptions.append("xGMI: 4 links x 32 GB/s = 128 GB/s per direction between the EPYC 7742 sockets")
    t.assumptions.append("sockets modelled as 2 NUMA domains (NPS1): nvidia-smi on NPS4 systems shows "
                         "SYS where this preset gives NODE")
    return t


def dgx_h100() -> Topology:
    """DGX H100: 8 H100-SXM5 on 4 NVSwitches (see :data:`PRESETS`)."""
    t = Topology("dgx-h100", description=PRESETS["dgx-h100"][1])
    numa = [0] * 4 + [1] * 4
    _gpus(t, 8, "NVIDIA H100 80GB HBM3", "9.0",
          [f"0000:{b}:00.0" for b in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")], numa)
    switches = [t.add_node(f"nvswitch{k}", "nvswitch") for k in range(4)]
    _nvswitch_fabric(t, range(8), switches, [5, 4, 4, 5])
    _nics(t, 8, 50.0, [f"0000:{b}:00.0" for b in ("19", "29", "3B", "5E", "9B", "AC", "BB", "DC")], numa)
    pairs = [[[f"gpu{k}", f"nic{k}"]] for k in range(8)]
    add_pcie_tree(t, [pairs[:4], pairs[4:]], pcie_gbps=PCIE_X16_GBPS[5], inter_socket_gbps=96.0,
                  inter_socket_links=4,
                  cpu_attrs=_cpus("Intel Xeon Platinum 8480C", ["0-55,112-167", "56-111,168-223"], [0, 1]))
    t.assumptions.append("UPI: 4 links x 24 GB/s (16 GT/s) = 96 GB/s per direction")
    return t


def pcie_8gpu_2socket(upi_gbps: float = 62.4) -> Topology:
    """8 PCIe Gen4 GPUs, 4 under one switch per socket (see :data:`PRESETS`).

    Parameters
    ----------
    upi_gbps : float
        Socket-to-socket bandwidth, GB/s per direction (default 62.4: 3 UPI links at
        11.2 GT/s; NCCL assumes 10 for Skylake UPI).
    """
    upi_gbps = check_float(upi_gbps, "upi_gbps", TopologyError, lo=0.0, lo_open=True, hi=MAX_BANDWIDTH_GBPS,
                           unit="GB/s")
    t = Topology("pcie-8gpu-2socket", description=PRESETS["pcie-8gpu-2socket"][1])
    numa = [0] * 4 + [1] * 4
    _gpus(t, 8, "NVIDIA A100-PCIE-40GB", "8.0",
          [f"0000:{b}:00.0" for b in ("1B", "1C", "1D", "1E", "9B", "9C", "9D", "9E")], numa)
    _nics(t, 2, 25.0, ["0000:1F:00.0", "0000:9F:00.0"], [0, 1])
    add_pcie_tree(t, [[[["gpu0", "gpu1", "gpu2", "gpu3", "nic0"]]],
                      [[["gpu4", "gpu5", "gpu6", "gpu7", "nic1"]]]],
                  pcie_gbps=PCIE_X16_GBPS[4], inter_socket_gbps=upi_gbps, inter_socket_links=3,
                  cpu_attrs=_cpus("Intel Xeon (Ice Lake)", ["0-31,64-95", "32-63,96-127"], [0, 1]))
    t.assumptions.append(f"UPI {upi_gbps} GB/s per direction (builder parameter upi_gbps)")
    return t


def mi300x() -> Topology:
    """AMD Instinct MI300X platform: 8 GPUs fully connected by Infinity Fabric (see :data:`PRESETS`)."""
    t = Topology("mi300x", description=PRESETS["mi300x"][1])
    numa = [0] * 4 + [1] * 4
    _gpus(t, 8, "AMD Instinct MI300X", None,
          [f"0000:{b}:00.0" for b in ("05", "15", "65", "75", "85", "95", "E5", "F5")], numa)
    for i in range(8):
        for j in range(i + 1, 8):
            t.add_link(f"gpu{i}", f"gpu{j}", kind="infinity_fabric", links=1, bandwidth_gbps=64.0,
                       latency_us=NVLINK_LATENCY_US)
    _nics(t, 8, 50.0, [f"0000:{b}:00.0" for b in ("06", "16", "66", "76", "86", "96", "E6", "F6")], numa)
    pairs = [[[f"gpu{k}", f"nic{k}"]] for k in range(8)]
    add_pcie_tree(t, [pairs[:4], pairs[4:]], pcie_gbps=PCIE_X16_GBPS[5], inter_socket_gbps=128.0,
                  inter_socket_links=4,
                  cpu_attrs=_cpus("AMD EPYC 9654", ["0-95,192-287", "96-191,288-383"], [0, 1]))
    t.assumptions.append("GPU-NIC pairs share a PCIe Gen5 switch; 400 Gb/s NICs")
    t.assumptions.append("xGMI: 4 links x 32 GB/s = 128 GB/s per direction between sockets")
    return t


PRESETS: dict[str, tuple[Callable[..., Topology], str]] = {
    "dgx1-v100": (dgx1_v100, (
        "NVIDIA DGX-1 (Volta): 8 Tesla V100-SXM2 in the hybrid cube-mesh, 6 NVLink2 per GPU at 25 GB/s "
        "per link per direction (150 GB/s per GPU); link counts as in the DGX-1 V100 system architecture "
        "white paper (WP-08437-002) figure 4 / SCCL's DGX1 topology. PCIe Gen3 x16 (15.75 GB/s): two GPUs "
        "and one 100 Gb/s EDR InfiniBand NIC (12.5 GB/s) per PLX switch, two switches per socket each on "
        "its own host bridge, two Xeon E5-2698 v4 joined by QPI (2 x 19.2 GB/s).")),
    "dgx2": (dgx2, (
        "NVIDIA DGX-2: 16 Tesla V100-SXM3 on two baseboards of 8 GPUs and 6 NVSwitches; each GPU has one "
        "NVLink2 (25 GB/s) to each of its board's 6 NVSwitches (150 GB/s per GPU) and switch k of one board "
        "joins switch k of the other by 8 links (200 GB/s; 1.2 TB/s bisection), per the DGX-2 system "
        "architecture white paper. PCIe Gen3: per socket two top switches on their own host bridges, each "
        "with two leaf switches of 2 GPUs + one 100 Gb/s EDR NIC; 2 Xeon Platinum 8168 joined by UPI.")),
    "dgx-a100": (dgx_a100, (
        "NVIDIA DGX A100: 8 A100-SXM4, 12 NVLink3 per GPU (25 GB/s each, 300 GB/s per GPU), 2 links to each "
        "of 6 NVSwitches (DGX A100 user guide / system architecture white paper). PCIe Gen4 x16 (31.5 GB/s): "
        "4 PCIe switch complexes, each with 2 GPUs and 2 ConnectX-6 HDR 200 Gb/s NICs (25 GB/s) behind their "
        "own port bridges (nvidia-smi shows PXB between them), 2 AMD EPYC 7742 joined by xGMI. "
        "Storage NICs are not modelled.")),
    "dgx-h100": (dgx_h100, (
        "NVIDIA DGX H100: 8 H100-SXM5, 18 NVLink4 per GPU (25 GB/s each, 450 GB/s per GPU) into 4 NVSwitch "
        "chips as 5+4+4+5 links (DGX H100 user guide; NCCL topology dumps show the same 5/5/4/4 split). "
        "8 ConnectX-7 NDR 400 Gb/s NICs (50 GB/s), each sharing a PCIe Gen5 x16 (63 GB/s) switch with one "
        "GPU (PIX), 2 Xeon Platinum 8480C joined by UPI.")),
    "pcie-8gpu-2socket": (pcie_8gpu_2socket, (
        "Generic 8-GPU PCIe server: per socket one PCIe Gen4 switch holding 4 GPUs (x16, 31.5 GB/s each) "
        "and one HDR 200 Gb/s NIC, switch uplink x16 (31.5 GB/s) to the host bridge; sockets joined by UPI, "
        "default 62.4 GB/s per direction (3 links at 11.2 GT/s, Ice Lake); NCCL assumes 10 GB/s for Skylake "
        "UPI: sweep with pcie_8gpu_2socket(upi_gbps=...). No NVLink.")),
    "mi300x": (mi300x, (
        "AMD Instinct MI300X platform: 8 GPUs fully connected, one Infinity Fabric link of 64 GB/s per "
        "direction to each of the 7 peers (448 GB/s per GPU; AMD MI300X platform data sheet). Each GPU on "
        "a PCIe Gen5 x16 switch (63 GB/s) with one 400 Gb/s NIC, 4 per socket, 2 EPYC 9654 sockets.")),
}


#: current hardware (H200, B200, GB200 NVL72, MI325X, MI355X, L40S): :mod:`.presets_current`
PRESETS.update(CURRENT_PRESETS)


def get_preset(name: str, **params) -> Topology:
    """Build preset ``name`` (keyword ``params`` go to its builder, e.g. ``upi_gbps``).

    Raises
    ------
    TopologyError
        Unknown name (the message lists the valid ones) or bad builder parameter.

    >>> get_preset("dgx-h100").smi_label(0, 7)
    'NV18'
    """
    if name not in PRESETS:
        raise TopologyError(f"unknown topology preset {name!r}; valid presets: {', '.join(sorted(PRESETS))}")
    try:
        return PRESETS[name][0](**params)
    except TypeError as exc:
        raise TopologyError(f"preset {name!r}: bad parameters {sorted(params)} ({exc})") from None
