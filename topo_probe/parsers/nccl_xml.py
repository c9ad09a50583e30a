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

Import: each ``cpu`` is a CPU / NUMA node (``cpu{numaid}``) with one host bridge (NCCL has
none: everything under a CPU is PHB to each other; our ``hostbridge="k"`` attribute on a
top-level ``pci`` splits them, see export); each ``pci`` holding a ``gpu`` or ``nic`` is that
endpoint, any other ``pci`` a PCIe switch.  PCIe bandwidth = ``link_width`` x per-lane rate of
``link_speed`` (theoretical: "16.0 GT/s PCIe" x16 = Gen4 = 31.5 GB/s; NCCL assumes 24).
``nvlink`` with ``tclass="0x068000"`` targets an NVSwitch: one ``nvswitch`` node per distinct
target bus id.  NVLink speed per link from the GPU's ``sm``: 60 -> 20 GB/s, 70/80/90 -> 25
(NVLink2/3/4), 100+ -> 50 (NCCL itself assumes 20 / 20.6 / 40.1).  Net ``speed`` is Mb/s;
NIC ``speed_gbps`` = speed / 8000 GB/s.  GPU rank -> index (renumbered 0.. in rank order).

Truncated input (a dump cut short, like the ``head`` of a file): by default parsed leniently:
whatever elements are complete are kept, open elements are closed at the end, a partial last
tag is dropped, and a note saying where it stopped goes to ``topo.assumptions``.  NVLinks to
GPUs missing from the file are dropped (noted).  ``strict=True`` raises instead.

Export (:func:`topo_probe.parsers.nccl_xml_export.to_nccl_xml`) writes the same format back for ``NCCL_TOPO_FILE``.
"""

from __future__ import annotations

import xml.parsers.expat as expat
from dataclasses import dataclass, field
from pathlib import PurePath

from topo_probe.errors import TopologyError
from topo_probe.machines.generators import CPU_LATENCY_US, NVLINK_LATENCY_US, NVSWITCH_LATENCY_US, PCIE_LATENCY_US
from topo_probe.parsers import CPU_LINK_GBPS, PCIE_LANE_GBPS, normalize_bus_id, nvlink_gbps_for_sm, pcie_gen_from_speed
from topo_probe.parsers.nccl_xml_export import CPU_CLASS, NVSWITCH_CLASS
from topo_probe.topology.model import Topology

__all__ = ["parse_nccl_xml"]


@dataclass
class _El:
    tag: str
    attrs: dict
    line: int
    col: int
    children: list = field(default_factory=list)


def _tree(text: str, source: str, strict: bool) -> tuple[_El, str | None]:
    p = expat.ParserCreate()
    stack: list[_El] = []
    root: list[_El] = []

    def start(tag, attrs):
        el = _El(tag, dict(attrs), p.CurrentLineNumber, p.CurrentColumnNumber + 1)
        (stack[-1].children if stack else root).append(el)
        stack.append(el)

    p.StartElementHandler = start
    p.EndElementHandler = lambda tag: stack.pop()
    try:
        p.Parse(text, True)
        return root[0], None
    except expat.ExpatError as exc:
        where = f"{source}:line {exc.lineno} column {exc.offset + 1}"
        msg = expat.errors.messages[exc.code]
        at_end = msg == expat.errors.XML_ERROR_NO_ELEMENTS or (
            msg in (expat.errors.XML_ERROR_UNCLOSED_TOKEN, expat.errors.XML_ERROR_PARTIAL_CHAR)
            and ">" not in _rest(text, exc.lineno, exc.offset))
        if not root or not stack or not at_end:
            raise TopologyError(f"{where}: {msg}") from None
        if strict:
            raise TopologyError(f"{where}: truncated XML: {len(stack)} elements still open "
                                f"(<{'> <'.join(e.tag for e in stack)}>)") from None
        return root[0], (f"{source} is truncated at line {exc.lineno} (inside <{'> <'.join(e.tag for e in stack)}>): "
                         f"parsed the complete elements before it"
                         + ("; a partial last tag was dropped" if msg != expat.errors.XML_ERROR_NO_ELEMENTS else ""))


def _rest(text: str, line: int, offset: int) -> str:
    lines = text.split("\n")
    return "\n".join([lines[line - 1][offset:]] + lines[line:]) if line - 1 < len(lines) else ""


def _attr(el: _El, key: str, source: str, conv=str):
    if key not in el.attrs:
        raise TopologyError(f"{source}:line {el.line} column {el.col}: <{el.tag}> has no {key!r} attribute")
    try:
        return conv(el.attrs[key])
    except ValueError:
        raise TopologyError(f"{source}:line {el.line} column {el.col}: <{el.tag} {key}={el.attrs[key]!r}> "
                            f"is not a valid {getattr(conv, '__name__', 'value')}") from None


def _walk(el: _El, tag: str):
    for c in el.children:
        if c.tag == tag:
            yield c
        yield from _walk(c, tag)


class _Importer:
    def __init__(self, root: _El, source: str) -> None:
        self.source, self.root = source, root
        self.t = Topology(PurePath(source).stem if not source.startswith("<") else "nccl-topo",
                          description=f"imported from NCCL topology XML {source}")
        self.counters = {"pcie": 0, "hb": 0, "nic": 0}
        self.gpu_bus: dict[tuple[int, str], str] = {}
        self.nvlinks: list[tuple[str, _El]] = []
        self.switch_bus: set[str] = set()
        self.pre = ""  # node id prefix "h{host}." when the file spans several hosts
        hashes = []
        for cpu in root.children:
            if cpu.tag == "cpu" and cpu.attrs.get("host_hash", "") not in hashes:
                hashes.append(cpu.attrs.get("host_hash", ""))
        self.hosts = {h: k for k, h in enumerate(hashes)}
        gpus = []
        for cpu in (c for c in root.children if c.tag == "cpu"):
            for g in _walk(cpu, "gpu"):
                gpus.append((self.hosts[cpu.attrs.get("host_hash", "")], _attr(g, "rank", source, int), g))
        self.index = {}
        for k, (h, r, g) in enumerate(sorted(gpus, key=lambda x: (x[0], x[1]))):
            if (h, r) in self.index:
                raise TopologyError(f"{source}:line {g.line} column {g.col}: GPU rank {r} appears twice")
            self.index[(h, r)] = k
        if any(k != r for (h, r), k in self.index.items()) and len(self.hosts) == 1:
            self.t.assumptions.append("GPU ranks in the file are not 0..n-1: renumbered in rank order")

    def new(self, prefix: str, kind: str, **attrs) -> str:
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
                self.switch_bus.add(normalize_bus_id(_attr(el, "busid", self.source)))
        for host_cpus in cpus.values():
            for i, a in enumerate(host_cpus):
                for b in host_cpus[i + 1:]:
                    self.t.add_link(a, b, kind="cpu", bandwidth_gbps=CPU_LINK_GBPS, latency_us=CPU_LATENCY_US)
        if any(len(c) > 1 for c in cpus.values()):
            self.t.assumptions.append(f"CPU-CPU links assumed {CPU_LINK_GBPS} GB/s per direction (not in the XML)")
        self.links()
        return self.t

    def cpu(self, el: _El, host: int) -> str:
        self.pre = f"h{host}." if len(self.hosts) > 1 else ""
        numa = _attr(el, "numaid", self.source, int)
        node = f"{self.pre}cpu{numa}"
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
                bridges[key] = self.new("hb", "host_bridge", numa_node=numa, host=host)
            hb = bridges[key]
            if child.tag == "pci":
                self.pci(child, hb, numa, host)
            elif child.tag == "nic":
                self.nic(child, hb, None, numa, host)
        for hb in bridges.values():
            total = sum(d["bandwidth_gbps"] for _, _, d in self.t.graph.in_edges(hb, data=True))
            self.t.add_link(hb, node, kind="cpu", bandwidth_gbps=total or CPU_LINK_GBPS, latency_us=CPU_LATENCY_US)
        return node

    def pci_gbps(self, el: _El) -> float:
        width = _attr(el, "link_width", self.source, int) if "link_width" in el.attrs else 16
        gen = pcie_gen_from_speed(el.attrs.get("link_speed"))
        if gen is None:
            note = "PCIe link speed missing or unknown in some <pci> elements: Gen3 assumed (as NCCL does)"
            if note not in self.t.assumptions:
                self.t.assumptions.append(note)
            gen = 3
        return PCIE_LANE_GBPS[gen] * (width or 16)

    def pci(self, el: _El, parent: str, numa: int, host: int) -> None:
        bus = normalize_bus_id(_attr(el, "busid", self.source))
        cls = _attr(el, "class", self.source).lower()
        raw = {k: el.attrs[k] for k in ("link_speed", "link_width", "vendor", "device") if k in el.attrs}
        gbps = self.pci_gbps(el)
        gpus = [c for c in el.children if c.tag == "gpu"]
        nics = [c for c in el.children if c.tag == "nic"]
        if cls == NVSWITCH_CLASS:
            self.switch_bus.add(bus)
            return
        ep_numa = _attr(el, "numa_node", self.source, int) if "numa_node" in el.attrs else numa
        for g in gpus:
            self.gpu(g, bus, parent, gbps, ep_numa, host, raw)
        for n in nics:
            self.nic(n, parent, (bus, gbps, raw), ep_numa, host)
        if gpus or nics:
            return
        sw = self.new("pcie", "pcie_switch", pci_bus_id=bus, pci_class=cls, host=host, **raw)
        self.t.add_link(sw, parent, kind="pcie", bandwidth_gbps=gbps, latency_us=PCIE_LATENCY_US)
        for c in el.children:
            if c.tag == "pci":
                self.pci(c, sw, numa, host)
            elif c.tag == "nic":
                self.nic(c, sw, None, numa, host)

    def gpu(self, el: _El, bus: str, parent: str, gbps: float, numa: int, host: int, raw: dict) -> None:
        s = self.source
        rank, sm = _attr(el, "rank", s, int), _attr(el, "sm", s, int)
        dev, gdr = _attr(el, "dev", s, int), _attr(el, "gdr", s, int)
        idx = self.index[(host, rank)]
        node = self.t.add_gpu(idx, f"{self.pre}gpu{idx}", pci_bus_id=bus, numa_node=numa, host=host,
                              compute_capability=f"{sm // 10}.{sm % 10}", nccl_rank=rank, nccl_dev=dev,
                              gdr=bool(gdr), **raw)
        self.t.add_link(node, parent, kind="pcie", bandwidth_gbps=gbps, latency_us=PCIE_LATENCY_US)
        self.gpu_bus[(host, bus)] = node
        for c in el.children:
            if c.tag == "nvlink":
                self.nvlinks.append((node, c))

    def nic(self, el: _El, parent: str, pci, numa: int, host: int) -> None:
        for net in (c for c in el.children if c.tag == "net" and "dev" in c.attrs):
            mbps = int(float(net.attrs.get("speed", "0") or 0))
            attrs = {"name": net.attrs.get("name", f"net{net.attrs['dev']}"), "numa_node": numa, "host": host,
                     "speed_gbps": (mbps if mbps > 0 else 10000) / 8000.0, "nccl_dev": _attr(net, "dev", self.source, int),
                     "gdr": net.attrs.get("gdr", "0") == "1"}
            attrs.update({k: net.attrs[k] for k in ("port", "guid", "maxconn", "latency") if k in net.attrs})
            if pci:
                attrs["pci_bus_id"] = pci[0]
                attrs.update(pci[2])
            node = self.new("nic", "nic", **attrs)
            self.t.add_link(node, parent, kind="pcie", bandwidth_gbps=pci[1] if pci else attrs["speed_gbps"],
                            latency_us=PCIE_LATENCY_US)

    def links(self) -> None:
        s, t = self.source, self.t
        targets = set(self.switch_bus)
        for _, el in self.nvlinks:
            if _attr(el, "tclass", s).lower() == NVSWITCH_CLASS:
                targets.add(normalize_bus_id(_attr(el, "target", s)))
        switches = {bus: t.add_node(f"nvswitch{k}", "nvswitch", pci_bus_id=bus) for k, bus in enumerate(sorted(targets))}
        dropped = []
        for node, el in self.nvlinks:
            count, tclass = _attr(el, "count", s, int), _attr(el, "tclass", s).lower()
            per = nvlink_gbps_for_sm(int(t.graph.nodes[node]["compute_capability"].replace(".", "")))[0]
            target = normalize_bus_id(el.attrs.get("target", ""))
            if tclass == NVSWITCH_CLASS:
                t.add_link(node, switches[target], kind="nvlink", links=count, bandwidth_gbps=count * per,
                           latency_us=NVSWITCH_LATENCY_US)
            elif tclass.startswith("0x03"):
                peer = self.gpu_bus.get((t.graph.nodes[node]["host"], target))
                if peer is None:
                    dropped.append(f"{node}->{target}")
                    continue
                t.add_link(node, peer, kind="nvlink", links=count, bandwidth_gbps=count * per,
                           latency_us=NVLINK_LATENCY_US, both=False)
            elif tclass == CPU_CLASS:
                t.graph.nodes[node]["nvlink_cpu_links"] = t.graph.nodes[node].get("nvlink_cpu_links", 0) + count
            else:
                dropped.append(f"{node}->{target} (tclass {tclass})")
        for el in (e for e in self.root.children if e.tag == "nvswitch"):
            a = switches[normalize_bus_id(el.attrs["busid"])]
            for c in (c for c in el.children if c.tag == "nvlink"):
                b = switches.get(normalize_bus_id(_attr(c, "target", s)))
                if b is not None:
                    count = _attr(c, "count", s, int)
                    per = float(c.attrs.get("link_gbps", 25.0))
                    t.add_link(a, b, kind="nvlink", links=count, bandwidth_gbps=count * per,
                               latency_us=NVSWITCH_LATENCY_US, both=False)
        for u, v, d in list(t.graph.edges(data=True)):
            if d["kind"] == "nvlink" and not t.graph.has_edge(v, u):
                t.graph.add_edge(v, u, **d)
                t.assumptions.append(f"NVLink {u}->{v} listed one way only: the reverse direction added")
        if dropped:
            t.assumptions.append(f"NVLinks to devices not in the file dropped: {', '.join(dropped)}")


def _mask_to_cpulist(mask: str) -> str:
    """'0000ff00,00000003' -> '0-1,40-47' (NCCL/sysfs cpumask: 32-bit hex words, high first).

    >>> _mask_to_cpulist("00000000,00ffffff,00000000,00000000,00000000,00ffffff")
    '0-23,128-151'
    """
    try:
        bits = int(mask.replace(",", ""), 16)
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
    root, note = _tree(text, source, strict)
    imp = _Importer(root, source)
    if note:
        imp.t.assumptions.append(note)
    return imp.run()
