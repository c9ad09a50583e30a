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

from synth.model.nccl import NcclMachine, NcclModel
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
    on 4 GPUs moves 3/4 GiB through each GPU's link: at least 25,565.3 µs even at 100 % of 31.5 GB/s (before: 17,058)."""
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


def test_a_narrow_switch_uplink_caps_the_ring(tmp_path):
    """Switches at 16 GT/s x4 = 7.875 GB/s: the ring crosses the pcilink between them (read as the slower uplink)."""
    _, m = _machine(tmp_path, switch_link=X4_UPLINK)
    assert (m.pcie_gen, m.pcie_path_gbs) == (4, 7.875)
    assert NcclModel(m).choose("allgather", GIB).time_us > _floor_us(GIB * 3 / 4, 7.875)


def test_gen5_gpus_keep_gen5(tmp_path):
    _, m = _machine(tmp_path, gpu_link=GEN5_X16)
    assert (m.pcie_gen, m.pcie_path_gbs, pcie_stream_gbs(m)) == (5, 0.0, 63.0)


@pytest.mark.parametrize("k", range(len(bound_check.PCIE_VARIANTS)))
def test_pcie_limited_machines_stay_above_the_bound(tmp_path, k):
    """The bound check's PCIe-limited machines (``bound_check.PCIE_VARIANTS``): no cell below the bound
    (the Gen4 pcilink dump had 55 of 560 before, its 2-host form 28; Gen3 x8 72)."""
    name, topo = bound_check.pcie_limited(tmp_path)[k]
    _, below, _ = bound_check.check(topo, sizes=[8 << s for s in range(0, 31, 3)], max_schedule_ranks=8)
    assert not below, (name, below[:3])
