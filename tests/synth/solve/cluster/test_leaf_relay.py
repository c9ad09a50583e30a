"""Oversubscribed leaf-spine clusters: the leaf cut counted by hand, and the hierarchy that relays
through one host per leaf meeting the larger of the host cut and the leaf cut.

By hand, DGX H100 hosts (8 NICs of 50 GB/s, a round moves 2 chunks over a NIC): an allgather
must bring the ``8 (H - L)`` blocks of the other leaves into a leaf of ``L`` hosts through its
uplink of ``L * 8 * 50 / R`` GB/s, ``R (H - L) / (2 L)`` rounds per block; a host takes the
``8 (H - 1)`` other blocks in through its 8 NICs, ``(H - 1) / 2``.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from synth.ir.fabric import build_fabric
from synth.ir.verifier import check
from synth.model.bounds import lower_bounds
from synth.solve.bwopt.bandwidth_term import bandwidth_term
from synth.solve.bwopt.optimal import bandwidth_optimal
from synth.solve.cluster.compose import _build, hierarchical, host_fabric
from synth.solve.cluster.leaf_relay import leaf_partners
from topo_probe.machines.clusters import cluster


def hand_bound(H: int, L: int, R: int) -> Fraction:
    return max(Fraction(H - 1, 2), Fraction(R * (H - L), 2 * L))


CASES = [(8, 2, 4, False), (8, 4, 2, True), (16, 4, 2, False), (6, 2, 4, True)]


@pytest.mark.parametrize("H,L,R,rail", CASES)
def test_bound_counts_the_leaf_cut(H, L, R, rail):
    fab = build_fabric(cluster("dgx-h100", H, spine_oversubscription=R, hosts_per_leaf=L, rail_optimized=rail))
    assert lower_bounds(fab, "allgather").bandwidth_rounds_per_block == hand_bound(H, L, R)


@pytest.mark.parametrize("H,L,R,rail", CASES)
def test_relayed_hierarchy_meets_the_bound(H, L, R, rail):
    fab = build_fabric(cluster("dgx-h100", H, spine_oversubscription=R, hosts_per_leaf=L, rail_optimized=rail))
    bound = hand_bound(H, L, R)
    for name in ("allgather", "reducescatter"):
        s = hierarchical(fab, name)
        check(s, fab)
        assert s.meta["leaf_relay"] is True
        assert bandwidth_term(s, fab) == bound
    ar = hierarchical(fab, "allreduce")
    check(ar, fab)
    assert bandwidth_term(ar, fab) == 2 * bound / (8 * H)           # the phased bound (RS + AG) / n
    # without the relay a block crosses the spine once per host: the leaf uplink carries L times the leaf cut
    plain = _build(fab, host_fabric(fab), "allgather", 1, 0, 30.0, None)
    assert bandwidth_term(plain, fab) == max(Fraction(H - 1, 2), L * Fraction(R * (H - L), 2 * L))


def test_relay_sends_each_block_over_the_spine_once_per_leaf():
    """8 hosts in 4 leaves of 2: the chunks of rank 0 leave leaf 0 three times (once per other
    leaf) and reach every other rank on rail 0 exactly once."""
    fab = build_fabric(cluster("dgx-h100", 8, spine_oversubscription=4, hosts_per_leaf=2))
    s = hierarchical(fab, "allgather")
    g = 8
    rail = [t for st in s.steps for t in st.transfers if t.chunk == 0 and t.src // g != t.dst // g]
    leaf = [h // 2 for h in range(8)]
    crossings = [t for t in rail if leaf[t.src // g] != leaf[t.dst // g]]
    assert len(crossings) == 3 and len({leaf[t.dst // g] for t in crossings}) == 3
    assert sorted(t.dst for t in rail) == [h * g for h in range(1, 8)]


def test_leaves_to_relay_over():
    assert leaf_partners((0, 0, 1, 1, 2, 2)) == [[0, 1], [2, 3], [4, 5]]
    assert leaf_partners((0, 1, 2)) is None            # one host per leaf: nothing to relay
    assert leaf_partners((0, 0, 0, 0, 1, 1)) == [[0, 1, 2, 3], [4, 5]]   # a partly filled last leaf
    assert leaf_partners((0,) * 4) is None


@pytest.mark.parametrize("H,L", [(6, 4), (11, 4), (7, 4)])
def test_partly_filled_leaf_meets_the_host_cut(H, L):
    """4:1, the last leaf partly filled: its uplink is as wide as a full leaf's, so the bound is
    the host cut (H - 1) / 2 (hand count above: the small leaf's cut is below it).  Without relays
    the small leaf's hosts pull the other leaves' blocks over the spine once each (6 hosts:
    4 = 1.6x); relaying needs some blocks of the small leaf to go straight to 2 hosts of a full
    leaf (a mean of ``k`` direct hosts above 1)."""
    fab = build_fabric(cluster("dgx-h100", H, spine_oversubscription=4, hosts_per_leaf=L))
    small = H % L
    assert lower_bounds(fab, "allgather").bandwidth_rounds_per_block == Fraction(H - 1, 2)
    assert max(Fraction(4 * (H - small), 2 * L), Fraction(4 * (H - L), 2 * L)) <= Fraction(H - 1, 2)
    s = hierarchical(fab, "allgather")
    check(s, fab)
    assert bandwidth_term(s, fab) == Fraction(H - 1, 2)
    assert Fraction(s.meta["leaf_direct"][f"{small}->{L}"]) > 1
    rs = hierarchical(fab, "reducescatter")
    check(rs, fab)
    assert bandwidth_term(rs, fab) == Fraction(H - 1, 2)


def test_single_switch_cluster_keeps_its_schedule():
    """No leaves, no relay: the schedule has no relay mark and one rails step."""
    fab = build_fabric(cluster("dgx-h100", 6))
    s = bandwidth_optimal(fab, "allgather")
    assert "leaf_relay" not in s.meta
    assert s.meta["ratio_to_bound"] == 1.0
