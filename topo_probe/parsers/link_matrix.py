"""Matrices to topologies: the ``link-matrix`` JSON format and the builders the other parsers
and probes share (NVLink counts -> links or NVSwitches; PCIe classes -> a PCIe tree).

``link-matrix`` document::

    {"format": "link-matrix", "name": "dgx1", "link_kind": "nvlink",
     "links": [[0, 2, 1, ...], ...], "link_bandwidth_gbps": 25.0, "link_latency_us": 0.7}

``links[i][j]`` is the number of links from GPU i to GPU j (diagonal 0); each edge carries
``links[i][j] * link_bandwidth_gbps`` GB/s per direction.  The matrix is taken literally: no
NVSwitch is inferred and no PCIe tree is added.  For NCCL's side, GPUs with no NVLink path of at
most two hops are assumed ``PHB`` apart (:mod:`topo_probe.topology.host_assumption`); the
optional field ``"host_path_class"`` (``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``) says otherwise.

>>> t = parse_link_matrix({"format": "link-matrix", "links": [[0, 2], [2, 0]],
...                        "link_bandwidth_gbps": 25.0, "link_latency_us": 0.7})
>>> t.smi_label(0, 1), t.gpu_bandwidth_gbps(0)
('NV2', 50.0)
"""

from __future__ import annotations

from typing import Sequence

from topo_probe.errors import TopologyError, show
from topo_probe.limits import (MAX_BANDWIDTH_GBPS, MAX_EDGES, MAX_GPUS, MAX_LATENCY_US, MAX_LINKS_PER_EDGE,
                               MIN_BANDWIDTH_GBPS)
from topo_probe.machines.generators import NVLINK_LATENCY_US
from topo_probe.number_checks import check_float
from topo_probe.number_rules import is_int
from topo_probe.parsers.hardware import MAX_NVLINKS_PER_GPU
from topo_probe.parsers.pcie_classes import rank_ranges
from topo_probe.topology.checks import check_topology
from topo_probe.topology.host_assumption import set_host_path_class
from topo_probe.topology.model import GPU_LINK_KINDS, Topology

__all__ = ["parse_link_matrix", "add_nvlinks", "NVSWITCH_PLANS"]

#: NV# seen between every GPU pair -> NVLinks from each GPU to each inferred NVSwitch:
#: NV18 = H100-like (4 switches, 5+5+4+4), NV12 = A100-like (6 x 2), NV6 = DGX-2-like (6 x 1).
#: Other counts get one switch per link.
NVSWITCH_PLANS = {18: (5, 5, 4, 4), 12: (2,) * 6, 6: (1,) * 6}


# ----------------------------------------------------------------------------- link-matrix JSON
def _links(doc: dict, source: str) -> list[list[int]]:
    """``doc["links"]`` checked: square, ints in 0..MAX_LINKS_PER_EDGE, zero diagonal, bounded size."""
    links = doc.get("links")
    if not isinstance(links, list) or not links:
        raise TopologyError(f"{source}: field 'links' must be a non-empty list of rows")
    n = len(links)
    if n > MAX_GPUS:
        raise TopologyError(f"{source}: field 'links' has {n} rows, more than the {MAX_GPUS} GPUs a topology may have")
    edges = 0
    for i, row in enumerate(links):
        if not isinstance(row, list) or len(row) != n:
            got = len(row) if isinstance(row, list) else type(row).__name__
            raise TopologyError(f"{source}: links[{i}]: must be a list of {n} integers (the matrix is "
                                f"{n} x {n}), got {got}")
        for j, v in enumerate(row):
            if not is_int(v) or v < 0:
                raise TopologyError(f"{source}: links[{i}][{j}]: must be a non-negative integer, got {show(v)}")
            if v > MAX_LINKS_PER_EDGE:
                raise TopologyError(f"{source}: links[{i}][{j}]: {show(v)} links, more than the "
                                    f"{MAX_LINKS_PER_EDGE} one GPU pair can have")
            if i == j and v:
                raise TopologyError(f"{source}: links[{i}][{i}]: a GPU has no links to itself, got {v}")
            edges += v > 0
    if edges > MAX_EDGES:
        raise TopologyError(f"{source}: field 'links' joins {edges} GPU pairs, more than the {MAX_EDGES} edges "
                            f"a topology may have")
    return [[int(v) for v in row] for row in links]


def parse_link_matrix(doc: dict, *, source: str = "<json>") -> Topology:
    """Build a topology from a ``link-matrix`` document (see the module docstring).

    Parameters
    ----------
    doc : dict
        The decoded JSON.  Required: ``links`` (square list of lists of ints in
        0..:data:`~topo_probe.limits.MAX_LINKS_PER_EDGE`, zero diagonal), ``link_bandwidth_gbps``
        (GB/s per link per direction).  Optional: ``format`` (must be ``"link-matrix"`` if
        present), ``name``, ``description``, ``link_latency_us`` (default 0.7 µs per edge),
        ``link_kind`` (``"nvlink"`` or ``"infinity_fabric"``), ``host_path_class`` (see the module
        docstring).  Numbers must be finite and
        within the limits of :mod:`topo_probe.limits`.
    source : str
        Name used in error messages.

    Raises
    ------
    TopologyError
        Naming the field, e.g. ``m.json: links[2][3]: must be a non-negative integer, got -1``.
    """
    if not isinstance(doc, dict):
        raise TopologyError(f"{source}: a link-matrix document must be a JSON object, got {type(doc).__name__}")
    if doc.get("format", "link-matrix") != "link-matrix":
        raise TopologyError(f"{source}: field 'format' must be 'link-matrix', got {show(doc.get('format'))}")
    links = _links(doc, source)
    n = len(links)
    most = max(max(row) for row in links) or 1
    if "link_bandwidth_gbps" not in doc:
        raise TopologyError(f"{source}: field 'link_bandwidth_gbps' is missing (a number, GB/s)")
    gbps = check_float(doc["link_bandwidth_gbps"], f"{source}: field 'link_bandwidth_gbps'", TopologyError,
                       lo=MIN_BANDWIDTH_GBPS, hi=MAX_BANDWIDTH_GBPS / most, unit="GB/s")
    lat = check_float(doc.get("link_latency_us", NVLINK_LATENCY_US), f"{source}: field 'link_latency_us'",
                      TopologyError, lo=0.0, hi=MAX_LATENCY_US, unit="µs")
    kind = doc.get("link_kind", "nvlink")
    if kind not in GPU_LINK_KINDS:
        raise TopologyError(f"{source}: field 'link_kind' must be one of {', '.join(GPU_LINK_KINDS)}, "
                            f"got {show(kind)}")
    name = doc.get("name", "link-matrix")
    if not isinstance(name, str) or not name:
        raise TopologyError(f"{source}: field 'name' must be a non-empty string, got {show(name)}")
    desc = doc.get("description", f"link matrix from {source}")
    if not isinstance(desc, str):
        raise TopologyError(f"{source}: field 'description' must be a string, got {show(desc)}")
    t = Topology(name, description=desc)
    if "host_path_class" in doc:
        set_host_path_class(t.graph, doc["host_path_class"], f"{source}: field 'host_path_class'")
    for i in range(n):
        t.add_gpu(i, host=0)
    add_nvlinks(t, links, link_gbps=gbps, latency_us=lat, infer_nvswitch=False, kind=kind)
    return check_topology(t, source, TopologyError)


# ----------------------------------------------------------------------------- NVLink
def add_nvlinks(topo: Topology, counts: Sequence[Sequence[int]], *, link_gbps: float,
                latency_us: float = NVLINK_LATENCY_US, infer_nvswitch: bool = True,
                kind: str = "nvlink") -> list[str]:
    """Add GPU fabric links from a count matrix ``counts[i][j]`` (links GPU i -> GPU j, by rank).

    Where ``infer_nvswitch`` and a group of >= 2 GPUs shows the same NV# k between every pair
    with ``k * (peers) > 18`` links per GPU (more than any GPU has), the group is taken to sit
    behind NVSwitches (:data:`NVSWITCH_PLANS`) instead of direct links.  Returns the
    assumptions made (also fit for ``topo.assumptions``).

    >>> t = Topology("a"); _ = [t.add_gpu(i) for i in range(8)]
    >>> notes = add_nvlinks(t, [[0 if i == j else 12 for j in range(8)] for i in range(8)], link_gbps=25.0)
    >>> len(t.nodes_of_kind("nvswitch")), t.smi_label(0, 7), t.gpu_bandwidth_gbps(0)
    (6, 'NV12', 300.0)
    """
    n = len(counts)
    gpus = [topo.gpu(i) for i in range(n)]
    notes: list[str] = []
    # groups: connected components of the symmetric "has links" relation
    seen: set[int] = set()
    for start in range(n):
        if start in seen:
            continue
        comp, todo = [], [start]
        seen.add(start)
        while todo:
            i = todo.pop()
            comp.append(i)
            for j in range(n):
                if j not in seen and (counts[i][j] or counts[j][i]):
                    seen.add(j)
                    todo.append(j)
        comp.sort()
        if len(comp) < 2:
            continue
        vals = {counts[i][j] for i in comp for j in comp if i != j}
        k = next(iter(vals))
        if infer_nvswitch and len(vals) == 1 and k * (len(comp) - 1) > MAX_NVLINKS_PER_GPU:
            plan = NVSWITCH_PLANS.get(k, (1,) * k)
            first = len(topo.nodes_of_kind("nvswitch"))
            switches = []
            for s in range(len(plan)):
                sid = f"nvswitch{first + s}"
                while sid in topo.graph:
                    first += 1
                    sid = f"nvswitch{first + s}"
                switches.append(topo.add_node(sid, "nvswitch", inferred=True))
            for i in comp:
                for sw, links in zip(switches, plan):
                    topo.add_link(gpus[i], sw, kind=kind, links=links, bandwidth_gbps=links * link_gbps,
                                  latency_us=latency_us / 2)
            notes.append(f"GPUs {rank_ranges(comp)} show NV{k} to all {len(comp) - 1} peers ({k * (len(comp) - 1)} "
                         f"links each, more than the {MAX_NVLINKS_PER_GPU} any GPU has): modelled as "
                         f"{len(plan)} NVSwitches with {'+'.join(map(str, plan))} links from each GPU")
            continue
        for i in comp:
            for j in comp:
                c = counts[i][j]
                if i != j and c:
                    topo.add_link(gpus[i], gpus[j], kind=kind, links=int(c), bandwidth_gbps=c * link_gbps,
                                  latency_us=latency_us, both=False)
            total = sum(counts[i][j] for j in comp if j != i)
            if total > MAX_NVLINKS_PER_GPU and kind == "nvlink":
                notes.append(f"GPU {i} has {total} direct NVLinks (more than {MAX_NVLINKS_PER_GPU}); kept as given")
    return notes


