"""GPUs, NVLinks, PCIe ancestry and P2P status from NVML (``nvidia-ml-py``, imported lazily).

Two halves, so the logic is tested without a GPU:

* :func:`gather_nvml_records` asks NVML and returns plain JSON-able records (below);
  :func:`probe_nvml` wraps it and turns every failure (module missing, library missing,
  driver not loaded) into a reason string.
* :func:`build_from_nvml_records` turns records into a :class:`Topology`.

Records (``format: "topocoll.nvml-records"``, version 1)::

    {"gpus": [{"index": 0, "name": "Tesla V100-SXM2-32GB", "pci_bus_id": "00000000:06:00.0",
               "compute_capability": [7, 0], "numa_node": 0, "cpu_affinity": "0-19,40-59",
               "pcie": {"max_gen": 3, "max_width": 16, "cur_gen": 3, "cur_width": 16},
               "nvlinks": [{"link": 0, "active": true, "version": 2,
                            "remote_pci_bus_id": "00000000:07:00.0", "remote_type": "gpu"}]}],
     "topology": [[null, "SINGLE", ...], ...],          # nvmlDeviceGetTopologyCommonAncestor
     "p2p": {"read": [[null, "OK", ...]], "write": ..., "atomics": ..., "nvlink": ...},
     "sysfs": {...}, "gdr": {...}}                       # optional, see probe.sysfs / probe.gdr

NVLink per-link speed from ``version`` (NVML_NVLINK_VERSION_*: 1 -> 20 GB/s, 2-6 (NVLink
2.0-4.0) -> 25, 7 (5.0) -> 50, 8 (6.0) -> 50 assumed), else the GPU name, else the SM.
Links whose remote is not one of the GPUs (``remote_type`` ``"switch"``) go to one
``nvswitch`` node per remote bus id.  PCIe: the sysfs tree when ``sysfs`` records cover the
GPUs, else a tree inferred from the common-ancestor levels (SINGLE/INTERNAL = PIX,
MULTIPLE = PXB, HOSTBRIDGE = PHB, NODE = NODE, SYSTEM = SYS).
"""

from __future__ import annotations

import importlib
from typing import Callable

from topo_probe.errors import TopologyError
from topo_probe.machines.generators import NVLINK_LATENCY_US, NVSWITCH_LATENCY_US
from topo_probe.parsers.hardware import (
    PCIE_LANE_GBPS,
    normalize_bus_id,
    nvlink_gbps_for_name,
    nvlink_gbps_for_sm,
    sm_from_compute_capability,
)
from topo_probe.parsers.pcie_classes import add_pcie_tree_from_classes
from topo_probe.probes.sysfs import add_sysfs_tree, pci_numa_node
from topo_probe.topology.model import P2PCapability, Topology

__all__ = ["gather_nvml_records", "build_from_nvml_records", "probe_nvml", "LEVEL_CLASS"]

LEVELS = {0: "INTERNAL", 10: "SINGLE", 20: "MULTIPLE", 30: "HOSTBRIDGE", 40: "NODE", 50: "SYSTEM"}
#: NVML common-ancestor level -> nvidia-smi class.
LEVEL_CLASS = {"INTERNAL": "PIX", "SINGLE": "PIX", "MULTIPLE": "PXB", "HOSTBRIDGE": "PHB", "NODE": "NODE",
               "CPU": "NODE", "SYSTEM": "SYS"}
P2P_STATUS = {0: "OK", 1: "CHIPSET_NOT_SUPPORTED", 2: "GPU_NOT_SUPPORTED", 3: "IOH_TOPOLOGY_NOT_SUPPORTED",
              4: "DISABLED_BY_REGKEY", 5: "NOT_SUPPORTED", 6: "UNKNOWN"}
REMOTE_TYPES = {0: "gpu", 1: "ibmnpu", 2: "switch", 255: "unknown"}
_NVLINK_VERSION_GBPS = {1: (20.0, "NVLink1"), 2: (25.0, "NVLink2"), 3: (25.0, "NVLink2"), 4: (25.0, "NVLink3"),
                        5: (25.0, "NVLink3"), 6: (25.0, "NVLink4"), 7: (50.0, "NVLink5"), 8: (50.0, "NVLink6")}


# ----------------------------------------------------------------------------- gathering
def _cpulist(words) -> str | None:
    """CPU list from nvmlDeviceGetCpuAffinity's 64-bit words (word 0 = CPUs 0-63).

    >>> _cpulist([0xF0F, 0x1])
    '0-3,8-11,64'
    """
    cpus = [64 * w + b for w, v in enumerate(words) for b in range(64) if int(v) >> b & 1]
    if not cpus:
        return None
    out, k = [], 0
    while k < len(cpus):
        j = k
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(f"{cpus[k]}-{cpus[j]}" if j > k else str(cpus[k]))
        k = j + 1
    return ",".join(out)


def _bus(pci) -> str:
    b = getattr(pci, "busId", None) or getattr(pci, "busIdLegacy", b"")
    return b.decode("ascii", "replace") if isinstance(b, bytes) else str(b)


def _gpu_record(nv, h, index: int, errors: list[str], sysfs_root=None) -> dict:
    def ask(what, fn, *args, quiet=False):
        try:
            return fn(h, *args)
        except nv.NVMLError as exc:
            if not quiet:
                errors.append(f"GPU {index}: {what}: {exc}")
            return None

    name = ask("name", nv.nvmlDeviceGetName)
    cc = ask("compute capability", nv.nvmlDeviceGetCudaComputeCapability)
    bus = _bus(ask("PCI info", nv.nvmlDeviceGetPciInfo))
    # The PCIe device's NUMA node is in sysfs; NVML's NumaNodeId is the GPU memory's own node and
    # only exists where GPUs are NUMA nodes (Grace Hopper), so it is a quiet fallback.
    numa = pci_numa_node(sysfs_root, bus) if sysfs_root is not None and bus else None
    if numa is None and hasattr(nv, "nvmlDeviceGetNumaNodeId"):
        numa = ask("NUMA node", nv.nvmlDeviceGetNumaNodeId, quiet=True)
    aff = ask("CPU affinity", nv.nvmlDeviceGetCpuAffinity, 16)
    rec = {"index": index, "name": name.decode() if isinstance(name, bytes) else name,
           "pci_bus_id": bus,
           "compute_capability": list(cc) if cc else None,
           "numa_node": numa if isinstance(numa, int) and numa >= 0 else None,
           "cpu_affinity": _cpulist(aff) if aff is not None else None,
           "pcie": {"max_gen": ask("max PCIe gen", nv.nvmlDeviceGetMaxPcieLinkGeneration),
                    "max_width": ask("max PCIe width", nv.nvmlDeviceGetMaxPcieLinkWidth),
                    "cur_gen": ask("PCIe gen", nv.nvmlDeviceGetCurrPcieLinkGeneration),
                    "cur_width": ask("PCIe width", nv.nvmlDeviceGetCurrPcieLinkWidth)},
           "nvlinks": []}
    for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            active = bool(nv.nvmlDeviceGetNvLinkState(h, link))
        except nv.NVMLError:
            continue  # no such link / NVLink not supported
        item = {"link": link, "active": active}
        if active:
            try:
                item["remote_pci_bus_id"] = _bus(nv.nvmlDeviceGetNvLinkRemotePciInfo(h, link))
            except nv.NVMLError as exc:
                errors.append(f"GPU {index} link {link}: remote PCI info: {exc}")
            for key, fn in (("remote_type", "nvmlDeviceGetNvLinkRemoteDeviceType"),
                            ("version", "nvmlDeviceGetNvLinkVersion")):
                try:
                    v = getattr(nv, fn)(h, link)
                    item[key] = REMOTE_TYPES.get(v, "unknown") if key == "remote_type" else int(v)
                except (nv.NVMLError, AttributeError):
                    pass
        rec["nvlinks"].append(item)
    return rec


def gather_nvml_records(nvml=None, sysfs_root=None) -> dict:
    """Ask NVML about every GPU (see the module docstring for the record format).

    ``nvml`` is the ``pynvml`` module (imported when None) or a stand-in with the same
    functions.  ``sysfs_root``: where each GPU's NUMA node is read
    (``<root>/sys/bus/pci/devices/<bus>/numa_node``); default ``/`` for the real NVML and
    nowhere for a stand-in (then NVML's own answer, if any).  Raises whatever ``nvmlInit``
    raises (NVMLError_LibraryNotFound...).
    """
    if sysfs_root is None and nvml is None:
        sysfs_root = "/"
    nv = nvml if nvml is not None else importlib.import_module("pynvml")
    nv.nvmlInit()
    try:
        n = nv.nvmlDeviceGetCount()
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        errors: list[str] = []
        rec = {"format": "topocoll.nvml-records", "version": 1, "errors": errors,
               "gpus": [_gpu_record(nv, h, i, errors, sysfs_root) for i, h in enumerate(handles)]}
        try:
            driver = nv.nvmlSystemGetDriverVersion()
            rec["driver_version"] = driver.decode() if isinstance(driver, bytes) else driver
        except nv.NVMLError:
            pass

        def level(i: int, j: int) -> str:
            lvl = nv.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
            return LEVELS.get(int(lvl), str(lvl))

        def p2p(i: int, j: int, idx: int) -> str:
            return P2P_STATUS.get(int(nv.nvmlDeviceGetP2PStatus(handles[i], handles[j], idx)), "UNKNOWN")

        rec["topology"] = _pair_matrix(nv, n, level, "topology common ancestor", errors)
        rec["p2p"] = {}
        for key, const in (("read", "NVML_P2P_CAPS_INDEX_READ"), ("write", "NVML_P2P_CAPS_INDEX_WRITE"),
                           ("atomics", "NVML_P2P_CAPS_INDEX_ATOMICS"), ("nvlink", "NVML_P2P_CAPS_INDEX_NVLINK")):
            idx = getattr(nv, const, None)
            idx = idx[0] if isinstance(idx, tuple) else idx  # nvidia-ml-py 13.x: READ is the tuple (0,)
            if idx is None:
                continue
            rec["p2p"][key] = _pair_matrix(nv, n, lambda i, j, idx=idx: p2p(i, j, idx), f"P2P {key}", errors)
        return rec
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down must not hide the answer
            pass


def _pair_matrix(nv, n: int, ask: Callable[[int, int], str], what: str, errors: list[str]) -> list[list]:
    """``ask(i, j)`` for every ordered pair of the ``n`` GPUs (None on the diagonal, and where NVML fails: the
    failure goes to ``errors`` as ``GPUs i,j: what: ...``)."""
    m: list[list] = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i != j:
                try:
                    m[i][j] = ask(i, j)
                except nv.NVMLError as exc:
                    errors.append(f"GPUs {i},{j}: {what}: {exc}")
    return m


def probe_nvml(nvml=None, sysfs_root=None) -> tuple[dict | None, list[str]]:
    """(records or None, reasons): :func:`gather_nvml_records` with every failure soft."""
    try:
        nv = nvml if nvml is not None else importlib.import_module("pynvml")
    except ImportError:
        return None, ["NVML: nvidia-ml-py (pynvml) not installed"]
    try:
        rec = gather_nvml_records(nv, sysfs_root if sysfs_root is not None or nvml is not None else "/")
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, OSError...
        name = type(exc).__name__
        if "LibraryNotFound" in name:
            return None, ["NVML library not found (no NVIDIA driver on this machine)"]
        if "DriverNotLoaded" in name:
            return None, ["NVML: NVIDIA driver not loaded"]
        return None, [f"NVML: {name}: {exc}"]
    reasons = [f"NVML: {e}" for e in rec.get("errors", [])[:5]]
    if not rec["gpus"]:
        reasons.append("NVML: no GPU")
    return rec, reasons


# ----------------------------------------------------------------------------- building
def _link_speed(g: dict) -> tuple[float, str]:
    versions = {ln.get("version") for ln in g.get("nvlinks", []) if ln.get("active") and ln.get("version")}
    if len(versions) == 1 and next(iter(versions)) in _NVLINK_VERSION_GBPS:
        gbps, gen = _NVLINK_VERSION_GBPS[next(iter(versions))]
        return gbps, f"{gen} (NVML link version)"
    guess = nvlink_gbps_for_name(g.get("name"))
    if guess:
        return guess[0], f"{guess[1]} (from the name {g.get('name')!r})"
    sm = sm_from_compute_capability(g.get("compute_capability"))
    if sm:
        gbps, gen = nvlink_gbps_for_sm(sm)
        return gbps, f"{gen} (from SM {sm})"
    return 25.0, "unknown generation (25 GB/s assumed)"


def _add_gpus(t: Topology, gpus: list[dict]) -> dict[str, str]:
    node_of = {}
    for k, g in enumerate(gpus):
        if int(g.get("index", k)) != k:
            raise TopologyError(f"nvml records: gpus[{k}] has index {g.get('index')}, expected {k}")
        bus = normalize_bus_id(g.get("pci_bus_id") or "")
        if not bus or bus in node_of:
            raise TopologyError(f"nvml records: gpus[{k}].pci_bus_id {g.get('pci_bus_id')!r} is missing or repeated")
        cc = g.get("compute_capability")
        pcie = g.get("pcie") or {}
        node_of[bus] = t.add_gpu(k, name=g.get("name"), pci_bus_id=bus, numa_node=g.get("numa_node"), host=0,
                                 compute_capability=f"{cc[0]}.{cc[1]}" if cc else None,
                                 cpu_affinity=g.get("cpu_affinity"), pcie_gen=pcie.get("max_gen") or pcie.get("cur_gen"),
                                 pcie_width=pcie.get("max_width") or pcie.get("cur_width"))
    return node_of


def _add_nvlinks(t: Topology, gpus: list[dict], node_of: dict[str, str]) -> None:
    switches: dict[str, str] = {}
    remote_bus = sorted({normalize_bus_id(ln["remote_pci_bus_id"]) for g in gpus for ln in g.get("nvlinks", [])
                         if ln.get("active") and ln.get("remote_pci_bus_id")
                         and normalize_bus_id(ln["remote_pci_bus_id"]) not in node_of
                         and ln.get("remote_type", "switch") == "switch"})
    for k, bus in enumerate(remote_bus):
        switches[bus] = t.add_node(f"nvswitch{k}", "nvswitch", pci_bus_id=bus)
    speeds, dropped = set(), []
    for g, node in zip(gpus, t.gpus):
        gbps, why = _link_speed(g)
        speeds.add(f"{gbps} GB/s per link: {why}")
        counts: dict[str, int] = {}
        for ln in g.get("nvlinks", []):
            if ln.get("active") and ln.get("remote_pci_bus_id"):
                b = normalize_bus_id(ln["remote_pci_bus_id"])
                counts[b] = counts.get(b, 0) + 1
        for b, c in sorted(counts.items()):
            if b in node_of:
                t.add_link(node, node_of[b], kind="nvlink", links=c, bandwidth_gbps=c * gbps,
                           latency_us=NVLINK_LATENCY_US, both=False)
            elif b in switches:
                t.add_link(node, switches[b], kind="nvlink", links=c, bandwidth_gbps=c * gbps,
                           latency_us=NVSWITCH_LATENCY_US)
            else:
                dropped.append(f"{node}->{b}")
    for u, v, d in list(t.graph.edges(data=True)):
        if d["kind"] == "nvlink" and not t.graph.has_edge(v, u):
            t.graph.add_edge(v, u, **d)
            t.assumptions.append(f"NVML reports NVLink {u}->{v} one way only: reverse added")
    if speeds and any(t.graph.edges[e]["kind"] == "nvlink" for e in t.graph.edges):
        t.assumptions.append("NVLink speed " + "; ".join(sorted(speeds)))
    if dropped:
        t.assumptions.append(f"active NVLinks to devices that are neither a visible GPU nor an NVSwitch "
                             f"dropped: {', '.join(dropped)}")


def _p2p(t: Topology, p2p: dict) -> None:
    n = t.num_gpus
    for i in range(n):
        for j in range(n):
            if i == j or not p2p.get("read"):
                continue
            st = {k: (p2p.get(k) or [[None] * n] * n)[i][j] for k in ("read", "write", "atomics")}
            if all(v is None for v in st.values()):
                continue
            bad = next((f"{k}: {v.lower().replace('_', ' ')} (NVML)" for k, v in st.items() if v not in (None, "OK")), "")
            t.p2p_overrides[(i, j)] = P2PCapability(st["read"] == "OK", st["write"] == "OK", st["atomics"] == "OK", bad)


def build_from_nvml_records(records: dict) -> Topology:
    """A :class:`Topology` from :func:`gather_nvml_records` records (see the module docstring).

    Raises TopologyError naming the field for malformed records.
    """
    gpus = records.get("gpus")
    if not isinstance(gpus, list) or not gpus:
        raise TopologyError("nvml records: field 'gpus' must be a non-empty list")
    t = Topology("nvml", description="probed with NVML" + (f" (driver {records['driver_version']})"
                                                            if records.get("driver_version") else ""))
    node_of = _add_gpus(t, gpus)
    _add_nvlinks(t, gpus, node_of)
    sysfs, gdr = records.get("sysfs"), records.get("gdr") or {}
    sys_bus = {d["bus_id"] for d in (sysfs or {}).get("devices", [])}
    if sysfs and all(b in sys_bus for b in node_of):
        from topo_probe.probes.gdr import gdr_status, nic_records
        ok, why = gdr_status(gdr)
        ends = dict(node_of)
        for k, nic in enumerate(n for n in nic_records(gdr) if normalize_bus_id(n["pci_bus_id"]) in sys_bus):
            attrs = {"speed_gbps": nic["speed_gbps"]} if nic.get("speed_gbps") else {}
            ends[normalize_bus_id(nic["pci_bus_id"])] = t.add_node(
                f"nic{k}", "nic", name=nic["name"], pci_bus_id=normalize_bus_id(nic["pci_bus_id"]), host=0,
                numa_node=nic.get("numa_node"), gdr=ok, **attrs)
        if not ok and t.nodes_of_kind("nic"):
            t.assumptions.append(f"GPUDirect RDMA: {why}")
        t.assumptions.extend(add_sysfs_tree(t, sysfs, ends))
    else:
        _pcie_from_levels(t, gpus, records.get("topology"))
    if records.get("p2p"):
        _p2p(t, records["p2p"])
    return t


def _pcie_from_levels(t: Topology, gpus: list[dict], levels) -> None:
    n = len(gpus)
    classes = {}
    for i in range(n):
        for j in range(n):
            lvl = levels[i][j] if levels and i < len(levels) and j < len(levels[i]) else None
            if i != j and lvl is not None:
                if lvl not in LEVEL_CLASS:
                    raise TopologyError(f"nvml records: topology[{i}][{j}] = {lvl!r} is not one of "
                                        f"{', '.join(LEVEL_CLASS)}")
                classes[(f"gpu{i}", f"gpu{j}")] = LEVEL_CLASS[lvl]
    pcie = {}
    for k, g in enumerate(gpus):
        p = g.get("pcie") or {}
        gen, width = p.get("max_gen") or p.get("cur_gen"), p.get("max_width") or p.get("cur_width")
        pcie[f"gpu{k}"] = PCIE_LANE_GBPS[gen] * width if gen in PCIE_LANE_GBPS and width else PCIE_LANE_GBPS[3] * 16
    t.assumptions.extend(add_pcie_tree_from_classes(
        t, t.gpus, classes, numa={f"gpu{k}": g.get("numa_node") for k, g in enumerate(gpus)},
        affinity={f"gpu{k}": g.get("cpu_affinity") for k, g in enumerate(gpus)}, pcie_gbps=pcie,
        locate=lambda a, b: f"nvml records: topology[{a[3:]}][{b[3:]}]"))
    t.assumptions.append("PCIe tree inferred from NVML common-ancestor levels (no sysfs records): "
                         "NICs not included")
