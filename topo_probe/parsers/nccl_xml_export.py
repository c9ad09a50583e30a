"""Write a Topology as an NCCL topology XML (``NCCL_TOPO_FILE``); the reader is
:mod:`topo_probe.parsers.nccl_xml`, which re-exports :func:`to_nccl_xml`.

Export writes what NCCL's loader requires (cpu: numaid, arch, vendor, familyid, modelid; pci:
busid, class, link_speed, link_width; gpu: dev, sm, rank, gdr; nvlink: target, count, tclass;
net: dev, ...) in NCCL's own dump layout (2-space indent, no XML declaration, no tabs).
Extensions NCCL ignores: ``hostbridge`` on top-level ``pci`` elements (several host bridges
under one CPU, nvidia-smi's NODE), ``numa_node`` on an endpoint's ``pci`` when it differs from
its CPU's ``numaid``, ``<nvswitch busid>`` elements under ``system`` holding
NVSwitch-to-NVSwitch ``nvlink`` children (DGX-2), ``topocoll_node``/``topocoll_hb`` (our node
ids) and a ``<topocoll>`` block of the exact values NCCL has no field for
(:mod:`topo_probe.parsers.nccl_xml_exact`): the reader gets back the same topology and
fingerprint.

AMD GPUs (``infinity_fabric`` links, a ``gcn_arch``, or an AMD Instinct name) are written as
RCCL writes them: ``gcn``/``arch``/``sm`` on ``<gpu>`` and ``<xgmi target count tclass>`` per
peer.  ``sm`` of an NVIDIA GPU comes from its compute capability, else its name, else its
NVLink count (4 links: P100/sm60, 6: V100/sm70, 12: A100/sm80, 18: H100/sm90), never from a
link speed (which ``--nvlink-gbps`` may have set).
"""

from __future__ import annotations

import re

from topo_probe.errors import TopologyError, show
from topo_probe.limits import MAX_BANDWIDTH_GBPS, MIN_BANDWIDTH_GBPS
from topo_probe.number_checks import check_float
from topo_probe.parsers.hardware import (
    AMD_SM,
    PCIE_LANE_GBPS,
    PCIE_SPEED_STRINGS,
    XGMI_GBPS,
    gcn_arch,
    normalize_bus_id,
)
from topo_probe.parsers.nccl_xml_tree import CPU_CLASS, NVSWITCH_CLASS
from topo_probe.topology.model import Topology

__all__ = ["to_nccl_xml", "is_topology_xml", "XML_MARK", "CPU_CLASS", "NVSWITCH_CLASS"]

#: how every XML :func:`to_nccl_xml` writes begins (a comment naming the topology): what tells our own file
XML_MARK = "<!-- topocoll: topology "


def is_topology_xml(head: bytes) -> bool:
    """Whether a file's first bytes are an XML that :func:`to_nccl_xml` wrote (it starts with :data:`XML_MARK`).

    >>> is_topology_xml(to_nccl_xml(Topology("t")).encode()), is_topology_xml(b"<system version='1'>")
    (True, False)
    """
    return head.lstrip().startswith(XML_MARK.encode())


#: PCI class RCCL's dumps give MI300-class GPUs (processing accelerator)
AMD_GPU_CLASS = "0x120000"
#: NVLinks per GPU -> the SM generation that has that many (P100 4, V100 6, A100 12, H100 18)
_SM_BY_NVLINKS = ((4, 60), (6, 70), (12, 80), (18, 90))
#: AMD product name fragment -> gfx architecture
_AMD_BY_NAME = (("MI300", "gfx942"), ("MI325", "gfx942"), ("MI250", "gfx90a"), ("MI210", "gfx90a"),
                ("MI100", "gfx908"), ("MI50", "gfx906"), ("MI60", "gfx906"))
#: CPU name fragment -> (vendor, family, model, what) written when a CPU node has no ids of its own
_AMD_CPUS = {"EPYC 9": ("AuthenticAMD", "25", "17", "Zen 4 Genoa"),
             "EPYC 7": ("AuthenticAMD", "23", "49", "Zen 2 Rome")}
_SAFE_ID = re.compile(r"[A-Za-z0-9_.:\-\[\],]{1,200}")


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
        from topo_probe.parsers.hardware import nvlink_gbps_for_name, sm_from_compute_capability
        self.t, self.g, self.out, self.notes = topo, topo.graph, [], []
        self.kind = lambda n: self.g.nodes[n]["kind"]
        self.sm, self.amd, self.nic_dev = {}, {}, None
        for n in topo.gpus:
            d = self.g.nodes[n]
            arch = self._amd_arch(n)
            if arch:
                self.amd[n] = arch
                self.sm[n] = d.get("nccl_sm") or AMD_SM.get(arch, 0)
                continue
            sm = sm_from_compute_capability(d.get("compute_capability")) or d.get("nccl_sm") or default_sm
            if sm is None:
                guess = nvlink_gbps_for_name(d.get("name"))
                links = sum(e["links"] for _, _, e in self.g.out_edges(n, data=True) if e["kind"] == "nvlink")
                sm = next((s for k, s in _SM_BY_NVLINKS if links <= k), 100) if not guess else \
                    {20.0: 60, 50.0: 100}.get(guess[0], 80)
                self._note(f"sm of GPUs without compute_capability guessed from "
                           f"{'their name' if guess else 'their NVLink count'} (sm={sm})")
            self.sm[n] = sm
        self.bus = self._bus_ids()

    def _amd_arch(self, n: str) -> str | None:
        d = self.g.nodes[n]
        arch = gcn_arch(d.get("gcn_arch"))
        if arch:
            return arch
        name = str(d.get("name") or "").upper()
        for frag, a in _AMD_BY_NAME:
            if frag in name:
                return a
        xgmi = [e for _, _, e in self.g.out_edges(n, data=True) if e["kind"] == "infinity_fabric"]
        if not xgmi:
            return None
        per = xgmi[0]["bandwidth_gbps"] / xgmi[0]["links"]
        arch = next((a for a, g in XGMI_GBPS.items() if abs(g - per) < 1e-9), "gfx942")
        self._note(f"GPU architecture of Infinity Fabric GPUs guessed from their link speed ({arch})")
        return arch

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
        head = [f"{XML_MARK}{_q(self.t.name).replace('--', '- -')} for NCCL_TOPO_FILE -->"]
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
        name = str(d.get("name") or "")
        family = _AMD_CPUS.get(next((k for k in _AMD_CPUS if k in name), ""), ("GenuineIntel", "6", "85", "Skylake"))
        ids = (("arch", "x86_64"), ("vendor", family[0]), ("familyid", family[1]), ("modelid", family[2]))
        for key, default in ids:
            if key not in d:
                self._note(f"CPU arch/vendor/familyid/modelid unknown: written as x86_64 {family[0]} "
                           f"{family[1]}/{family[2]} ({family[3]})")
            attrs[key] = d.get(key, default)
        if cpu in self.g:
            attrs.update(self._id("topocoll_node", cpu))
        self.emit("<cpu " + " ".join(f'{a}="{_q(v)}"' for a, v in attrs.items()) + ">", 1)
        self.cpu_numa = attrs["numaid"]
        hbs = children.get(cpu, [])
        for h, hb in enumerate(hbs):
            extra = {"hostbridge": str(h)} if len(hbs) > 1 else {}
            extra.update(self._id("topocoll_hb", hb))
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
                attrs = {"busid": self.bus[n], "class": d.get("pci_class", "0x060400"), **extra,
                         **self._id("topocoll_node", n)}
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
        cls = d.get("pci_class", "0x020000" if nets else AMD_GPU_CLASS if n in self.amd else "0x030200")
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
        dev = d["nccl_dev"] if "nccl_dev" in d else self._nic_dev()[n]
        attrs = {"name": d.get("name", n), "dev": dev, **self._id("topocoll_node", n)}
        if d.get("speed_gbps") is not None:     # whole Mb/s; the loaders' range, so that the file reads back
            gbps = check_float(d["speed_gbps"], f"to_nccl_xml: NIC {show(n)}: speed_gbps", TopologyError,
                               lo=MIN_BANDWIDTH_GBPS, hi=MAX_BANDWIDTH_GBPS, unit="GB/s")
            attrs["speed"] = int(round(gbps * 8000))
        attrs["port"] = d.get("port", 1)
        attrs["latency"] = d.get("latency", "0.000000")
        attrs.update({k: d[k] for k in ("guid", "maxconn") if k in d})
        attrs["gdr"] = "0" if d.get("gdr") is False else "1"
        self.emit("<net " + " ".join(f'{a}="{_q(v)}"' for a, v in attrs.items()) + "/>", depth)

    def _nic_dev(self) -> dict[str, int]:
        """NIC node -> its place among all NICs in natural order (``dev`` of a NIC without ``nccl_dev``), worked
        out once per export: sorting the NICs again for each of them was quadratic (1,024 NICs: 1.07 M sort keys)."""
        if self.nic_dev is None:
            self.nic_dev = {n: k for k, n in enumerate(sorted(self.t.nodes_of_kind("nic"), key=_natural))}
        return self.nic_dev

    def _id(self, key: str, node: str) -> dict:
        """``{key: node}`` when the node id is safe to write (else the reader makes one up)."""
        return {key: node} if _SAFE_ID.fullmatch(node) else {}

    def _gpu(self, n: str, depth: int) -> None:
        d = self.g.nodes[n]
        attrs = {"dev": d.get("nccl_dev", d["index"]), "sm": self.sm[n]}
        if n in self.amd:
            attrs["gcn"] = self.amd[n]
            if d.get("hip_arch"):
                attrs["arch"] = d["hip_arch"]
        attrs.update({"rank": d["index"], "gdr": "0" if d.get("gdr") is False else "1", **self._id("topocoll_node", n)})
        links = []
        for _, v, e in sorted(self.g.out_edges(n, data=True), key=lambda x: _natural(x[1])):
            if e["kind"] == "nvlink" and self.kind(v) in ("gpu", "nvswitch"):
                tclass = "0x030200" if self.kind(v) == "gpu" else NVSWITCH_CLASS
                sw = self._id("topocoll_node", v) if self.kind(v) == "nvswitch" else {}
                links.append(f'<nvlink target="{self.bus[v]}" count="{e["links"]}" tclass="{tclass}"'
                             + "".join(f' {k}="{x}"' for k, x in sw.items()) + "/>")
            elif e["kind"] == "infinity_fabric" and self.kind(v) == "gpu":
                tclass = self.g.nodes[v].get("pci_class") or (AMD_GPU_CLASS if v in self.amd else "0x030200")
                links.append(f'<xgmi target="{self.bus[v]}" count="{e["links"]}" tclass="{_q(tclass)}"/>')
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
            ids = "".join(f' {k}="{x}"' for k, x in self._id("topocoll_node", sw).items())
            self.emit(f'<nvswitch busid="{self.bus[sw]}"{ids}>', depth)
            for v, e in sorted(links, key=lambda x: _natural(x[0])):
                ids = "".join(f' {k}="{x}"' for k, x in self._id("topocoll_node", v).items())
                self.emit(f'<nvlink target="{self.bus[v]}" count="{e["links"]}" tclass="{NVSWITCH_CLASS}" '
                          f'link_gbps="{e["bandwidth_gbps"] / e["links"]:g}"{ids}/>', depth + 1)
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
    text = _Exporter(topo, default_sm).run()
    if topo.num_gpus == 0:
        return text
    from topo_probe.parsers.nccl_xml import parse_nccl_xml
    from topo_probe.parsers.nccl_xml_exact import exact_block
    block = exact_block(topo, parse_nccl_xml(text, source="<export>"))
    if not block:
        return text
    head, tail = text.rsplit("</system>", 1)
    return head + "\n".join(block) + "\n</system>" + tail
