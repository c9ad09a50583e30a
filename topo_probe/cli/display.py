"""Plain-text views of a Topology: the ``nvidia-smi topo -m`` matrix, pair bandwidths, P2P/GDR.

>>> from topo_probe.machines.presets import get_preset
>>> t = get_preset("dgx1-v100")
>>> print(smi_matrix(t).splitlines()[1])
GPU0  X     NV2   NV1   NV1   NV2   SYS   SYS   SYS   PIX   NODE  SYS   SYS   0-19,40-59    0
>>> pair_bandwidth_gbps(t, 0, 1), pair_bandwidth_gbps(t, 0, 5)
(50.0, 15.75)
"""

from __future__ import annotations

import re

from collections import defaultdict, deque

from topo_probe.errors import TopologyError
from topo_probe.topology.host_assumption import host_assumption_line
from topo_probe.topology.model import Topology

LEGEND = """Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks (or Infinity Fabric links)
  NET  = Connection between different hosts (through the network)
  -    = No path of this kind"""


def _label(fn, *args) -> str:
    try:
        return fn(*args)
    except TopologyError:
        return "-"


def nearest_cpu(topo: Topology, node: str) -> str | None:
    """The CPU node closest to ``node`` over PCIe/CPU edges (``None`` if it has none)."""
    seen, queue = {node}, deque([node])
    while queue:
        u = queue.popleft()
        for v in sorted(topo.graph.successors(u)):
            if v in seen or topo.graph.edges[u, v]["kind"] not in ("pcie", "cpu"):
                continue
            if topo.kind(v) == "cpu":
                return v
            if topo.kind(v) in ("pcie_switch", "host_bridge"):
                seen.add(v)
                queue.append(v)
    return None


def _table(rows: list[list[str]]) -> str:
    """Left-aligned columns; the last two (CPU and NUMA affinity) sized to their contents."""
    width = max(6, max((len(c) for r in rows for c in r[:-2]), default=0) + 2)
    aff = max(14, max(len(r[-2]) for r in rows) + 2)
    return "\n".join(("".join(c.ljust(width) for c in r[:-2]) + r[-2].ljust(aff) + r[-1]).rstrip()
                     for r in rows)


#: NICs the matrix shows as columns; beyond this the NIC columns follow in blocks of this many
NIC_COLUMNS = 12


def _natural(name: str) -> tuple:
    """Sort key reading digit runs as numbers: nic2 before nic10."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(name)))


def sorted_nics(topo: Topology, gpus: int | None = None) -> list[str]:
    """The NICs in host, then natural name order (``nic2`` before ``nic10``); with ``gpus``,
    only those on the hosts of GPUs ``0 .. gpus-1``."""
    nics = topo.nodes_of_kind("nic")
    if gpus is not None and gpus < topo.num_gpus:
        hosts = {topo.host_of(i) for i in range(gpus)}
        nics = [n for n in nics if topo.graph.nodes[n].get("host", 0) in hosts]
    return sorted(nics, key=lambda n: (topo.graph.nodes[n].get("host", 0), _natural(n)))


#: Most GPUs the matrices show (beyond this the first ones): a matrix of 1,024 GPUs (a 128-host cluster,
#: ``torus:32x32``) is a million pairs, each with its routes and PCIe class, and no one reads it.
SHOWN_GPUS = 128


def smi_matrix(topo: Topology, gpus: int | None = None) -> str:
    """An ``nvidia-smi topo -m`` style matrix: GPU and NIC rows/columns, CPU and NUMA affinity,
    then the legend (and a NIC legend when there are NICs).  With more than
    :data:`NIC_COLUMNS` NICs the NIC columns move to blocks of that many below the matrix, so
    no line grows with the NIC count.  ``gpus``: only GPUs ``0 .. gpus-1`` and their hosts' NICs."""
    gpus, nics = topo.gpus[:gpus], sorted_nics(topo, gpus)
    wide = len(nics) > NIC_COLUMNS
    shown = [] if wide else nics
    names = [f"GPU{topo.graph.nodes[g]['index']}" for g in gpus] + [f"NIC{k}" for k in range(len(shown))]
    rows = [[""] + names + ["CPU Affinity", "NUMA Affinity"]]
    for a in gpus:
        i = topo.graph.nodes[a]["index"]
        cells = [_label(topo.smi_label, i, topo.graph.nodes[b]["index"]) for b in gpus]
        cells += [_label(topo.pcie_class, a, n) for n in shown]
        cpu = nearest_cpu(topo, a)
        aff = str(topo.graph.nodes[cpu].get("affinity", "N/A")) if cpu else "N/A"
        numa = topo.graph.nodes[a].get("numa_node")
        if numa is None and cpu:
            numa = topo.graph.nodes[cpu].get("numa_node")
        rows.append([f"GPU{i}"] + cells + [aff, "N/A" if numa is None else str(numa)])
    for k, a in enumerate(shown):
        cells = [_label(topo.pcie_class, a, b) for b in gpus]
        cells += ["X" if a == b else _label(topo.pcie_class, a, b) for b in shown]
        rows.append([f"NIC{k}"] + cells + ["", ""])
    text = _table(rows)
    if wide:
        text += "\n\n" + _nic_blocks(topo, gpus, nics)
    text += "\n\n" + LEGEND
    if nics:
        hosts = {topo.graph.nodes[n].get("host", 0) for n in nics}

        def where(n: str) -> str:
            return f"host {topo.graph.nodes[n].get('host', 0)} " if len(hosts) > 1 else ""
        text += "\n\nNIC Legend:\n\n" + "\n".join(
            f"  NIC{k}: {where(n)}{topo.graph.nodes[n].get('name', n)}" for k, n in enumerate(nics))
    return text


def _nic_blocks(topo: Topology, gpus: list[str], nics: list[str]) -> str:
    """GPU and NIC rows against NIC columns, :data:`NIC_COLUMNS` columns per block.  Each row's cells are
    found once, row by row (one PCIe search per row, not one per row and block), then cut into blocks."""
    names = [f"GPU{topo.graph.nodes[a]['index']}" for a in gpus] + [f"NIC{k}" for k in range(len(nics))]
    cells = [[_label(topo.pcie_class, a, n) for n in nics] for a in gpus]
    cells += [["X" if a == b else _label(topo.pcie_class, a, b) for b in nics] for a in nics]
    blocks = []
    for lo in range(0, len(nics), NIC_COLUMNS):
        hi = min(lo + NIC_COLUMNS, len(nics))
        rows = [[""] + [f"NIC{k}" for k in range(lo, hi)] + ["", ""]]
        rows += [[name] + row[lo:hi] + ["", ""] for name, row in zip(names, cells)]
        blocks.append(f"NIC{lo}-NIC{hi - 1}:\n" + _table(rows))
    return "\n\n".join(blocks)


def pair_bandwidth_gbps(topo: Topology, i: int, j: int) -> float:
    """GB/s per direction GPU i -> GPU j gets when it is the only traffic: the minimum over the
    edges of its routes of ``bandwidth / (share of the traffic crossing the edge)``; 0 if none."""
    load: dict[tuple[str, str], float] = defaultdict(float)
    for path, frac in topo.routes(i, j):
        for u, v in zip(path, path[1:]):
            load[(u, v)] += frac
    if not load:
        return 0.0
    return min(topo.graph.edges[e]["bandwidth_gbps"] / f for e, f in load.items())


def bandwidth_matrix(topo: Topology, gpus: int | None = None) -> list[list[float]]:
    """``m[i][j]`` = :func:`pair_bandwidth_gbps` (GB/s per direction); 0 on the diagonal; GPUs
    ``0 .. gpus-1`` (all without ``gpus``)."""
    n = topo.num_gpus if gpus is None else min(gpus, topo.num_gpus)
    return [[0.0 if i == j else pair_bandwidth_gbps(topo, i, j) for j in range(n)] for i in range(n)]


def _num(x: float) -> str:
    """``50.0``, ``15.75``: two decimals at most, one at least."""
    s = f"{x:.2f}".rstrip("0")
    return s + "0" if s.endswith(".") else s


def format_bandwidth_matrix(topo: Topology, gpus: int | None = None) -> str:
    """:func:`bandwidth_matrix` as text, one row per sending GPU."""
    m = bandwidth_matrix(topo, gpus)
    n = len(m)
    cells = [["X" if i == j else _num(m[i][j]) for j in range(n)] for i in range(n)]
    width = max(7, max((len(c) for r in cells for c in r), default=1) + 2)
    lines = ["Pair bandwidth (GB/s per direction, each pair alone):",
             ("".ljust(7) + "".join(f"GPU{j}".ljust(width) for j in range(n))).rstrip()]
    lines += [f"GPU{i}".ljust(7) + "".join(c.ljust(width) for c in r).rstrip() for i, r in enumerate(cells)]
    return "\n".join(lines)


def _wrapped(first: str, words: list[str], width: int = 100) -> list[str]:
    """``first`` then ``words``, folded at ``width`` characters with a hanging indent."""
    lines, cur = [], first
    for w in words:
        if len(cur) + len(w) + 1 > width and cur.strip() != first.strip():
            lines.append(cur.rstrip())
            cur = " " * len(first)
        cur += w + " "
    return lines + [cur.rstrip()]


def p2p_gdr_summary(topo: Topology, gpus: int | None = None) -> str:
    """P2P read/write per ordered GPU pair (grouped by reason) and GPUDirect RDMA per GPU
    (GPUs ``0 .. gpus-1`` and their hosts' NICs with ``gpus``)."""
    n = topo.num_gpus if gpus is None else min(gpus, topo.num_gpus)
    ok, why = 0, defaultdict(set)
    for i, j in ((i, j) for i in range(n) for j in range(n) if i != j):
        cap = topo.p2p(i, j)
        if cap.supported:
            ok += 1
        else:
            why[cap.reason or "not supported"].add((min(i, j), max(i, j)))
    lines = [f"P2P read/write: {ok} of {n * (n - 1)} ordered GPU pairs"]
    for reason, pairs in sorted(why.items()):
        lines += _wrapped(f"  no P2P ({reason}): ", [f"{a}-{b}" for a, b in sorted(pairs)])
    nics = sorted_nics(topo, n)
    if not nics:
        lines.append("GPUDirect RDMA: no NICs")
        return "\n".join(lines)
    lines.append("GPUDirect RDMA (NCCL default level PXB):")
    for i in range(n):
        good, reasons = [], []
        for k, nic in enumerate(nics):
            try:
                sup, reason = topo.gdr(i, nic)
            except TopologyError as exc:
                sup, reason = False, str(exc)
            name = topo.graph.nodes[nic].get("name", nic)
            if sup:
                good.append(f"NIC{k} ({name}, {_label(topo.pcie_class, topo.gpu(i), nic)})")
            elif topo.host_of(i) == topo.graph.nodes[nic].get("host", 0):
                reasons.append(reason)
        if good:
            lines.append(f"  GPU{i}: " + ", ".join(good))
        else:
            lines.append(f"  GPU{i}: none ({reasons[0] if reasons else 'no NIC on its host'})")
    return "\n".join(lines)


def render(topo: Topology) -> str:
    """The full report ``topo-probe`` prints: header, topology matrix, bandwidths, P2P/GDR."""
    head = [f"Topology {topo.name}: {topo.num_gpus} GPUs, fingerprint {topo.fingerprint()}"]
    head += [f"  assumption: {a}" for a in topo.assumptions]
    host = host_assumption_line(topo)
    head += [f"  host assumption {host}"] if host else []
    k = min(topo.num_gpus, SHOWN_GPUS)
    if k < topo.num_gpus:
        head.append(f"  shown below: GPUs 0-{k - 1} of {topo.num_gpus} and their hosts' NICs (--format json "
                    f"or --json OUT gives the whole topology)")
    return "\n\n".join(["\n".join(head), smi_matrix(topo, k), format_bandwidth_matrix(topo, k),
                        p2p_gdr_summary(topo, k)])
