"""NCCL rules that change at a patch release, and the model keeping a log's (major, minor, patch).

Read by hand at NVIDIA/nccl tags (src/graph/tuning.cc ``ncclTunerConstantsDefaults``, Blackwell rows):
``perChMaxRingLL128Bws`` {2*36.7, 2*36.7, 2*36.7} (v2.28.3-1 line 179) -> {2*36.7, 34.6, 2*36.7} (v2.28.7-1 and
v2.28.9-1 line 179) -> {34.5, 34.6, 34.5} (v2.29.2-1, v2.29.3-1) -> {40.0, 40.0, 40.0} (v2.29.7-1 line 180);
``perChMaxNVLSTreeBws`` on > 2 nodes 43.1 (v2.28.3-1, v2.28.7-1 line 197) -> 43.8 (v2.28.9-1 line 197);
``hwLatencies`` NET NVLSTree/Simple 14 (v2.28.7-1 line 165) -> 20.9 us (v2.28.9-1 line 165).  p2p work batches
keep to one epoch of 8 rounds from v2.28.7-1 (src/enqueue.cc ``addWorkBatchToPlan`` lines 131-138), not in
v2.28.3-1.  Every expected number is computed by hand from those rows and the graph the model builds (2 x 8 B200:
8 ring channels of 48 GB/s, PXB)."""

from __future__ import annotations

import dataclasses

import pytest

from _paths import ROOT  # noqa: F401  (puts the repository on sys.path)
from synth.model.nccl import DEFAULT_PARAMS, NcclEnv, NcclMachine, NcclModel
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.p2p_cta import p2p_channel_batches
from synth.model.nccl.versions import latency_tables
from synth.model.nccl.versions_patch import release, since
from topo_probe import cluster, get_preset

B200_2 = NcclMachine.from_topology(cluster("hgx-b200", nodes=2))
B200_4 = NcclMachine.from_topology(cluster("hgx-b200", nodes=4))


def test_a_bare_minor_is_its_first_release_and_a_patch_is_kept():
    assert release((2, 28)) == (2, 28, 0) and release((2, 28, 9)) == (2, 28, 9)
    assert not since((2, 28), (2, 28, 7)) and since((2, 28, 7), (2, 28, 7)) and since((2, 29), (2, 28, 9))
    assert NcclModel(B200_2, env=NcclEnv(), version=(2, 28, 9)).table.version == (2, 28, 9)


@pytest.mark.parametrize("version, per_channel", [((2, 28), 73.4), ((2, 28, 3), 73.4), ((2, 28, 7), 34.6),
                                                  ((2, 28, 9), 34.6), ((2, 29), 34.6), ((2, 29, 7), 40.0)])
def test_two_node_ring_ll128_estimate_follows_the_release_row(version, per_channel):
    g = comm_graphs(B200_2, NcclEnv(), version)
    assert (g.ring.n_channels, g.ring.bw_intra) == (8, 48.0)
    # busBw = min(8 x 48 x 0.92, 8 x perChMaxRingLL128Bw[Blackwell][N2]); all_reduce algbw = busBw x 16 / 30
    expected = min(8 * 48.0 * 0.92, 8 * per_channel) * 16 / 30
    got = NcclModel(B200_2, env=NcclEnv(), version=version).table.bandwidth[("allreduce", "ring", "LL128")]
    assert got == pytest.approx(expected)
    assert {73.4: 188.416, 34.6: 147.627, 40.0: 170.667}[per_channel] == pytest.approx(got, abs=1e-3)


def test_nvls_tree_cap_moves_at_2_28_9_not_2_28_7():
    bws = [NcclModel(B200_4, env=NcclEnv(), version=v).table.bandwidth[("allreduce", "nvls_tree", "Simple")]
           for v in ((2, 28, 3), (2, 28, 7), (2, 28, 9), (2, 29, 7))]
    assert bws[1] == pytest.approx(bws[0])
    assert bws[2] / bws[1] == pytest.approx(43.8 / 43.1)
    assert bws[3] == pytest.approx(bws[2])


def test_nvls_tree_network_hop_moves_at_2_28_9():
    hop = [latency_tables("nvls_tree", v, tuner=True)[1][2][2] for v in ((2, 28, 3), (2, 28, 7), (2, 28, 9))]
    assert hop == [14, 14, pytest.approx(20.9)]


def test_p2p_epochs_from_2_28_7_and_assumed_for_a_bare_2_28():
    """64 ranks on 32 channels, one part: rounds r and r + 32 share a channel, 4 epochs apart. 2.28.3 (no
    epoch rule) keeps both works in one batch; 2.28.7 opens a second."""
    assert p2p_channel_batches(64, 1, 32, (2, 28, 3)) == 1
    assert p2p_channel_batches(64, 1, 32, (2, 28, 7)) == 2
    assert p2p_channel_batches(64, 1, 32, (2, 28, 9)) == 2
    assert p2p_channel_batches(64, 1, 32, (2, 28)) == 2


@pytest.mark.parametrize("version, batches", [((2, 28, 3), 1), ((2, 28, 7), 2)])
def test_a_64_rank_alltoall_pays_the_fixed_p2p_cost_per_batch_of_its_release(version, batches):
    m = NcclMachine.from_topology(get_preset("gb200-nvl72")).with_(ranks=64)
    params = [dataclasses.replace(DEFAULT_PARAMS, p2p_latency_us=lat) for lat in (30.0, 40.0)]
    times = [NcclModel(m, p, env=NcclEnv(), version=version).choose("alltoall", 512 << 10).time_us for p in params]
    assert times[1] - times[0] == pytest.approx(10.0 * batches)
