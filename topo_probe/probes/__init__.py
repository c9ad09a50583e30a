"""Probe the local machine: NVML, sysfs, GPUDirect RDMA and CUDA, each optional.

:func:`probe_machine` combines whatever answers; every source that cannot answer adds a
reason instead of raising.  On a machine without NVIDIA GPUs it returns ``(None, reasons)``
quickly.  The decision logic lives in pure functions tested with recorded answers
(:func:`topo_probe.probes.nvml.build_from_nvml_records`,
:func:`topo_probe.probes.sysfs.build_from_sysfs_records`,
:func:`topo_probe.probes.cuda.p2p_from_cuda_records`).
"""

from __future__ import annotations

import os

from topo_probe.topology.model import Topology

__all__ = ["probe_machine", "combine"]


def combine(nvml_records: dict | None, sysfs_records: dict | None, gdr_records: dict | None,
            cuda_records: dict | None) -> tuple[Topology | None, list[str]]:
    """The pure half of :func:`probe_machine`: a topology from whichever records exist.

    NVML gives GPUs and NVLinks (with the sysfs PCIe tree and RDMA NICs when present);
    without NVML, sysfs alone gives a PCIe-only topology; CUDA peer access fills
    ``p2p_overrides`` for pairs NVML did not answer (matched by PCI bus id).
    """
    from topo_probe.errors import TopologyError
    from topo_probe.probes.nvml import build_from_nvml_records
    from topo_probe.probes.sysfs import build_from_sysfs_records

    reasons: list[str] = []
    topo = None
    try:
        if nvml_records and nvml_records.get("gpus"):
            topo = build_from_nvml_records({**nvml_records, "sysfs": sysfs_records, "gdr": gdr_records})
        elif sysfs_records and any(d["kind"] == "gpu" for d in sysfs_records.get("devices", [])):
            from topo_probe.probes.gdr import nic_records
            topo = build_from_sysfs_records(sysfs_records, nic_records=nic_records(gdr_records or {}))
            reasons.append("topology from sysfs only: NVLinks unknown")
        elif sysfs_records is not None:
            reasons.append(sysfs_records.get("error") or "sysfs: no NVIDIA GPU under /sys/bus/pci/devices")
    except TopologyError as exc:
        reasons.append(f"building the topology failed: {exc}")
        topo = None
    if topo is not None and cuda_records:
        from topo_probe.probes.cuda import cuda_bus_ids, p2p_from_cuda_records
        rank = {topo.graph.nodes[g].get("pci_bus_id"): topo.graph.nodes[g]["index"] for g in topo.gpus}
        order = [rank.get(b) for b in cuda_bus_ids(cuda_records)]
        if None in order:
            reasons.append("CUDA devices do not match the probed GPUs by PCI bus id: CUDA P2P ignored")
        else:
            for (i, j), cap in p2p_from_cuda_records(cuda_records).items():
                topo.p2p_overrides.setdefault((order[i], order[j]), cap)
    if topo is not None:
        topo.name = "local"
    return topo, reasons


def probe_machine(*, root: str | os.PathLike = "/", use_nvml: bool = True,
                  use_cuda: bool = True) -> tuple[Topology | None, list[str]]:
    """Probe this machine's interconnect.

    Parameters
    ----------
    root : path
        Filesystem root for sysfs (tests pass a fake tree).
    use_nvml, use_cuda : bool
        Skip NVML / CUDA (CuPy) when False.

    Returns
    -------
    (Topology or None, list of str)
        The topology (None when no GPU was found) and the reasons / notes: which source
        could not answer and why (e.g. ``"NVML library not found ..."``,
        ``"CUDA: cupy not installed"``).  Never raises for a missing driver or library.
    """
    from topo_probe.probes.gdr import gdr_status, scan_gdr
    from topo_probe.probes.sysfs import scan_sysfs

    reasons: list[str] = []
    nvml_records = cuda_records = None
    if use_nvml:
        from topo_probe.probes.nvml import probe_nvml
        nvml_records, why = probe_nvml()
        reasons += why
    gdr_records = scan_gdr(root)
    ok, why = gdr_status(gdr_records)
    if not ok:
        reasons.append(f"GDR: {why}")
    nics = {d["pci_bus_id"]: d["name"] for d in gdr_records["ib_devices"] if d.get("pci_bus_id")}
    sysfs_records = scan_sysfs(root, nics=nics)
    if use_cuda:
        from topo_probe.probes.cuda import probe_cuda
        cuda_records, why = probe_cuda()
        reasons += why
    topo, why = combine(nvml_records, sysfs_records, gdr_records, cuda_records)
    return topo, reasons + why
