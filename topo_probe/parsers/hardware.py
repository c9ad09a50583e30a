"""Hardware figures and identifiers the parsers and the probes share (link bandwidths, PCI bus
ids, SM numbers, AMD architectures); the parsers import them from here, never from the package
``topo_probe.parsers``, which loads the parsers on first use.

Bandwidths are theoretical GB/s (1e9 bytes/s) per direction:

* NVLink per link: NVLink1 (P100) 20, NVLink2/3/4 (V100, A100, H100/H200) 25, NVLink5
  (B200) 50.  NCCL itself assumes less (20 on SM70/SM80, 20.6 on SM90, 40.1 on SM100).
* PCIe per lane: Gen1 0.25, Gen2 0.5, Gen3 0.984375, Gen4 1.96875, Gen5 3.9375,
  Gen6 7.875 (x16: 4, 8, 15.75, 31.5, 63, 126).
* AMD Infinity Fabric (xGMI) per link between GPUs, by GPU architecture (:data:`XGMI_GBPS`):
  gfx950 (MI350X, MI355X) 76.8 — AMD MI355X data sheet, 153.6 GB/s bidirectional per link, 1075.2 GB/s
  aggregate over 7 links; gfx942/gfx940/gfx941 (MI300X, MI325X, MI300A) 64 — AMD MI300X platform data
  sheet, 896 GB/s aggregate bidirectional over 7 links, xGMI-3 at 32 GT/s x16; gfx90a (MI250X, MI250) 50 — ROCm "AMD
  Instinct MI250 Hardware": 25 GT/s x16 links, 50 GB/s; gfx908 (MI100) 46 — ROCm "AMD Instinct
  MI100 Hardware": 23 GT/s x16 links; gfx906 (MI50, MI60) 50 — AMD's launch figure of 200 GB/s
  peer-to-peer over two links.  RCCL itself assumes less after protocol overheads
  (``src/graph/topo.h``: MI200_XGMI_WIDTH 36, GFX94X 48).

>>> pcie_gbps(4, 16), pcie_gen_from_speed("32.0 GT/s PCIe"), normalize_bus_id("00000000:0A:00.0")
(31.5, 5, '0000:0a:00.0')
>>> nvlink_gbps_for_name("NVIDIA H200"), nvlink_gbps_for_sm(100)
((25.0, 'NVLink4'), (50.0, 'NVLink5'))
"""

from __future__ import annotations

import math
import re

from topo_probe.limits import MAX_BANDWIDTH_GBPS, MIN_BANDWIDTH_GBPS
from topo_probe.number_rules import is_real

__all__ = ["pcie_gbps", "pcie_gen_from_speed", "normalize_bus_id",
           "nvlink_gbps_for_name", "nvlink_gbps_for_sm", "PCIE_LANE_GBPS", "PCIE_SPEED_STRINGS",
           "MAX_NVLINKS_PER_GPU", "CPU_LINK_GBPS", "XGMI_GBPS", "XGMI_DEFAULT_GBPS", "gcn_arch",
           "xgmi_gbps_for_arch", "nvlink_guess_from_counts", "MAX_NIC_MBPS",
           "SLOWEST_NIC_MBPS"]

#: Theoretical PCIe bandwidth per lane per direction (GB/s) by generation.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.984375, 4: 1.96875, 5: 3.9375, 6: 7.875}

#: The ``link_speed`` strings Linux (>= 5.7) and NCCL's XML use, by generation.
PCIE_SPEED_STRINGS = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe",
                      4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"}

_GT_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}

#: Fastest NIC ``speed`` of an NCCL topology XML ``<net>`` (Mb/s, 8000 per GB/s): as fast as the loaders take a NIC
#: (MAX_BANDWIDTH_GBPS: 8e8 Mb/s), so every file ``to_nccl_xml`` writes reads back.  NCCL reads it into an int
#: (v2.28.9-1 src/graph/topo.cc line 371, ``xmlGetAttrIntDefault(xmlNet, "speed", &mbps, 0)``; src/graph/xml.h
#: line 116, ``strtol``), which 8e8 fits.
MAX_NIC_MBPS = int(MAX_BANDWIDTH_GBPS * 8000)

#: Slowest positive NIC ``speed`` of an NCCL topology XML ``<net>`` (Mb/s): the least whole Mb/s the loaders take
#: (MIN_BANDWIDTH_GBPS: 0.001 GB/s = 8 Mb/s), so every NIC the reader keeps is one ``to_nccl_xml`` writes back.
SLOWEST_NIC_MBPS = math.ceil(MIN_BANDWIDTH_GBPS * 8000)

#: Most NVLinks any NVIDIA GPU has had (H100/H200/B200: 18).  A GPU showing more links to its
#: peers than this is behind NVSwitches.
MAX_NVLINKS_PER_GPU = 18

#: Bandwidth (GB/s per direction) assumed between two CPU sockets / NUMA nodes when the source
#: does not say; NCCL's figure for Skylake-and-later UPI is 10, AMD 16.  Ours is a modest
#: 2-link UPI figure.
CPU_LINK_GBPS = 20.0

#: GB/s per xGMI link per direction by gfx architecture (see the module docstring)
XGMI_GBPS = {"gfx950": 76.8, "gfx942": 64.0, "gfx940": 64.0, "gfx941": 64.0, "gfx90a": 50.0, "gfx908": 46.0,
             "gfx906": 50.0}
#: assumed for an architecture not in :data:`XGMI_GBPS` (said so in the topology's assumptions)
XGMI_DEFAULT_GBPS = 50.0
#: RCCL's numeric ``gcn`` values of older dumps -> gfx name (``910`` is gfx90a)
_GCN_NUMBERS = {"910": "gfx90a", "908": "gfx908", "906": "gfx906", "900": "gfx900"}
#: NCCL ``sm`` RCCL writes for these architectures in its own topology models
#: (tools/topo_expl/models: topo_8p_940 304, topo_16p1h 104, topo_4p3l_n2 120, topo_8p_pcie 64)
AMD_SM = {"gfx942": 304, "gfx940": 304, "gfx941": 304, "gfx90a": 104, "gfx908": 120, "gfx906": 64}

# name fragment (upper case) -> (GB/s per link per direction, NVLink generation)
_NVLINK_BY_NAME = (
    ("GB200", 50.0, "NVLink5"), ("B200", 50.0, "NVLink5"), ("B300", 50.0, "NVLink5"),
    ("B100", 50.0, "NVLink5"), ("GH200", 25.0, "NVLink4"), ("H200", 25.0, "NVLink4"),
    ("H100", 25.0, "NVLink4"), ("H800", 25.0, "NVLink4"), ("H20", 25.0, "NVLink4"),
    ("A100", 25.0, "NVLink3"), ("A800", 25.0, "NVLink3"), ("A30", 25.0, "NVLink3"),
    ("V100", 25.0, "NVLink2"), ("P100", 20.0, "NVLink1"),
)


def pcie_gbps(gen: int, width: int) -> float:
    """Theoretical bandwidth (GB/s per direction) of a PCIe link of generation ``gen`` and
    ``width`` lanes.

    >>> pcie_gbps(3, 16), pcie_gbps(5, 8)
    (15.75, 31.5)
    """
    return PCIE_LANE_GBPS[int(gen)] * int(width)


def pcie_gen_from_speed(speed: str | float | None) -> int | None:
    """PCIe generation from a link speed such as ``"16.0 GT/s PCIe"``, ``"8 GT/s"`` or 16.0
    (GT/s); None when unknown (``"Unknown"``, empty).

    >>> pcie_gen_from_speed("8 GT/s"), pcie_gen_from_speed("2.5 GT/s PCIe"), pcie_gen_from_speed("Unknown")
    (3, 1, None)
    """
    if speed is None:
        return None
    if is_real(speed):
        value = float(speed)
    else:
        m = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s", str(speed))
        if not m:
            return None
        value = float(m.group(1))
    return _GT_TO_GEN.get(value)


def normalize_bus_id(bus_id: str | bytes) -> str:
    """Canonical PCI bus id ``dddd:bb:dd.f`` in lower case (NVML prints 8 domain digits,
    NCCL and Linux 4).

    >>> normalize_bus_id(b"00000000:1B:00.0"), normalize_bus_id("1b:00.0")
    ('0000:1b:00.0', '0000:1b:00.0')
    """
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode("ascii", "replace")
    s = bus_id.strip().rstrip("\x00").lower()
    m = re.fullmatch(r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])", s)
    if not m:
        return s
    dom, bus, dev, fn = m.groups()
    return f"{int(dom or '0', 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn}"


def nvlink_gbps_for_name(name: str | None) -> tuple[float, str] | None:
    """(GB/s per NVLink per direction, generation) guessed from a GPU product name, or None.

    >>> nvlink_gbps_for_name("Tesla V100-SXM2-32GB"), nvlink_gbps_for_name("GeForce GTX 1080")
    ((25.0, 'NVLink2'), None)
    """
    if not name:
        return None
    up = str(name).upper()
    for frag, gbps, gen in _NVLINK_BY_NAME:
        if frag in up:
            return gbps, gen
    return None


def nvlink_gbps_for_sm(sm: int) -> tuple[float, str]:
    """(GB/s per NVLink per direction, generation) from the CUDA SM version (NCCL's ``sm``:
    60, 70, 80, 90, 100...).  SM60 -> NVLink1 20; SM70 -> NVLink2, SM80 -> NVLink3, SM90 ->
    NVLink4, all 25; SM100 and later -> NVLink5 50.

    >>> nvlink_gbps_for_sm(70), nvlink_gbps_for_sm(90)
    ((25.0, 'NVLink2'), (25.0, 'NVLink4'))
    """
    sm = int(sm)
    if sm < 70:
        return 20.0, "NVLink1"
    if sm < 80:
        return 25.0, "NVLink2"
    if sm < 90:
        return 25.0, "NVLink3"
    if sm < 100:
        return 25.0, "NVLink4"
    return 50.0, "NVLink5"


def sm_from_compute_capability(cc) -> int | None:
    """NCCL's ``sm`` number from a compute capability given as ``"9.0"``, ``(9, 0)``, 9.0 or 90.

    >>> sm_from_compute_capability("8.6"), sm_from_compute_capability((9, 0)), sm_from_compute_capability(None)
    (86, 90, None)
    """
    if cc is None:
        return None
    if isinstance(cc, (tuple, list)) and len(cc) == 2:
        return int(cc[0]) * 10 + int(cc[1])
    if isinstance(cc, int) and cc >= 10:
        return cc
    text = str(cc)
    m = re.fullmatch(r"\s*(\d+)\.(\d)\s*", text)
    if m:
        return int(m.group(1)) * 10 + int(m.group(2))
    if text.strip().isdigit():
        v = int(text)
        return v if v >= 10 else v * 10
    return None


def gcn_arch(gcn: str | None) -> str | None:
    """The gfx name of an RCCL ``gcn`` attribute (``"gfx942"``, ``"gfx942:sramecc+:xnack-"`` or an
    older dump's number ``"910"``); None when empty.

    >>> gcn_arch("910"), gcn_arch("gfx942:sramecc+:xnack-"), gcn_arch(None)
    ('gfx90a', 'gfx942', None)
    """
    if not gcn:
        return None
    text = str(gcn).strip().lower().split(":")[0]
    return _GCN_NUMBERS.get(text, text)


def xgmi_gbps_for_arch(arch: str | None) -> float | None:
    """GB/s per xGMI link per direction of a gfx architecture, or None when unknown.

    >>> xgmi_gbps_for_arch("gfx942"), xgmi_gbps_for_arch("910"), xgmi_gbps_for_arch("gfx1100")
    (64.0, 50.0, None)
    """
    return XGMI_GBPS.get(gcn_arch(arch) or "")


def nvlink_guess_from_counts(counts: list[list[int]]) -> tuple[float, str, int] | None:
    """(GB/s per NVLink per direction, why, PCIe generation) guessed from the NV# counts of an
    ``nvidia-smi topo -m`` matrix (``counts[i][j]`` links between GPU i and j); None without NVLink.

    >>> nvlink_guess_from_counts([[0, 18], [18, 0]])[0], nvlink_guess_from_counts([[0, 0], [0, 0]])
    (25.0, None)
    """
    vals = {c for row in counts for c in row if c}
    if not vals:
        return None
    n = len(counts)
    full = all(counts[i][j] for i in range(n) for j in range(n) if i != j)
    if full and vals == {12}:
        return 25.0, "NV12 between every GPU pair looks like NVLink3 (A100)", 4
    if full and vals == {18}:
        return 25.0, "NV18 between every GPU pair looks like NVLink4 (H100/H200)", 5
    if max(vals) <= 2:
        return 25.0, "an NV1/NV2 mesh looks like NVLink2 (V100, DGX-1 hybrid cube-mesh)", 3
    return 25.0, f"NV# pattern {sorted(vals)} does not identify the NVLink generation", 4
