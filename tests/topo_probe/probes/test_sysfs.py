"""sysfs PCIe tree on fake /sys trees laid out like the real one (symlinks into /sys/devices)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from topo_probe.errors import TopologyError
from topo_probe.probes.sysfs import build_from_sysfs_records, link_gbps, scan_sysfs

GPU, BRIDGE, NIC, AUDIO, NVSW = "0x030200", "0x060400", "0x020700", "0x040300", "0x068000"


def add_device(root: Path, path: list[str], cls: str, vendor: str = "0x10de", numa: int = 0,
               speed: str = "16.0 GT/s PCIe", width: int = 16, cur: str = "2.5 GT/s PCIe") -> Path:
    """Create /sys/devices/<path> (bridges on the way included) and its /sys/bus/pci/devices link."""
    devices = root / "sys" / "devices"
    bus = root / "sys" / "bus" / "pci" / "devices"
    bus.mkdir(parents=True, exist_ok=True)
    devices.mkdir(parents=True, exist_ok=True)
    d = devices
    for k, comp in enumerate(path):
        d = d / comp
        d.mkdir(exist_ok=True)
        if k == 0:
            continue
        last = k == len(path) - 1
        if last or not (d / "class").exists():
            files = {"class": cls if last else BRIDGE, "vendor": vendor if last else "0x1000",
                     "device": "0x1234", "numa_node": str(numa), "max_link_speed": speed,
                     "max_link_width": str(width), "current_link_speed": cur,
                     "current_link_width": str(width), "local_cpulist": "0-15" if numa == 0 else "16-31"}
            for name, value in files.items():
                (d / name).write_text(value + "\n")
        link = bus / comp
        if not link.exists():
            os.symlink(os.path.relpath(d, bus), link)
    return d


def machine(root: Path) -> None:
    a = ["pci0000:00", "0000:00:01.0", "0000:01:00.0"]          # root port, switch upstream port
    add_device(root, a + ["0000:02:00.0", "0000:03:00.0"], GPU)   # gpu0
    add_device(root, a + ["0000:02:00.0", "0000:03:00.1"], AUDIO)  # its audio function: ignored
    add_device(root, a + ["0000:02:01.0", "0000:04:00.0"], GPU)   # gpu1, same switch
    add_device(root, a + ["0000:02:02.0", "0000:05:00.0"], NIC, "0x15b3")  # mlx5_0
    add_device(root, a + ["0000:02:02.0", "0000:05:00.1"], NIC, "0x15b3")  # mlx5_1 (2nd function)
    add_device(root, ["pci0000:00", "0000:00:02.0", "0000:06:00.0"], GPU)   # gpu2 on its own root port
    b = ["pci0000:40", "0000:40:01.0", "0000:41:00.0", "0000:42:00.0", "0000:43:00.0"]  # two switch levels
    add_device(root, b + ["0000:44:00.0", "0000:45:00.0"], GPU)   # gpu3
    add_device(root, b + ["0000:44:01.0", "0000:46:00.0"], GPU)   # gpu4
    add_device(root, ["pci0000:40", "0000:40:01.0", "0000:41:00.0", "0000:42:01.0", "0000:47:00.0",
                      "0000:48:00.0", "0000:49:00.0"], NIC, "0x15b3")  # mlx5_2
    add_device(root, ["pci0000:80", "0000:80:01.0", "0000:81:00.0"], GPU, numa=1, speed="8.0 GT/s PCIe")  # gpu5
    add_device(root, ["pci0000:80", "0000:80:02.0", "0000:82:00.0"], NVSW, numa=1)


NICS = {"0000:05:00.0": "mlx5_0", "0000:05:00.1": "mlx5_1", "0000:49:00.0": "mlx5_2"}


def test_scan_finds_gpus_nics_and_ancestry(tmp_path):
    machine(tmp_path)
    rec = scan_sysfs(tmp_path, nics=NICS)
    kinds = {d["bus_id"]: d["kind"] for d in rec["devices"]}
    assert kinds == {"0000:03:00.0": "gpu", "0000:04:00.0": "gpu", "0000:06:00.0": "gpu", "0000:45:00.0": "gpu",
                     "0000:46:00.0": "gpu", "0000:81:00.0": "gpu", "0000:82:00.0": "nvswitch",
                     "0000:05:00.0": "nic", "0000:05:00.1": "nic", "0000:49:00.0": "nic"}
    gpu0 = next(d for d in rec["devices"] if d["bus_id"] == "0000:03:00.0")
    assert gpu0["path"] == ["pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"]
    assert gpu0["numa_node"] == 0 and gpu0["link"]["max_link_width"] == "16"
    assert rec["bridges"]["0000:01:00.0"]["class"] == BRIDGE
    assert link_gbps(gpu0["link"]) == 31.5  # max Gen4 x16, not the idle 2.5 GT/s
    assert scan_sysfs(tmp_path / "nowhere")["error"].startswith("cannot list")


def test_tree_reproduces_nvidia_smi_classes(tmp_path):
    machine(tmp_path)
    rec = scan_sysfs(tmp_path, nics=NICS)
    t = build_from_sysfs_records(rec)
    assert t.num_gpus == 6 and len(t.nodes_of_kind("nic")) == 3
    nic = {t.graph.nodes[n]["name"]: n for n in t.nodes_of_kind("nic")}
    expect = {("gpu0", "gpu1"): "PIX", ("gpu0", nic["mlx5_0"]): "PIX", (nic["mlx5_0"], nic["mlx5_1"]): "PIX",
              ("gpu0", "gpu2"): "PHB", ("gpu0", "gpu3"): "NODE", ("gpu3", "gpu4"): "PIX",
              ("gpu3", nic["mlx5_2"]): "PXB", ("gpu0", "gpu5"): "SYS", (nic["mlx5_2"], nic["mlx5_0"]): "NODE"}
    for (a, b), c in expect.items():
        assert t.pcie_class(a, b) == c == t.pcie_class(b, a), (a, b)
    assert [t.graph.nodes[g]["pci_bus_id"] for g in t.gpus] == \
        ["0000:03:00.0", "0000:04:00.0", "0000:06:00.0", "0000:45:00.0", "0000:46:00.0", "0000:81:00.0"]
    assert [t.graph.nodes[g]["numa_node"] for g in t.gpus] == [0, 0, 0, 0, 0, 1]
    assert t.graph.edges["gpu0", next(iter(t.graph.successors("gpu0")))]["bandwidth_gbps"] == 31.5
    assert t.graph.edges["gpu5", next(iter(t.graph.successors("gpu5")))]["bandwidth_gbps"] == 15.75
    assert len(t.nodes_of_kind("host_bridge")) == 3 and len(t.nodes_of_kind("cpu")) == 2
    assert t.gdr(0, nic["mlx5_0"]) == (True, "") and t.gdr(5, nic["mlx5_0"])[0] is False
    assert any("NVLink unknown" in a for a in t.assumptions)


def test_unknown_numa_and_missing_speed(tmp_path):
    add_device(tmp_path, ["pci0000:00", "0000:00:01.0", "0000:01:00.0"], GPU, numa=-1, speed="Unknown",
               cur="Unknown")
    t = build_from_sysfs_records(scan_sysfs(tmp_path))
    assert t.graph.nodes["gpu0"]["numa_node"] == 0
    assert any("numa_node is -1" in a for a in t.assumptions) and any("Gen3 x16" in a for a in t.assumptions)
    with pytest.raises(TopologyError, match="no NVIDIA GPU"):
        build_from_sysfs_records({"devices": []})
