"""Hierarchical schedules on clusters of identical hosts (synth.solve.cluster): replayed with NumPy
(tests/_replay.py), bandwidth terms against hand-counted cut bounds."""

from __future__ import annotations

from fractions import Fraction

import pytest

from synth.ir.fabric import build_fabric
from synth.ir.verifier import check
from synth.solve.bwopt.bandwidth_term import bandwidth_term
from synth.solve.bwopt.optimal import bandwidth_optimal
from synth.solve.cluster.compose import hierarchical
from synth.solve.cluster.local_trees import local_forest
from _replay import replays_correctly
from topo_probe.errors import UnsupportedCollective
from topo_probe.machines.clusters import cluster
from topo_probe.machines.presets import get_preset


@pytest.mark.parametrize("rail", [False, True])
@pytest.mark.parametrize("coll", ["allgather", "reducescatter", "allreduce"])
def test_dgx_h100_cluster_meets_the_host_cut(rail, coll):
    """5 hosts: a host's 8 NICs (2 chunks per 25 GB/s round each) take in 32 blocks: 2 rounds per
    block, above a GPU's 39 / 20; allreduce: (2 + 2) / 40 per block, the phased bound."""
    f = build_fabric(cluster("dgx-h100", 5, rail_optimized=rail))
    s = hierarchical(f, coll)
    check(s, f)
    assert replays_correctly(s)
    want = Fraction(4, 40) if coll == "allreduce" else Fraction(2)
    assert bandwidth_term(s, f) == want
    key = "ratio_to_phased_bound" if coll == "allreduce" else "ratio_to_bound"
    assert s.meta[key] == 1.0 and s.meta["method"] == "hierarchical"
    assert s.num_steps == (2 if coll != "allreduce" else 4)      # rails + one host level (NVSwitch star)


@pytest.mark.parametrize("topo", [
    cluster("dgx1-v100", 3),
    cluster(get_preset("dgx-h100").subset([0, 1, 2, 3], "h100x4"), 3, nics_per_node=2, rail_optimized=True),
    cluster("dgx-a100", 2, nics_per_node=1, nic_gbps=25.0),
    cluster("pcie-8gpu-2socket", 2, spine_oversubscription=2, hosts_per_leaf=1),
], ids=["dgx1-3", "h100x4-2nics-rails", "a100-1nic", "pcie-spine"])
@pytest.mark.parametrize("coll", ["allgather", "reducescatter", "allreduce"])
def test_other_hosts_verify_and_stay_above_the_bound(topo, coll):
    f = build_fabric(topo)
    s = hierarchical(f, coll, chunks=2 if coll == "allgather" else 1)
    assert replays_correctly(s, seed=1)
    assert s.meta["ratio_to_bound"] >= 1.0 - 1e-12
    assert Fraction(s.meta["achieved_exact"]) == bandwidth_term(s, f)


def test_one_nic_per_host_is_the_bottleneck():
    """Everything enters a host through its one NIC: 8 (H - 1) = 16 chunks at 1 chunk per round
    (the 25 GB/s NIC; an NVLink is the 25 GB/s round), so the hierarchy meets the host cut."""
    f = build_fabric(cluster("dgx-a100", 3, nics_per_node=1, nic_gbps=25.0))
    s = hierarchical(f, "allgather")
    assert f.unit_gbps == 25.0 and bandwidth_term(s, f) == 16
    assert s.meta["ratio_to_bound"] == 1.0


def test_local_forest_counts_whole_chunks():
    f = build_fabric(get_preset("dgx1-v100"))
    lf = local_forest(f, False, 12)
    assert all(sum(m for _, m in ts) == 12 for ts in lf.counts.values())
    assert lf.term == Fraction(7, 6)             # 12 chunks: two per ring direction of the cube mesh
    assert local_forest(build_fabric(get_preset("dgx-h100")), False, 3).term == Fraction(7, 18)


def test_auto_prefers_the_better_method_on_small_clusters():
    f = build_fabric(cluster("dgx-h100", 2))
    s = bandwidth_optimal(f, "allgather", time_limit_s=20)
    check(s, f)
    assert s.meta["achieved_rounds_per_block"] <= hierarchical(f, "allgather").meta["achieved_rounds_per_block"]


def test_bad_requests():
    with pytest.raises(UnsupportedCollective, match="not a cluster"):
        hierarchical(build_fabric(get_preset("dgx-h100")), "allgather")
    f = build_fabric(cluster("dgx-h100", 2))
    with pytest.raises(UnsupportedCollective, match="broadcast"):
        hierarchical(f, "broadcast")
    with pytest.raises(UnsupportedCollective, match="chunks"):
        hierarchical(f, "allgather", chunks=0)
    with pytest.raises(UnsupportedCollective, match="carried"):
        hierarchical(f, "allgather", carried=-1)
    with pytest.raises(UnsupportedCollective, match="at most 7 carried"):
        hierarchical(f, "allgather", chunks=2, carried=8)
    with pytest.raises(UnsupportedCollective, match="tree packing stops"):
        bandwidth_optimal(build_fabric(cluster("dgx-h100", 9)), "gather")
