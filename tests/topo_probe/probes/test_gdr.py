"""GPUDirect RDMA readiness and RDMA NIC locality on fake /sys trees."""

from __future__ import annotations

import json
import os

from _paths import FIXTURES
from test_sysfs import GPU, NIC, add_device

from topo_probe.probes.gdr import gdr_status, nic_records, scan_gdr
from topo_probe.probes.nvml import build_from_nvml_records
from topo_probe.probes.sysfs import scan_sysfs


def add_ib(root, name, pci_dir, rate="400 Gb/sec (4X NDR)", layer="InfiniBand"):
    d = root / "sys" / "class" / "infiniband" / name
    (d / "ports" / "1").mkdir(parents=True)
    os.symlink(os.path.relpath(pci_dir, d), d / "device")
    (d / "ports" / "1" / "rate").write_text(rate + "\n")
    (d / "ports" / "1" / "link_layer").write_text(layer + "\n")


def test_scan_gdr_states(tmp_path):
    assert gdr_status(scan_gdr(tmp_path)) == (False, "no RDMA NIC under /sys/class/infiniband")
    nic_dir = add_device(tmp_path, ["pci0000:00", "0000:00:01.0", "0000:02:00.0"], NIC, "0x15b3", numa=1)
    add_ib(tmp_path, "mlx5_0", nic_dir)
    add_ib(tmp_path, "mlx5_1", nic_dir, rate="100 Gb/sec (4X EDR)", layer="Ethernet")
    rec = scan_gdr(tmp_path)
    assert rec["ib_devices"] == [
        {"name": "mlx5_0", "pci_bus_id": "0000:02:00.0", "numa_node": 1, "speed_gbps": 50.0, "link_layer": "InfiniBand"},
        {"name": "mlx5_1", "pci_bus_id": "0000:02:00.0", "numa_node": 1, "speed_gbps": 12.5, "link_layer": "Ethernet"}]
    ok, why = gdr_status(rec)
    assert not ok and why.startswith("nvidia_peermem not loaded")
    (tmp_path / "sys" / "kernel" / "mm" / "memory_peers" / "nv_mem").mkdir(parents=True)
    assert scan_gdr(tmp_path)["memory_peers"] == ["nv_mem"] and gdr_status(scan_gdr(tmp_path)) == (True, "")
    (tmp_path / "sys" / "module" / "nvidia_peermem").mkdir(parents=True)
    assert scan_gdr(tmp_path)["nvidia_peermem"] is True
    assert [n["name"] for n in nic_records(rec)] == ["mlx5_0", "mlx5_1"]


def test_nvml_with_sysfs_and_gdr(tmp_path):
    """NVML records of the 2-GPU box + a fake sysfs where GPU 0 and a NIC share a switch,
    without nvidia_peermem: the NIC is PIX to GPU 0 but GDR is off, with the reason."""
    rec = json.loads((FIXTURES / "nvml_records_2x_pcie.json").read_text())
    sw = ["pci0000:00", "0000:00:01.0", "0000:01:00.0"]
    add_device(tmp_path, sw + ["0000:02:00.0", "0000:03:00.0"], GPU)
    nic_dir = add_device(tmp_path, sw + ["0000:02:01.0", "0000:04:00.0"], NIC, "0x15b3")
    add_device(tmp_path, ["pci0000:40", "0000:40:01.0", "0000:41:00.0"], GPU)
    add_ib(tmp_path, "mlx5_0", nic_dir)
    rec["gpus"][0]["pci_bus_id"] = "00000000:03:00.0"
    gdr = scan_gdr(tmp_path)
    rec["gdr"] = gdr
    rec["sysfs"] = scan_sysfs(tmp_path, nics={n["pci_bus_id"]: n["name"] for n in nic_records(gdr)})
    t = build_from_nvml_records(rec)
    assert t.pcie_class("gpu0", "nic0") == "PIX" and t.pcie_class("gpu1", "nic0") == "NODE"
    assert t.smi_label(0, 1) == "NODE"  # sysfs tree wins over NVML's HOSTBRIDGE level
    assert t.graph.nodes["nic0"]["speed_gbps"] == 50.0
    assert t.gdr(0, "nic0") == (False, "nvidia_peermem not loaded")
    assert any(a.startswith("GPUDirect RDMA: nvidia_peermem not loaded") for a in t.assumptions)
