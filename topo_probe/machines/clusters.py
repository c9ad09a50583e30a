"""Multi-host machines: copies of a single-host topology joined by a network of switches."""

from __future__ import annotations

import math

from topo_probe.errors import TopologyError, show
from topo_probe.limits import (MAX_BANDWIDTH_GBPS, MAX_EDGES, MAX_GPUS, MAX_HOSTS, MAX_LATENCY_US, MAX_NICS_PER_HOST,
                               MAX_NODES, MAX_OVERSUBSCRIPTION, MIN_BANDWIDTH_GBPS)
from topo_probe.machines.generators import NET_LATENCY_US, PCIE_LATENCY_US, PCIE_X16_GBPS, positive_count
from topo_probe.machines.presets import get_preset
from topo_probe.number_checks import check_float, check_int
from topo_probe.number_rules import is_int, is_real
from topo_probe.topology.model import Topology

#: NIC ports of one leaf switch of :func:`cluster`'s leaf-spine network (a 64-port switch, half down)
LEAF_PORTS = 32


def with_nics(base: Topology, count: int, speed_gbps: float | None = None) -> Topology:
    """A copy of single-host ``base`` with exactly ``count`` NICs (each of ``speed_gbps``, default
    the speed of base's first NIC): NIC k hangs where GPU ``k * G // count``'s first PCIe
    neighbour is (its PCIe switch or host bridge; the GPU itself when it has none), so NICs
    spread evenly over the GPUs as on real hosts (e.g. 32 EFA NICs on 8 GPUs: 4 per GPU).
    A ``base`` of several hosts is refused (:func:`check_one_host`): its NICs carry the network.

    >>> t = with_nics(get_preset("dgx-a100"), 4, 50.0)
    >>> [t.graph.nodes[n]["speed_gbps"] for n in t.nodes_of_kind("nic")]
    [50.0, 50.0, 50.0, 50.0]
    """
    k = check_int(positive_count(count, 1, "NICs per node", "NICs"), "NICs per node", TopologyError, lo=1,
                  hi=MAX_NICS_PER_HOST, what="NICs")       # the rule and form of --nics-per-node's refusal
    check_one_host(base, "with_nics")
    old = base.nodes_of_kind("nic")
    if speed_gbps is None:      # a given speed is checked as given (check_float below)
        speed_gbps = base.graph.nodes[old[0]].get("speed_gbps") if old else None
        if _no_speed(speed_gbps):
            raise TopologyError(f"{show(base.name)} has no NIC speed to copy; give the NIC speed (--nic-gbps)")
    speed_gbps = check_float(speed_gbps, "NIC speed", TopologyError, lo=MIN_BANDWIDTH_GBPS, hi=MAX_BANDWIDTH_GBPS,
                             unit="GB/s")
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
            nics_per_node: int | None = None, spine_oversubscription: float | None = None,
            hosts_per_leaf: int | None = None) -> Topology:
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

    ``spine_oversubscription=R`` (R >= 1) builds a two-tier leaf-spine network instead: hosts
    are grouped ``hosts_per_leaf`` at a time (default: 32 NIC ports per leaf, so 32 hosts per
    rail leaf, 4 hosts of 8 NICs per shared leaf); group ``q`` has one leaf ``leaf{q}`` (or
    one per rail, ``leaf{q}.rail{r}``, with ``rail_optimized``) holding its NICs, and every
    leaf joins the switch ``spine`` by an uplink of ``1/R`` of its full downlink bandwidth
    (all leaves alike, also a last partly filled one; the spine switches of a real fabric,
    spread over by ECMP, are one switch here, as parallel NVSwitches are).  Traffic between
    leaves (and between rails) crosses the spine; leaf-spine edges add ``net_latency_us / 2``
    each.

    Examples
    --------
    >>> c = cluster("dgx-a100", nodes=2)
    >>> c.num_gpus, c.gpu(11), c.host_of(11), c.path_class(0, 11), c.path_class(8, 11)
    (16, 'h1.gpu3', 1, 'NET', 'NVL')
    >>> s = cluster("dgx-h100", nodes=4, spine_oversubscription=2, hosts_per_leaf=2)
    >>> s.nodes_of_kind("net_switch"), s.graph.edges["leaf0", "spine"]["bandwidth_gbps"]
    (['leaf0', 'leaf1', 'spine'], 400.0)
    """
    if isinstance(preset_or_topology, str):
        base = get_preset(preset_or_topology)
    else:
        base = preset_or_topology
    check_one_host(base, "cluster")
    if nics_per_node is not None:      # checked also when it equals the host's own count (8.0 is not 8)
        nics_per_node = positive_count(nics_per_node, 1, "NICs per node", "NICs")
        if nics_per_node != len(base.nodes_of_kind("nic")):
            base = with_nics(base, nics_per_node, nic_gbps)
    k = check_hosts(nodes, base.num_gpus, "cluster: nodes")
    nics = base.nodes_of_kind("nic")
    if not nics:
        raise TopologyError(f"cluster: {show(base.name)} has no NICs to join hosts with")
    if len(nics) > MAX_NICS_PER_HOST:
        raise TopologyError(f"cluster: {show(base.name)} has {len(nics)} NICs, more than the {MAX_NICS_PER_HOST} a "
                            f"host may have")
    if hosts_per_leaf is not None and spine_oversubscription is None:   # a single-tier network has no leaves
        raise TopologyError("cluster: hosts_per_leaf needs spine_oversubscription R")
    net_latency_us = check_float(net_latency_us, "cluster: net_latency_us", TopologyError, lo=0.0,
                                 hi=MAX_LATENCY_US, unit="µs")
    rails = sorted(nics, key=lambda x: (str(base.graph.nodes[x].get("name", x)), x))
    speeds = _rail_speeds(base, rails, nic_gbps)
    per_leaf = None if spine_oversubscription is None else _hosts_per_leaf(hosts_per_leaf,
                                                                           1 if rail_optimized else len(rails))
    _check_size(base, k, len(rails), rail_optimized, per_leaf)
    t = _replicated_hosts(base, k)
    if spine_oversubscription is None:
        leaf_of, shape = _single_tier(t, len(rails), rail_optimized)
    else:
        leaf_of, shape = _leaf_spine(t, k, speeds, rail_optimized, spine_oversubscription, per_leaf, net_latency_us)
    for h in range(k):
        for r, nic in enumerate(rails):
            t.graph.nodes[f"h{h}.{nic}"]["speed_gbps"] = speeds[r]
            t.add_link(f"h{h}.{nic}", leaf_of(h, r), kind="network", bandwidth_gbps=speeds[r],
                       latency_us=net_latency_us / 2)
    t.assumptions = list(base.assumptions) + [f"network: {shape}, {net_latency_us} us NIC to NIC"]
    return t


def check_one_host(base: Topology, where: str) -> None:
    """Refuse a ``base`` of several hosts (a node with a ``host`` other than 0, e.g. a saved :func:`cluster`) in one
    line starting with ``where``: :func:`with_nics` would drop its NICs, and the network edges with them, leaving
    every other host cut off."""
    if any(int(d.get("host", 0)) != 0 for _, d in base.graph.nodes(data=True)):
        raise TopologyError(f"{where}: {show(base.name)} already spans several hosts")


def check_hosts(nodes, gpus_per_host: int, where: str) -> int:
    """``nodes`` (a host count) as an int: an integer (:func:`~topo_probe.number_rules.is_int`) >= 1 whose hosts of
    ``gpus_per_host`` GPUs are at most :data:`~topo_probe.limits.MAX_GPUS`, checked before anything is built (4,096
    DGX hosts took a minute, then were refused); else TopologyError in one line starting with ``where``
    (``--nodes``, ``cluster: nodes``).

    >>> check_hosts(129, 8, "--nodes")
    Traceback (most recent call last):
    ...
    topo_probe.errors.TopologyError: --nodes 129: 129 hosts of 8 GPUs is 1032 GPUs, more than the 1024 a topology may have
    """
    if not is_int(nodes) or nodes < 1:
        raise TopologyError(f"{where} must be an integer >= 1, got {show(nodes)}")
    if nodes * gpus_per_host > MAX_GPUS:
        raise TopologyError(f"{where} {nodes}: {nodes} hosts of {gpus_per_host} GPUs is {nodes * gpus_per_host} GPUs, "
                            f"more than the {MAX_GPUS} a topology may have")
    return int(nodes)


def _replicated_hosts(base: Topology, k: int) -> Topology:
    """``k`` copies of ``base``, host ``h``'s nodes named ``"h{h}.<node>"`` with ``host=h`` and
    its GPUs numbered ``h*g ..`` on (``g`` GPUs per host); no network yet."""
    g = base.num_gpus
    t = Topology(f"{k}x{base.name}", description=f"{k} hosts of {base.name}; {base.description}")
    t.graph.graph.update(base.graph.graph)          # e.g. the host path class of a link matrix
    for h in range(k):
        for n, d in base.graph.nodes(data=True):
            attrs = {a: v for a, v in d.items() if a != "kind"}
            attrs["host"] = h
            if d["kind"] == "gpu":
                attrs["index"] = h * g + int(d["index"])
            t.add_node(f"h{h}.{n}", d["kind"], **attrs)
        for u, v, d in base.graph.edges(data=True):
            t.graph.add_edge(f"h{h}.{u}", f"h{h}.{v}", **d)
    return t


def _no_speed(speed) -> bool:
    """Whether a NIC's own ``speed_gbps`` is missing (None, or 0 / negative as nvidia-smi-derived NICs may carry)."""
    return speed is None or (is_real(speed) and speed <= 0)


def _rail_speeds(base: Topology, rails: list[str], nic_gbps: float | None) -> list[float]:
    """GB/s of each rail's NIC: ``nic_gbps`` when given, else the NIC's own ``speed_gbps``."""
    speeds = []
    for nic in rails:
        speed = nic_gbps if nic_gbps is not None else base.graph.nodes[nic].get("speed_gbps")
        if nic_gbps is None and _no_speed(speed):      # a given nic_gbps is checked as given
            raise TopologyError(f"cluster: NIC {nic!r} has no speed_gbps (nvidia-smi shows none); pass nic_gbps "
                                f"(--nic-gbps G, GB/s per direction per NIC)")
        speeds.append(check_float(speed, f"cluster: NIC {nic!r} speed", TopologyError, lo=MIN_BANDWIDTH_GBPS,
                                  hi=MAX_BANDWIDTH_GBPS, unit="GB/s"))
    return speeds


def _hosts_per_leaf(hosts_per_leaf: int | None, per_host: int) -> int:
    """Hosts under one leaf: ``hosts_per_leaf`` (1..:data:`~topo_probe.limits.MAX_HOSTS`), by default as many as
    fill :data:`LEAF_PORTS` NIC ports (``per_host`` a host)."""
    m = hosts_per_leaf if hosts_per_leaf is not None else max(1, LEAF_PORTS // per_host)
    m = positive_count(m, 1, "hosts per leaf", "hosts")
    if m > MAX_HOSTS:
        raise TopologyError(f"hosts per leaf: at most {MAX_HOSTS}, got {m}")
    return m


def _check_size(base: Topology, hosts: int, rails: int, rail_optimized: bool, per_leaf: int | None) -> None:
    """Refuse, before building it, a cluster the topology loader would refuse: more nodes or edges than
    :data:`~topo_probe.limits.MAX_NODES` / :data:`~topo_probe.limits.MAX_EDGES` (each host's copy of ``base``, its
    NICs' two network edges, the switches and each leaf's two uplink edges); ``per_leaf``: hosts under one leaf
    (:func:`_hosts_per_leaf`), None for a single-tier network."""
    switches, leaves = (rails if rail_optimized else 1), 0
    if per_leaf is not None:
        leaves = -(-hosts // per_leaf) * switches
        switches = leaves + 1
    nodes = hosts * base.graph.number_of_nodes() + switches
    edges = hosts * (base.graph.number_of_edges() + 2 * rails) + 2 * leaves
    if nodes > MAX_NODES or edges > MAX_EDGES:
        raise TopologyError(f"cluster: {hosts} hosts of {show(base.name)} are {nodes} nodes and {edges} edges; a "
                            f"topology may have at most {MAX_NODES} and {MAX_EDGES}")


def _single_tier(t: Topology, rails: int, rail_optimized: bool):
    """One non-blocking switch for all NICs, or one per rail: (switch of host h's rail r, shape)."""
    switch = [f"netswitch{r if rail_optimized else 0}" for r in range(rails)]
    for name in sorted(set(switch)):
        t.add_node(name, "net_switch", host=-1)
    shape = "one switch per rail" if rail_optimized else "one non-blocking switch"
    return (lambda h, r: switch[r]), shape


def _leaf_spine(t: Topology, hosts: int, speeds: list[float], rail_optimized: bool, ratio: float, m: int,
                net_latency_us: float):
    """Add leaves of ``m`` hosts each and the spine of :func:`cluster` to ``t``; returns (leaf of (host, rail),
    words)."""
    # a Python float: a numpy.float32 would divide in float32 (800 / float32(3) = 266.66665649...)
    ratio = check_float(ratio, "cluster: spine_oversubscription", TopologyError, lo=1.0, hi=MAX_OVERSUBSCRIPTION)
    per_host = 1 if rail_optimized else len(speeds)
    groups = -(-hosts // m)
    planes = range(len(speeds)) if rail_optimized else range(1)
    t.add_node("spine", "net_switch", host=-1, tier="spine")
    for q in range(groups):
        for r in planes:
            leaf = t.add_node(f"leaf{q}.rail{r}" if rail_optimized else f"leaf{q}", "net_switch", host=-1,
                              tier="leaf")
            down = m * (speeds[r] if rail_optimized else sum(speeds))
            # within the loader's edge_limits("network") (topo_probe.topology.checks): m <= MAX_HOSTS hosts of
            # <= MAX_NICS_PER_HOST NICs
            t.add_link(leaf, "spine", kind="network", links=max(1, math.ceil(m * per_host / ratio)),
                       bandwidth_gbps=down / ratio, latency_us=net_latency_us / 2)

    def leaf_of(h: int, r: int) -> str:
        return f"leaf{h // m}.rail{r}" if rail_optimized else f"leaf{h // m}"
    words = (f"{groups} {'rail leaves' if rail_optimized else 'leaves'} of {m} hosts under one spine, "
             f"{ratio:g}:1 oversubscribed")
    return leaf_of, words
