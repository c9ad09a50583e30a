"""topo_probe.parsers.nccl_xml_export: the exact text NCCL's loader reads for a small box, the
CPU mask writer against a brute-force bit mask, and the re-export from nccl_xml."""

from __future__ import annotations

import math
import tempfile
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topo_probe.errors import TopologyError
from topo_probe.limits import MAX_BANDWIDTH_GBPS, MIN_BANDWIDTH_GBPS
from topo_probe.load import load_topology
from topo_probe.machines.clusters import with_nics
from topo_probe.machines.presets import get_preset
from topo_probe.parsers import nccl_xml
from topo_probe.parsers.link_matrix import parse_link_matrix
from topo_probe.parsers.nccl_xml_export import CPU_CLASS, NVSWITCH_CLASS, _cpulist_to_mask, to_nccl_xml
from topo_probe.topology.checks import check_topology
from topo_probe.topology.serialize import save_topology

# NCCL's dump layout (src/graph/xml.cc): 2-space indent, one element per line, no declaration;
# GPU pci class 0x030200, nvlink target = the peer's bus id, count = links; our node ids and the
# <topocoll> block (the CPU and host bridge NCCL needs but the link matrix has not) ride along
TWO_GPUS_NV2 = """\
<!-- topocoll: topology link-matrix for NCCL_TOPO_FILE -->
<!-- assumption: 2 GPUs/NICs without a PCIe path placed directly under the first CPU -->
<!-- assumption: CPU arch/vendor/familyid/modelid unknown: written as x86_64 GenuineIntel 6/85 (Skylake) -->
<!-- assumption: PCIe links whose bandwidth is no PCIe generation x width written as Gen4 x16 -->
<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
    <pci busid="0000:01:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
      <gpu dev="0" sm="80" rank="0" gdr="1" topocoll_node="gpu0">
        <nvlink target="0000:02:00.0" count="2" tclass="0x030200"/>
      </gpu>
    </pci>
    <pci busid="0000:02:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
      <gpu dev="1" sm="80" rank="1" gdr="1" topocoll_node="gpu1">
        <nvlink target="0000:01:00.0" count="2" tclass="0x030200"/>
      </gpu>
    </pci>
  </cpu>
  <topocoll version="1">
    <unnode id="cpu0"/>
    <unnode id="hb0"/>
  </topocoll>
</system>
"""


def test_exact_text_of_a_two_gpu_nvlink_box():
    t = parse_link_matrix({"links": [[0, 2], [2, 0]], "link_bandwidth_gbps": 25.0})
    assert to_nccl_xml(t, default_sm=80) == TWO_GPUS_NV2


def test_reader_and_writer_share_the_pci_class_codes():
    assert (nccl_xml.NVSWITCH_CLASS, nccl_xml.CPU_CLASS) == (NVSWITCH_CLASS, CPU_CLASS) == ("0x068000", "0x068001")


@settings(derandomize=True, max_examples=60, deadline=None)
@given(st.sets(st.integers(0, 200), min_size=1, max_size=40))
def test_cpu_mask_against_brute_force(cpus):
    mask = _cpulist_to_mask(",".join(map(str, sorted(cpus))))
    words = mask.split(",")
    assert all(len(w) == 8 for w in words)                       # 32-bit words, high word first
    bits = int("".join(words), 16)
    assert {k for k in range(bits.bit_length()) if bits >> k & 1} == cpus
    assert nccl_xml._mask_to_cpulist(mask).split(",") == _ranges(sorted(cpus))


def _ranges(cpus: list[int]) -> list[str]:
    out, start = [], cpus[0]
    for a, b in zip(cpus, cpus[1:] + [None]):
        if b != a + 1:
            out.append(f"{start}-{a}" if a > start else f"{a}")
            start = b
    return out


def test_cpu_mask_rejects_non_lists():
    assert _cpulist_to_mask("node0") is None and _cpulist_to_mask("0-3,8") == "0000010f"


# ----------------------------------------------------------------------------- NIC speeds
# NCCL's <net speed> is whole Mb/s (8000 per GB/s).  The reader took at most 1e8 Mb/s (12,500 GB/s) while the loaders
# take NICs of up to MAX_BANDWIDTH_GBPS (1e5 GB/s): a 12,500.1 GB/s NIC, accepted by load_topology, failed to export
# ("<export>:line 19 column 13: <net> attribute speed=100000800 is out of range 0..100000000").
_SPEEDS = [MIN_BANDWIDTH_GBPS, 12500.0, math.nextafter(12500.0, math.inf), 12500.1, MAX_BANDWIDTH_GBPS]


@settings(derandomize=True, max_examples=40, deadline=None)
@given(speed=st.one_of(st.sampled_from(_SPEEDS), st.floats(MIN_BANDWIDTH_GBPS, MAX_BANDWIDTH_GBPS)))
def test_every_nic_speed_the_loader_accepts_exports_and_loads_back(speed):
    t = with_nics(get_preset("dgx-a100"), 2, speed)
    with tempfile.TemporaryDirectory() as tmp:
        save_topology(t, Path(tmp) / "t.json")
        assert load_topology(str(Path(tmp) / "t.json")) == t          # the loader accepts this topology
        (Path(tmp) / "t.xml").write_text(to_nccl_xml(t))
        back = load_topology(str(Path(tmp) / "t.xml"))
    speeds = [back.graph.nodes[n]["speed_gbps"] for n in back.nodes_of_kind("nic")]
    assert len(speeds) == 2
    for got in speeds:      # a whole number M of Mb/s (got = M / 8000 GB/s), within half a Mb/s of the speed (exact)
        mbps = round(got * 8000)
        assert got == mbps / 8000 and abs(mbps - Fraction(speed) * 8000) <= Fraction(1, 2) + Fraction(1, 10**6)


@pytest.mark.parametrize("speed", [math.nextafter(MAX_BANDWIDTH_GBPS, math.inf), 1e6, 0.0, -5.0,
                                   math.nextafter(MIN_BANDWIDTH_GBPS, 0.0), math.inf])
def test_a_nic_speed_the_loader_refuses_is_refused_by_export_in_one_line_naming_the_nic(speed):
    t = with_nics(get_preset("dgx-a100"), 2, 25.0)
    t.graph.nodes["nic1"]["speed_gbps"] = speed                 # set by hand: cluster()/with_nics() refuse it
    with pytest.raises(TopologyError) as exc:
        check_topology(t, "t.json", TopologyError)
    with pytest.raises(TopologyError) as exc:
        to_nccl_xml(t)
    line = str(exc.value)
    assert "\n" not in line and line.startswith("to_nccl_xml: NIC 'nic1': speed_gbps must be ") and \
        line.endswith(f", got {speed!r}"), line
