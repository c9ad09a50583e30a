"""A tree's LL128 chain is capped by NCCL's own per-channel tree LL128 ceiling (``perChMaxTreeLL128Bws`` x the
tree graph's channels, NVIDIA/nccl v2.28.9-1 src/graph/tuning.cc line 308) at one achieved fraction for every
GPU generation, not by a fraction of the chain's link bandwidth fitted on cloud hosts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from synth.model.nccl.channel_caps import tree_ll128_cap_gbs
from synth.model.nccl.constants import busbw_factor
from synth.model.nccl.env import NcclEnv
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.params import DEFAULT_PARAMS, ModelParams
from synth.model.nccl.runtime import collective_time_us
from synth.model.nccl.tuning import TuneTable
from topo_probe import cluster

#: NCCL 2.28's perChMaxTreeLL128Bws rows (GB/s per channel, 1 / 2 / > 2 nodes), copied by hand from tuning.cc
NCCL_TREE_LL128 = {"sm70": (20.0, 20.0, 20.0), "sm80": (20.0, 20.0, 20.0), "sm90": (36.7, 36.7, 29.0),
                   "sm100": (55.6, 31.67, 20.0)}


@pytest.mark.parametrize("preset,arch", [("dgx1-v100", "sm70"), ("dgx-a100", "sm80"), ("dgx-h100", "sm90"),
                                         ("hgx-b200", "sm100")])
@pytest.mark.parametrize("nodes", [2, 4])
def test_the_cap_is_nccls_per_channel_figure_times_the_tree_channels(preset, arch, nodes):
    m = NcclMachine.from_topology(cluster(preset, nodes=nodes))
    g = comm_graphs(m, NcclEnv(), (2, 28))
    per_channel = NCCL_TREE_LL128[arch][min(nodes, 3) - 1]
    expected = 0.5 * per_channel * g.tree.n_channels * 2 * (m.ranks - 1) / m.ranks     # tree algbw in bus terms
    assert tree_ll128_cap_gbs(m, g, "allreduce", ModelParams(tree_ll128_channel_eff=1.0)) == pytest.approx(expected)
    half = tree_ll128_cap_gbs(m, g, "allreduce", ModelParams(tree_ll128_channel_eff=0.5))
    assert half == pytest.approx(expected / 2)


def test_the_cap_binds_a_tree_ll128_all_reduce_and_not_its_simple_twin():
    """Two DGX-1 over 4 x 100 Gb/s: lowering the fraction slows tree/LL128 by the ratio where the cap binds, and
    leaves tree/Simple untouched (hand-worked: the cap is the one term that changes)."""
    m = NcclMachine.from_topology(cluster("dgx1-v100", nodes=2, nics_per_node=4, nic_gbps=12.5))
    t = TuneTable.build(m, NcclEnv(), (2, 28))
    size = 256 << 20
    lo, hi = (replace(DEFAULT_PARAMS, tree_ll128_channel_eff=k) for k in (0.1, 0.2))
    t_lo, t_hi = (collective_time_us(t, "allreduce", "tree", "LL128", t.graphs.n_channels, size, p) for p in (lo, hi))
    wire = size * busbw_factor("allreduce", m.ranks) / 1000.0
    cap_lo = tree_ll128_cap_gbs(m, t.graphs, "allreduce", lo)
    assert t_lo - t_hi == pytest.approx(wire / cap_lo - wire / (2 * cap_lo), rel=1e-6)
    s_lo, s_hi = (collective_time_us(t, "allreduce", "tree", "Simple", t.graphs.n_channels, size, p) for p in (lo, hi))
    assert s_lo == s_hi
