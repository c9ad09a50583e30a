"""PCIe trees from nvidia-smi path classes (PIX/PXB/PHB/NODE/SYS): switches, host bridges and CPUs that reproduce every cell."""

from __future__ import annotations

from typing import Callable, Hashable, Sequence

from topo_probe.errors import TopologyError
from topo_probe.machines.generators import CPU_LATENCY_US, PCIE_LATENCY_US
from topo_probe.parsers.hardware import CPU_LINK_GBPS
from topo_probe.topology.model import Topology

__all__ = ["add_pcie_tree_from_classes", "set_cpu_affinity", "PCIE_CLASSES", "rank_ranges"]

#: nvidia-smi PCIe classes, nearest first.
PCIE_CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")
_RANK = {c: k for k, c in enumerate(PCIE_CLASSES)}


def rank_ranges(xs: Sequence[int]) -> str:
    """'0-3,6' for [0, 1, 2, 3, 6].

    >>> rank_ranges([0, 1, 2, 3, 6])
    '0-3,6'
    """
    out, xs = [], sorted(xs)
    start = prev = xs[0]
    for x in xs[1:] + [None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(f"{start}-{prev}" if prev > start else f"{start}")
        if x is not None:
            start = prev = x
    return ",".join(out)


# ----------------------------------------------------------------------------- PCIe tree
class _UnionFind:
    def __init__(self, items: Sequence[str]) -> None:
        self.parent = {x: x for x in items}
        self.order = {x: k for k, x in enumerate(items)}

    def find(self, x: str) -> str:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:  # keep the earliest item as the root: stable group order
            if self.order[rb] < self.order[ra]:
                ra, rb = rb, ra
            self.parent[rb] = ra

    def groups(self, items: Sequence[str]) -> list[list[str]]:
        out: dict[str, list[str]] = {}
        for x in items:
            out.setdefault(self.find(x), []).append(x)
        return list(out.values())


def _members(uf: "_UnionFind", eps, root: str) -> list[str]:
    return [e for e in eps if uf.find(e) == root]


def _sys_between(uf, eps, known, a: str, b: str) -> bool:
    ga, gb = _members(uf, eps, uf.find(a)), _members(uf, eps, uf.find(b))
    return any(known.get((x, y)) == "SYS" for x in ga for y in gb)


def _cpu_groups(eps, known, keys, locate, notes: list[str]):
    """Union endpoints that share a CPU: cells <= NODE, equal affinity keys (unless a SYS cell
    separates them: the cell wins), then (greedily) endpoints without a key whose pairs are
    hidden, unless a SYS cell forbids it.  Disagreements go to ``notes``."""
    uf = _UnionFind(eps)
    for (a, b), c in known.items():
        if _RANK[c] <= _RANK["NODE"]:
            uf.union(a, b)
    by_key: dict[Hashable, str] = {}
    split: list[str] = []
    for e in eps:
        k = keys.get(e)
        if k is None:
            continue
        if k not in by_key:
            by_key[k] = e
        elif uf.find(by_key[k]) != uf.find(e):
            if _sys_between(uf, eps, known, by_key[k], e):
                split.append(f"{by_key[k]}/{e} ({k[0]} {k[1]})")
            else:
                uf.union(by_key[k], e)

    def group_keys(root):
        return {keys[e] for e in eps if uf.find(e) == root and keys.get(e) is not None}

    merged = False
    for i, a in enumerate(eps):
        for b in eps[i + 1:]:
            if (a, b) in known or uf.find(a) == uf.find(b):
                continue
            if keys.get(a) is not None and keys.get(b) is not None:
                continue
            ra, rb = uf.find(a), uf.find(b)
            if len(group_keys(ra) | group_keys(rb)) > 1 or _sys_between(uf, eps, known, a, b):
                continue
            uf.union(a, b)
            merged = True
    if split:
        notes.append(f"SYS between endpoints that report the same NUMA/CPU affinity, read as SYS (the path "
                     f"crosses the host, as in VMs that hide the PCIe tree; the affinity is kept on the GPUs): "
                     f"{_some(split)}")
    joined = []
    for g in uf.groups(eps):
        ks = [(e, keys[e]) for e in g if keys.get(e) is not None]
        joined += [f"{ks[0][0]}/{e} ({ks[0][1][1]} vs {k[1]}, {locate(ks[0][0], e)})"
                   for e, k in ks[1:] if k != ks[0][1]]
    if joined:
        notes.append(f"PCIe cells nearer than SYS join endpoints whose NUMA/CPU affinity differs, read as one "
                     f"CPU (the cells win; NUMA node of the first): {_some(joined)}")
    return uf, merged


def _some(items: list[str], k: int = 6) -> str:
    return "; ".join(items[:k]) + (f"; and {len(items) - k} more" if len(items) > k else "")


def add_pcie_tree_from_classes(topo: Topology, endpoints: Sequence[str],
                               classes: dict[tuple[str, str], str], *,
                               numa: dict[str, int | None] | None = None,
                               affinity: dict[str, str | None] | None = None,
                               pcie_gbps: float | dict[str, float] = 15.75,
                               cpu_gbps: float = CPU_LINK_GBPS,
                               locate: Callable[[str, str], str] | None = None) -> list[str]:
    """Infer CPUs, host bridges and PCIe switches above ``endpoints`` (GPU/NIC node ids that
    already exist) from pairwise nvidia-smi classes, and add them to ``topo``.

    ``classes[(a, b)]`` is PIX, PXB, PHB, NODE or SYS for the pairs whose class is known
    (a pair joined by NVLink has none).  The groups are the finest the cells allow: PIX =
    same switch, PXB = switches under one upstream switch, PHB = same host bridge, NODE =
    host bridges of one CPU, SYS = different CPUs.  CPUs are also grouped by ``numa`` (else
    ``affinity``) of each endpoint; endpoints with neither whose pairs are all hidden share a
    CPU when no cell forbids it.  CPU nodes are ``cpu{numa}`` and get ``numa_node``;
    endpoints get ``numa_node`` too.  Each PCIe edge carries ``pcie_gbps`` (per endpoint if a
    dict); CPUs are fully meshed by ``cpu`` edges of ``cpu_gbps``.

    Contradictions are read, never refused, and said so in the returned assumptions: a SYS cell
    between endpoints of one NUMA node keeps them on separate CPUs (the cell wins: a VM hides the
    PCIe tree and SYS means "through the host"); cells nearer than SYS join endpoints of different
    NUMA nodes under one CPU; cells no tree reproduces (A PIX B, B PIX C but A SYS C) are read as
    the nearest class the other cells imply (``locate(a, b)`` names each).  Raises TopologyError
    only for a class that is not one of :data:`PCIE_CLASSES`.

    >>> t = Topology("x"); _ = [t.add_gpu(i) for i in range(3)]
    >>> _ = add_pcie_tree_from_classes(t, ["gpu0", "gpu1", "gpu2"], {("gpu0", "gpu1"): "PIX",
    ...     ("gpu0", "gpu2"): "SYS", ("gpu1", "gpu2"): "SYS"})
    >>> t.smi_label(0, 1), t.smi_label(1, 2), t.graph.nodes["gpu2"]["numa_node"]
    ('PIX', 'SYS', 1)
    """
    eps = list(endpoints)
    numa, affinity = numa or {}, affinity or {}
    locate = locate or (lambda a, b: f"{a}/{b}")
    known: dict[tuple[str, str], str] = {}
    for (a, b), c in classes.items():
        if c not in _RANK:
            raise TopologyError(f"{locate(a, b)}: PCIe class {c!r} is not one of {', '.join(PCIE_CLASSES)}")
        known[(a, b)] = known[(b, a)] = c
    keys = {e: (("numa", numa[e]) if numa.get(e) is not None else
                ("affinity", affinity[e]) if affinity.get(e) else None) for e in eps}
    notes: list[str] = []
    cpu_uf, merged = _cpu_groups(eps, known, keys, locate, notes)
    levels = []
    for t in ("PIX", "PXB", "PHB"):
        uf = _UnionFind(eps)
        for (a, b), c in known.items():
            if _RANK[c] <= _RANK[t]:
                uf.union(a, b)
        levels.append(uf)
    levels.append(cpu_uf)

    def computed(a: str, b: str) -> str:
        for k, uf in enumerate(levels):
            if uf.find(a) == uf.find(b):
                return PCIE_CLASSES[k]
        return "SYS"

    wrong = [f"{a}/{b} {c} read as {computed(a, b)} ({locate(a, b)})" for i, a in enumerate(eps)
             for b in eps[i + 1:] for c in [known.get((a, b))] if c is not None and computed(a, b) != c]
    if wrong:
        notes.append(f"cells no PCIe tree reproduces, read as the class the other cells imply: {_some(wrong)}")
    notes += _build_tree(topo, eps, levels, numa, pcie_gbps, cpu_gbps)
    hidden = [(a, b) for i, a in enumerate(eps) for b in eps[i + 1:] if (a, b) not in known]
    if hidden:
        notes.append(f"{len(hidden)} endpoint pairs have no PCIe class in the source (NVLink hides it); "
                     "they were placed on separate host bridges unless other cells join them")
    if merged:
        notes.append("endpoints without CPU/NUMA affinity were put on a CPU shared with others where no "
                     "cell forbids it")
    set_cpu_affinity(topo)
    return notes


def set_cpu_affinity(topo: Topology) -> None:
    """Give each CPU node without one an ``affinity`` (CPU list) when all GPUs on its NUMA node
    report the same ``cpu_affinity``."""
    for cpu in topo.nodes_of_kind("cpu"):
        d = topo.graph.nodes[cpu]
        if d.get("affinity") is None:
            vals = {topo.graph.nodes[g].get("cpu_affinity") for g in topo.gpus
                    if topo.graph.nodes[g].get("numa_node") == d.get("numa_node")}
            if len(vals) == 1 and None not in vals:
                d["affinity"] = vals.pop()


def _build_tree(topo, eps, levels, numa, pcie_gbps, cpu_gbps) -> list[str]:
    leaf, up, hb_uf, cpu_uf = levels
    notes: list[str] = []

    def bw(e: str) -> float:
        return float(pcie_gbps[e]) if isinstance(pcie_gbps, dict) else float(pcie_gbps)

    cpu_groups = cpu_uf.groups(eps)
    used = {numa[e] for e in eps if numa.get(e) is not None}
    ids, nxt, guessed = [], 0, []
    for g in cpu_groups:
        known_ids = sorted({numa[e] for e in g if numa.get(e) is not None})
        if known_ids:
            ids.append(known_ids[0])
            continue
        while nxt in used:
            nxt += 1
        ids.append(nxt)
        used.add(nxt)
        guessed.append(f"{nxt} ({', '.join(g)})")
    if guessed and len(cpu_groups) > 1:
        notes.append(f"NUMA node number assigned (the source gives none): {'; '.join(guessed)}")
    counters = {"hb": len(topo.nodes_of_kind("host_bridge")), "pcie": len(topo.nodes_of_kind("pcie_switch"))}

    def new(prefix: str, kind: str, **attrs) -> str:
        while f"{prefix}{counters[prefix]}" in topo.graph:
            counters[prefix] += 1
        node = topo.add_node(f"{prefix}{counters[prefix]}", kind, **attrs)
        counters[prefix] += 1
        return node

    def link(child: str, parent: str, gbps: float) -> None:
        topo.add_link(child, parent, kind="pcie", bandwidth_gbps=gbps, latency_us=PCIE_LATENCY_US)

    def switch(members: list, parent: str) -> str:
        """A new PCIe switch under ``parent``, its uplink as fast as its fastest member's."""
        sw = new("pcie", "pcie_switch")
        link(sw, parent, max(bw(e) for e in members))
        return sw

    cpus = []
    for g, nid in zip(cpu_groups, ids):
        cpu = f"cpu{nid}"
        cpu = topo.add_node(cpu if cpu not in topo.graph else f"cpu{nid}.{len(cpus)}", "cpu", numa_node=nid)
        for other in cpus:
            topo.add_link(cpu, other, kind="cpu", bandwidth_gbps=cpu_gbps, latency_us=CPU_LATENCY_US)
        cpus.append(cpu)
        for e in g:
            topo.graph.nodes[e].setdefault("numa_node", nid)
            if topo.graph.nodes[e].get("numa_node") is None:
                topo.graph.nodes[e]["numa_node"] = nid
        for hb_members in hb_uf.groups(g):
            hb = new("hb", "host_bridge", numa_node=nid)
            total = 0.0
            for up_members in up.groups(hb_members):
                total += max(bw(e) for e in up_members)
                if len(up_members) == 1:
                    link(up_members[0], hb, bw(up_members[0]))
                    continue
                usw, leaves = switch(up_members, hb), leaf.groups(up_members)     # leaf switches under it, if any
                for members in leaves if len(leaves) > 1 else [up_members]:
                    lsw = switch(members, usw) if len(leaves) > 1 else usw
                    for e in members:
                        link(e, lsw, bw(e))
            topo.add_link(hb, cpu, kind="cpu", bandwidth_gbps=total, latency_us=CPU_LATENCY_US)
    return notes
