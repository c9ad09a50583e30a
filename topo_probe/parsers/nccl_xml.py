"""NCCL topology XML (``NCCL_TOPO_FILE`` / ``NCCL_TOPO_DUMP_FILE``) to and from a Topology.

Format (NCCL ``src/graph/xml.cc``, ``topo.cc``)::

    <system version="1">
      <cpu numaid="0" affinity="00ffffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
        <pci busid="0000:16:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
          <pci busid="0000:18:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16">
            <gpu dev="0" sm="90" rank="0" gdr="1">
              <nvlink target="0000:05:00.0" count="5" tclass="0x068000"/>
            </gpu>
          </pci>
          <pci busid="0000:19:00.0" class="0x020000" link_speed="32.0 GT/s PCIe" link_width="16">
            <nic><net name="mlx5_0" dev="0" speed="400000" port="1" gdr="1"/></nic>
          </pci>
        </pci>
      </cpu>
    </system>

Import: each ``cpu`` is a CPU / NUMA node (``cpu{numaid}``) with one host bridge (NCCL has none: everything under a
CPU is PHB to each other; our ``hostbridge="k"`` attribute on a top-level ``pci`` splits them, see export); each
``pci`` holding a ``gpu`` or ``nic`` is that endpoint, any other ``pci`` a PCIe switch. PCIe bandwidth =
``link_width`` x per-lane rate of ``link_speed`` (theoretical: "16.0 GT/s PCIe" x16 = Gen4 = 31.5 GB/s; NCCL assumes
24). ``nvlink`` with ``tclass="0x068000"`` targets an NVSwitch: one ``nvswitch`` node per distinct target bus id.
NVLink speed per link from the GPU's ``sm``: 60 -> 20 GB/s, 70/80/90 -> 25 (NVLink2/3/4), 100+ -> 50 (NCCL itself
assumes 20 / 20.6 / 40.1). Net ``speed`` is Mb/s; NIC ``speed_gbps`` = speed / 8000 GB/s (<= 0: NCCL's 10,000;
1..7, under the slowest NIC the loaders take, refused). GPU rank -> index (renumbered 0.. in rank order).

RCCL (AMD) dumps and models describe Infinity Fabric as ``<xgmi target=BUSID count=N tclass=...>`` under each GPU
and add ``gcn`` (``gfx942``, or an older dump's number such as ``910`` = gfx90a) and ``arch`` to ``<gpu>``: each
``xgmi`` becomes an ``infinity_fabric`` edge of ``count`` links at the architecture's speed per link
(:data:`topo_probe.parsers.XGMI_GBPS`: gfx942 64 GB/s per direction, gfx90a 50, ...); the GPU keeps ``gcn_arch``,
``hip_arch`` and its ``nccl_sm`` (AMD's ``sm`` is no CUDA compute capability).

Files written by our exporter carry ``topocoll_node``/``topocoll_hb`` attributes (node ids) and a ``<topocoll>``
block of exact values NCCL's format has no field for (:mod:`topo_probe.parsers.nccl_xml_exact`), so they read back
to the same topology and fingerprint. Hostile input is refused early (:mod:`topo_probe.parsers.nccl_xml_tree`: size,
depth, DOCTYPE/ENTITY, strict bounded numbers); a file without GPUs is an error.

Truncated input (a dump cut short, like the ``head`` of a file): by default parsed leniently: whatever elements are
complete are kept, open elements are closed at the end, a partial last tag is dropped, and a note saying where it
stopped goes to ``topo.assumptions``. NVLinks to GPUs missing from the file are dropped (noted). ``strict=True``
raises instead.

Export (:func:`topo_probe.parsers.nccl_xml_export.to_nccl_xml`) writes the same format back for ``NCCL_TOPO_FILE``.
"""

from __future__ import annotations

import re
from pathlib import PurePath

from topo_probe.errors import TopologyError
from topo_probe.machines.generators import CPU_LATENCY_US, NVLINK_LATENCY_US, NVSWITCH_LATENCY_US, PCIE_LATENCY_US
from topo_probe.parsers.hardware import (CPU_LINK_GBPS, PCIE_LANE_GBPS, XGMI_DEFAULT_GBPS, gcn_arch, normalize_bus_id,
                                         nvlink_gbps_for_sm, pcie_gen_from_speed, xgmi_gbps_for_arch)
from topo_probe.parsers.nccl_xml_exact import TAG as EXACT_TAG
from topo_probe.parsers.nccl_xml_exact import apply_exact
from topo_probe.parsers.nccl_xml_tree import (CPU_CLASS, NVSWITCH_CLASS, El, attr, attr_float, attr_int, net_speed_gbps,
                                              read_tree, walk)
from topo_probe.topology.model import Topology

#: NCCL's rate of a link inside one device, a ``<pcilink>`` between two virtual switches (v2.28.9-1 topo.h line 15)
LOC_BW_GBPS = 5000.0

__all__ = ["parse_nccl_xml"]

#: bounds of counts in the file
MAX_RANK = 1 << 20
MAX_LINKS = 64
#: node ids the reader takes from ``topocoll_node`` attributes (letters, digits and ._:-[],)
_SAFE_ID = re.compile(r"[A-Za-z0-9_.:\-\[\],]{1,200}")
_GPU_LINKS = ("nvlink", "xgmi")


class _Importer:
    def __init__(self, root: El, source: str) -> None:
        self.source, self.root = source, root
        self.t = Topology(PurePath(source).stem if not source.startswith("<") else "nccl-topo",
                          description=f"imported from NCCL topology XML {source}")
        self.counters = {"pcie": 0, "hb": 0, "nic": 0}
        self.gpu_bus: dict[tuple[int, str], str] = {}
        self.links_of: list[tuple[str, El]] = []   # (gpu node, <nvlink> or <xgmi>)
        self.switch_bus: set[str] = set()
        self.pcilinks: list[tuple[tuple[int, str], str]] = []  # ((host, switch bus id), <pcilink> target bus id)
        self.bcm: dict[tuple[int, str], tuple[str, float]] = {}  # (host, bus id) -> (switch node, uplink GB/s)
        self.pre = ""  # node id prefix "h{host}." when the file spans several hosts
        hashes = []
        for cpu in root.children:
            if cpu.tag == "cpu" and cpu.attrs.get("host_hash", "") not in hashes:
                hashes.append(cpu.attrs.get("host_hash", ""))
        self.hosts = {h: k for k, h in enumerate(hashes)}
        gpus = []
        for cpu in (c for c in root.children if c.tag == "cpu"):
            for g in walk(cpu, "gpu"):
                gpus.append((self.hosts[cpu.attrs.get("host_hash", "")], attr_int(g, "rank", source, 0, MAX_RANK), g))
        if not gpus:
            raise TopologyError(f"{source}: no <gpu> element under any <cpu>: not a GPU topology")
        self.index = {}
        for k, (h, r, g) in enumerate(sorted(gpus, key=lambda x: (x[0], x[1]))):
            if (h, r) in self.index:
                raise TopologyError(f"{source}:line {g.line} column {g.col}: GPU rank {r} appears twice")
            self.index[(h, r)] = k
        if any(k != r for (h, r), k in self.index.items()) and len(self.hosts) == 1:
            self.t.assumptions.append("GPU ranks in the file are not 0..n-1: renumbered in rank order")

    def note(self, text: str) -> None:
        if text not in self.t.assumptions:
            self.t.assumptions.append(text)

    def named(self, el: El, key: str = "topocoll_node") -> str | None:
        """The node id the writer recorded in ``key``, when it is safe and still free."""
        name = el.attrs.get(key)
        return name if name and _SAFE_ID.fullmatch(name) and name not in self.t.graph else None

    def new(self, prefix: str, kind: str, el: El | None = None, key: str = "topocoll_node", **attrs) -> str:
        node = self.named(el, key) if el is not None else None
        while node is None or node in self.t.graph:
            node = f"{self.pre}{prefix}{self.counters[prefix]}"
            self.counters[prefix] += 1
        return self.t.add_node(node, kind, **attrs)

    def run(self) -> Topology:
        if self.root.tag != "system":
            raise TopologyError(f"{self.source}:line {self.root.line} column {self.root.col}: root element is "
                                f"<{self.root.tag}>, expected <system>")
        cpus: dict[int, list[str]] = {}
        for el in self.root.children:
            if el.tag == "cpu":
                host = self.hosts[el.attrs.get("host_hash", "")]
                cpus.setdefault(host, []).append(self.cpu(el, host))
            elif el.tag == "nvswitch":
                self.switch_bus.add(normalize_bus_id(attr(el, "busid", self.source)))
        for host_cpus in cpus.values():
            for i, a in enumerate(host_cpus):
                for b in host_cpus[i + 1:]:
                    self.t.add_link(a, b, kind="cpu", bandwidth_gbps=CPU_LINK_GBPS, latency_us=CPU_LATENCY_US)
        exact = [el for el in self.root.children if el.tag == EXACT_TAG]
        if any(len(c) > 1 for c in cpus.values()) and not exact:
            self.t.assumptions.append(f"CPU-CPU links assumed {CPU_LINK_GBPS} GB/s per direction (not in the XML)")
        self.links()
        self.pci_links()
        for el in exact:
            apply_exact(self.t, el, self.source)
        return self.t

    def cpu(self, el: El, host: int) -> str:
        self.pre = f"h{host}." if len(self.hosts) > 1 else ""
        numa = attr_int(el, "numaid", self.source, -1, 1 << 16)
        node = self.named(el) or f"{self.pre}cpu{numa}"
        if node in self.t.graph:
            raise TopologyError(f"{self.source}:line {el.line} column {el.col}: a second <cpu numaid=\"{numa}\">")
        attrs = {k: el.attrs[k] for k in ("arch", "vendor", "familyid", "modelid", "host_hash") if k in el.attrs}
        if "affinity" in el.attrs:
            attrs["affinity_mask"] = el.attrs["affinity"]
            attrs["affinity"] = _mask_to_cpulist(el.attrs["affinity"])
        self.t.add_node(node, "cpu", numa_node=numa, host=host, **attrs)
        bridges: dict[str, str] = {}
        for child in el.children:
            key = child.attrs.get("hostbridge", "")
            if key not in bridges:
                bridges[key] = self.new("hb", "host_bridge", child, "topocoll_hb", numa_node=numa, host=host)
            hb = bridges[key]
            if child.tag == "pci":
                self.pci(child, hb, numa, host)
            elif child.tag == "nic":
                self.nic(child, hb, None, numa, host)
        for hb in bridges.values():
            total = sum(d["bandwidth_gbps"] for _, _, d in self.t.graph.in_edges(hb, data=True))
            self.t.add_link(hb, node, kind="cpu", bandwidth_gbps=total or CPU_LINK_GBPS, latency_us=CPU_LATENCY_US)
        return node

    def pci_gbps(self, el: El) -> float:
        if el.attrs.get("link_width") == "":    # NCCL writes "" (and link_speed="") for a device of no sysfs path
            width = 0       # (VM; v2.28.9-1 src/graph/xml.cc 611-626), read as 0, then x16 (src/graph/topo.cc 484-488)
            self.note("PCIe link width empty in some <pci> elements: x16 assumed (as NCCL does)")
        else:
            width = attr_int(el, "link_width", self.source, 0, 64, 16)
        gen = pcie_gen_from_speed(el.attrs.get("link_speed"))
        if gen is None:
            self.note("PCIe link speed missing or unknown in some <pci> elements: Gen3 assumed (as NCCL does)")
            gen = 3
        return PCIE_LANE_GBPS[gen] * (width or 16)

    def pci(self, el: El, parent: str, numa: int, host: int) -> None:
        bus = normalize_bus_id(attr(el, "busid", self.source))
        cls = attr(el, "class", self.source).lower()
        raw = {k: el.attrs[k] for k in ("link_speed", "link_width", "vendor", "device") if k in el.attrs}
        gbps = self.pci_gbps(el)
        gpus = [c for c in el.children if c.tag == "gpu"]
        nics = [c for c in el.children if c.tag == "nic"]
        if cls == NVSWITCH_CLASS:
            self.switch_bus.add(bus)
            return
        ep_numa = attr_int(el, "numa_node", self.source, -1, 1 << 16, numa)
        for g in gpus:
            self.gpu(g, bus, parent, gbps, ep_numa, host, dict(raw, pci_class=cls))
        for n in nics:
            self.nic(n, parent, (bus, gbps, raw), ep_numa, host)
        if gpus or nics:
            return
        sw = self.new("pcie", "pcie_switch", el, pci_bus_id=bus, pci_class=cls, host=host, **raw)
        self.t.add_link(sw, parent, kind="pcie", bandwidth_gbps=gbps, latency_us=PCIE_LATENCY_US)
        self.bcm[(host, bus)] = (sw, gbps)
        for c in el.children:
            if c.tag == "pcilink":
                self.pcilinks.append(((host, bus), normalize_bus_id(attr(c, "target", self.source))))
            if c.tag == "pci":
                self.pci(c, sw, numa, host)
            elif c.tag == "nic":
                self.nic(c, sw, None, numa, host)

    def pci_links(self) -> None:
        """<pcilink>: two Broadcom switches joined directly, PXB (NCCL 2.22.3+; v2.28.9-1 topo.cc 621-641), at NCCL's
        ``LOC_BW`` (topo.cc line 637, topo.h line 15): the two are virtual switches of one chip (xml.cc ``getBcmLinks``
        lines 426-445 read ``/sys/kernel/pci_switch_link/virtual_switch_links``), joined inside it, not over their
        uplinks, whose rate the dump states and the chip's does not."""
        for (host, bus), target in self.pcilinks:
            a, b = self.bcm[(host, bus)][0], self.bcm.get((host, target), (None, 0.0))[0]
            if b not in (None, a) and not self.t.graph.has_edge(a, b):
                self.t.add_link(a, b, kind="pcie", bandwidth_gbps=LOC_BW_GBPS, latency_us=PCIE_LATENCY_US)
                self.t.graph.nodes[a]["pcilink_to"] = target      # NCCL: LINK_LOC at LOC_BW (topo.cc line 637)
                self.note("<pcilink> between PCIe switches: one chip's virtual switches, at NCCL's LOC_BW 5000 GB/s")

    def gpu(self, el: El, bus: str, parent: str, gbps: float, numa: int, host: int, raw: dict) -> None:
        s = self.source
        rank, sm = attr_int(el, "rank", s, 0, MAX_RANK), attr_int(el, "sm", s, 0, 1 << 20)
        dev, gdr = attr_int(el, "dev", s, 0, MAX_RANK), attr_int(el, "gdr", s, 0, 1)
        idx = self.index[(host, rank)]
        extra = {"nccl_sm": sm}
        arch = gcn_arch(el.attrs.get("gcn"))
        if arch:  # AMD: RCCL writes the gfx architecture; its sm is no CUDA compute capability
            extra.update(vendor_name="AMD", gcn_arch=arch)
            if "arch" in el.attrs:
                extra["hip_arch"] = el.attrs["arch"][:40]
        else:
            extra["compute_capability"] = f"{sm // 10}.{sm % 10}"
        node = self.t.add_gpu(idx, self.named(el) or f"{self.pre}gpu{idx}", pci_bus_id=bus, numa_node=numa,
                              host=host, nccl_rank=rank, nccl_dev=dev, gdr=bool(gdr), **extra, **raw)
        self.t.add_link(node, parent, kind="pcie", bandwidth_gbps=gbps, latency_us=PCIE_LATENCY_US)
        self.gpu_bus[(host, bus)] = node
        for c in el.children:
            if c.tag in _GPU_LINKS:
                self.links_of.append((node, c))

    def nic(self, el: El, parent: str, pci, numa: int, host: int) -> None:
        for net in (c for c in el.children if c.tag == "net" and "dev" in c.attrs):
            attrs = {"name": net.attrs.get("name", f"net{net.attrs['dev']}")[:200], "numa_node": numa, "host": host,
                     "speed_gbps": net_speed_gbps(net, self.source),
                     "nccl_dev": attr_int(net, "dev", self.source, 0, MAX_RANK),
                     "gdr": net.attrs.get("gdr", "0") == "1"}
            attrs.update({k: net.attrs[k] for k in ("port", "guid", "maxconn", "latency") if k in net.attrs})
            if pci:
                attrs["pci_bus_id"] = pci[0]
                attrs.update(pci[2])
            node = self.new("nic", "nic", net, **attrs)
            self.t.add_link(node, parent, kind="pcie", bandwidth_gbps=pci[1] if pci else attrs["speed_gbps"],
                            latency_us=PCIE_LATENCY_US)

    def links(self) -> None:
        s, t = self.source, self.t
        targets: dict[tuple[int, str], str | None] = {}
        for node, el in self.links_of:
            if el.tag == "nvlink" and attr(el, "tclass", s).lower() == NVSWITCH_CLASS:
                key = (t.graph.nodes[node]["host"], normalize_bus_id(attr(el, "target", s)))
                targets[key] = targets.get(key) or self.named(el)
        for el in (e for e in self.root.children if e.tag == "nvswitch"):
            bus = normalize_bus_id(attr(el, "busid", s))
            if not any(b == bus for _, b in targets):
                targets[(0, bus)] = self.named(el)
        for bus in self.switch_bus:
            if not any(b == bus for _, b in targets):
                targets[(0, bus)] = None
        switches = {}
        for k, (host, bus) in enumerate(sorted(targets)):
            name = targets[(host, bus)]
            if not name or name in t.graph:
                name = f"{f'h{host}.' if len(self.hosts) > 1 else ''}nvswitch{k}"
            name = name if name not in t.graph else f"nvswitch{k}.{bus}"
            switches[(host, bus)] = t.add_node(name, "nvswitch", pci_bus_id=bus, host=host)
        dropped = []
        for node, el in self.links_of:
            self.gpu_link(node, el, switches, dropped)
        for el in (e for e in self.root.children if e.tag == "nvswitch"):
            a = self.switch_of(el, normalize_bus_id(attr(el, "busid", s)), switches, None)
            for c in (c for c in el.children if c.tag == "nvlink"):
                b = self.switch_of(c, normalize_bus_id(attr(c, "target", s)), switches, t.graph.nodes[a]["host"])
                if b is not None:
                    count = attr_int(c, "count", s, 1, MAX_LINKS)
                    per = attr_float(c, "link_gbps", s, 1e-6, 1e5, 25.0)
                    t.add_link(a, b, kind="nvlink", links=count, bandwidth_gbps=count * per,
                               latency_us=NVSWITCH_LATENCY_US, both=False)
        for u, v, d in list(t.graph.edges(data=True)):
            if d["kind"] in ("nvlink", "infinity_fabric") and not t.graph.has_edge(v, u):
                t.graph.add_edge(v, u, **d)
                t.assumptions.append(f"{'NVLink' if d['kind'] == 'nvlink' else 'xGMI'} {u}->{v} listed one way "
                                     f"only: the reverse direction added")
        if dropped:
            t.assumptions.append(f"GPU links to devices not in the file dropped: {', '.join(dropped[:8])}"
                                 + (f" and {len(dropped) - 8} more" if len(dropped) > 8 else ""))

    def switch_of(self, el: El, bus: str, switches: dict, host: int | None) -> str | None:
        """The NVSwitch an <nvswitch> element or its <nvlink> names: by the recorded node id,
        else by bus id (on ``host`` when given)."""
        name = el.attrs.get("topocoll_node")
        if name in switches.values():
            return name
        hits = [sw for (h, b), sw in sorted(switches.items()) if b == bus and host in (None, h)]
        return hits[0] if hits else None

    def gpu_link(self, node: str, el: El, switches: dict, dropped: list) -> None:
        """One <nvlink> or <xgmi> of a GPU: to a peer GPU, an NVSwitch or the CPU."""
        s, t = self.source, self.t
        count, tclass = attr_int(el, "count", s, 1, MAX_LINKS), attr(el, "tclass", s).lower()
        target = normalize_bus_id(el.attrs.get("target", ""))
        gd = t.graph.nodes[node]
        if el.tag == "xgmi":
            kind, lat = "infinity_fabric", NVLINK_LATENCY_US
            per = xgmi_gbps_for_arch(gd.get("gcn_arch"))
            if per is None:
                per = XGMI_DEFAULT_GBPS
                self.note(f"xGMI speed of GPU architecture {gd.get('gcn_arch') or 'unknown'} not known: "
                          f"{XGMI_DEFAULT_GBPS} GB/s per link per direction assumed")
        else:
            kind, lat = "nvlink", NVLINK_LATENCY_US
            per = nvlink_gbps_for_sm(gd["nccl_sm"])[0] if "compute_capability" in gd else 25.0
        if tclass == NVSWITCH_CLASS and el.tag == "nvlink":
            t.add_link(node, switches[(gd["host"], target)], kind="nvlink", links=count, bandwidth_gbps=count * per,
                       latency_us=NVSWITCH_LATENCY_US)
        elif tclass == CPU_CLASS:
            gd["nvlink_cpu_links"] = gd.get("nvlink_cpu_links", 0) + count
        else:
            peer = self.gpu_bus.get((gd["host"], target))
            if peer is None or peer == node:
                dropped.append(f"{node}->{target}" + ("" if peer is None else " (itself)"))
                return
            t.add_link(node, peer, kind=kind, links=count, bandwidth_gbps=count * per, latency_us=lat, both=False)


#: hex digits of the longest CPU mask read as a CPU list (Linux's NR_CPUS is at most 8192)
MAX_MASK_DIGITS = 2048


def _mask_to_cpulist(mask: str) -> str:
    """'0000ff00,00000003' -> '0-1,40-47' (NCCL/sysfs cpumask: 32-bit hex words, high first).

    >>> _mask_to_cpulist("00000000,00ffffff,00000000,00000000,00000000,00ffffff")
    '0-23,128-151'
    """
    digits = mask.replace(",", "")
    if len(digits) > MAX_MASK_DIGITS:             # more CPUs than Linux has: kept as written
        return mask
    try:
        bits = int(digits, 16)
    except ValueError:
        return mask
    cpus = [k for k in range(bits.bit_length()) if bits >> k & 1]
    out, k = [], 0
    while k < len(cpus):
        j = k
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(f"{cpus[k]}-{cpus[j]}" if j > k else f"{cpus[k]}")
        k = j + 1
    return ",".join(out)


def parse_nccl_xml(text: str, *, source: str = "<xml>", strict: bool = False) -> Topology:
    """Parse an NCCL topology XML (see the module docstring for what is built and assumed).

    Parameters
    ----------
    text : str
        The XML.
    source : str
        File name for messages and the topology name.
    strict : bool
        Raise on truncated input instead of parsing what is there.

    Raises
    ------
    TopologyError
        ``source:line N column M: problem`` for malformed XML, a missing required attribute
        (cpu numaid; pci busid, class; gpu rank, sm, dev, gdr; nvlink count, tclass, target)
        or a duplicate GPU rank / CPU numaid.

    >>> x = ('<system version="1"><cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">'
    ...      '<pci busid="0000:01:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">'
    ...      '<gpu dev="0" sm="80" rank="0" gdr="1"/></pci></cpu></system>')
    >>> t = parse_nccl_xml(x)
    >>> t.num_gpus, t.graph.nodes["gpu0"]["pci_bus_id"], t.graph.edges["gpu0", "hb0"]["bandwidth_gbps"]
    (1, '0000:01:00.0', 31.5)
    """
    root, note = read_tree(text, source, strict)
    imp = _Importer(root, source)
    if note:
        imp.t.assumptions.append(note)
    return imp.run()
