"""Synthetic topologies: ring, line, fully connected, parity mesh, torus, hub-and-spoke, and PCIe trees.

Every generator returns a :class:`~topo_probe.topology.model.Topology` whose GPU nodes are
``gpu0 .. gpu{n-1}`` (rank = index, ``host`` 0).  Bandwidths are GB/s (1e9 bytes/s) **per
link per direction**; an edge bundling ``links`` links carries ``links * bandwidth_gbps``.

Default one-way latencies (per edge, µs), chosen so that end-to-end figures match the usual
orders of magnitude (NVLink hop ~0.7 µs, PCIe ~1 µs, network ~2-5 µs):

* :data:`NVLINK_LATENCY_US` 0.7 per direct GPU-GPU NVLink / Infinity Fabric edge;
  :data:`NVSWITCH_LATENCY_US` 0.35 per GPU<->NVSwitch (or switch-switch) edge, so
  GPU -> NVSwitch -> GPU is also 0.7 µs.
* :data:`PCIE_LATENCY_US` 0.5 per PCIe edge (GPU -> switch -> GPU = 1 µs).
* :data:`CPU_LATENCY_US` 0.5 per host-bridge / inter-socket (QPI, UPI, xGMI) edge.
* :data:`NET_LATENCY_US` 3.0 NIC -> network switch -> NIC (1.5 per edge).

Generators without ``pcie_gbps`` have no PCIe tree: GPUs that the generated fabric does not
join within two hops have no route but the GPUs, and for NCCL's side the stated host assumption
(:mod:`topo_probe.topology.host_assumption`, class PHB by default); pass ``pcie_gbps`` to hang
every GPU under one PCIe switch (class PIX) as a fallback route.
"""

from __future__ import annotations

from typing import Sequence, Union

from topo_probe.errors import TopologyError, show
from topo_probe.number_rules import is_int
from topo_probe.topology.model import GPU_LINK_KINDS, Topology

NVLINK_LATENCY_US = 0.7
NVSWITCH_LATENCY_US = 0.35
PCIE_LATENCY_US = 0.5
CPU_LATENCY_US = 0.5
NET_LATENCY_US = 3.0

#: PCIe x16 theoretical bandwidth per direction (GB/s) by generation.
PCIE_X16_GBPS = {3: 15.75, 4: 31.5, 5: 63.0}

TreeSpec = Sequence[Union[str, "TreeSpec"]]


def positive_count(n: int, minimum: int, what: str, unit: str) -> int:
    """``n`` as an int if it is an integer (:func:`~topo_probe.number_rules.is_int`) >= ``minimum``, else TopologyError
    naming ``what`` and the ``unit`` counted (``GPUs``, ``NICs``, ``hosts``: plural, singular for a minimum of 1).

    >>> positive_count(0, 1, "NICs per node", "NICs")
    Traceback (most recent call last):
    ...
    topo_probe.errors.TopologyError: NICs per node: need at least 1 NIC, got 0
    """
    if not is_int(n):
        raise TopologyError(f"{what}: need an integer count of {unit}, got {show(n)}")     # 8.0 as well
    if n < minimum:
        counted = unit[:-1] if minimum == 1 and unit.endswith("s") else unit
        raise TopologyError(f"{what}: need at least {minimum} {counted}, got {show(n)}")
    return int(n)


def _gpus(name: str, n: int, description: str) -> Topology:
    t = Topology(name, description=description)
    for i in range(n):
        t.add_gpu(i, host=0)
    return t


def _check_kind(kind: str) -> None:
    if kind not in GPU_LINK_KINDS:
        raise TopologyError(f"kind {kind!r} is not one of {', '.join(GPU_LINK_KINDS)}")


def _link(t: Topology, i: int, j: int, kind: str, links: int, bw: float, lat: float) -> None:
    t.add_link(f"gpu{i}", f"gpu{j}", kind=kind, links=links, bandwidth_gbps=links * bw, latency_us=lat)


def _maybe_pcie(t: Topology, pcie_gbps: float | None) -> Topology:
    if pcie_gbps is not None:
        add_pcie_tree(t, [[[[g for g in t.gpus]]]], pcie_gbps=pcie_gbps, inter_socket_gbps=0.0)
    return t


def ring(n: int, bandwidth_gbps: float = 25.0, links: int = 1, latency_us: float = NVLINK_LATENCY_US,
         *, kind: str = "nvlink", pcie_gbps: float | None = None) -> Topology:
    """Bidirectional ring gpu0 - gpu1 - ... - gpu{n-1} - gpu0.

    Parameters
    ----------
    n : int
        GPUs (>= 2; a 2-ring is one bidirectional edge).
    bandwidth_gbps : float
        GB/s per link per direction.
    links : int
        Links bonded in each ring edge (edge bandwidth = ``links * bandwidth_gbps``).
    latency_us : float
        One-way latency of each edge (µs).
    kind : str
        ``"nvlink"`` or ``"infinity_fabric"``.
    pcie_gbps : float, optional
        If given, also hang all GPUs under one PCIe switch with links of this speed.

    Examples
    --------
    >>> t = ring(4, links=2)
    >>> t.nvlink_count(0, 1), t.nvlink_count(0, 3), t.nvlink_count(0, 2), t.gpu_bandwidth_gbps(0)
    (2, 2, 0, 100.0)
    """
    n = positive_count(n, 2, "ring", "GPUs")
    _check_kind(kind)
    t = _gpus(f"ring{n}", n, f"ring of {n} GPUs, {links} x {bandwidth_gbps} GB/s per edge")
    for i in range(n if n > 2 else 1):
        _link(t, i, (i + 1) % n, kind, links, bandwidth_gbps, latency_us)
    return _maybe_pcie(t, pcie_gbps)


def line(n: int, bandwidth_gbps: float = 25.0, links: int = 1, latency_us: float = NVLINK_LATENCY_US,
         *, kind: str = "nvlink", pcie_gbps: float | None = None) -> Topology:
    """Chain gpu0 - gpu1 - ... - gpu{n-1} (a ring without the closing edge); see :func:`ring`.

    >>> t = line(3)
    >>> t.nvlink_count(0, 1), t.nvlink_count(2, 0)
    (1, 0)
    """
    n = positive_count(n, 2, "line", "GPUs")
    _check_kind(kind)
    t = _gpus(f"line{n}", n, f"line of {n} GPUs, {links} x {bandwidth_gbps} GB/s per edge")
    for i in range(n - 1):
        _link(t, i, i + 1, kind, links, bandwidth_gbps, latency_us)
    return _maybe_pcie(t, pcie_gbps)


def fully_connected(n: int, bandwidth_gbps: float = 25.0, links: int = 1,
                    latency_us: float = NVLINK_LATENCY_US, *, kind: str = "nvlink",
                    pcie_gbps: float | None = None) -> Topology:
    """Every GPU pair joined by ``links`` direct links (all-to-all mesh); see :func:`ring`.

    >>> fully_connected(8, 64.0, kind="infinity_fabric").gpu_bandwidth_gbps(3)
    448.0
    """
    n = positive_count(n, 2, "fully_connected", "GPUs")
    _check_kind(kind)
    t = _gpus(f"full{n}", n, f"fully connected {n} GPUs, {links} x {bandwidth_gbps} GB/s per pair")
    for i in range(n):
        for j in range(i + 1, n):
            _link(t, i, j, kind, links, bandwidth_gbps, latency_us)
    return _maybe_pcie(t, pcie_gbps)


def parity_mesh(n: int = 8, bandwidth_gbps: float = 25.0, same_parity_links: int = 6, other_links: int = 5,
                latency_us: float = NVLINK_LATENCY_US, *, kind: str = "infinity_fabric",
                name: str = "amd-mesh") -> Topology:
    """Every GPU pair joined, by ``same_parity_links`` links where both indices are even or both
    odd and ``other_links`` otherwise: the uneven link counts of AMD boards whose xGMI bundles
    differ (8 GPUs: 38 links of 25 GB/s per GPU); see :func:`ring`.

    >>> parity_mesh().gpu_bandwidth_gbps(0)
    950.0
    """
    n = positive_count(n, 2, "parity_mesh", "GPUs")
    _check_kind(kind)
    t = _gpus(name, n, f"{n} GPUs, {same_parity_links} or {other_links} x {bandwidth_gbps} GB/s per pair by parity")
    for i in range(n):
        for j in range(i + 1, n):
            _link(t, i, j, kind, same_parity_links if (i + j) % 2 == 0 else other_links, bandwidth_gbps, latency_us)
    return t


def torus(x: int, y: int, bandwidth_gbps: float = 25.0, links: int = 1,
          latency_us: float = NVLINK_LATENCY_US, *, kind: str = "nvlink",
          pcie_gbps: float | None = None) -> Topology:
    """2-D torus of ``x * y`` GPUs; GPU (a, b) has rank ``a * y + b``.

    Each dimension is a ring (wrap-around edge included when its size is >= 3; a size-2
    dimension gets one edge, a size-1 dimension none).

    >>> t = torus(3, 3)
    >>> sorted(j for j in range(9) if t.nvlink_count(0, j))
    [1, 2, 3, 6]
    """
    x, y = positive_count(x, 1, "torus x", "GPUs"), positive_count(y, 1, "torus y", "GPUs")
    if x * y < 2:
        raise TopologyError(f"torus: need at least 2 GPUs, got {x}x{y}")
    _check_kind(kind)
    t = _gpus(f"torus{x}x{y}", x * y, f"{x}x{y} torus, {links} x {bandwidth_gbps} GB/s per edge")
    for a in range(x):
        for b in range(y):
            r = a * y + b
            if y > 1 and (b + 1 < y or y > 2):
                _link(t, r, a * y + (b + 1) % y, kind, links, bandwidth_gbps, latency_us)
            if x > 1 and (a + 1 < x or x > 2):
                _link(t, r, ((a + 1) % x) * y + b, kind, links, bandwidth_gbps, latency_us)
    return _maybe_pcie(t, pcie_gbps)


def hub_and_spoke(n: int, bandwidth_gbps: float = 25.0, links: int = 1,
                  latency_us: float = NVSWITCH_LATENCY_US, *, pcie_gbps: float | None = None) -> Topology:
    """``n`` GPUs each joined to one NVSwitch (``nvswitch0``) by ``links`` NVLinks (SCCL's
    HubAndSpoke).  ``latency_us`` is per GPU<->switch edge.

    >>> t = hub_and_spoke(8, links=6)
    >>> t.smi_label(0, 5), t.path_class(0, 5), t.gpu_bandwidth_gbps(0)
    ('NV6', 'NVL', 150.0)
    """
    n = positive_count(n, 2, "hub_and_spoke", "GPUs")
    t = _gpus(f"hub{n}", n, f"{n} GPUs on one NVSwitch, {links} x {bandwidth_gbps} GB/s each")
    t.add_node("nvswitch0", "nvswitch")
    for i in range(n):
        t.add_link(f"gpu{i}", "nvswitch0", kind="nvlink", links=links,
                   bandwidth_gbps=links * bandwidth_gbps, latency_us=latency_us)
    return _maybe_pcie(t, pcie_gbps)


def add_pcie_tree(t: Topology, sockets: Sequence[Sequence[TreeSpec]], *, pcie_gbps: float,
                  inter_socket_gbps: float, cpu_attrs: Sequence[dict] | None = None,
                  inter_socket_links: int = 1) -> None:
    """Add CPUs, host bridges and PCIe switches above existing GPU/NIC nodes.

    ``sockets[s]`` lists the host bridges of CPU ``cpu{s}``; each host bridge is a list of
    items hung directly under it: a node id (an endpoint on a root port) or a nested list
    (a PCIe switch holding its own items).  Every PCIe edge carries ``pcie_gbps`` (a x16
    link); each host bridge joins its CPU by a ``cpu`` edge of the same speed; consecutive
    sockets are joined by a ``cpu`` edge of ``inter_socket_gbps`` (QPI/UPI/xGMI).  New nodes
    are ``cpu{s}``, ``hb{k}``, ``pcie{k}`` numbered depth first after existing ones.

    Examples
    --------
    >>> t = fully_connected(4)
    >>> add_pcie_tree(t, [[[["gpu0", "gpu1"]]], [[["gpu2", "gpu3"]]]], pcie_gbps=31.5,
    ...               inter_socket_gbps=62.4)
    >>> t.pcie_class("gpu0", "gpu1"), t.pcie_class("gpu0", "gpu2")
    ('PIX', 'SYS')
    """
    counters = {"hb": len(t.nodes_of_kind("host_bridge")), "pcie": len(t.nodes_of_kind("pcie_switch"))}

    def new(prefix: str, kind: str, **attrs) -> str:
        node = f"{prefix}{counters[prefix]}"
        counters[prefix] += 1
        return t.add_node(node, kind, **attrs)

    def hang(parent: str, items: TreeSpec) -> None:
        for item in items:
            child = item if isinstance(item, str) else new("pcie", "pcie_switch")
            t.add_link(child, parent, kind="pcie", bandwidth_gbps=pcie_gbps, latency_us=PCIE_LATENCY_US)
            if not isinstance(item, str):
                hang(child, item)

    first_cpu = len(t.nodes_of_kind("cpu"))
    cpus = []
    for s, bridges in enumerate(sockets):
        attrs = dict(cpu_attrs[s]) if cpu_attrs else {"numa_node": s}
        cpu = t.add_node(f"cpu{first_cpu + s}", "cpu", **attrs)
        if cpus and inter_socket_gbps > 0:
            t.add_link(cpus[-1], cpu, kind="cpu", links=inter_socket_links,
                       bandwidth_gbps=inter_socket_gbps, latency_us=CPU_LATENCY_US)
        cpus.append(cpu)
        for items in bridges:
            hb = new("hb", "host_bridge", numa_node=attrs.get("numa_node", s))
            t.add_link(hb, cpu, kind="cpu", bandwidth_gbps=pcie_gbps, latency_us=CPU_LATENCY_US)
            hang(hb, items)
