"""Exact values NCCL's topology format cannot carry: the ``<topocoll>`` extension block.

NCCL's XML has no field for a link's latency, a CPU-to-CPU bandwidth, a PCIe bandwidth that
is no generation x width, or the network switches of a cluster.  So that a file written by
``topo-probe --nccl-xml`` reads back to the very topology (same fingerprint), the writer
appends, under ``<system>``, the differences between what the NCCL elements alone would give
and the real topology (``unnode`` removes what the writer had to make up, such as a CPU for
GPUs that have no PCIe path)::

    <topocoll version="1">
      <node id="netswitch0" kind="net_switch" host="0"/>
      <link a="cpu0" b="cpu1" kind="cpu" links="4" gbps="128.0" latency_us="0.5"/>
      <unlink a="hb0" b="cpu0"/>
      <unnode id="cpu0"/>
      <host path_class="SYS"/>
    </topocoll>

(``<host path_class>``: the class assumed for NCCL's side between GPUs without a PCIe tree, when
the user set one, :mod:`topo_probe.topology.host_assumption`.)

NCCL and RCCL skip elements they do not know (``xmlLoadSub``: "Ignoring element"), so the file
stays a valid ``NCCL_TOPO_FILE``.  The reader applies the block after the NCCL elements;
entries naming nodes the file does not have (say, after a hand edit) are skipped and noted.
"""

from __future__ import annotations

from topo_probe.errors import TopologyError
from topo_probe.limits import MAX_LATENCY_US
from topo_probe.parsers.nccl_xml_tree import El, attr, attr_float, attr_int
from topo_probe.topology.checks import edge_limits
from topo_probe.topology.host_assumption import GRAPH_KEY, set_host_path_class
from topo_probe.topology.model import LINK_KINDS, NODE_KINDS, Topology

TAG = "topocoll"
# The widest edge any kind may have: a network edge's (a cluster's leaf uplink); check_topology, after the file is
# read, holds each edge to its own kind's limits (topo_probe.topology.checks.edge_limits: a network edge's GB/s
# per port).
MAX_LINKS, _LEAST_GBPS_PER_LINK, _MOST_GBPS_PER_LINK = edge_limits("network")
MIN_GBPS, MAX_GBPS = _LEAST_GBPS_PER_LINK, _MOST_GBPS_PER_LINK * MAX_LINKS


def apply_exact(t: Topology, block: El, source: str) -> None:
    """Apply a ``<topocoll>`` block to ``t`` (see the module docstring)."""
    skipped = 0
    for el in block.children:
        if el.tag == "unnode":
            node = attr(el, "id", source)
            if node in t.graph and t.graph.nodes[node]["kind"] != "gpu":
                t.graph.remove_node(node)
        elif el.tag == "host":
            set_host_path_class(t.graph, attr(el, "path_class", source), f"{source}:line {el.line} <host path_class>")
        elif el.tag == "node":
            node, kind = attr(el, "id", source), attr(el, "kind", source)
            if kind not in NODE_KINDS or kind == "gpu":
                raise TopologyError(f"{source}:line {el.line} column {el.col}: <node kind={kind[:40]!r}> is not a "
                                    f"non-GPU node kind ({', '.join(k for k in NODE_KINDS if k != 'gpu')})")
            if node not in t.graph:
                t.add_node(node, kind, host=attr_int(el, "host", source, -1, 1 << 20, 0))
        elif el.tag in ("link", "unlink"):
            a, b = attr(el, "a", source), attr(el, "b", source)
            if a not in t.graph or b not in t.graph or a == b:
                skipped += 1
                continue
            if el.tag == "unlink":
                if t.graph.has_edge(a, b):
                    t.graph.remove_edge(a, b)
                continue
            kind = attr(el, "kind", source)
            if kind not in LINK_KINDS:
                raise TopologyError(f"{source}:line {el.line} column {el.col}: <link kind={kind[:40]!r}> is not one "
                                    f"of {', '.join(LINK_KINDS)}")
            t.graph.add_edge(a, b, kind=kind, links=attr_int(el, "links", source, 1, MAX_LINKS),
                             bandwidth_gbps=attr_float(el, "gbps", source, MIN_GBPS, MAX_GBPS),
                             latency_us=attr_float(el, "latency_us", source, 0.0, MAX_LATENCY_US))
    if skipped:
        t.assumptions.append(f"{skipped} exact-value entries of the <{TAG}> block name nodes this file does "
                             f"not have: skipped")


def _fmt(x: float) -> str:
    return repr(float(x))


def exact_block(original: Topology, imported: Topology) -> list[str]:
    """The ``<topocoll>`` lines (2-space indent under ``<system>``) that turn ``imported`` (what
    the NCCL elements give) into ``original``; empty when nothing differs."""
    out: list[str] = []
    for n, d in sorted(original.graph.nodes(data=True)):
        if n not in imported.graph and d["kind"] != "gpu":
            out.append(f'    <node id="{n}" kind="{d["kind"]}" host="{int(d.get("host", 0) or 0)}"/>')
    for u, v, d in sorted(original.graph.edges(data=True)):
        e = imported.graph.edges[u, v] if imported.graph.has_edge(u, v) else None
        keys = ("kind", "links", "bandwidth_gbps", "latency_us")
        if e is None or any(e[k] != d[k] for k in keys):
            out.append(f'    <link a="{u}" b="{v}" kind="{d["kind"]}" links="{int(d["links"])}" '
                       f'gbps="{_fmt(d["bandwidth_gbps"])}" latency_us="{_fmt(d["latency_us"])}"/>')
    for u, v in sorted(imported.graph.edges()):
        if not original.graph.has_edge(u, v) and u in original.graph and v in original.graph:
            out.append(f'    <unlink a="{u}" b="{v}"/>')
    for n, d in sorted(imported.graph.nodes(data=True)):
        if n not in original.graph and d["kind"] != "gpu":
            out.append(f'    <unnode id="{n}"/>')
    if original.graph.graph.get(GRAPH_KEY):
        out.append(f'    <host path_class="{original.graph.graph[GRAPH_KEY]}"/>')
    return [f'  <{TAG} version="1">'] + out + [f"  </{TAG}>"] if out else []
