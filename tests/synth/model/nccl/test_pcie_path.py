"""A PCIe stream is capped by the links of its path in the described Topology (``synth/model/nccl/pcie_path.py``):
NCCL rates each PCIe link by its own lanes x speed (NVIDIA/nccl v2.28.9-1 src/graph/topo.cc lines 482-492), a path
at its slowest link (src/graph/paths.cc line 67) and a channel takes its bandwidth from every link it crosses
(src/graph/search.cc ``followPath`` lines 79-112).  Before, the GPUs' generation was read from the fastest PCIe link
anywhere (the Gen5 switch and NIC of a Gen4 L40S box), so the model streamed above the GPUs' own links and below the
lower bound.  Expectations by hand: data-sheet GB/s per direction x (n-1)/n of the bytes, no efficiency."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from synth.model.nccl import DEFAULT_PARAMS, NcclMachine, NcclModel
from synth.model.nccl.pcie_path import pcie_stream_gbs
from topo_probe.load import load_topology

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "benchmarks"))
import bound_check  # noqa: E402

GIB = 1 << 30
GEN3_X8 = 'link_speed="8.0 GT/s PCIe" link_width="8"'
GEN5_X16 = 'link_speed="32.0 GT/s PCIe" link_width="16"'
X4_UPLINK = 'link_speed="16.0 GT/s PCIe" link_width="4"'


def _machine(tmp_path, **variant):
    path = tmp_path / "dump.xml"
    path.write_text(bound_check.pcie_dump_variant(**variant))
    topo = load_topology(str(path))
    return topo, NcclMachine.from_topology(topo)


def _floor_us(nbytes: float, link_gbs: float) -> float:
    """µs to move ``nbytes`` through a link of ``link_gbs`` GB/s at its full data-sheet rate."""
    return nbytes / (link_gbs * 1e3)


def test_the_pcilink_dump_is_gen4_as_its_gpus_links_say(tmp_path):
    """16.0 GT/s x16 = 31.5 GB/s per direction: Gen4, not the switches' 32 GT/s (Gen5).  A 1 GiB ring all_gather
    on 4 GPUs moves 3/4 GiB through each GPU's link: at least 25,565.3 µs even at 100 % of 31.5 GB/s
    (before: 17,058)."""
    _, m = _machine(tmp_path)
    assert (m.pcie_gen, m.pcie_path_gbs) == (4, 0.0)
    assert pcie_stream_gbs(m) == 31.5
    floor = _floor_us(GIB * 3 / 4, 31.5)
    assert floor == pytest.approx(25565.3, abs=0.1)
    assert NcclModel(m).choose("allgather", GIB).time_us > floor
    assert NcclModel(m).choose("allreduce", GIB).time_us > 2 * floor          # reduce-scatter then all-gather


def test_a_gen3_x8_gpu_streams_at_most_7_875_gb_s(tmp_path):
    """8.0 GT/s x8: half of Gen3 x16's 15.75 = 7.875 GB/s; generation 3 and the narrower path stated."""
    _, m = _machine(tmp_path, gpu_link=GEN3_X8)
    assert (m.pcie_gen, m.pcie_path_gbs) == (3, 7.875)
    assert pcie_stream_gbs(m) == 7.875
    for coll in ("allgather", "reducescatter", "alltoall"):
        assert NcclModel(m).choose(coll, GIB).time_us > _floor_us(GIB * 3 / 4, 7.875), coll


def test_a_narrow_switch_uplink_caps_the_ring_through_host_memory(tmp_path):
    """Switches at 16 GT/s x4 (4 lanes x 1.969 = 7.875 GB/s), no ``<pcilink>``: the switches meet
    at the host bridge, so a ring between them crosses both uplinks; 3/4 GiB at 7.875 GB/s is 102,261.2 µs at least."""
    _, m = _machine(tmp_path, switch_link=X4_UPLINK, pcilink=False)
    assert (m.pcie_gen, m.p2p, m.pcie_path_gbs) == (4, False, 7.875)
    floor = _floor_us(GIB * 3 / 4, 7.875)
    assert floor == pytest.approx(102261.2, abs=0.1)
    assert NcclModel(m).choose("allgather", GIB).time_us > floor


def test_a_pcilink_never_limits_a_gpu_pair(tmp_path):
    """With ``<pcilink>`` NCCL joins the switches with LINK_LOC at LOC_BW, 5000 GB/s (v2.28.9-1 src/graph/topo.cc
    line 637, topo.h line 15), and its breadth-first paths (src/graph/paths.cc lines 52-108) take it, one hop shorter
    than through the CPU: GPU to GPU never crosses the x4 uplinks, so only the GPUs' own 31.5 GB/s links count
    (the parser rates the pcilink at LOC_BW too, so the bound does not cap the pair at the uplinks either)."""
    topo, m = _machine(tmp_path, switch_link=X4_UPLINK)
    assert (m.pcie_gen, m.p2p, m.pcie_path_gbs, pcie_stream_gbs(m)) == (4, True, 0.0, 31.5)
    two = NcclMachine.from_topology(bound_check.machine(topo, 2))                  # the mark survives the host copies
    assert (two.nodes, two.pcie_path_gbs) == (2, 0.0)


def test_a_gen4_x8_gpu_reads_as_gen3_as_nccl_rates_it(tmp_path):
    """16.0 GT/s x8 = 15.75 GB/s, Gen3 x16's rate; NCCL: 8 x 120 / 80 = 16 x 60 / 80 = 12 GB/s for both (v2.28.9-1
    src/graph/topo.cc lines 423-426 ``kvDictPciGen``, line 491)."""
    _, m = _machine(tmp_path, gpu_link='link_speed="16.0 GT/s PCIe" link_width="8"')
    assert (m.pcie_gen, m.pcie_path_gbs, pcie_stream_gbs(m)) == (3, 0.0, 15.75)


def test_gen5_gpus_keep_gen5(tmp_path):
    _, m = _machine(tmp_path, gpu_link=GEN5_X16)
    assert (m.pcie_gen, m.pcie_path_gbs, pcie_stream_gbs(m)) == (5, 0.0, 63.0)


@pytest.mark.parametrize("k", range(len(bound_check.PCIE_VARIANTS)))
def test_pcie_limited_machines_stay_above_the_bound(k):
    """The bound check's PCIe-limited machines (``bound_check.PCIE_VARIANTS``): no cell below the bound at these 11
    sizes, 8 B - 1 GiB every 8x (385 cells a machine).  Before the fix, at these sizes, the first six variants had
    185 of their 2,310 cells below it: the Gen4 pcilink dump 39, its 2-host form 19, Gen3 x8 48, Gen5 0, SHM 31,
    SHM with x4 uplinks 48 (the 2-host Gen3 x8 variant, added later, 15; the pcilink under x4 uplinks 46, its bound
    then crossing the pcilink at the uplink's rate, and SHM with x4 uplinks on 2 hosts 5, added with pcie_share.py)."""
    name, topo = bound_check.pcie_limited()[k]
    _, below, _ = bound_check.check(topo, sizes=[8 << s for s in range(0, 31, 3)], max_schedule_ranks=8)
    assert not below, (name, below[:3])


def test_pcie_limited_parses_each_dump_as_the_file_would_be_loaded(tmp_path):
    """``bound_check.pcie_limited`` parses each variant's text in memory: the same machine (all but its name) as
    ``load_topology`` gives for that text written to a file, and nothing is written."""
    from topo_probe.topology.serialize import topology_to_dict
    for k, (name, topo) in enumerate(bound_check.pcie_limited()):
        _, gpu_link, switch_link, pcilink, hosts = bound_check.PCIE_VARIANTS[k]
        path = tmp_path / f"pcie_variant_{k}.xml"
        path.write_text(bound_check.pcie_dump_variant(gpu_link, switch_link, pcilink))
        ref = load_topology(str(path))
        ref = bound_check.machine(ref, hosts) if hosts else ref
        got, want = topology_to_dict(topo), topology_to_dict(ref)
        for doc in (got, want):
            doc.pop("name", None), doc.pop("description", None)
        assert got == want, name
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"pcie_variant_{k}.xml" for k in range(k + 1)]


FAMILY = Path(__file__).resolve().parents[3] / "fixtures" / "family"


def test_a_ring_across_two_sockets_is_capped_by_their_20_gb_s_link():
    """4 x P100 on two sockets (nvidia-smi: SOC between the pairs, no P2P), the sockets joined by a 20 GB/s link in the
    Topology.  A ring crosses it once each way (search.cc line 110: a channel takes bandwidth from every link), so a
    1 GiB ring broadcast moves 1 GiB over it: at least 1 GiB / (20 GB/s x link_eff[shm]) = 107,374.2 µs at the
    model's host-memory efficiency of 0.5 (before: 68,241 µs, 1.6 x the link)."""
    m = NcclMachine.from_topology(load_topology(str(FAMILY / "nvsmi_p100x4_driver384_soc.txt")))
    assert (m.sockets, m.p2p, m.pcie_path_gbs) == (2, False, 20.0)
    eff = DEFAULT_PARAMS.link_efficiency(m.arch, "shm")
    assert eff == 0.5
    assert _floor_us(GIB, 20.0 * eff) == pytest.approx(107374.2, abs=0.1)
    assert NcclModel(m).choose("broadcast", GIB).time_us > _floor_us(GIB, 20.0 * eff)


def test_a_nic_is_capped_by_its_own_pcie_link():
    """A VM's dump without sysfs: the NIC's link read as Gen3 x16 (15.75 GB/s); a 50 GB/s line rate given on the command
    line cannot leave through it (topo.cc lines 482-492 rate the NIC's link; paths.cc line 67: a path's slowest)."""
    topo = bound_check.machine(load_topology(str(FAMILY / "nccl_topo_dump_vm_no_sysfs.xml")), 2, nic_gbps=50.0)
    assert NcclMachine.from_topology(topo).nic_gbps == 15.75


def test_a_gpu_reaches_its_nics_at_most_at_its_path_rate():
    """Two 25 GB/s NIC ports for 4 Gen3 x8 GPUs: each GPU's traffic leaves over its 7.875 GB/s link, so the node's
    GPUs send 4 x 7.875 = 31.5 GB/s, not the ports' 50 (``used_net_gbps``; before: min(50, 4 x 15.75))."""
    m = NcclMachine("l40s", "sm89", 8, 2, "pcie", 0, pcie_gen=3, nics_per_node=2, nic_gbps=25.0, pcie_path_gbs=7.875)
    assert m.used_net_gbps == 31.5


def test_a_two_host_alltoall_leaves_over_the_gpus_own_link(tmp_path):
    """2 x 4 x L40S at Gen3 x8: a GPU sends 7/8 of its 1 GiB to the 7 other ranks, all over its own 7.875 GB/s link,
    its 3 local peers' parts and its 4 remote ones' alike (not at once over two paths): at least
    7/8 GiB / (7.875 x link_eff[pcie]) = 149,130.8 µs at the model's PCIe efficiency 0.8 (before: 63,967 µs)."""
    path = tmp_path / "dump.xml"
    path.write_text(bound_check.pcie_dump_variant(gpu_link=GEN3_X8))
    m = NcclMachine.from_topology(bound_check.machine(load_topology(str(path)), 2))
    eff = DEFAULT_PARAMS.link_efficiency(m.arch, "pcie")
    assert (m.nodes, m.pcie_path_gbs, eff) == (2, 7.875, 0.8)
    floor = _floor_us(GIB * 7 / 8, 7.875 * eff)
    assert floor == pytest.approx(149130.8, abs=0.1)
    assert NcclModel(m).choose("alltoall", GIB).time_us > floor


@pytest.mark.parametrize("k", range(len(bound_check.FAMILY)))
def test_family_machines_stay_above_the_bound(k):
    """``bound_check.FAMILY``: the two-socket P100 had 13 of 385 cells below the bound at these sizes (broadcast,
    reduce, allreduce), 14 on two hosts with 12.5 GB/s NICs; with 50 GB/s NICs (added with pcie_share.py) the P100 5
    and the VM 10."""
    name, topo = bound_check.family()[k]
    _, below, _ = bound_check.check(topo, sizes=[8 << s for s in range(0, 31, 3)], max_schedule_ranks=8)
    assert not below, (name, below[:3])
