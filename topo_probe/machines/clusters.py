"""Multi-host machines: copies of a single-host topology joined by a network of switches."""

from __future__ import annotations

from topo_probe.errors import TopologyError
from topo_probe.machines.generators import NET_LATENCY_US, PCIE_LATENCY_US, PCIE_X16_GBPS, positive_count
from topo_probe.machines.presets import get_preset
from topo_probe.topology.model import Topology


def with_nics(base: Topology, count: int, speed_gbps: float | None = None) -> Topology:
    """A copy of single-host ``base`` with exactly ``count`` NICs (each of ``speed_gbps``, default
    the speed of base's first NIC): NIC k hangs where GPU ``k * G // count``'s first PCIe
    neighbour is (its PCIe switch or host bridge; the GPU itself when it has none), so NICs
    spread evenly over the GPUs as on real hosts (e.g. 32 EFA NICs on 8 GPUs: 4 per GPU).

    >>> t = with_nics(get_preset("dgx-a100"), 4, 50.0)
    >>> [t.graph.nodes[n]["speed_gbps"] for n in t.nodes_of_kind("nic")]
    [50.0, 50.0, 50.0, 50.0]
    """
    k = positive_count(count, 1, "NICs per node")
    if k > 64:
        raise TopologyError(f"NICs per node: at most 64, got {k}")
    old = base.nodes_of_kind("nic")
    if speed_gbps is None:
        speed_gbps = base.graph.nodes[old[0]].get("speed_gbps") if old else None
    if not speed_gbps or not speed_gbps > 0:
        raise TopologyError(f"{base.name!r} has no NIC speed to copy; give the NIC speed (--nic-gbps)")
    t = base.copy()
    for nic in old:
        t.graph.remove_node(nic)
    g = t.num_gpus
    for j in range(k):
        gpu = t.gpu(j * g // k)
        ups = [v for v in t.graph.successors(gpu) if t.graph.nodes[v]["kind"] in ("pcie_switch", "host_bridge")]
        parent = ups[0] if ups else gpu
        numa = t.graph.nodes[parent].get("numa_node", t.graph.nodes[gpu].get("numa_node"))
        nic = t.add_node(f"nic{j}", "nic", name=f"nic{j}", speed_gbps=float(speed_gbps),
                         **({"numa_node": numa} if numa is not None else {}))
        t.add_link(nic, parent, kind="pcie", bandwidth_gbps=PCIE_X16_GBPS[5], latency_us=PCIE_LATENCY_US)
    t.assumptions = list(base.assumptions) + [f"{k} NICs of {speed_gbps} GB/s per host, spread over the GPUs"]
    return t


def cluster(preset_or_topology: str | Topology, nodes: int, nic_gbps: float | None = None,
            net_latency_us: float = NET_LATENCY_US, *, rail_optimized: bool = False,
            nics_per_node: int | None = None) -> Topology:
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
    ``nics_per_node`` replaces the host's NICs by that many (:func:`with_nics`, ``nic_gbps`` each).

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
    if nics_per_node is not None and nics_per_node != len(base.nodes_of_kind("nic")):
        base = with_nics(base, nics_per_node, nic_gbps)
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
            t.graph.nodes[f"h{h}.{nic}"]["speed_gbps"] = float(speed)
            t.add_link(f"h{h}.{nic}", f"netswitch{r if rail_optimized else 0}", kind="network",
                       bandwidth_gbps=float(speed), latency_us=net_latency_us / 2)
    t.assumptions = list(base.assumptions) + [
        f"network: {'one switch per rail' if rail_optimized else 'one non-blocking switch'}, "
        f"{net_latency_us} us NIC to NIC"]
    return t
