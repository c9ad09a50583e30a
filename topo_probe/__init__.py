"""topo_probe: the machine's interconnect as a Topology (model, presets, parsers, probes).

The names below are the public surface; each loads its module on first use, so ``import
topo_probe`` stays light (the command-line entry points import nothing heavy before their
Ctrl-C handling is in place: :mod:`topo_probe.cli.entry`).

>>> from topo_probe import get_preset, cluster
>>> get_preset("dgx1-v100").smi_label(0, 3), cluster("dgx-a100", nodes=2).num_gpus
('NV1', 16)
"""

from __future__ import annotations

from topo_probe.lazy import lazy_exports

_EXPORTS = {
    "Topology": "topo_probe.topology.model", "P2PCapability": "topo_probe.topology.model",
    "load_topology": "topo_probe.load",
    "probe": ("topo_probe.probes", "probe_machine"),
    "get_preset": "topo_probe.machines.presets", "PRESETS": "topo_probe.machines.presets",
    "cluster": "topo_probe.machines.clusters",
    "parse_generator_spec": "topo_probe.machines.specs",
    "parse_nvsmi_topo": "topo_probe.parsers.nvsmi", "parse_nvsmi_p2p": "topo_probe.parsers.nvsmi",
    "apply_p2p": "topo_probe.parsers.nvsmi",
    "parse_nccl_xml": "topo_probe.parsers.nccl_xml",
    "save_topology": "topo_probe.topology.serialize",
    "TopologyError": "topo_probe.errors", "TopocollError": "topo_probe.errors",
}

__all__ = ["Topology", "P2PCapability", "load_topology", "probe", "get_preset", "PRESETS", "cluster",
           "parse_generator_spec", "parse_nvsmi_topo", "parse_nvsmi_p2p", "apply_p2p", "parse_nccl_xml",
           "save_topology", "TopologyError", "TopocollError"]


__getattr__, __dir__ = lazy_exports("topo_probe", _EXPORTS, globals())
