"""Generator specs: short names for synthetic machines on the command line (``ring:8``, ``full:16``,
``torus:4x4``, ``hub:8``, ``line:4``, ``pcie:8``).

Grammar: ``KIND:SIZE[@GBPS][/LINKS]`` where SIZE is ``N`` (``NxM`` for a torus), GBPS the
bandwidth per link per direction (GB/s; default 25 for NVLink-style links, the PCIe x16 Gen4 rate
31.5 for ``pcie``) and LINKS the links bundled per edge (default 1).

========  ====================================================================================
kind      machine
========  ====================================================================================
ring      :func:`~topo_probe.machines.generators.ring` of N GPUs
line      :func:`~topo_probe.machines.generators.line` of N GPUs
full      :func:`~topo_probe.machines.generators.fully_connected`: every pair joined directly
torus     :func:`~topo_probe.machines.generators.torus` of N x M GPUs
hub       :func:`~topo_probe.machines.generators.hub_and_spoke`: N GPUs on one NVSwitch
xgmi      fully connected by AMD Infinity Fabric (xGMI) links, 64 GB/s by default (MI300X)
pcie      :func:`pcie_box`: N GPUs on PCIe only, 4 per switch, switches split over 2 sockets
========  ====================================================================================

Every kind except ``pcie`` also hangs its GPUs under one PCIe Gen4 switch with one 200 Gb/s NIC
per GPU, so ``--nodes`` can join copies of it into a cluster.  A spec that sets GBPS or LINKS
names them in the topology's name, so ``ring:4`` and ``ring:4@50/2`` get different default
results folders (``results/ring4/``, ``results/ring4-50gbps-2links/``).

>>> t = parse_generator_spec("full:8@64")
>>> t.num_gpus, t.gpu_bandwidth_gbps(0)
(8, 448.0)
>>> parse_generator_spec("ring:4").name, parse_generator_spec("ring:4@50/2").name, parse_generator_spec("ring:4/1").name
('ring4', 'ring4-50gbps-2links', 'ring4-1links')
>>> parse_generator_spec("torus:4x4").num_gpus, parse_generator_spec("pcie:8").smi_label(0, 7)
(16, 'SYS')
>>> parse_generator_spec("xgmi:8").smi_label(0, 1)
'NV1'
>>> is_generator_spec("dgx-a100"), is_generator_spec("ring:8")
(False, True)
"""

from __future__ import annotations

import re

from topo_probe.errors import TopologyError
from topo_probe.limits import MAX_GPUS    # a spec asks for no more GPUs than any topology may have
from topo_probe.machines.generators import (
    PCIE_X16_GBPS,
    add_pcie_tree,
    fully_connected,
    hub_and_spoke,
    line,
    ring,
    torus,
)
from topo_probe.topology.model import Topology

#: NIC line rate given to generated machines (GB/s per direction): 200 Gb/s
GENERATED_NIC_GBPS = 25.0

_SPEC = re.compile(r"(?P<kind>[a-z]+):(?P<n>\d{1,5})(?:x(?P<m>\d{1,5}))?(?:@(?P<gbps>\d+(?:\.\d+)?))?"
                   r"(?:/(?P<links>\d{1,3}))?")
KINDS = ("ring", "line", "full", "xgmi", "torus", "hub", "pcie")


def is_generator_spec(text: str) -> bool:
    """Whether ``text`` looks like ``KIND:...`` with a known kind."""
    return text.split(":", 1)[0] in KINDS and ":" in text


def pcie_box(n: int, pcie_gbps: float = PCIE_X16_GBPS[4], per_switch: int = 4,
             inter_socket_gbps: float = 62.4) -> Topology:
    """``n`` GPUs joined only by PCIe: ``per_switch`` GPUs (and one NIC) per switch, switches
    split over two sockets (one when ``n <= per_switch``) joined by a CPU link of
    ``inter_socket_gbps``.

    >>> t = pcie_box(8)
    >>> t.smi_label(0, 3), t.smi_label(0, 4), len(t.nodes_of_kind("nic"))
    ('PIX', 'SYS', 2)
    """
    if not 2 <= n <= MAX_GPUS:
        raise TopologyError(f"pcie:{n}: need 2 to {MAX_GPUS} GPUs")
    t = Topology(f"pcie{n}", description=f"{n} GPUs on PCIe ({pcie_gbps} GB/s x16), {per_switch} per switch")
    for i in range(n):
        t.add_gpu(i)
    groups = [list(range(k, min(k + per_switch, n))) for k in range(0, n, per_switch)]
    for k in range(len(groups)):
        t.add_node(f"nic{k}", "nic", name=f"mlx5_{k}", speed_gbps=GENERATED_NIC_GBPS)
    switches = [[f"gpu{i}" for i in g] + [f"nic{k}"] for k, g in enumerate(groups)]
    sockets = 2 if len(switches) > 1 else 1
    half = (len(switches) + 1) // 2
    per_socket = [switches[:half], switches[half:]] if sockets == 2 else [switches]
    add_pcie_tree(t, [[[sw for sw in sock]] for sock in per_socket], pcie_gbps=pcie_gbps,
                  inter_socket_gbps=inter_socket_gbps)
    return t


def _with_nics(t: Topology) -> Topology:
    """Hang every GPU and one NIC per GPU under one PCIe Gen4 switch (a fallback route and a
    way off the host for clusters)."""
    for i in range(t.num_gpus):
        t.add_node(f"nic{i}", "nic", name=f"mlx5_{i}", speed_gbps=GENERATED_NIC_GBPS)
    items = [g for i in range(t.num_gpus) for g in (f"gpu{i}", f"nic{i}")]
    add_pcie_tree(t, [[[items]]], pcie_gbps=PCIE_X16_GBPS[4], inter_socket_gbps=0.0)
    return t


def parse_generator_spec(text: str) -> Topology:
    """The machine a generator spec names (see the module docstring).

    Raises
    ------
    TopologyError
        Unknown kind, malformed spec, a size out of range (one line naming the spec).
    """
    m = _SPEC.fullmatch(text.strip())
    if m is None or m["kind"] not in KINDS:
        raise TopologyError(f"topology spec {text!r}: expected KIND:N[xM][@GBPS][/LINKS] with KIND one of "
                            f"{', '.join(KINDS)} (e.g. full:16, torus:4x4, ring:8@50)")
    kind, n, links = m["kind"], int(m["n"]), int(m["links"] or 1)
    size = n * int(m["m"]) if m["m"] else n
    if m["m"] and kind != "torus":
        raise TopologyError(f"topology spec {text!r}: only torus takes NxM")
    if not 2 <= size <= MAX_GPUS or links < 1:
        raise TopologyError(f"topology spec {text!r}: need 2 to {MAX_GPUS} GPUs and at least 1 link")
    gbps = float(m["gbps"]) if m["gbps"] else None
    if gbps is not None and not 0 < gbps < 1e6:
        raise TopologyError(f"topology spec {text!r}: bandwidth must be > 0 GB/s")
    if kind == "pcie":
        return pcie_box(size, gbps or PCIE_X16_GBPS[4])
    bw = gbps or (64.0 if kind == "xgmi" else 25.0)
    if kind == "xgmi":
        t = fully_connected(size, bw, links, kind="infinity_fabric")
        t.name = f"xgmi{size}"
    elif kind == "torus":
        if not m["m"]:
            raise TopologyError(f"topology spec {text!r}: a torus needs NxM, e.g. torus:4x4")
        t = torus(n, int(m["m"]), bw, links)
    else:
        build = {"ring": ring, "line": line, "full": fully_connected, "hub": hub_and_spoke}[kind]
        t = build(size, bw, links)
    if gbps is not None or m["links"]:      # two different specs never share a name (or a results folder)
        t.name += (f"-{gbps:g}gbps" if gbps is not None else "") + (f"-{links}links" if m["links"] else "")
    return _with_nics(t)


__all__ = ["parse_generator_spec", "is_generator_spec", "pcie_box", "KINDS", "GENERATED_NIC_GBPS"]
