"""GPUDirect RDMA readiness and RDMA NIC locality from Linux sysfs.

:func:`scan_gdr` reads (under an injectable ``root``):

* ``sys/module/nvidia_peermem`` (the current peer-memory module) and ``sys/module/nv_peer_mem``
  or ``sys/kernel/mm/memory_peers/nv_mem*`` (the older Mellanox one);
* ``sys/class/infiniband/<dev>/device`` (symlink to the NIC's PCI device: bus id,
  ``numa_node``) and ``ports/<p>/rate`` (``"400 Gb/sec (4X NDR)"``) / ``link_layer``.

:func:`gdr_status` decides from those records.  Without a peer-memory module NCCL can still
use DMA-BUF GDR (Linux >= 5.12, driver >= 515, ``NCCL_DMABUF_ENABLE``), which sysfs does not
show: the reason says so.

>>> gdr_status({"nvidia_peermem": False, "nv_peer_mem": False, "memory_peers": [], "ib_devices": []})
(False, 'no RDMA NIC under /sys/class/infiniband')
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from topo_probe.parsers.hardware import normalize_bus_id
from topo_probe.probes.sysfs import read_numa_node, read_text

__all__ = ["scan_gdr", "gdr_status", "nic_records"]


def _rate_gbps(rate: str | None) -> float | None:
    """'400 Gb/sec (4X NDR)' -> 50.0 GB/s.

    >>> _rate_gbps("200 Gb/sec (4X HDR)"), _rate_gbps(None)
    (25.0, None)
    """
    m = re.match(r"\s*([0-9.]+)\s*Gb/sec", rate or "")
    return float(m.group(1)) / 8 if m else None


def scan_gdr(root: str | os.PathLike = "/") -> dict:
    """Records of GPUDirect RDMA prerequisites and RDMA NICs (see the module docstring)."""
    root = Path(root)
    peers = root / "sys" / "kernel" / "mm" / "memory_peers"
    try:
        mem_peers = sorted(p for p in os.listdir(peers) if p.startswith("nv_mem"))
    except OSError:
        mem_peers = []
    out = {"nvidia_peermem": (root / "sys" / "module" / "nvidia_peermem").is_dir(),
           "nv_peer_mem": (root / "sys" / "module" / "nv_peer_mem").is_dir(),
           "memory_peers": mem_peers, "ib_devices": []}
    ib = root / "sys" / "class" / "infiniband"
    try:
        names = sorted(os.listdir(ib))
    except OSError:
        return out
    for name in names:
        dev = ib / name / "device"
        real = Path(os.path.realpath(dev))
        bus = normalize_bus_id(real.name) if dev.exists() else None
        ports, rates, layers = ib / name / "ports", [], []
        try:
            port_names = sorted(os.listdir(ports))
        except OSError:
            port_names = []
        for p in port_names:
            rates.append(_rate_gbps(read_text(ports / p / "rate")))
            layers.append(read_text(ports / p / "link_layer"))
        speeds = [r for r in rates if r]
        out["ib_devices"].append({
            "name": name, "pci_bus_id": bus,
            "numa_node": read_numa_node(dev),
            "speed_gbps": max(speeds) if speeds else None,
            "link_layer": next((x for x in layers if x), None)})
    return out


def gdr_status(records: dict) -> tuple[bool, str]:
    """(GPUDirect RDMA possible, reason if not) from :func:`scan_gdr` records.

    >>> gdr_status({"nvidia_peermem": True, "ib_devices": [{"name": "mlx5_0"}]})
    (True, '')
    """
    if not records.get("ib_devices"):
        return False, "no RDMA NIC under /sys/class/infiniband"
    if records.get("nvidia_peermem") or records.get("nv_peer_mem") or records.get("memory_peers"):
        return True, ""
    return False, ("nvidia_peermem not loaded (NCCL may still use DMA-BUF GDR on Linux >= 5.12 with "
                   "driver >= 515; sysfs does not show it)")


def nic_records(records: dict) -> list[dict]:
    """The RDMA NICs of :func:`scan_gdr` records with a PCI bus id (for the PCIe tree)."""
    return [d for d in records.get("ib_devices", []) if d.get("pci_bus_id")]
