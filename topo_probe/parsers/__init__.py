"""Parsers of what users already have: ``nvidia-smi topo -m`` / ``-p2p`` text, NCCL topology
XML, link-count matrices.

Each parser takes text (or a decoded JSON document) and returns a
:class:`~topo_probe.topology.model.Topology`; none of them runs a program or touches the machine.
Malformed input raises :class:`~topo_probe.errors.TopologyError` with one line naming the
source and the place (``file:line N column M`` or the JSON field) and the rule broken.

Entry points (imported lazily from their modules):

* :func:`topo_probe.parsers.nvsmi.parse_nvsmi_topo`, :func:`~topo_probe.parsers.nvsmi.parse_nvsmi_p2p`,
  :func:`~topo_probe.parsers.nvsmi.apply_p2p`
* :func:`topo_probe.parsers.nccl_xml.parse_nccl_xml`, :func:`~topo_probe.parsers.nccl_xml_export.to_nccl_xml`
* :func:`topo_probe.parsers.link_matrix.parse_link_matrix`

The figures the parsers and the probes share (link bandwidths, bus ids, SM numbers) live in
:mod:`topo_probe.parsers.hardware` and are importable from here too.
"""

from __future__ import annotations

from topo_probe.parsers.hardware import (  # noqa: F401  (importable from here, as they always were)
    AMD_SM,
    CPU_LINK_GBPS,
    MAX_NVLINKS_PER_GPU,
    PCIE_LANE_GBPS,
    PCIE_SPEED_STRINGS,
    XGMI_DEFAULT_GBPS,
    XGMI_GBPS,
    gcn_arch,
    normalize_bus_id,
    nvlink_gbps_for_name,
    nvlink_gbps_for_sm,
    pcie_gbps,
    pcie_gen_from_speed,
    sm_from_compute_capability,
    xgmi_gbps_for_arch,
)

__all__ = ["parse_nvsmi_topo", "parse_nvsmi_p2p", "apply_p2p", "parse_nccl_xml", "to_nccl_xml",
           "parse_link_matrix", "pcie_gbps", "pcie_gen_from_speed", "normalize_bus_id",
           "nvlink_gbps_for_name", "nvlink_gbps_for_sm", "PCIE_LANE_GBPS", "PCIE_SPEED_STRINGS",
           "MAX_NVLINKS_PER_GPU", "CPU_LINK_GBPS", "XGMI_GBPS", "XGMI_DEFAULT_GBPS", "gcn_arch",
           "xgmi_gbps_for_arch"]

_LAZY = {"parse_nvsmi_topo": "nvsmi", "parse_nvsmi_p2p": "nvsmi", "apply_p2p": "nvsmi",
         "parse_nccl_xml": "nccl_xml", "to_nccl_xml": "nccl_xml_export", "parse_link_matrix": "link_matrix"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f"topo_probe.parsers.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'topo_probe.parsers' has no attribute {name!r}")
