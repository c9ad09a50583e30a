"""probe_machine: soft failure on this GPU-less machine; combining recorded sources."""

from __future__ import annotations

import json
import time

from _paths import FIXTURES
from test_sysfs import GPU, add_device

from topo_probe.probes import combine, probe_machine
from topo_probe.probes.sysfs import scan_sysfs


def test_this_machine_returns_none_with_reasons_quickly():
    start = time.perf_counter()
    topo, reasons = probe_machine()
    assert time.perf_counter() - start < 10
    assert topo is None
    assert any(r.startswith("NVML") for r in reasons) and any(r.startswith("CUDA: ") for r in reasons)
    assert all(isinstance(r, str) and "\n" not in r for r in reasons)


def test_fake_root_without_nvml_gives_pcie_only_topology(tmp_path):
    add_device(tmp_path, ["pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"], GPU)
    add_device(tmp_path, ["pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:01.0", "0000:04:00.0"], GPU)
    topo, reasons = probe_machine(root=tmp_path, use_nvml=False, use_cuda=False)
    assert topo.num_gpus == 2 and topo.smi_label(0, 1) == "PIX" and topo.name == "local"
    assert "topology from sysfs only: NVLinks unknown" in reasons
    assert any(r.startswith("GDR: ") for r in reasons)


def test_combine_nvml_and_cuda_by_bus_id():
    nvml = json.loads((FIXTURES / "nvml_records_2x_pcie.json").read_text())
    nvml.pop("p2p")
    # CUDA enumerates the two GPUs in the opposite order
    cuda = {"devices": [{"index": 0, "pci_bus_id": "0000:41:00.0"}, {"index": 1, "pci_bus_id": "0000:01:00.0"}],
            "can_access_peer": [[None, 1], [0, None]]}
    topo, reasons = combine(nvml, None, None, cuda)
    assert reasons == []
    assert topo.p2p(1, 0).supported and not topo.p2p(0, 1).supported  # CUDA 0 -> 1 is rank 1 -> 0
    cuda["devices"][0]["pci_bus_id"] = "0000:99:00.0"
    topo, reasons = combine(nvml, None, None, cuda)
    assert reasons == ["CUDA devices do not match the probed GPUs by PCI bus id: CUDA P2P ignored"]
    assert combine(None, {"devices": [], "bridges": {}}, None, None) == \
        (None, ["sysfs: no NVIDIA GPU under /sys/bus/pci/devices"])
    bad = dict(nvml, topology=[[None, "FAR"], ["FAR", None]])
    topo, reasons = combine(bad, None, None, None)
    assert topo is None and reasons[0].startswith("building the topology failed: nvml records: topology[0][1]")


def test_scan_sysfs_of_this_machine_does_not_raise():
    rec = scan_sysfs("/")
    assert isinstance(rec["devices"], list)
