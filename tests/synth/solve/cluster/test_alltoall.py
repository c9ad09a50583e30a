"""AllToAll by multicommodity flow on clusters (synth.solve.cluster.alltoall): NumPy replay, the
cut bound counted by hand, and the cost model against the direct (NCCL pairwise) baseline."""

from __future__ import annotations

from fractions import Fraction

import pytest

from synth.baselines import baseline
from synth.ir.fabric import build_fabric
from synth.model.cost import CostModel
from synth.solve.bwopt.bandwidth_term import bandwidth_term
from synth.solve.bwopt.optimal import bandwidth_optimal
from synth.solve.cluster.alltoall import cluster_alltoall
from _replay import replays_correctly
from topo_probe.errors import UnsupportedCollective
from topo_probe.machines.clusters import cluster
from topo_probe.machines.presets import get_preset


@pytest.mark.parametrize("kw", [dict(rail_optimized=True), dict(), dict(spine_oversubscription=2, hosts_per_leaf=2),
                                dict(rail_optimized=True, spine_oversubscription=4, hosts_per_leaf=2)])
def test_dgx_h100_alltoall_meets_the_cut(kw):
    """4 hosts.  Host cut: 8 GPUs send 8 blocks to each of 24 remote GPUs through 8 NICs of 2
    chunks a round: 8 x 24 / 16 = 12 rounds per block.  Leaves of 2 hosts joined by a spine at
    R:1: the 16 GPUs of a leaf send 16 x 16 blocks out through 2 x 16 / R chunks a round."""
    f = build_fabric(cluster("dgx-h100", 4, **kw))
    s = cluster_alltoall(f)
    assert replays_correctly(s)
    R = kw.get("spine_oversubscription")
    want = Fraction(12) if R is None else max(Fraction(12), Fraction(16 * 16 * R, 32))
    assert bandwidth_term(s, f) == want
    assert s.meta["ratio_to_bound"] == 1.0 and s.meta["lp_rounds_per_block"] == pytest.approx(float(want))


def test_rails_beat_the_pairwise_alltoall_in_the_cost_model():
    """Pairwise sends across rails cross PCIe and the CPU; the LP relays over NVLink to the
    destination's rail (PXN-like), so the model's time at 1 GiB drops."""
    f = build_fabric(cluster("dgx-h100", 4, rail_optimized=True))
    ours = cluster_alltoall(f)
    pairwise = baseline("direct", f, "alltoall")
    cost = CostModel(f)
    assert cost.schedule_time_us(pairwise, 1 << 30) > 1.5 * cost.schedule_time_us(ours, 1 << 30)
    assert bandwidth_term(pairwise, f) > bandwidth_term(ours, f)


def test_hosts_without_a_switch_relay_inside():
    """DGX-1 hosts: GPU pairs without NVLink relay through a common neighbour."""
    f = build_fabric(cluster("dgx1-v100", 2))
    s = cluster_alltoall(f)
    assert replays_correctly(s, seed=2)
    assert s.meta["ratio_to_bound"] >= 1.0 - 1e-12 and s.meta["ratio_to_lp"] <= 1.005


def test_bandwidth_optimal_takes_alltoall_on_clusters_only():
    f = build_fabric(cluster("dgx-h100", 2))
    assert bandwidth_optimal(f, "alltoall").meta["method"] == "mcf-lp"
    with pytest.raises(UnsupportedCollective):
        bandwidth_optimal(build_fabric(get_preset("dgx-h100")), "alltoall")
    with pytest.raises(UnsupportedCollective, match="not a cluster"):
        cluster_alltoall(build_fabric(get_preset("dgx-h100")))
    with pytest.raises(UnsupportedCollective, match="max_chunks"):
        cluster_alltoall(f, max_chunks=0)


_DIGEST = """
import hashlib
from topo_probe.machines.clusters import cluster
from synth.ir.fabric import build_fabric
from synth.solve.cluster.alltoall import cluster_alltoall
s = cluster_alltoall(build_fabric(cluster("dgx-h100", 2, rail_optimized=True)), time_limit_s=60)
print(hashlib.sha256(repr((s.chunks_per_rank, s.steps)).encode()).hexdigest())
"""


def test_the_same_schedule_whatever_the_string_hash_seed():
    """The fabric lists a route's resources in an order that follows Python's string hashing;
    the LP must not (it once picked another of its optimal vertices in each process)."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = str(Path(__file__).resolve().parents[4])
    got = {subprocess.run([sys.executable, "-c", _DIGEST], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": root}).stdout
           for seed in ("1", "2")}
    assert len(got) == 1
