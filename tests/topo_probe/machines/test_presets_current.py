"""Presets of current hardware (issue 22) against the published figures, computed by hand here:
per-GPU NVLink / Infinity Fabric GB/s per direction, GPU and NIC counts, NIC speed, P2P, compute
capability; ``--nodes 2``; fingerprints; the NCCL model; one synthesis (hgx-b200 allgather)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from synth.model.nccl.env import NcclEnv
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.tuner import NcclModel
from topo_probe.cli.main import main as topo_probe_main
from topo_probe.machines.clusters import cluster
from topo_probe.machines.presets import PRESETS, get_preset
from topo_probe.machines.presets_current import CURRENT_PRESETS
from topo_probe.topology.model import GPU_LINK_KINDS

# Published figures, each as the source states it (bidirectional where the vendor says so):
# name: (GPUs, links per GPU, GB/s per link *bidirectional*, NICs, NIC Gb/s, cc / gfx, GPU name part)
PUBLISHED = {
    "hgx-h200": (8, 18, 50.0, 8, 400, "9.0", "H200"),          # H200 data sheet: 900 GB/s NVLink per GPU
    "hgx-b200": (8, 18, 100.0, 8, 400, "10.0", "B200"),        # DGX B200: 14.4 TB/s over 8 GPUs = 1.8 TB/s
    "gb200-nvl72": (72, 18, 100.0, 72, 400, "10.0", "GB200"),  # NVL72: 1.8 TB/s per GPU, 130 TB/s per rack
    "mi325x": (8, 7, 128.0, 8, 400, "gfx942", "MI325X"),       # 896 GB/s aggregate = 7 x 128
    "mi355x": (8, 7, 153.6, 8, 400, "gfx950", "MI355X"),       # 1075.2 GB/s aggregate = 7 x 153.6
    "l40s-8gpu-pcie": (8, 0, 0.0, 4, 200, "8.9", "L40S"),      # no NVLink; PCIe Gen4 x16 64 GB/s bidir.
}


def test_names_are_registered_with_their_sources():
    assert set(CURRENT_PRESETS) == set(PUBLISHED) and set(PUBLISHED) <= set(PRESETS)
    for name, (builder, doc) in CURRENT_PRESETS.items():
        assert PRESETS[name] == (builder, doc) and ("data sheet" in doc or "user guide" in doc or "page" in doc)
        assert builder.__doc__ and len(doc) > 200


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_figures(name):
    gpus, links, link_bidir, nics, nic_gbit, arch, part = PUBLISHED[name]
    t = get_preset(name)
    t.check_connected()
    assert t.num_gpus == gpus
    per_gpu = links * link_bidir / 2            # GB/s per direction
    for i in range(gpus):
        out = [d for _, _, d in t.graph.out_edges(t.gpu(i), data=True) if d["kind"] in GPU_LINK_KINDS]
        assert sum(d["links"] for d in out) == links
        assert t.gpu_bandwidth_gbps(i) == pytest.approx(per_gpu)
        attrs = t.graph.nodes[t.gpu(i)]
        assert part in attrs["name"] and attrs["host"] == 0 and attrs["index"] == i
        assert (attrs.get("gcn_arch") if arch.startswith("gfx") else attrs["compute_capability"]) == arch
    nic_nodes = t.nodes_of_kind("nic")
    assert len(nic_nodes) == nics and {t.graph.nodes[n]["speed_gbps"] for n in nic_nodes} == {nic_gbit / 8}


def test_hand_computed_totals():
    # NVL72: 72 GPUs x 1.8 TB/s = 129.6 TB/s ("130 TB/s"); DGX B200: 8 x 1.8 = 14.4 TB/s
    rack = get_preset("gb200-nvl72")
    assert 2 * sum(rack.gpu_bandwidth_gbps(i) for i in range(72)) == pytest.approx(129_600.0)
    assert 2 * sum(get_preset("hgx-b200").gpu_bandwidth_gbps(i) for i in range(8)) == pytest.approx(14_400.0)
    assert len(rack.nodes_of_kind("nvswitch")) == 18 and len(rack.nodes_of_kind("cpu")) == 36
    assert {rack.graph.nodes[f"nvswitch{k}"]["tray"] for k in range(18)} == set(range(9))
    assert len(get_preset("hgx-b200").nodes_of_kind("nvswitch")) == 2
    assert len(get_preset("hgx-h200").nodes_of_kind("nvswitch")) == 4


@pytest.mark.parametrize("name", ["hgx-h200", "hgx-b200", "mi325x", "mi355x"])
def test_every_pair_one_hop_and_p2p(name):
    t = get_preset(name)
    want = "NV18" if name.startswith("hgx") else "NV1"
    for i, j in t.gpu_pairs():
        assert t.smi_label(i, j) == want and t.path_class(i, j) == "NVL" and t.p2p(i, j).supported


def test_l40s_p2p_follows_the_pcie_tree():
    t = get_preset("l40s-8gpu-pcie")
    for i, j in t.gpu_pairs():
        same_switch = i // 4 == j // 4
        assert t.smi_label(i, j) == ("PIX" if same_switch else "SYS")
        assert t.p2p(i, j).supported == same_switch
    pcie = {d["bandwidth_gbps"] for _, _, d in t.graph.out_edges("gpu0", data=True) if d["kind"] == "pcie"}
    assert pcie == {16 * 1.96875}   # Gen4 x16: 16 GT/s x 16 lanes x 128/130 / 8 = 31.5 GB/s


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_two_nodes(name):
    g, nics = PUBLISHED[name][0], PUBLISHED[name][3]
    c = cluster(name, nodes=2)
    assert c.num_gpus == 2 * g and c.host_of(g) == 1 and c.path_class(0, g) == "NET"
    assert len(c.nodes_of_kind("nic")) == 2 * nics
    m = NcclMachine.from_topology(c)
    assert (m.nodes, m.gpus_per_node, m.nics_per_node) == (2, g, nics)


#: same interconnect, so the same structural fingerprint (names and bus ids do not count): the HGX H200
#: baseboard is the HGX H100 one; MI325X keeps MI300X's Infinity Fabric (896 GB/s) and platform
SAME_FABRIC = {"hgx-h200": "dgx-h100", "mi325x": "mi300x"}


def test_fingerprints_stable_and_distinct():
    fps = {name: get_preset(name).fingerprint() for name in PRESETS}
    assert all(get_preset(n).fingerprint() == fps[n] for n in PUBLISHED)
    for new, old in SAME_FABRIC.items():
        assert fps[new] == fps[old]
    distinct = {n: fp for n, fp in fps.items() if n not in SAME_FABRIC}
    assert len(set(distinct.values())) == len(distinct)


ARCH = {"hgx-h200": "sm90", "hgx-b200": "sm100", "gb200-nvl72": "sm100", "mi325x": "gfx942", "mi355x": "gfx950",
        "l40s-8gpu-pcie": "sm89"}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_nccl_model_gives_a_finite_time(name):
    m = NcclMachine.from_topology(get_preset(name))
    assert m.arch == ARCH[name]
    assert m.link_gbs == pytest.approx(PUBLISHED[name][2] / 2 if PUBLISHED[name][1] else 25.0)
    t_us = NcclModel(m, env=NcclEnv()).time_us("allreduce", 1 << 20)
    # above the 1 MiB all_reduce lower bound 2(n-1)/n x 1 MiB over the per-GPU bandwidth, below 10 ms
    per_gpu = max(PUBLISHED[name][1] * PUBLISHED[name][2] / 2, 31.5)
    assert math.isfinite(t_us) and 2 * 7 / 8 * (1 << 20) / (per_gpu * 1e3) < t_us < 10_000


def test_synthesized_allgather_on_hgx_b200_meets_the_hand_bound():
    """Allgather on 8 GPUs of 900 GB/s per direction: each GPU receives 7 blocks, so 7/900 s per GB,
    i.e. 7/18 rounds per block of 50 GB/s (one NVLink5)."""
    from synth import bandwidth_optimal, build_fabric, verify
    f = build_fabric(get_preset("hgx-b200"))
    assert f.unit_gbps == 50.0
    s = bandwidth_optimal(f, "allgather", time_limit_s=30)
    assert verify(s, f) is None
    assert Fraction(s.meta["achieved_exact"]) == Fraction(7, 18)


@pytest.mark.parametrize("name", ["hgx-b200", "mi355x"])
def test_topo_probe_cli_shows_the_preset(name, capsys):
    assert topo_probe_main(["--topology", name, "--nodes", "2"]) in (0, None)
    out = capsys.readouterr().out
    assert f"2x{name}: 16 GPUs" in out
