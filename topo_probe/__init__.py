"""topo_probe: the machine's interconnect as a Topology (model, presets, parsers, probes).

>>> from topo_probe import get_preset, cluster
>>> get_preset("dgx1-v100").smi_label(0, 3), cluster("dgx-a100", nodes=2).num_gpus
('NV1', 16)
"""

from topo_probe.errors import TopocollError, TopologyError
from topo_probe.load import load_topology
from topo_probe.machines.clusters import cluster
from topo_probe.machines.presets import PRESETS, get_preset
from topo_probe.machines.specs import parse_generator_spec
from topo_probe.parsers.nccl_xml import parse_nccl_xml
from topo_probe.parsers.nvsmi import apply_p2p, parse_nvsmi_p2p, parse_nvsmi_topo
from topo_probe.probes import probe_machine as probe
from topo_probe.topology.model import P2PCapability, Topology
from topo_probe.topology.serialize import save_topology

__all__ = ["Topology", "P2PCapability", "load_topology", "probe", "get_preset", "PRESETS", "cluster",
           "parse_generator_spec", "parse_nvsmi_topo", "parse_nvsmi_p2p", "apply_p2p", "parse_nccl_xml",
           "save_topology", "TopologyError", "TopocollError"]
