"""NVML probe: decision logic on recorded answers, gathering through a fake pynvml."""

from __future__ import annotations

import json
import types

import pytest
from _paths import FIXTURES

from topo_probe.errors import TopologyError
from topo_probe.probes.nvml import build_from_nvml_records, gather_nvml_records, probe_nvml

DGX1 = [[0, 2, 1, 1, 2, 0, 0, 0], [2, 0, 1, 2, 0, 1, 0, 0], [1, 1, 0, 2, 0, 0, 2, 0],
        [1, 2, 2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2, 1, 1], [0, 1, 0, 0, 2, 0, 1, 2],
        [0, 0, 2, 0, 1, 1, 0, 2], [0, 0, 0, 1, 1, 2, 2, 0]]


def records(name):
    return json.loads((FIXTURES / f"nvml_records_{name}.json").read_text())


def test_dgx1_records():
    t = build_from_nvml_records(records("dgx1_v100"))
    assert t.num_gpus == 8
    for i in range(8):
        for j in range(8):
            assert t.nvlink_count(i, j) == DGX1[i][j]
            if i != j and not DGX1[i][j]:
                assert t.smi_label(i, j) == ("NODE" if i // 4 == j // 4 and i // 2 != j // 2 else
                                             "PIX" if i // 2 == j // 2 else "SYS")
        assert t.gpu_bandwidth_gbps(i) == 150.0
        g = t.graph.nodes[t.gpu(i)]
        assert (g["name"], g["compute_capability"], g["numa_node"]) == ("Tesla V100-SXM2-32GB", "7.0", i // 4)
        assert g["pci_bus_id"] == records("dgx1_v100")["gpus"][i]["pci_bus_id"][4:].lower()
    assert t.path_class(0, 5) == "NVB" and t.p2p(0, 5).supported is False
    assert "chipset not supported" in t.p2p(0, 5).reason
    assert t.p2p(0, 4) == t.p2p(4, 0) and t.p2p(0, 4).atomics and t.p2p(0, 4).supported
    assert t.p2p(5, 0).atomics is False and t.p2p(5, 0).read is False
    assert any("NVLink2 (NVML link version)" in a for a in t.assumptions)


def test_two_pcie_gpus_records():
    t = build_from_nvml_records(records("2x_pcie"))
    assert t.num_gpus == 2 and t.smi_label(0, 1) == "PHB" and t.nvlink_count(0, 1) == 0
    assert t.graph.edges["gpu0", "hb0"]["bandwidth_gbps"] == 31.5  # max gen 4 x16, not the idle Gen1
    assert t.p2p(0, 1).supported is False and "gpu not supported" in t.p2p(0, 1).reason
    assert len(t.nodes_of_kind("cpu")) == 1


def test_nvswitch_records_5_5_4_4():
    sw = ["00000000:05:00.0", "00000000:06:00.0", "00000000:07:00.0", "00000000:08:00.0"]
    gpus = []
    for i in range(8):
        links, k = [], 0
        for s, count in zip(sw, (5, 5, 4, 4)):
            for _ in range(count):
                links.append({"link": k, "active": True, "version": 6, "remote_pci_bus_id": s,
                              "remote_type": "switch"})
                k += 1
        links.append({"link": 18, "active": False})
        gpus.append({"index": i, "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": f"0000:{0x18 + 16 * i:02x}:00.0",
                     "compute_capability": [9, 0], "numa_node": i // 4, "nvlinks": links})
    t = build_from_nvml_records({"gpus": gpus, "topology": None})
    assert len(t.nodes_of_kind("nvswitch")) == 4 and t.smi_label(0, 7) == "NV18"
    assert t.gpu_bandwidth_gbps(3) == 450.0 and t.path_class(1, 6) == "NVL"
    assert t.pcie_class("gpu0", "gpu4") == "SYS" and t.pcie_class("gpu0", "gpu1") == "NODE"


def test_bad_records():
    with pytest.raises(TopologyError, match="'gpus'"):
        build_from_nvml_records({})
    r = records("2x_pcie")
    r["gpus"][1]["pci_bus_id"] = r["gpus"][0]["pci_bus_id"]
    with pytest.raises(TopologyError, match=r"gpus\[1\]\.pci_bus_id"):
        build_from_nvml_records(r)
    r = records("2x_pcie")
    r["topology"][0][1] = "FAR"
    with pytest.raises(TopologyError, match=r"topology\[0\]\[1\]"):
        build_from_nvml_records(r)


# ----------------------------------------------------------------------------- fake pynvml
class FakeNVMLError(Exception):
    def __init__(self, value=3):
        super().__init__(value)
        self.value = value


def fake_pynvml(rec: dict, *, init_error: type | None = None) -> types.SimpleNamespace:
    """A stand-in module answering from recorded records like the real pynvml would, including
    nvidia-ml-py 13's NVML_P2P_CAPS_INDEX_READ = (0,) (a tuple ctypes would reject)."""
    gpus = rec["gpus"]
    levels = {"INTERNAL": 0, "SINGLE": 10, "MULTIPLE": 20, "HOSTBRIDGE": 30, "NODE": 40, "SYSTEM": 50}
    status = {"OK": 0, "CHIPSET_NOT_SUPPORTED": 1, "GPU_NOT_SUPPORTED": 2, "NOT_SUPPORTED": 5}
    idx_key = {0: "read", 1: "write", 3: "atomics", 2: "nvlink"}
    calls = {"init": 0, "shutdown": 0}

    def init():
        calls["init"] += 1
        if init_error:
            raise init_error(12)

    def link(h, n):
        links = {ln["link"]: ln for ln in gpus[h]["nvlinks"]}
        if n not in links:
            raise FakeNVMLError(2)
        return links[n]

    def p2p(a, b, idx):
        if not isinstance(idx, int):
            raise TypeError("ctypes: an int is required")
        return status[rec["p2p"][idx_key[idx]][a][b]]

    def affinity(h, size):
        words = [0] * size
        for part in gpus[h]["cpu_affinity"].split(","):
            lo, hi = (int(x) for x in part.split("-"))
            for c in range(lo, hi + 1):
                words[c // 64] |= 1 << (c % 64)
        return words

    pci = lambda bus: types.SimpleNamespace(busId=bus.encode())  # noqa: E731
    return types.SimpleNamespace(
        NVMLError=FakeNVMLError, NVML_NVLINK_MAX_LINKS=18, calls=calls,
        NVML_P2P_CAPS_INDEX_READ=(0,), NVML_P2P_CAPS_INDEX_WRITE=1, NVML_P2P_CAPS_INDEX_NVLINK=2,
        NVML_P2P_CAPS_INDEX_ATOMICS=3,
        nvmlInit=init, nvmlShutdown=lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1),
        nvmlDeviceGetCount=lambda: len(gpus), nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlSystemGetDriverVersion=lambda: rec["driver_version"].encode(),
        nvmlDeviceGetName=lambda h: gpus[h]["name"].encode(),
        nvmlDeviceGetCudaComputeCapability=lambda h: tuple(gpus[h]["compute_capability"]),
        nvmlDeviceGetNumaNodeId=lambda h: gpus[h]["numa_node"] if gpus[h]["numa_node"] is not None else -1,
        nvmlDeviceGetCpuAffinity=affinity,
        nvmlDeviceGetPciInfo=lambda h: pci(gpus[h]["pci_bus_id"]),
        nvmlDeviceGetMaxPcieLinkGeneration=lambda h: gpus[h]["pcie"]["max_gen"],
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: gpus[h]["pcie"]["max_width"],
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: gpus[h]["pcie"]["cur_gen"],
        nvmlDeviceGetCurrPcieLinkWidth=lambda h: gpus[h]["pcie"]["cur_width"],
        nvmlDeviceGetNvLinkState=lambda h, n: int(link(h, n)["active"]),
        nvmlDeviceGetNvLinkRemotePciInfo=lambda h, n: pci(link(h, n)["remote_pci_bus_id"]),
        nvmlDeviceGetNvLinkRemoteDeviceType=lambda h, n: {"gpu": 0, "switch": 2}[link(h, n)["remote_type"]],
        nvmlDeviceGetNvLinkVersion=lambda h, n: link(h, n)["version"],
        nvmlDeviceGetTopologyCommonAncestor=lambda a, b: levels[rec["topology"][a][b]],
        nvmlDeviceGetP2PStatus=p2p)


@pytest.mark.parametrize("name", ["dgx1_v100", "2x_pcie"])
def test_gather_through_fake_pynvml_gives_the_records(name):
    rec = records(name)
    nv = fake_pynvml(rec)
    got = gather_nvml_records(nv)
    assert nv.calls == {"init": 1, "shutdown": 1} and got["errors"] == []
    for key in ("gpus", "topology", "p2p", "driver_version"):
        assert got[key] == rec[key], key
    assert build_from_nvml_records(got) == build_from_nvml_records(rec)


def test_probe_nvml_reasons():
    class NVMLError_LibraryNotFound(FakeNVMLError):  # noqa: N801 - pynvml's spelling
        pass
    rec, why = probe_nvml(fake_pynvml(records("2x_pcie"), init_error=NVMLError_LibraryNotFound))
    assert rec is None and why == ["NVML library not found (no NVIDIA driver on this machine)"]
    rec, why = probe_nvml(fake_pynvml(records("2x_pcie")))
    assert rec["gpus"] and why == []
    rec, why = probe_nvml()  # this machine: no pynvml or no driver
    assert rec is None and len(why) == 1
    assert why[0] in ("NVML: nvidia-ml-py (pynvml) not installed",
                      "NVML library not found (no NVIDIA driver on this machine)") or why[0].startswith("NVML:")


def test_gpu_numa_node_comes_from_sysfs_and_nvml_not_supported_is_quiet(tmp_path):
    """On PCIe x86 hosts NVML's NumaNodeId is Not Supported (it is the GPU memory's own node on
    Grace Hopper); the GPU's PCIe device's NUMA node is in sysfs."""
    rec = records("2x_pcie")
    nv = fake_pynvml(rec)

    def not_supported(h):
        raise nv.NVMLError("Not Supported")
    nv.nvmlDeviceGetNumaNodeId = not_supported
    for k, g in enumerate(rec["gpus"]):
        dom, rest = g["pci_bus_id"].split(":", 1)
        bus = f"{int(dom, 16):04x}:{rest.lower()}"          # sysfs names: 4 domain digits
        d = tmp_path / "sys" / "bus" / "pci" / "devices" / bus
        d.mkdir(parents=True)
        (d / "numa_node").write_text(f"{1 - k % 2}\n" if k != 0 else "-1\n")
    got = gather_nvml_records(nv, sysfs_root=tmp_path)
    assert [g["numa_node"] for g in got["gpus"]] == [None] + [1 - k % 2 for k in range(1, len(rec["gpus"]))]
    assert not [e for e in got["errors"] if "NUMA" in e]
    # without sysfs, NVML's answer (here: none) is used, still quietly
    assert all(g["numa_node"] is None for g in gather_nvml_records(nv)["gpus"])


def test_a_pair_nvml_cannot_answer_is_none_and_said():
    """The 2-GPU PCIe records with NVML failing the common-ancestor question for (1, 0) and the P2P write question
    for (0, 1): those cells are None, every other cell is the recorded one, and each failure is one line naming the
    pair and the question, in the order asked (topology first)."""
    rec = records("2x_pcie")
    nv = fake_pynvml(rec)
    ask_level, ask_p2p = nv.nvmlDeviceGetTopologyCommonAncestor, nv.nvmlDeviceGetP2PStatus

    def level(a, b):
        if (a, b) == (1, 0):
            raise FakeNVMLError(999)
        return ask_level(a, b)

    def p2p(a, b, idx):
        if (a, b, idx) == (0, 1, 1):
            raise FakeNVMLError(3)
        return ask_p2p(a, b, idx)
    nv.nvmlDeviceGetTopologyCommonAncestor, nv.nvmlDeviceGetP2PStatus = level, p2p
    got = gather_nvml_records(nv)
    assert got["errors"] == ["GPUs 1,0: topology common ancestor: 999", "GPUs 0,1: P2P write: 3"]
    assert got["topology"] == [[None, rec["topology"][0][1]], [None, None]]
    assert got["p2p"]["write"] == [[None, None], [rec["p2p"]["write"][1][0], None]]
    assert all(got["p2p"][k] == rec["p2p"][k] for k in ("read", "atomics", "nvlink"))
