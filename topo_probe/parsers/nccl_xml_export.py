"""Write a Topology as an NCCL topology XML (``NCCL_TOPO_FILE``); the reader is
:mod:`topo_probe.parsers.nccl_xml`, which re-exports :func:`to_nccl_xml`.

Export writes what NCCL's loader requires (cpu: numaid, arch, vendor, familyid, modelid; pci:
busid, class, link_speed, link_width; gpu: dev, sm, rank, gdr; nvlink: target, count, tclass;
net: dev, ...) in NCCL's own dump layout (2-space indent, no XML declaration, no tabs).
Extensions NCCL ignores: ``hostbridge`` on top-level ``pci`` elements (several host bridges
under one CPU, nvidia-smi's NODE), ``numa_node`` on an endpoint's ``pci`` when it differs from
its CPU's ``numaid``, and ``<nvswitch busid>`` elements under ``system`` holding
NVSwitch-to-NVSwitch ``nvlink`` children (DGX-2).
"""

from __future__ import annotations

import re

from topo_probe.parsers import PCIE_LANE_GBPS, PCIE_SPEED_STRINGS, normalize_bus_id
from topo_probe.topology.model import Topology

__all__ = ["to_nccl_xml"]

# PCI class codes in ``nvlink tclass`` (shared with the reader)
NVSWITCH_CLASS = "0x068000"
CPU_CLASS = "0x068001"


def _q(value) -> str:
    """An attribute value NCCL reads verbatim (no escapes): drop quotes/markup, <= 255 chars."""
    return re.sub(r'["<>&\n\r\t]', "_", str(value))[:255]


def _cpulist_to_mask(cpulist: str) -> str | None:
    """'0-1,40-47' -> '0000ff00,00000003'; None if not a CPU list.

    >>> _cpulist_to_mask("0-3,8")
    '0000010f'
    """
    bits = 0
    for part in str(cpulist).split(","):
        m = re.fullmatch(r"\s*(\d+)(?:-(\d+))?\s*", part)
        if not m:
            return None
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        for k in range(lo, hi + 1):
            bits |= 1 << k
    words = max(1, (bits.bit_length() + 31) // 32)
    return ",".join(f"{(bits >> (32 * w)) & 0xFFFFFFFF:08x}" for w in reversed(range(words)))


def _natural(node: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", node)]


class _Exporter:
    def __init__(self, topo: Topology, default_sm: int | None) -> None:
        from topo_probe.parsers import nvlink_gbps_for_name, sm_from_compute_capability
        self.t, self.g, self.out, self.notes = topo, topo.graph, [], []
        self.kind = lambda n: self.g.nodes[n]["kind"]
        self.sm = {}
        for n in topo.gpus:
            d = self.g.nodes[n]
            sm = sm_from_compute_capability(d.get("compute_capability")) or default_sm
            if sm is None:
                guess = nvlink_gbps_for_name(d.get("name"))
                per = [e["bandwidth_gbps"] / e["links"] for _, _, e in self.g.out_edges(n, data=True)
                       if e["kind"] == "nvlink"]
                per_link = guess[0] if guess else (per[0] if per else 25.0)
                sm = 60 if per_link <= 20 else 100 if per_link >= 50 else 80
                self._note(f"sm of GPUs without compute_capability guessed from NVLink speed (sm={sm})")
            self.sm[n] = sm
        self.bus = self._bus_ids()

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def _bus_ids(self) -> dict[str, str]:
        nodes = sorted((n for n in self.g if self.kind(n) in ("gpu", "nic", "pcie_switch", "nvswitch")), key=_natural)
        bus, owner = {}, {}
        for n in nodes:
            b = self.g.nodes[n].get("pci_bus_id")
            b = normalize_bus_id(b) if b else None
            if b and re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", b) and (
                    b not in owner or (self.kind(n) == "nic" and self.kind(owner[b]) == "nic")):
                bus[n] = b
                owner.setdefault(b, n)
        free = (f"{d:04x}:{b:02x}:00.0" for d in range(0x10000) for b in range(1, 256))
        for n in nodes:
            if n not in bus:
                b = next(free)
                while b in owner:
                    b = next(free)
                bus[n], owner[b] = b, n
        return bus

    def _tree(self):
        """cpu -> host bridges -> PCIe children (BFS over cpu/pcie edges)."""
        children: dict[str, list[str]] = {}
        seen = set()
        for cpu in sorted(self.t.nodes_of_kind("cpu"), key=_natural):
            seen.add(cpu)
            hbs = sorted({v for _, v, d in self.g.out_edges(cpu, data=True)
                          if d["kind"] == "cpu" and self.kind(v) == "host_bridge"}, key=_natural)
            children[cpu] = [h for h in hbs if h not in seen]
            todo = list(children[cpu])
            seen.update(todo)
            while todo:
                u = todo.pop(0)
                if self.kind(u) in ("gpu", "nic"):
                    continue
                kids = sorted({v for _, v, d in self.g.out_edges(u, data=True) if d["kind"] == "pcie"
                               and v not in seen and self.kind(v) in ("pcie_switch", "gpu", "nic")}, key=_natural)
                seen.update(kids)
                children[u] = kids
                todo.extend(kids)
        loose = [n for n in sorted(self.g, key=_natural) if self.kind(n) in ("gpu", "nic") and n not in seen]
        return children, loose

    def _speed(self, node: str, parent: str | None) -> tuple[str, str]:
        d = self.g.nodes[node]
        if "link_speed" in d and "link_width" in d:
            return d["link_speed"], str(d["link_width"])
        bw = self.g.edges[node, parent]["bandwidth_gbps"] if parent and self.g.has_edge(node, parent) else None
        for width in (16, 8, 4, 2, 1, 32):
            for gen, lane in PCIE_LANE_GBPS.items():
                if bw is not None and abs(lane * width - bw) < 1e-6:
                    return PCIE_SPEED_STRINGS[gen], str(width)
        self._note("PCIe links whose bandwidth is no PCIe generation x width written as Gen4 x16")
        return PCIE_SPEED_STRINGS[4], "16"

    def emit(self, text: str, depth: int) -> None:
        self.out.append("  " * depth + text)

    def run(self) -> str:
        children, loose = self._tree()
        cpus = sorted(self.t.nodes_of_kind("cpu"), key=lambda c: (self.g.nodes[c].get("host", 0), _natural(c)))
        if loose:
            self._note(f"{len(loose)} GPUs/NICs without a PCIe path placed directly under the first CPU")
            if not cpus:
                cpus = ["<none>"]
        hosts = sorted({self.g.nodes[c].get("host", 0) for c in cpus if c in self.g})
        body: list[str] = []
        self.out = body
        for k, cpu in enumerate(cpus):
            self._cpu(cpu, k, children, loose if k == 0 else [], len(hosts) > 1)
        self._switch_links(1)
        head = [f"<!-- topocoll: topology {_q(self.t.name).replace('--', '- -')} for NCCL_TOPO_FILE -->"]
        head += [f"<!-- assumption: {_q(n).replace('--', '- -')} -->" for n in self.notes]
        return "\n".join(head + ['<system version="1">'] + body + ["</system>"]) + "\n"

    def _cpu(self, cpu: str, k: int, children, loose, multi_host: bool) -> None:
        d = self.g.nodes[cpu] if cpu in self.g else {}
        numa = d.get("numa_node", k)
        attrs = {"numaid": numa if numa is not None else k}
        if multi_host:
            attrs["host_hash"] = d.get("host_hash", f"0x{d.get('host', 0) + 1:x}")
        mask = d.get("affinity_mask") or (_cpulist_to_mask(d["affinity"]) if d.get("affinity") else None)
        if mask:
            attrs["affinity"] = mask
        for key, default in (("arch", "x86_64"), ("vendor", "GenuineIntel"), ("familyid", "6"), ("modelid", "85")):
            if key not in d:
                self._note("CPU arch/vendor/familyid/modelid unknown: written as x86_64 GenuineIntel 6/85 (Skylake)")
            attrs[key] = d.get(key, default)
        self.emit("<cpu " + " ".join(f'{a}="{_q(v)}"' for a, v in attrs.items()) + ">", 1)
        self.cpu_numa = attrs["numaid"]
        hbs = children.get(cpu, [])
        for h, hb in enumerate(hbs):
            extra = {"hostbridge": str(h)} if len(hbs) > 1 else {}
            self._children(hb, children, 2, extra)
        for n in loose:
            self._endpoint(n, None, 2, {}, [n] if self.kind(n) == "nic" else None)
        self.emit("</cpu>", 1)

    def _children(self, parent: str, children, depth: int, extra: dict) -> None:
        kids = children.get(parent, [])
        nics: dict[str, list[str]] = {}
        for n in kids:
            if self.kind(n) == "nic":
                nics.setdefault(self.bus[n], []).append(n)
        done = set()
        for n in kids:
            if self.kind(n) == "nic":
                if self.bus[n] not in done:
                    done.add(self.bus[n])
                    self._endpoint(n, parent, depth, extra, nics[self.bus[n]])
            elif self.kind(n) == "gpu":
                self._endpoint(n, parent, depth, extra, None)
            else:
                speed, width = self._speed(n, parent)
                d = self.g.nodes[n]
                attrs = {"busid": self.bus[n], "class": d.get("pci_class", "0x060400"), **extra}
                attrs.update({k: d[k] for k in ("vendor", "device") if k in d})
                attrs.update({"link_speed": speed, "link_width": width})
                open_ = "<pci " + " ".join(f'{a}="{_q(v)}"' for a, v in attrs.items())
                if children.get(n):
                    self.emit(open_ + ">", depth)
                    self._children(n, children, depth + 1, {})
                    self.emit("</pci>", depth)
                else:
                    self.emit(open_ + "/>", depth)

    def _endpoint(self, n: str, parent: str | None, depth: int, extra: dict, nets: list[str] | None) -> None:
        d = self.g.nodes[n]
        speed, width = self._speed(n, parent)
        cls = d.get("pci_class", "0x020000" if nets else "0x030200")
        attrs = {"busid": self.bus[n], "class": cls, **extra}
        attrs.update({k: d[k] for k in ("vendor", "device") if k in d})
        attrs.update({"link_speed": speed, "link_width": width})
        if d.get("numa_node") is not None and d["numa_node"] != self.cpu_numa:
            attrs["numa_node"] = d["numa_node"]  # extension: endpoint NUMA differs from its CPU's
        self.emit("<pci " + " ".join(f'{a}="{_q(v)}"' for a, v in attrs.items()) + ">", depth)
        if nets:
            self.emit("<nic>", depth + 1)
            for net in nets:
                self._net(net, depth + 2)
            self.emit("</nic>", depth + 1)
        else:
            self._gpu(n, depth + 1)
        self.emit("</pci>", depth)

    def _net(self, n: str, depth: int) -> None:
        d = self.g.nodes[n]
        nics = sorted(self.t.nodes_of_kind("nic"), key=_natural)
        attrs = {"name": d.get("name", n), "dev": d.get("nccl_dev", nics.index(n))}
        if d.get("speed_gbps"):
            attrs["speed"] = int(round(float(d["speed_gbps"]) * 8000))
        attrs["port"] = d.get("port", 1)
        attrs["latency"] = d.get("latency", "0.000000")
        attrs.update({k: d[k] for k in ("guid", "maxconn") if k in d})
        attrs["gdr"] = "0" if d.get("gdr") is False else "1"
        self.emit("<net " + " ".join(f'{a}="{_q(v)}"' for a, v in attrs.items()) + "/>", depth)

    def _gpu(self, n: str, depth: int) -> None:
        d = self.g.nodes[n]
        attrs = {"dev": d.get("nccl_dev", d["index"]), "sm": self.sm[n], "rank": d["index"],
                 "gdr": "0" if d.get("gdr") is False else "1"}
        links = []
        for _, v, e in sorted(self.g.out_edges(n, data=True), key=lambda x: _natural(x[1])):
            if e["kind"] == "nvlink" and self.kind(v) in ("gpu", "nvswitch"):
                tclass = "0x030200" if self.kind(v) == "gpu" else NVSWITCH_CLASS
                links.append(f'<nvlink target="{self.bus[v]}" count="{e["links"]}" tclass="{tclass}"/>')
            elif e["kind"] not in ("pcie", "nvlink"):
                self._note(f"{e['kind']} links between GPUs cannot be written in NCCL XML: left out")
        if d.get("nvlink_cpu_links"):
            links.append(f'<nvlink target="0000:00:00.0" count="{d["nvlink_cpu_links"]}" tclass="{CPU_CLASS}"/>')
        open_ = "<gpu " + " ".join(f'{a}="{_q(v)}"' for a, v in attrs.items())
        if not links:
            self.emit(open_ + "/>", depth)
            return
        self.emit(open_ + ">", depth)
        for line in links:
            self.emit(line, depth + 1)
        self.emit("</gpu>", depth)

    def _switch_links(self, depth: int) -> None:
        for sw in sorted(self.t.nodes_of_kind("nvswitch"), key=_natural):
            links = [(v, e) for _, v, e in self.g.out_edges(sw, data=True) if self.kind(v) == "nvswitch"]
            if not links:
                continue
            self.emit(f'<nvswitch busid="{self.bus[sw]}">', depth)
            for v, e in sorted(links, key=lambda x: _natural(x[0])):
                self.emit(f'<nvlink target="{self.bus[v]}" count="{e["links"]}" tclass="{NVSWITCH_CLASS}" '
                          f'link_gbps="{e["bandwidth_gbps"] / e["links"]:g}"/>', depth + 1)
            self.emit("</nvswitch>", depth)


def to_nccl_xml(topo: Topology, *, default_sm: int | None = None) -> str:
    """Write ``topo`` as an NCCL topology XML that NCCL's loader (``NCCL_TOPO_FILE``) accepts.

    Bus ids come from ``pci_bus_id`` where present and unique, else are made up (unique);
    ``sm`` from ``compute_capability``, else ``default_sm``, else guessed from the NVLink speed;
    PCIe ``link_speed``/``link_width`` from each edge's bandwidth.  Assumptions made while
    writing are XML comments at the top.  :func:`parse_nccl_xml` of the result gives the same
    GPUs, NVLink counts, NICs, NUMA split and nvidia-smi labels.

    >>> from topo_probe.parsers.link_matrix import parse_link_matrix
    >>> t = parse_link_matrix({"links": [[0, 2], [2, 0]], "link_bandwidth_gbps": 25.0})
    >>> from topo_probe.parsers.nccl_xml import parse_nccl_xml
    >>> back = parse_nccl_xml(to_nccl_xml(t))
    >>> back.smi_label(0, 1), back.nvlink_count(1, 0)
    ('NV2', 2)
    """
    return _Exporter(topo, default_sm).run()
