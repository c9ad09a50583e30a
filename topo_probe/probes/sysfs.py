"""The PCIe tree of NVIDIA GPUs (and given NICs) from Linux sysfs.

:func:`scan_sysfs` reads ``<root>/sys/bus/pci/devices`` (symlinks into
``/sys/devices/pci<domain>:<bus>/<bridge>/.../<device>``) and returns plain records;
:func:`add_sysfs_tree` / :func:`build_from_sysfs_records` turn records into topology nodes
without touching the machine, so tests run on fake trees.

Records: ``{"devices": [{"bus_id", "class", "vendor", "device", "kind" (gpu / nvswitch /
nic), "name", "numa_node", "local_cpulist", "link": {...}, "path": [root complex, bridge...,
bus_id]}], "bridges": {bus_id: {"class", "link": {...}}}}`` where ``link`` holds the
``max_link_speed``, ``max_link_width``, ``current_link_speed``, ``current_link_width`` files.

Tree like NCCL's (``xml.cc``): from a device, go up two levels at a time (a PCIe switch is an
upstream port plus downstream ports: skipping one level keeps one node per switch), until
the root complex ``pciDDDD:BB``, which is a host bridge on the CPU of the devices' NUMA
node.  Each edge carries the lower level's link (max speed x max width; current values if
the max ones are missing), theoretical GB/s per direction.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from topo_probe.errors import TopologyError
from topo_probe.machines.generators import CPU_LATENCY_US, PCIE_LATENCY_US
from topo_probe.parsers.hardware import CPU_LINK_GBPS, PCIE_LANE_GBPS, normalize_bus_id, pcie_gen_from_speed
from topo_probe.parsers.pcie_classes import set_cpu_affinity
from topo_probe.topology.model import Topology

__all__ = ["scan_sysfs", "add_sysfs_tree", "build_from_sysfs_records", "link_gbps"]

_BDF = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_LINK_FILES = ("max_link_speed", "max_link_width", "current_link_speed", "current_link_width")
NVIDIA = "0x10de"


def read_text(path: Path) -> str | None:
    """A sysfs attribute's text, stripped; None if it cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def read_numa_node(dev: Path) -> int | None:
    """``<dev>/numa_node`` as an int; None when missing or -1 (no affinity known)."""
    numa = read_text(dev / "numa_node")
    return int(numa) if numa and numa.lstrip("-").isdigit() and int(numa) >= 0 else None


def pci_numa_node(root, bus_id: str) -> int | None:
    """NUMA node of PCI device ``bus_id`` (any spelling, e.g. NVML's 8-digit domain) under
    ``<root>/sys/bus/pci/devices``; None if unknown."""
    return read_numa_node(Path(root) / "sys" / "bus" / "pci" / "devices" / normalize_bus_id(bus_id))


def _link(dev: Path) -> dict:
    return {k: v for k in _LINK_FILES if (v := read_text(dev / k)) is not None}


def _kind(cls: str, vendor: str) -> str | None:
    if vendor == NVIDIA and (cls.startswith("0x0302") or cls.startswith("0x0300")):
        return "gpu"
    if vendor == NVIDIA and cls.startswith("0x0680"):
        return "nvswitch"
    return None


def scan_sysfs(root: str | os.PathLike = "/", *, nics: dict[str, str] | None = None) -> dict:
    """Read NVIDIA GPUs / NVSwitches (and the devices in ``nics``: bus id -> name) with their
    bridge ancestry from ``<root>/sys/bus/pci/devices``.  Missing files give missing fields;
    a missing directory gives ``{"devices": [], "bridges": {}, "error": ...}``.
    """
    base = Path(root) / "sys" / "bus" / "pci" / "devices"
    nics = {normalize_bus_id(k): v for k, v in (nics or {}).items()}
    out: dict = {"devices": [], "bridges": {}}
    try:
        entries = sorted(os.listdir(base))
    except OSError as exc:
        out["error"] = f"cannot list {base}: {exc.strerror or exc}"
        return out
    for name in entries:
        dev = base / name
        cls, vendor = (read_text(dev / "class") or "").lower(), (read_text(dev / "vendor") or "").lower()
        bus = normalize_bus_id(name)
        kind = _kind(cls, vendor) or ("nic" if bus in nics else None)
        if kind is None:
            continue
        real = Path(os.path.realpath(dev))
        parts = real.parts
        start = next((k for k, p in enumerate(parts) if p.startswith("pci") and ":" in p), None)
        path = list(parts[start:]) if start is not None else [name]
        out["devices"].append({
            "bus_id": bus, "class": cls, "vendor": vendor, "device": read_text(dev / "device"), "kind": kind,
            "name": nics.get(bus), "numa_node": read_numa_node(dev), "local_cpulist": read_text(dev / "local_cpulist"),
            "link": _link(dev), "path": path})
        for k, comp in enumerate(path[1:-1], start=1):
            if _BDF.fullmatch(comp):
                bdir = Path(*parts[:start + k + 1]) if start is not None else None
                out["bridges"].setdefault(normalize_bus_id(comp), {
                    "class": (read_text(bdir / "class") or "").lower() if bdir else "",
                    "link": _link(bdir) if bdir else {}})
    return out


def link_gbps(link: dict) -> float | None:
    """GB/s per direction of a ``link`` record (max speed/width, else current), or None.

    >>> link_gbps({"max_link_speed": "16.0 GT/s PCIe", "max_link_width": "16"})
    31.5
    """
    for speed_key, width_key in (("max_link_speed", "max_link_width"), ("current_link_speed", "current_link_width")):
        gen = pcie_gen_from_speed(link.get(speed_key))
        width = link.get(width_key)
        if gen and width and str(width).isdigit() and int(width) > 0:
            return PCIE_LANE_GBPS[gen] * int(width)
    return None


def add_sysfs_tree(topo: Topology, records: dict, node_of: dict[str, str]) -> list[str]:
    """Add host bridges, PCIe switches and CPUs above the endpoints ``node_of`` (normalized bus
    id -> existing node id) from :func:`scan_sysfs` records.  Returns the assumptions made.

    Raises TopologyError when an endpoint is not in the records.
    """
    devs = {d["bus_id"]: d for d in records.get("devices", [])}
    notes: list[str] = []
    missing = [b for b in node_of if normalize_bus_id(b) not in devs]
    if missing:
        raise TopologyError(f"sysfs: device {missing[0]} not found under sys/bus/pci/devices")
    fallback = []

    def gbps(link: dict, what: str) -> float:
        v = link_gbps(link)
        if v is None:
            fallback.append(what)
            return PCIE_LANE_GBPS[3] * 16
        return v

    rc_numa: dict[str, int | None] = {}
    for bus in node_of:
        d = devs[normalize_bus_id(bus)]
        if rc_numa.get(d["path"][0]) is None:
            rc_numa[d["path"][0]] = d["numa_node"]
    if any(v is None for v in rc_numa.values()):
        notes.append("sysfs numa_node is -1 for some root complexes: they were put on NUMA node 0")
    cpus: dict[int, str] = {}
    hbs: dict[str, str] = {}
    switches: dict[str, str] = {}
    for rc, numa in sorted(rc_numa.items()):
        numa = numa if numa is not None else 0
        if numa not in cpus:
            cpus[numa] = topo.add_node(f"cpu{numa}", "cpu", numa_node=numa)
        hbs[rc] = topo.add_node(f"hb{len(hbs)}", "host_bridge", numa_node=numa, root_complex=rc)
    for bus, node in sorted(node_of.items(), key=lambda x: normalize_bus_id(x[0])):
        d = devs[normalize_bus_id(bus)]
        topo.graph.nodes[node].setdefault("numa_node", d["numa_node"])
        if topo.graph.nodes[node].get("numa_node") is None:
            topo.graph.nodes[node]["numa_node"] = rc_numa[d["path"][0]] or 0
        path, child, link = d["path"], node, d["link"]
        k = len(path) - 3
        while True:
            if k < 1 or not _BDF.fullmatch(path[k]):
                parent = hbs[path[0]]
            else:
                b = normalize_bus_id(path[k])
                parent = switches.get(b)
                if parent is None:
                    parent = switches[b] = topo.add_node(f"pcie{len(switches)}", "pcie_switch", pci_bus_id=b)
                    new = True
                else:
                    new = False
            if not topo.graph.has_edge(child, parent):
                topo.add_link(child, parent, kind="pcie", bandwidth_gbps=gbps(link, child), latency_us=PCIE_LATENCY_US)
            if parent in hbs.values() or not new:
                break
            child, link = parent, records.get("bridges", {}).get(b, {}).get("link", {})
            k -= 2
    for rc, hb in hbs.items():
        numa = rc_numa[rc] if rc_numa[rc] is not None else 0
        total = sum(e["bandwidth_gbps"] for _, _, e in topo.graph.in_edges(hb, data=True))
        topo.add_link(hb, cpus[numa], kind="cpu", bandwidth_gbps=total, latency_us=CPU_LATENCY_US)
    ids = sorted(cpus.values())
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            topo.add_link(a, b, kind="cpu", bandwidth_gbps=CPU_LINK_GBPS, latency_us=CPU_LATENCY_US)
    if len(ids) > 1:
        notes.append(f"CPU-CPU links assumed {CPU_LINK_GBPS} GB/s per direction (sysfs does not say)")
    if fallback:
        notes.append(f"PCIe link speed unknown in sysfs for {', '.join(fallback)}: Gen3 x16 assumed")
    set_cpu_affinity(topo)
    return notes


def build_from_sysfs_records(records: dict, *, nic_records: list[dict] | None = None) -> Topology:
    """A PCIe-only topology from :func:`scan_sysfs` records: GPUs ``gpu0..`` in PCI bus order
    (``CUDA_DEVICE_ORDER=PCI_BUS_ID``), NICs ``nic0..`` for the ``nic`` records (or
    ``nic_records`` from :func:`topo_probe.probes.gdr.scan_gdr`).  No NVLink information.
    """
    devs = records.get("devices", [])
    gpus = sorted((d for d in devs if d["kind"] == "gpu"), key=lambda d: d["bus_id"])
    if not gpus:
        raise TopologyError("sysfs: no NVIDIA GPU under sys/bus/pci/devices")
    t = Topology("sysfs", description="PCIe tree from Linux sysfs (no NVLink information)")
    node_of = {}
    for k, d in enumerate(gpus):
        node_of[d["bus_id"]] = t.add_gpu(k, pci_bus_id=d["bus_id"], numa_node=d["numa_node"], host=0,
                                         cpu_affinity=d.get("local_cpulist"))
    nic_list = nic_records if nic_records is not None else [d for d in devs if d["kind"] == "nic"]
    present = {d["bus_id"] for d in devs}
    for k, n in enumerate(sorted(nic_list, key=lambda n: n.get("name") or "")):
        bus = normalize_bus_id(n.get("pci_bus_id") or n.get("bus_id") or "")
        if bus in present:
            attrs = {"speed_gbps": n["speed_gbps"]} if n.get("speed_gbps") else {}
            node_of[bus] = t.add_node(f"nic{k}", "nic", name=n.get("name"), pci_bus_id=bus, host=0,
                                      numa_node=n.get("numa_node"), **attrs)
    t.assumptions.extend(add_sysfs_tree(t, records, node_of))
    t.assumptions.append("NVLink unknown (no NVML): only PCIe links are modelled")
    return t
