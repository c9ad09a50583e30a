"""The host a topology without a PCIe tree is assumed to sit in, for NCCL's side only.

A link matrix (or any topology whose GPUs are in no PCIe tree) says how GPUs are joined by
NVLink / Infinity Fabric and nothing about the host.  Synthesis never needs more: our schedules
relay through GPUs.  NCCL does: it routes GPU to GPU over NVLink only directly, through
NVSwitches or through at most one intermediate GPU (NCCL 2.30.7 ``src/graph/paths.cc``
``ncclTopoSetPaths``: a path may pass a GPU only over NVLink and only while it is one hop long,
``PATH_NVB``); every other pair goes over PCIe and the CPU, and its path class decides P2P
(``ncclTopoCheckP2p``: default P2P level ``PATH_PXB``, so ``PHB`` and farther pairs talk
through host memory).

So such pairs get a stated *host path class* (:data:`HOST_PATH_CLASSES`).  The default is
``PHB``: one host, every GPU on a root port of one CPU, which is what NCCL itself builds for
GPUs it has no PCI information for (NCCL 2.30.7 ``src/graph/xml.cc``
``ncclTopoGetXmlFromSys``: "No information on /sys, attach GPU to unknown CPU", all of them
under one ``<cpu numaid="-1">``; ``paths.cc``: a path through the CPU is ``PATH_PHB``).  The
user overrides it with the link-matrix field ``host_path_class`` or ``--host-path-class``; it is
kept in the graph's attributes (``graph.graph["host_path_class"]``), so copies and subsets keep
it, and it counts in the fingerprint only when set.

>>> import networkx as nx
>>> g = nx.DiGraph(); g.add_node("gpu0", kind="gpu", index=0)
>>> host_path_class(g), needs_host_assumption(g)
('PHB', True)
>>> set_host_path_class(g, "SYS", "--host-path-class"); host_path_class(g)
'SYS'
"""

from __future__ import annotations

import networkx as nx

from topo_probe.errors import TopologyError

__all__ = [
    "DEFAULT_HOST_PATH_CLASS",
    "GRAPH_KEY",
    "HOST_PATH_CLASSES",
    "assumed_pcie_class",
    "fingerprint_part",
    "host_assumption_line",
    "host_path_class",
    "needs_host_assumption",
    "set_host_path_class",
]

#: the classes a user may assume between GPUs without an NVLink path of at most two hops
#: (nvidia-smi / NCCL names, nearest first)
HOST_PATH_CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")
#: what NCCL builds for GPUs without PCI information (see the module docstring)
DEFAULT_HOST_PATH_CLASS = "PHB"
#: where the class is kept: ``topo.graph.graph[GRAPH_KEY]``
GRAPH_KEY = "host_path_class"

#: what each class means, as one phrase for the stated assumption
_MEANING = {"PIX": "every GPU under one PCIe switch", "PXB": "the GPUs under several PCIe switches of one CPU",
            "PHB": "every GPU on a root port of one CPU", "NODE": "the GPUs under several host bridges of one CPU",
            "SYS": "the GPUs split over two CPU sockets"}
#: P2P at each class under NCCL's default P2P level PXB (paths.cc ncclTopoCheckP2p)
_P2P = {"PIX": "P2P", "PXB": "P2P", "PHB": "no P2P (host memory)", "NODE": "no P2P (host memory)",
        "SYS": "no P2P (host memory)"}
_TREE_KINDS = ("pcie_switch", "host_bridge", "cpu")


def host_path_class(graph: nx.DiGraph) -> str:
    """The assumed class of ``graph`` (the user's, else :data:`DEFAULT_HOST_PATH_CLASS`)."""
    return graph.graph.get(GRAPH_KEY) or DEFAULT_HOST_PATH_CLASS


def set_host_path_class(graph: nx.DiGraph, cls: str, where: str) -> None:
    """Set the assumed class; ``where`` (a file field or a flag) names it in the error.

    Raises
    ------
    TopologyError
        ``cls`` is not one of :data:`HOST_PATH_CLASSES`.
    """
    if not isinstance(cls, str) or cls.upper() not in HOST_PATH_CLASSES:
        shown = repr(cls) if isinstance(cls, str) else type(cls).__name__
        raise TopologyError(f"{where}: host path class must be one of {', '.join(HOST_PATH_CLASSES)}, got {shown}")
    graph.graph[GRAPH_KEY] = cls.upper()


def _without_pcie(graph: nx.DiGraph, node: str) -> bool:
    """No link to a PCIe switch, host bridge or CPU (a NIC hung on the GPU itself does not count)."""
    return not any(graph.nodes[v]["kind"] in _TREE_KINDS for v in graph.successors(node))


def needs_host_assumption(graph: nx.DiGraph) -> bool:
    """True when some GPU is in no PCIe tree (no link to a PCIe switch, host bridge or CPU)."""
    return any(d["kind"] == "gpu" and _without_pcie(graph, n) for n, d in graph.nodes(data=True))


def assumed_pcie_class(graph: nx.DiGraph, a: str, b: str) -> str:
    """The class of two endpoints of one host that no PCIe path joins: the assumed class when
    either is in no PCIe tree.

    Raises
    ------
    TopologyError
        Both are in PCIe trees that do not meet (a broken topology, not a missing host).
    """
    if _without_pcie(graph, a) or _without_pcie(graph, b):
        return host_path_class(graph)
    raise TopologyError(f"{a} and {b} are not connected by PCIe")


def fingerprint_part(graph: nx.DiGraph) -> list:
    """What the class adds to a fingerprint: nothing unless the user set one."""
    cls = graph.graph.get(GRAPH_KEY)
    return [["host_path_class", cls]] if cls else []


def host_assumption_line(topo) -> str | None:
    """One line naming the host assumed for NCCL's side of ``topo`` (a
    :class:`~topo_probe.topology.model.Topology`), or None when every GPU is in a PCIe tree.
    Counts the GPU pairs it applies to on up to 64 GPUs."""
    g = topo.graph
    if not needs_host_assumption(g):
        return None
    cls = host_path_class(g)
    n = topo.num_gpus
    used = ""
    if n <= 64:
        far = sum(1 for i, j in topo.gpu_pairs() if i < j and topo.host_of(i) == topo.host_of(j)
                  and topo.path_class(i, j) == cls and not topo.pcie_paths(i, j))
        used = f"; it applies to {far} of {n * (n - 1) // 2} GPU pairs"
    source = "set by the user" if g.graph.get(GRAPH_KEY) else "default: what NCCL builds for GPUs without PCI information"
    return (f"for NCCL's side only (synthesis does not use it): no PCIe tree given, so GPUs with no "
            f"NVLink path of at most 2 hops are {cls}, {_MEANING[cls]}, {_P2P[cls]} ({source}; "
            f"override: link-matrix field \"host_path_class\" or --host-path-class){used}")
