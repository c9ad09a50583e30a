"""PCIe Gen6 (64 GT/s per lane) in the NCCL model's machine description: NCCL rates a PCIe link at
lanes x kvDictPciGen speed / 80 GB/s, with "64.0 GT/s PCIe" = 480 (100 Mb/s per lane) since v2.12
(v2.28.9-1 src/graph/topo.cc 425, 489-491), so a Gen6 x16 link is 16 x 480 / 80 = 96 GB/s.  A GB300
host's ConnectX-8 links its GPU at Gen6 x16: two 400 Gb/s ports per GPU then carry the GPU's traffic,
where a Gen5 link (48 GB/s in NCCL's rating) fills with one."""

from __future__ import annotations

import pytest

from synth.model.nccl import NcclMachine
from synth.model.nccl.constants import PCI_BW_BY_GEN
from topo_probe.errors import InvalidArgument


def gb300_pair(gen: int) -> NcclMachine:
    """2 hosts x 4 Blackwell GPUs on NVSwitch, 8 x 400 Gb/s (50 GB/s) RoCE NICs per host."""
    return NcclMachine("gb300", "sm100", 8, 2, "nvswitch", 18, pcie_gen=gen, nics_per_node=8, nic_gbps=50.0,
                       net_kind="roce")


def test_nccl_rates_gen6_x16_at_96_gbs():
    assert PCI_BW_BY_GEN[6] == 16 * 480 / 80 == 96.0
    assert PCI_BW_BY_GEN[5] == 16 * 240 / 80 == 48.0


def test_a_gen6_gpu_drives_two_400g_ports():
    # Gen6: ceil(96 / 50) = 2 NICs per GPU, min(126 GB/s link, 2 x 50) = 100 per GPU, 4 GPUs = 400 per host
    assert gb300_pair(6).used_net_gbps == 400.0
    # Gen5: ceil(48 / 50) = 1 NIC per GPU, min(63, 50) = 50 per GPU, 4 GPUs = 200 per host
    assert gb300_pair(5).used_net_gbps == 200.0


def test_generation_seven_is_refused_by_name():
    with pytest.raises(InvalidArgument, match="PCIe generation 7"):
        gb300_pair(7)
