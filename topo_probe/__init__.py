"""topo_probe: the machine's interconnect as a Topology (model, presets, parsers, probes)."""

from topo_probe.errors import TopologyError
from topo_probe.topology.model import P2PCapability, Topology

__all__ = ["Topology", "TopologyError", "P2PCapability"]
