"""NCCL topology XML: the real (truncated) H200 dump, malformed input, export -> import."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from _paths import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from topo_probe.errors import TopologyError
from topo_probe.parsers.link_matrix import add_nvlinks
from topo_probe.parsers.nccl_xml import parse_nccl_xml
from topo_probe.parsers.nccl_xml_export import to_nccl_xml
from topo_probe.parsers.nvsmi import parse_nvsmi_topo
from topo_probe.parsers.pcie_classes import add_pcie_tree_from_classes
from topo_probe.topology.model import Topology

H200 = (FIXTURES / "nccl_topo_dump_h200_partial.xml").read_text()
DGX1 = [[0, 2, 1, 1, 2, 0, 0, 0], [2, 0, 1, 2, 0, 1, 0, 0], [1, 1, 0, 2, 0, 0, 2, 0],
        [1, 2, 2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2, 1, 1], [0, 1, 0, 0, 2, 0, 1, 2],
        [0, 0, 2, 0, 1, 1, 0, 2], [0, 0, 0, 1, 1, 2, 2, 0]]


def nic(t, name):
    return next(n for n in t.nodes_of_kind("nic") if t.graph.nodes[n]["name"] == name)


# ----------------------------------------------------------------------------- the real dump
def test_h200_partial_dump():
    t = parse_nccl_xml(H200, source="h200.xml")
    text_gpus = re.findall(r'<gpu dev="(\d+)"', H200)
    assert t.num_gpus == len(text_gpus) == 2
    for g in t.gpus:
        to_sw = sorted(d["links"] for _, v, d in t.graph.out_edges(g, data=True) if t.kind(v) == "nvswitch")
        assert to_sw == [4, 4, 5, 5]  # 5+5+4+4 = 18 NVLinks per GPU (reference)
        assert t.gpu_bandwidth_gbps(t.graph.nodes[g]["index"]) == 450.0  # 18 x 25 GB/s (published H100/H200)
        assert t.graph.nodes[g]["compute_capability"] == "9.0" and t.graph.nodes[g]["numa_node"] == 0
    assert sorted(t.graph.nodes[s]["pci_bus_id"] for s in t.nodes_of_kind("nvswitch")) == \
        sorted(set(re.findall(r'target="([^"]+)"', H200)))
    assert t.smi_label(0, 1) == "NV18" and t.path_class(0, 1) == "NVL"
    assert len(t.nodes_of_kind("nic")) == len(re.findall(r"<net ", H200)) == 2
    assert t.graph.nodes[nic(t, "mlx5_0")]["speed_gbps"] == 50.0  # 400000 Mb/s
    assert [t.graph.nodes[c]["numa_node"] for c in t.nodes_of_kind("cpu")] == [0]
    assert t.pcie_class("gpu0", nic(t, "mlx5_0")) == "PIX"  # same Broadcom switch 0000:16:00.0
    assert t.pcie_class("gpu0", nic(t, "mlx5_1")) == "PHB"
    assert t.gdr(0, nic(t, "mlx5_0")) == (True, "") and t.gdr(1, nic(t, "mlx5_1")) == (True, "")
    assert t.graph.edges["gpu0", "pcie0"]["bandwidth_gbps"] == 63.0  # 32 GT/s x16 = Gen5
    assert any("truncated at line 33" in a for a in t.assumptions)
    assert t.graph.nodes["cpu0"]["affinity"] == "0-23,96-119"


def test_truncation_strict_and_mid_tag():
    with pytest.raises(TopologyError) as exc:
        parse_nccl_xml(H200, source="h200.xml", strict=True)
    assert re.match(r"h200\.xml:line 33 column 1: truncated XML: 2 elements still open", str(exc.value))
    cut = H200[:H200.index('<nvlink target="0000:08:00.0" count="4"') + 20]  # inside GPU 0's 4th nvlink
    t = parse_nccl_xml(cut)
    assert t.num_gpus == 1 and t.graph.nodes  # GPU 0 with 3 complete nvlink elements
    assert sorted(d["links"] for _, v, d in t.graph.out_edges("gpu0", data=True) if t.kind(v) == "nvswitch") == [4, 5, 5]
    assert any("partial last tag" in a for a in t.assumptions)
    with pytest.raises(TopologyError, match="line 9 column 11"):
        parse_nccl_xml(cut, strict=True)


@pytest.mark.parametrize("edit,where,what", [
    (lambda x: x.replace("</gpu>\n      </pci>", "</pci>\n      </pci>", 1), "line 10 column 11", "mismatched tag"),
    (lambda x: x.replace(' rank="1"', "", 1), "line 25 column 9", "'rank'"),
    (lambda x: x.replace(' rank="1"', ' rank="0"', 1), "line 25 column 9", "rank 0 appears twice"),
    (lambda x: x.replace(' sm="90"', ' sm="x"', 1), "line 5 column 9", "'x'"),
    (lambda x: x.replace(' numaid="0"', "", 1), "line 2 column 3", "'numaid'"),
    (lambda x: x.replace('count="5"', 'count="five"', 1), "line 6 column 11", "'five'"),
    (lambda x: x.replace("<system", "<sys", 1).replace("</system>", ""), "line 1 column 1", "<system>"),
    (lambda x: "junk" + x, "line 1 column 5", "not well-formed"),
])
def test_malformed_one_line_errors(edit, where, what):
    with pytest.raises(TopologyError) as exc:
        parse_nccl_xml(edit(H200), source="d.xml")
    msg = str(exc.value)
    assert msg.startswith(f"d.xml:{where}") and what in msg and "\n" not in msg


# ----------------------------------------------------------------------------- export checks
# RCCL adds <xgmi> under <gpu>; our exact-value block <topocoll> is one NCCL skips (xmlLoadSub)
NCCL_TAGS = {"system": {"cpu", "nvswitch", "topocoll"}, "cpu": {"pci", "nic"},
             "pci": {"pci", "gpu", "nic", "pcilink"}, "gpu": {"nvlink", "c2c", "xgmi"}, "nic": {"net"},
             "nvswitch": {"nvlink"}, "topocoll": {"node", "link", "unlink", "unnode"}}
REQUIRED = {"system": {"version"}, "cpu": {"numaid", "arch", "vendor", "familyid", "modelid"},
            "pci": {"busid", "class", "link_speed", "link_width"}, "gpu": {"dev", "sm", "rank", "gdr"},
            "nvlink": {"target", "count", "tclass"}, "xgmi": {"target", "count", "tclass"},
            "net": {"dev", "name"}, "nic": set(), "nvswitch": {"busid"}, "topocoll": {"version"},
            "node": {"id", "kind"}, "link": {"a", "b", "kind", "links", "gbps", "latency_us"}, "unlink": {"a", "b"}, "unnode": {"id"}}
NCCL_SPEEDS = {"2.5 GT/s PCIe", "5.0 GT/s PCIe", "8.0 GT/s PCIe", "16.0 GT/s PCIe", "32.0 GT/s PCIe", "64.0 GT/s PCIe"}


def nccl_lexer_check(xml: str) -> None:
    """What NCCL's hand-written reader (xml.cc xmlGetNode) needs: one element per line, space
    indentation only, `<name key="value" ...>` with single spaces, double quotes, no quote
    inside values, <= 16 attributes, values < 256 chars, known nesting, required attributes."""
    assert "\t" not in xml and not xml.startswith("<?xml")
    stack: list[str] = []
    for line in xml.splitlines():
        s = line.lstrip(" ")
        if s.startswith("<!--"):
            assert s.endswith("-->") and "--" not in s[4:-3]
            continue
        if s.startswith("</"):
            assert s == f"</{stack.pop()}>"
            continue
        m = re.fullmatch(r'<([a-z0-9]+)((?: [a-z_]+="[^"<>&]*")*)(/?)>', s)
        assert m, line
        tag, attrs = m.group(1), dict(re.findall(r' ([a-z_]+)="([^"]*)"', m.group(2)))
        assert len(attrs) <= 16 and all(len(v) < 256 for v in attrs.values())
        assert REQUIRED[tag] <= set(attrs), (tag, attrs)
        if stack:
            assert tag in NCCL_TAGS[stack[-1]], (stack[-1], tag)
        if tag == "pci":
            assert attrs["link_speed"] in NCCL_SPEEDS and int(attrs["link_width"]) > 0
        if not m.group(3):
            stack.append(tag)
    assert not stack


def signature(t: Topology):
    n = t.num_gpus
    nics = sorted(t.nodes_of_kind("nic"), key=lambda x: t.graph.nodes[x].get("name", x))
    return {"gpus": n,
            "labels": [[t.smi_label(i, j) for j in range(n)] for i in range(n)],
            "nvlinks": [[t.nvlink_count(i, j) for j in range(n)] for i in range(n)],
            "nics": [t.graph.nodes[x].get("name") for x in nics],
            "numa": [t.graph.nodes[g].get("numa_node") for g in t.gpus] + [t.graph.nodes[x].get("numa_node") for x in nics],
            "gpu_nic": [[t.pcie_class(g, x) for x in nics] for g in t.gpus],
            "bw": [round(t.gpu_bandwidth_gbps(i), 6) for i in range(n)]}


def round_trip(t: Topology) -> Topology:
    xml = to_nccl_xml(t)
    nccl_lexer_check(xml)
    back = parse_nccl_xml(xml)
    assert signature(back) == signature(t)
    return back


def cube_mesh_box() -> Topology:
    """DGX-1-like by hand: cube-mesh NVLink, 2 sockets, 2 PCIe switches per socket (2 GPUs +
    1 NIC each), each switch on its own host bridge."""
    t = Topology("cube")
    for i in range(8):
        t.add_gpu(i, compute_capability="7.0", numa_node=i // 4)
    for i in range(8):
        for j in range(i + 1, 8):
            if DGX1[i][j]:
                t.add_link(f"gpu{i}", f"gpu{j}", kind="nvlink", links=DGX1[i][j], bandwidth_gbps=25.0 * DGX1[i][j])
    for s in range(2):
        t.add_node(f"cpu{s}", "cpu", numa_node=s, affinity=f"{20 * s}-{20 * s + 19}")
    t.add_link("cpu0", "cpu1", kind="cpu", bandwidth_gbps=38.4)
    for k in range(4):
        t.add_node(f"nic{k}", "nic", name=f"mlx5_{k}", numa_node=k // 2, speed_gbps=12.5)
        t.add_node(f"hb{k}", "host_bridge")
        t.add_node(f"pcie{k}", "pcie_switch")
        t.add_link(f"hb{k}", f"cpu{k // 2}", kind="cpu", bandwidth_gbps=15.75)
        t.add_link(f"pcie{k}", f"hb{k}", kind="pcie", bandwidth_gbps=15.75)
        for e in (f"gpu{2 * k}", f"gpu{2 * k + 1}", f"nic{k}"):
            t.add_link(e, f"pcie{k}", kind="pcie", bandwidth_gbps=15.75)
    return t


def nvswitch_box() -> Topology:
    """8 GPUs x 12 NVLinks into 6 NVSwitches; 2 sockets, 4 NICs; two-level PCIe switches."""
    t = Topology("switchbox")
    for i in range(8):
        t.add_gpu(i, compute_capability="8.0", numa_node=i // 4, pci_bus_id=f"0000:{0x10 + i:02x}:00.0")
    for s in range(6):
        t.add_node(f"nvswitch{s}", "nvswitch")
        for i in range(8):
            t.add_link(f"gpu{i}", f"nvswitch{s}", kind="nvlink", links=2, bandwidth_gbps=50.0)
    for s in range(2):
        t.add_node(f"cpu{s}", "cpu", numa_node=s)
        t.add_node(f"hb{s}", "host_bridge")
        t.add_link(f"hb{s}", f"cpu{s}", kind="cpu", bandwidth_gbps=63.0)
    t.add_link("cpu0", "cpu1", kind="cpu", bandwidth_gbps=128.0)
    for k in range(4):
        up = t.add_node(f"pcie_up{k}", "pcie_switch")
        t.add_link(up, f"hb{k // 2}", kind="pcie", bandwidth_gbps=31.5)
        t.add_node(f"nic{k}", "nic", name=f"mlx5_{k}", numa_node=k // 2, speed_gbps=25.0, gdr=k != 3)
        for e in (f"gpu{2 * k}", f"gpu{2 * k + 1}", f"nic{k}"):
            leaf = t.add_node(f"pcie_{e}", "pcie_switch")
            t.add_link(leaf, up, kind="pcie", bandwidth_gbps=31.5)
            t.add_link(e, leaf, kind="pcie", bandwidth_gbps=31.5)
    return t


def test_round_trip_cube_mesh():
    t = cube_mesh_box()
    assert t.smi_label(0, 5) == "SYS" and t.pcie_class("gpu0", "gpu2") == "NODE"
    back = round_trip(t)
    assert back.pcie_class("gpu0", "gpu2") == "NODE" and back.pcie_class("gpu0", "gpu1") == "PIX"
    assert Counter(back.graph.nodes[g]["numa_node"] for g in back.gpus) == {0: 4, 1: 4}
    assert back.graph.nodes["cpu1"]["affinity"] == "20-39"


def test_round_trip_nvswitch_box():
    t = nvswitch_box()
    back = round_trip(t)
    assert len(back.nodes_of_kind("nvswitch")) == 6 and back.smi_label(2, 7) == "NV12"
    assert back.pcie_class("gpu0", nic(back, "mlx5_0")) == "PXB" and back.gdr(6, nic(back, "mlx5_3"))[0] is False
    assert [back.graph.nodes[g]["pci_bus_id"] for g in back.gpus] == [f"0000:{0x10 + i:02x}:00.0" for i in range(8)]


def test_round_trip_real_inputs():
    for name in ("nvsmi_topo_dgx1_v100.txt", "nvsmi_topo_dgx_a100.txt", "nvsmi_topo_2x_pcie_raw_tabs.txt"):
        round_trip(parse_nvsmi_topo((FIXTURES / name).read_text()))
    back = parse_nccl_xml(to_nccl_xml(parse_nccl_xml(H200)))
    assert signature(back) == signature(parse_nccl_xml(H200))
    assert back.graph.nodes["cpu0"]["affinity_mask"] == "00000000,00000000,00ffffff,00000000,00000000,00ffffff"


def test_round_trip_presets_when_available():
    presets = pytest.importorskip("topo_probe.machines.presets")
    for name in ("dgx1-v100", "dgx-a100", "dgx-h100", "dgx2", "pcie-8gpu-2socket", "hgx-h200", "hgx-b200", "mi325x",
                 "mi355x", "l40s-8gpu-pcie"):
        if name in presets.PRESETS:
            round_trip(presets.get_preset(name))


def test_infinity_fabric_is_written_as_rccls_xgmi():
    t = Topology("mi")
    for i in range(2):
        t.add_gpu(i)
    t.add_link("gpu0", "gpu1", kind="infinity_fabric", links=2, bandwidth_gbps=100.0)
    xml = to_nccl_xml(t)
    nccl_lexer_check(xml)
    assert '<xgmi target="0000:02:00.0" count="2" tclass="0x120000"/>' in xml and 'gcn="gfx90a"' in xml
    assert "guessed from their link speed (gfx90a)" in xml and "without a PCIe path" in xml
    back = parse_nccl_xml(xml)
    assert back.fingerprint() == t.fingerprint() and back.graph.edges["gpu1", "gpu0"]["bandwidth_gbps"] == 100.0


@settings(derandomize=True, max_examples=80, deadline=None)
@given(st.integers(2, 6), st.integers(0, 3), st.data())
def test_random_topologies_round_trip(n_gpu, n_nic, data):
    pos = [tuple(data.draw(st.integers(0, 1)) for _ in range(4)) for _ in range(n_gpu + n_nic)]
    nv = [[0] * n_gpu for _ in range(n_gpu)]
    if data.draw(st.booleans()) and n_gpu >= 3:
        nv = [[0 if i == j else 18 for j in range(n_gpu)] for i in range(n_gpu)]
    else:
        for i in range(n_gpu):
            for j in range(i + 1, n_gpu):
                nv[i][j] = nv[j][i] = data.draw(st.sampled_from([0, 1, 2]))
    t = Topology("rand")
    for i in range(n_gpu):
        t.add_gpu(i, compute_capability="9.0")
    for k in range(n_nic):
        t.add_node(f"nic{k}", "nic", name=f"mlx5_{k}", speed_gbps=50.0)
    add_nvlinks(t, nv, link_gbps=25.0)
    eps = t.gpus + [f"nic{k}" for k in range(n_nic)]
    labels = ("SYS", "NODE", "PHB", "PXB")
    classes = {(a, b): next((labels[k] for k in range(4) if pos[x][k] != pos[y][k]), "PIX")
               for x, a in enumerate(eps) for y, b in enumerate(eps) if x < y}
    add_pcie_tree_from_classes(t, eps, classes, numa={e: p[0] for e, p in zip(eps, pos)}, pcie_gbps=63.0)
    back = round_trip(t)
    same = {e: (e if e.startswith("gpu") else nic(back, t.graph.nodes[e]["name"])) for e in eps}
    for a, b in classes:
        assert back.pcie_class(same[a], same[b]) == classes[(a, b)]


# ----------------------------------------------------------------------------- a dump without PCI sysfs
VM = (FIXTURES / "family" / "nccl_topo_dump_vm_no_sysfs.xml").read_text()


def test_dump_without_sysfs_reads_empty_link_width_as_x16():
    """NCCL writes link_speed="" and link_width="" where it finds no sysfs path (a VM; v2.28.9-1 xml.cc
    611-626) and reads "" as x16 at its Gen3 fallback (topo.cc 484-488): the same topology as the dump with
    those values written out (hand-written fixture, tests/fixtures/family/README.md)."""
    t = parse_nccl_xml(VM, source="vm.xml")
    spelled = VM.replace('link_width=""', 'link_width="16"').replace('link_speed=""', 'link_speed="8.0 GT/s PCIe"')
    assert t.fingerprint() == parse_nccl_xml(spelled).fingerprint()
    assert t.smi_label(0, 1) == "NV12" and t.gpu_bandwidth_gbps(0) == 300.0  # 12 NVLink3 x 25 GB/s
    pcie = sorted(d["bandwidth_gbps"] for u, v, d in t.graph.edges(data=True) if d["kind"] == "pcie")
    assert pcie == [15.75] * 6  # 3 devices, both directions: 16 lanes x 8 GT/s x 128/130 / 8
    assert t.graph.nodes[nic(t, "eth0")]["speed_gbps"] == 12.5  # 100000 Mb/s
    assert [t.graph.nodes[c]["numa_node"] for c in t.nodes_of_kind("cpu")] == [-1]
    assert "PCIe link width empty in some <pci> elements: x16 assumed (as NCCL does)" in t.assumptions


@settings(derandomize=True, max_examples=30, deadline=None)
@given(st.data())
def test_any_empty_link_width_reads_as_x16(data):
    """Blanking the width of any <pci> of the real H200 dump gives that device's link 16 lanes, nothing else."""
    widths = [m.start() for m in re.finditer(r'link_width="16"', H200)]
    k = data.draw(st.sampled_from(widths))
    blank = H200[:k] + 'link_width=""' + H200[k + len('link_width="16"'):]
    a, b = parse_nccl_xml(H200), parse_nccl_xml(blank)
    assert a.fingerprint() == b.fingerprint()
    assert {(u, v): d["bandwidth_gbps"] for u, v, d in a.graph.edges(data=True)} == \
        {(u, v): d["bandwidth_gbps"] for u, v, d in b.graph.edges(data=True)}


# ----------------------------------------------------------------------------- Broadcom switches joined by <pcilink>
BCM = (FIXTURES / "family" / "nccl_topo_dump_bcm_pcilink.xml").read_text()


def test_pcilink_joins_broadcom_switches_as_nccl_does():
    """NCCL links two switches that name each other in <pcilink> directly (v2.28.9-1 topo.cc 621-641) and calls
    a PCI-to-PCI hop PXB (paths.cc 95): GPUs under the two switches are PXB with P2P, not PHB through the CPU
    (as the same file without its <pcilink> lines reads)."""
    t = parse_nccl_xml(BCM, source="bcm.xml")
    plain = parse_nccl_xml(re.sub(r"\s*<pcilink [^>]*/>", "", BCM))
    same = {(0, 1), (2, 3)}
    for i in range(4):
        for j in range(4):
            if i != j:
                want = "PIX" if (min(i, j), max(i, j)) in same else "PXB"
                assert (t.smi_label(i, j), plain.smi_label(i, j)) == (want, want if want == "PIX" else "PHB")
                assert t.p2p(i, j).read is True and plain.p2p(i, j).read is (want == "PIX")
    switches = {t.graph.nodes[n]["pci_bus_id"]: n for n in t.nodes_of_kind("pcie_switch")}
    link = t.graph.edges[switches["0000:15:00.0"], switches["0000:35:00.0"]]
    assert link["bandwidth_gbps"] == 5000.0  # NCCL's LOC_BW (topo.h line 15), not an uplink's 63 (Gen5 x16)
    assert t.gdr(2, nic(t, "mlx5_0")) == (True, "")
    assert parse_nccl_xml(to_nccl_xml(t)).fingerprint() == t.fingerprint()


@settings(derandomize=True, max_examples=30, deadline=None)
@given(st.sampled_from(["0000:15:00.0", "0000:35:00.0", "0000:17:00.0", "0000:99:00.0", "zz", ""]))
def test_pcilink_to_anything_else_is_ignored_or_one_line(target):
    """A <pcilink> to itself, a GPU, a missing device or a bad bus id adds no link (or is a TopologyError)."""
    text = BCM.replace('<pcilink target="0000:35:00.0"/>', f'<pcilink target="{target}"/>')
    try:
        t = parse_nccl_xml(text)
    except TopologyError as e:
        assert "\n" not in str(e)
        return
    links = [(u, v) for u, v in t.graph.edges if t.kind(u) == t.kind(v) == "pcie_switch"]
    assert len(links) == 2  # the other switch's <pcilink> back still joins them (both directions)


@pytest.mark.parametrize("speed,gbps", [("-1", 1.25), ("-2147483648", 1.25), ("0", 1.25), ("", 1.25),
                                        ("200000", 25.0), ("800000000", 1e5)])
def test_a_net_speed_nccl_reads_as_none_is_its_default_10000_mbps(speed, gbps):
    """NCCL reads ``<net speed>`` into an int and takes any value <= 0 as 10,000 Mb/s ("Some NICs define speed =
    -1": v2.28.9-1 src/graph/topo.cc lines 370-373), and dumps a NIC's own speed as it is (line 1352,
    ``xmlInitAttrInt(netNode, "speed", props.speed)``), so a dump can hold speed="-1".  The reader refused it
    ('speed=-1 is out of range 0..800000000'); by hand: 10000 / 8000 = 1.25 GB/s, 200000 / 8000 = 25."""
    x = (FIXTURES / "rccl_topo" / "topo_8p_pcie.xml").read_text()
    y = re.sub(r'(<net name="mlx5_0" [^>]*?speed=")[0-9]+"', rf'\g<1>{speed}"', x, count=1)
    assert y != x
    t = parse_nccl_xml(y)
    nic = next(n for n in t.nodes_of_kind("nic") if t.graph.nodes[n]["name"] == "mlx5_0")
    assert t.graph.nodes[nic]["speed_gbps"] == gbps


@pytest.mark.parametrize("speed", ["-2147483649", "800000001"])
def test_a_net_speed_past_an_int_or_the_loaders_nic_limit_is_refused_in_one_line(speed):
    x = (FIXTURES / "rccl_topo" / "topo_8p_pcie.xml").read_text()
    y = re.sub(r'(<net name="mlx5_0" [^>]*?speed=")[0-9]+"', rf'\g<1>{speed}"', x, count=1)
    with pytest.raises(TopologyError, match=rf"^<xml>:line \d+ column \d+: <net> attribute speed={speed} is out of "
                                            r"range -2147483648\.\.800000000$"):
        parse_nccl_xml(y)


def test_the_slowest_net_speed_is_the_least_whole_mbps_the_loaders_take():
    from topo_probe.limits import MIN_BANDWIDTH_GBPS
    from topo_probe.parsers.hardware import SLOWEST_NIC_MBPS
    assert SLOWEST_NIC_MBPS == 8                    # by hand: 0.001 GB/s x 8000 Mb/s per GB/s
    assert (SLOWEST_NIC_MBPS - 1) / 8000 < MIN_BANDWIDTH_GBPS <= SLOWEST_NIC_MBPS / 8000


@pytest.mark.parametrize("speed", ["1", "5", "7"])
def test_a_net_speed_under_the_slowest_nic_is_refused_at_its_attribute(speed):
    """1..7 Mb/s is 0.000125..0.000875 GB/s, under MIN_BANDWIDTH_GBPS (0.001): the reader took it, and it was refused
    later, far from its line (to_nccl_xml: 'speed_gbps must be >= 0.001 GB/s')."""
    y = re.sub(r'(<net name="mlx5_0" [^>]*?speed=")[0-9]+"', rf'\g<1>{speed}"',
               (FIXTURES / "rccl_topo" / "topo_8p_pcie.xml").read_text(), count=1)
    line = next(i for i, text in enumerate(y.splitlines(), 1) if '<net name="mlx5_0"' in text)
    with pytest.raises(TopologyError, match=rf"^<xml>:line {line} column \d+: <net> attribute speed={speed} is under "
                                            r"8 Mb/s, the slowest NIC the loaders take \(0\.001 GB/s\)"):
        parse_nccl_xml(y)


def test_the_slowest_net_speed_reads_and_exports_again():
    y = re.sub(r'(<net name="mlx5_0" [^>]*?speed=")[0-9]+"', r'\g<1>8"',
               (FIXTURES / "rccl_topo" / "topo_8p_pcie.xml").read_text(), count=1)
    t = parse_nccl_xml(y)
    assert t.graph.nodes[nic(t, "mlx5_0")]["speed_gbps"] == 0.001       # by hand: 8 / 8000
    back = parse_nccl_xml(to_nccl_xml(t))
    assert back.graph.nodes[nic(back, "mlx5_0")]["speed_gbps"] == 0.001
