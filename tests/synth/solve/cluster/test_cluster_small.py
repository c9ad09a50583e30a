"""2-4 hosts: the hierarchy with carried pieces, the rooted hierarchy and the delivery bound.

References: the verifier and an independent NumPy replay (tests/_replay.py) for correctness;
bandwidth terms (computed from the transfers) against bounds counted by hand from the
presets' link rates (one round = 25 GB/s: a DGX H100 GPU has 18 NVLink rounds and one 50 GB/s
NIC = 2; a DGX A100 GPU 12 NVLink rounds and one 25 GB/s NIC = 1) and against the cut bound
of synth.model.bounds.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from synth.ir.fabric import build_fabric
from synth.ir.verifier import check
from synth.solve.bounds_cache import fabric_bounds
from synth.solve.bwopt.bandwidth_term import bandwidth_term
from synth.solve.bwopt.optimal import bandwidth_optimal
from synth.solve.cluster.compose import hierarchical
from synth.solve.cluster.delivery_bound import delivery_bound
from synth.solve.cluster.rooted import hierarchical_rooted
from _replay import replays_correctly
from topo_probe.errors import InvalidArgument, UnsupportedCollective
from topo_probe.machines.clusters import cluster
from topo_probe.machines.presets import get_preset

_FABRICS: dict = {}


def fabric(preset: str, hosts: int, rails: bool):
    key = (preset, hosts, rails)
    if key not in _FABRICS:
        _FABRICS[key] = build_fabric(cluster(preset, hosts, rail_optimized=rails))
    return _FABRICS[key]


def arrivals_bound(hosts: int, gpus: int, nvlink_rounds: int, nic_rounds: int) -> Fraction:
    """Allgather, by hand: a host's GPUs take in gpus * (n - 1) blocks, over their NVLinks and
    the host's NICs (whatever the routes behind them), so T >= that / (host's NVLink + NIC rounds);
    and the host's NICs must bring in every other host's block once."""
    n = hosts * gpus
    return max(Fraction(gpus * (n - 1), gpus * (nvlink_rounds + nic_rounds)),
               Fraction(gpus * (hosts - 1), gpus * nic_rounds))


CASES = [  # preset, hosts, rails, NVLink rounds, NIC rounds per GPU
    ("dgx-h100", 2, False, 18, 2), ("dgx-h100", 2, True, 18, 2), ("dgx-h100", 4, False, 18, 2),
    ("dgx-a100", 2, False, 12, 1), ("dgx-a100", 2, True, 12, 1),
]
IDS = [f"{p}x{h}{'-rails' if r else ''}" for p, h, r, _, _ in CASES]


@pytest.mark.parametrize("preset,hosts,rails,nvl,nic", CASES, ids=IDS)
@pytest.mark.parametrize("coll", ["allgather", "reducescatter", "allreduce"])
def test_small_clusters_verify_and_meet_the_hand_bound(preset, hosts, rails, nvl, nic, coll):
    f = fabric(preset, hosts, rails)
    s = hierarchical(f, coll)
    check(s, f)
    assert replays_correctly(s, seed=2)
    hand = arrivals_bound(hosts, 8, nvl, nic)
    n = 8 * hosts
    bound = 2 * hand / n if coll == "allreduce" else hand      # phased: (RS + AG) / n
    term = bandwidth_term(s, f)
    assert bound <= term <= bound * Fraction(1005, 1000)
    assert Fraction(s.meta["achieved_exact"]) == term
    cut = fabric_bounds(f, coll).phased_rounds_per_block if coll == "allreduce" else \
        Fraction(fabric_bounds(f, coll).bandwidth_rounds_per_block)
    assert term >= cut
    if preset == "dgx-h100" and not rails:                       # the cut bound is the hand bound
        assert term <= cut * Fraction(1005, 1000)


def test_carried_pieces_are_what_reach_the_bound_on_two_hosts():
    """2 x dgx-h100: plain, every GPU takes 14 of its 15 blocks over NVLink (14/18 = 7/9 rounds);
    half a block more over each NIC (1.5 / 2 = 3/4) leaves 13.5 / 18 = 3/4 for NVLink."""
    f = fabric("dgx-h100", 2, False)
    plain = hierarchical(f, "allgather", chunks=1)
    carried = hierarchical(f, "allgather", chunks=2, carried=1)
    assert bandwidth_term(plain, f) == Fraction(7, 9)
    assert bandwidth_term(carried, f) == Fraction(3, 4)
    assert hierarchical(f, "allgather").steps == carried.steps
    assert carried.meta["carried"] == 1 and carried.chunks_per_rank == 2


def test_five_hosts_keep_the_plain_hierarchy():
    f = build_fabric(cluster("dgx-h100", 5))
    s = hierarchical(f, "allgather")
    assert s.meta["carried"] == 0 and s.chunks_per_rank == 1 and s.num_steps == 2


@pytest.mark.parametrize("preset,hosts,rails,nic", [("dgx-h100", 2, False, 2), ("dgx-h100", 2, True, 2),
                                                    ("dgx-h100", 4, False, 2), ("dgx-a100", 2, False, 1),
                                                    ("dgx-a100", 2, True, 1)], ids=IDS)
@pytest.mark.parametrize("coll", ["broadcast", "reduce"])
@pytest.mark.parametrize("root", [0, 13])
def test_rooted_meet_the_host_cut(preset, hosts, rails, nic, coll, root):
    """A host's 8 NICs must take the whole block in (broadcast; reduce: send it out): 1 / (8 x NIC)."""
    f = fabric(preset, hosts, rails)
    s = hierarchical_rooted(f, coll, root)
    check(s, f)
    assert s.root == root and replays_correctly(s, seed=3)
    term = bandwidth_term(s, f)
    assert term == Fraction(1, 8 * nic) == Fraction(fabric_bounds(f, coll, root).bandwidth_rounds_per_block)
    assert s.num_steps == 1 + (hosts - 1) + 1                     # scatter, the rail chain, NVSwitch stars


def test_rooted_bad_requests():
    f = fabric("dgx-h100", 2, False)
    with pytest.raises(UnsupportedCollective, match="allgather"):
        hierarchical_rooted(f, "allgather")
    with pytest.raises(UnsupportedCollective, match="pieces_per_gpu"):
        hierarchical_rooted(f, "broadcast", pieces_per_gpu=0)
    with pytest.raises(InvalidArgument, match="root"):
        hierarchical_rooted(f, "broadcast", 16)
    with pytest.raises(UnsupportedCollective, match="not a cluster"):
        hierarchical_rooted(build_fabric(get_preset("dgx-h100")), "broadcast")


@pytest.mark.parametrize("preset,hosts,rails,nvl,nic", CASES, ids=IDS)
def test_delivery_bound_is_the_hand_count(preset, hosts, rails, nvl, nic):
    f = fabric(preset, hosts, rails)
    want = arrivals_bound(hosts, 8, nvl, nic)
    assert delivery_bound(f, "allgather") == pytest.approx(float(want), rel=1e-9)
    assert delivery_bound(f, "reducescatter") == pytest.approx(float(want), rel=1e-9)


def test_delivery_bound_on_one_host_is_the_nvlink_cut():
    f = build_fabric(get_preset("dgx-h100"))
    assert delivery_bound(f, "allgather") == pytest.approx(7 / 18, rel=1e-9)      # 7 blocks over 18 NVLinks
    with pytest.raises(UnsupportedCollective, match="alltoall"):
        delivery_bound(f, "alltoall")


@pytest.mark.parametrize("coll", ["allgather", "allreduce", "broadcast"])
def test_auto_keeps_the_hierarchy_and_is_deterministic(coll):
    """Rails: the cut bound is loose (125/171 for allgather), the certified bound is met, so
    the tree packing is not run; two runs give the same schedule."""
    f = fabric("dgx-h100", 2, True)
    a = bandwidth_optimal(f, coll, time_limit_s=20)
    b = bandwidth_optimal(f, coll, time_limit_s=20)
    assert a.meta["method"] == "hierarchical" and a.steps == b.steps and a.chunks_per_rank == b.chunks_per_rank
    check(a, f)
    if coll != "broadcast":
        assert a.meta["ratio_to_certified_bound"] == pytest.approx(1.0, abs=1e-9)


_DIGEST = """
import hashlib
from topo_probe.machines.clusters import cluster
from synth.ir.fabric import build_fabric
from synth.solve.bwopt.optimal import bandwidth_optimal
f = build_fabric(cluster("dgx-a100", 2, rail_optimized=True))
got = [bandwidth_optimal(f, c, time_limit_s=20) for c in ("allreduce", "broadcast")]
print(hashlib.sha256(repr([(s.chunks_per_rank, s.steps) for s in got]).encode()).hexdigest())
"""


def test_the_same_schedules_whatever_the_string_hash_seed():
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = str(Path(__file__).resolve().parents[4])
    got = {subprocess.run([sys.executable, "-c", _DIGEST], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": root}).stdout
           for seed in ("1", "2")}
    assert len(got) == 1 and len(next(iter(got)).strip()) == 64


def test_rooted_hosts_not_joined_pairwise_fall_back_to_the_trees():
    """Two hosts whose 4 GPUs form a ring (GPUs 0 and 2 of a host are not joined): the
    hierarchical broadcast/reduce refuses them in one line (its root scatters to every GPU of
    its host), and bandwidth_optimal packs trees instead, a schedule the verifier accepts (it
    used to end in a KeyError from the fabric)."""
    from synth.ir.fabric import build_fabric
    from synth.ir.verifier import check
    from synth.solve.bwopt.optimal import bandwidth_optimal
    from synth.solve.cluster.rooted import hierarchical_rooted
    from topo_probe.errors import UnsupportedCollective
    from topo_probe.load import load_topology
    from topo_probe.machines.clusters import cluster
    topo = cluster(load_topology("ring:4"), nodes=2)
    fab = build_fabric(topo)
    with pytest.raises(UnsupportedCollective, match="not joined"):
        hierarchical_rooted(fab, "broadcast", 0)
    s = bandwidth_optimal(fab, "broadcast", root=0, time_limit_s=20)
    check(s, fab)
    assert s.meta["method"] == "lp-trees"
