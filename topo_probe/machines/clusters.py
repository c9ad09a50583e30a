"""Multi-host machines: copies of a single-host topology joined by a network of switches."""

from __future__ import annotations

from topo_probe.errors import TopologyError
from topo_probe.machines.generators import NET_LATENCY_US, positive_count
from topo_probe.machines.presets import get_preset
from topo_probe.topology.model import Topology


def cluster(preset_or_topology: str | Topology, nodes: int, nic_gbps: float | None = None,
            net_latency_us: float = NET_LATENCY_US, *, rail_optimized: bool = False) -> Topology:
    """``nodes`` copies of a single-host topology joined by an InfiniBand/Ethernet network.

    Host ``h`` holds ranks ``h*g .. h*g+g-1`` (``g`` GPUs per host); every node of host ``h``
    gets ``host=h`` and its id prefixed ``"h{h}."`` (``"h1.gpu3"`` is rank ``g + 3``).  Each
    NIC gets a ``network`` edge of ``nic_gbps`` (default: the NIC's own ``speed_gbps``) to a
    single-level, non-blocking switch layer:

    * ``rail_optimized=False`` (default): one switch ``netswitch0`` for all NICs;
    * ``rail_optimized=True``: one switch per rail, ``netswitch{r}`` joins NIC ``r`` (in
      name order) of every host, as in rail-optimized DGX SuperPOD fabrics (traffic between
      different rails then has no network path, exactly as without a spine layer).

    ``net_latency_us`` is the one-way NIC -> switch -> NIC latency, split over the two edges.

    Examples
    --------
    >>> c = cluster("dgx-a100", nodes=2)
    >>> c.num_gpus, c.gpu(11), c.host_of(11), c.path_class(0, 11), c.path_class(8, 11)
    (16, 'h1.gpu3', 1, 'NET', 'NVL')
    """
    if isinstance(preset_or_topology, str):
        base = get_preset(preset_or_topology)
    else:
        base = preset_or_topology
    k = positive_count(nodes, 1, "cluster nodes")
    if any(int(d.get("host", 0)) != 0 for _, d in base.graph.nodes(data=True)):
        raise TopologyError(f"cluster: {base.name!r} already spans several hosts")
    nics = base.nodes_of_kind("nic")
    if not nics:
        raise TopologyError(f"cluster: {base.name!r} has no NICs to join hosts with")
    g = base.num_gpus
    t = Topology(f"{k}x{base.name}", description=f"{k} hosts of {base.name}; {base.description}")
    for h in range(k):
        for n, d in base.graph.nodes(data=True):
            attrs = {a: v for a, v in d.items() if a != "kind"}
            attrs["host"] = h
            if d["kind"] == "gpu":
                attrs["index"] = h * g + int(d["index"])
            t.add_node(f"h{h}.{n}", d["kind"], **attrs)
        for u, v, d in base.graph.edges(data=True):
            t.graph.add_edge(f"h{h}.{u}", f"h{h}.{v}", **d)
    switches = len(nics) if rail_optimized else 1
    for r in range(switches):
        t.add_node(f"netswitch{r}", "net_switch", host=-1)
    for h in range(k):
        for r, nic in enumerate(sorted(nics, key=lambda x: (str(base.graph.nodes[x].get("name", x)), x))):
            speed = nic_gbps if nic_gbps is not None else base.graph.nodes[nic].get("speed_gbps")
            if not speed or speed <= 0:
                raise TopologyError(f"cluster: NIC {nic!r} has no speed_gbps; pass nic_gbps")
            t.add_link(f"h{h}.{nic}", f"netswitch{r if rail_optimized else 0}", kind="network",
                       bandwidth_gbps=float(speed), latency_us=net_latency_us / 2)
    t.assumptions = list(base.assumptions) + [
        f"network: {'one switch per rail' if rail_optimized else 'one non-blocking switch'}, "
        f"{net_latency_us} us NIC to NIC"]
    return t
