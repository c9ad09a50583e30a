"""Blackwell's tuner rows after NCCL 2.28.3, and the LL128 rate the execution model runs Blackwell at.

src/graph/tuning.cc ``ncclTunerConstantsDefaults``, read by hand at NVIDIA/nccl tags v2.28.3-1, v2.28.7-1,
v2.29.3-1, v2.29.7-1 and v2.30.3-1: ``perChMaxRingLL128Bws`` Blackwell {2*36.7, 2*36.7, 2*36.7} ->
{34.5, 34.6, 34.5} (2.29.3) -> {40.0, 40.0, 40.0} (2.29.7); ``perChMaxNVLSTreeBws`` Blackwell on > 2
nodes 43.1 -> 43.8 (2.28.9) -> 80.0 (2.30.3); ``hwLatencies`` NET NVLSTree/Simple 14 -> 20.9 µs (2.28.9).
These tests give bare (major, minor) versions; the patch-level rows are test_patch_versions.py's.
Every expected number below is computed by hand from those rows and the graphs the model builds."""

from __future__ import annotations

import pytest

from _paths import ROOT  # noqa: F401  (puts the repository on sys.path)
from synth.model.nccl import NcclEnv, NcclMachine, NcclModel
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.channel_caps import ring_channel_cap_gbs
from synth.model.nccl.versions import latency_tables
from topo_probe import cluster, get_preset

B200 = NcclMachine.from_topology(get_preset("hgx-b200"))
B200_4 = NcclMachine.from_topology(cluster("hgx-b200", nodes=4))
H100 = NcclMachine.from_topology(get_preset("dgx-h100"))


def _tuner_bw(m, version, algo, proto="Simple", coll="allreduce"):
    return NcclModel(m, version=version).table.bandwidth[(coll, algo, proto)]


@pytest.mark.parametrize("version, per_channel", [((2, 28), 73.4), ((2, 29), 34.5), ((2, 30), 40.0)])
def test_tuner_ring_ll128_estimate_follows_the_versions_blackwell_row(version, per_channel):
    g = comm_graphs(B200, NcclEnv(), version)
    assert g.ring.n_channels == 16
    # busBw = min(16 x bwIntra x 0.92, 16 x perChMaxRingLL128Bw); all_reduce algbw = busBw x 8 / 14
    bus = min(16 * g.ring.bw_intra * 0.92, 16 * per_channel)
    assert _tuner_bw(B200, version, "ring", "LL128") == pytest.approx(bus * 8 / 14)


def test_hopper_rows_did_not_move():
    assert [_tuner_bw(H100, v, "ring", "LL128") for v in ((2, 29), (2, 30))] == \
        [pytest.approx(_tuner_bw(H100, (2, 28), "ring", "LL128"))] * 2


def test_tuner_nvls_tree_cap_on_more_than_two_nodes():
    # 4 x 8 B200: the NVLS-tree estimate is capped per channel at 43.1 (2.28.3), 43.8 (2.29), 80.0 (2.30)
    caps = [_tuner_bw(B200_4, v, "nvls_tree") for v in ((2, 28), (2, 29), (2, 30))]
    assert caps[1] / caps[0] == pytest.approx(43.8 / 43.1)
    assert caps[2] > caps[1]                     # 80 no longer binds: the graph's own rate does


def test_execution_runs_blackwell_ll128_at_40_per_channel_in_every_version():
    for version in ((2, 26), (2, 28), (2, 30)):
        g = comm_graphs(B200, NcclEnv(), version)
        # 16 graph channels x 40 GB/s, shared by the CTAs that run (8 of 32)
        assert ring_channel_cap_gbs(B200, "LL128", 8, g, "allreduce", version) == pytest.approx(16 * 40.0 * 8 / 32)
        # Simple: the same per-channel figure in payload terms (120 of 128 bytes)
        assert ring_channel_cap_gbs(B200, "Simple", 8, g, "allreduce", version) == pytest.approx(8 * 40.0 * 128 / 120)
    g = comm_graphs(H100, NcclEnv(), (2, 28))
    assert ring_channel_cap_gbs(H100, "LL128", g.n_channels, g, "allreduce", (2, 28)) == pytest.approx(g.ring.n_channels * 36.7)


def test_nvls_tree_network_hop_of_the_tuner_only():
    assert latency_tables("nvls_tree", (2, 28), tuner=True)[1][2][2] == 14
    assert latency_tables("nvls_tree", (2, 29), tuner=True)[1][2][2] == pytest.approx(20.9)
    assert latency_tables("nvls_tree", (2, 30))[1][2][2] == 14          # the execution model's hop is fitted on 14
    assert latency_tables("nvls", (2, 30), tuner=True)[1][2][2] == 18


def test_b200_forced_ring_ll128_is_bound_by_40_gbs_per_graph_channel():
    # 1 GiB all_reduce on 8 x B200, ring/LL128 forced: its bus bandwidth never beats 16 graph channels x
    # 40 GB/s (nor 16 x 73.4, the 2.28.3 row, which it may approach now only if the links allow it)
    choice = NcclModel(B200).forced("allreduce", "ring", "LL128", 1 << 30)
    busbw = 2 * 7 / 8 * (1 << 30) / (1000.0 * choice.time_us)
    assert busbw <= 16 * 40.0 * 1.0001
    assert busbw > 0.8 * 16 * 40.0                # and the cap is what binds at this size
