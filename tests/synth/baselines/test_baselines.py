"""Baselines: every applicable baseline on every preset and collective verifies and computes the
right result under an independent NumPy execution; ring counts, step counts and rounds checked
against hand-computed values; inapplicable baselines say why."""

from __future__ import annotations

import json
import math
from functools import lru_cache

import pytest
from _replay import replays_correctly  # noqa: E402
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.baselines import BASELINES, available_baselines, baseline
from synth.baselines.ringsearch import find_rings
from synth.baselines.tree import btree_parents, nccl_trees
from synth.ir.collectives import COLLECTIVES, ROOTED
from synth.ir.fabric import build_fabric
from synth.ir.schedule import Schedule, Step
from synth.ir.verifier import RULES, verify
from topo_probe.errors import InvalidArgument, UnsupportedCollective
from topo_probe.machines.clusters import cluster
from topo_probe.machines.generators import fully_connected, ring, torus
from topo_probe.machines.presets import get_preset
from topo_probe.topology.model import Topology

PRESETS = ("dgx1-v100", "dgx2", "dgx-a100", "dgx-h100", "pcie-8gpu-2socket", "mi300x")
DGX1 = [[0, 2, 1, 1, 2, 0, 0, 0], [2, 0, 1, 2, 0, 1, 0, 0], [1, 1, 0, 2, 0, 0, 2, 0], [1, 2, 2, 0, 0, 0, 0, 1],
        [2, 0, 0, 0, 0, 2, 1, 1], [0, 1, 0, 0, 2, 0, 1, 2], [0, 0, 2, 0, 1, 1, 0, 2], [0, 0, 0, 1, 1, 2, 2, 0]]


def dgx1_hand(gpus=range(8)) -> Topology:
    gpus = list(gpus)
    t = Topology(f"dgx1-hand{len(gpus)}")
    for k, _ in enumerate(gpus):
        t.add_gpu(k)
    for a, i in enumerate(gpus):
        for b, j in enumerate(gpus):
            if a < b and DGX1[i][j]:
                t.add_link(f"gpu{a}", f"gpu{b}", kind="nvlink", links=DGX1[i][j], bandwidth_gbps=25.0 * DGX1[i][j])
    return t


@lru_cache(maxsize=None)
def fabric(name: str):
    extra = {"dgx1-hand": lambda: dgx1_hand(), "dgx1[0-5]": lambda: get_preset("dgx1-v100").subset(range(6)),
             "dgx1[0-4]": lambda: dgx1_hand(range(5)), "ring8": lambda: ring(8), "torus3x4": lambda: torus(3, 4),
             "full5": lambda: fully_connected(5), "2xdgx-h100": lambda: cluster("dgx-h100", nodes=2),
             "single": lambda: _single()}
    return build_fabric(extra[name]() if name in extra else get_preset(name))


def _single() -> Topology:
    t = Topology("single")
    t.add_gpu(0)
    return t


# ---------------------------------------------------------------- independent reference
def numpy_correct(s, seed=0) -> bool:
    """Execute on random integers (sums for combining chunks, owner values otherwise)."""
    return replays_correctly(s, seed)


def check_schedule(s, f, name, coll, C=None):
    assert s.name == name and s.meta["baseline"] == name
    assert s.collective == coll and s.ranks == f.num_ranks
    assert (s.topology_name, s.topology_fingerprint) == (f.topology_name, f.fingerprint)
    if C is not None:
        assert s.chunks_per_rank == C
    rep = verify(s, f)
    assert rep.ok, rep.violations[:2]
    assert [st.rounds for st in s.steps] == rep.rounds_needed  # every step declares the minimum
    assert numpy_correct(s)
    assert Schedule.from_dict(json.loads(s.to_json())) == s  # meta is plain JSON


# ---------------------------------------------------------------- every preset, collective, baseline
EXPECTED = {  # which baselines apply (root 0), derived by hand from the link structure
    "dgx1-v100": {"ring": COLLECTIVES, "tree": ("allreduce", "broadcast", "reduce", "gather", "scatter"),
                  "rhd": ("allgather", "reducescatter", "allreduce")},   # partners r^1, r^2, r^4 are NVLinks
    "dgx-a100": {"ring": COLLECTIVES, "tree": ("allreduce", "broadcast", "reduce", "gather", "scatter"),
                 "direct": COLLECTIVES, "rhd": ("allgather", "reducescatter", "allreduce"),
                 "bruck": ("allgather", "alltoall"), "oneshot": ("allreduce",)},
}
EXPECTED["dgx-h100"] = EXPECTED["mi300x"] = EXPECTED["dgx2"] = EXPECTED["pcie-8gpu-2socket"] = EXPECTED["dgx-a100"]


@pytest.mark.parametrize("preset", PRESETS)
def test_every_applicable_baseline_verifies_on_every_preset(preset):
    f = fabric(preset)
    for coll in COLLECTIVES:
        avail = available_baselines(f, coll)
        want = [b for b in BASELINES if coll in EXPECTED[preset].get(b, ())]
        assert avail == want, (coll, avail)
        for name in avail:
            for C in (1, 2, 3):
                check_schedule(baseline(name, f, coll, chunks=C), f, name, coll, C)
        for name in set(BASELINES) - set(avail):
            with pytest.raises(UnsupportedCollective, match=name):
                baseline(name, f, coll)


@pytest.mark.parametrize("topo", ["dgx1[0-5]", "dgx1[0-4]", "ring8", "torus3x4", "full5", "2xdgx-h100"])
def test_baselines_on_other_topologies(topo):
    f = fabric(topo)
    for coll in COLLECTIVES:
        avail = available_baselines(f, coll)
        assert "ring" in avail
        for name in avail:
            check_schedule(baseline(name, f, coll, chunks=2), f, name, coll, 2)


def test_every_root_on_dgx1_and_dgx_a100():
    for preset, names in (("dgx1-v100", ("ring", "tree")), ("dgx-a100", ("ring", "tree", "direct"))):
        f = fabric(preset)
        for coll in sorted(ROOTED):
            for root in range(f.num_ranks):
                for name in names:
                    s = baseline(name, f, coll, root=root, chunks=2)
                    assert s.root == root
                    check_schedule(s, f, name, coll)


def test_single_rank_and_two_ranks():
    f1 = fabric("single")
    for coll in COLLECTIVES:
        for name in available_baselines(f1, coll):
            assert baseline(name, f1, coll).num_steps == 0
    f2 = build_fabric(ring(2))
    for coll in COLLECTIVES:
        for name in available_baselines(f2, coll):
            check_schedule(baseline(name, f2, coll), f2, name, coll)


# ---------------------------------------------------------------- rings
def test_dgx1_packs_six_directed_rings_saturating_every_nvlink():
    for f in (fabric("dgx1-v100"), fabric("dgx1-hand")):
        plan = find_rings(f)
        assert len(plan.rings) == 6 and not plan.relayed
        use: dict = {}
        for r in plan.rings:
            assert sorted(r) == list(range(8))
            for k in range(8):
                i, j = r[k], r[(k + 1) % 8]
                assert DGX1[i][j] > 0
                use[(i, j)] = use.get((i, j), 0) + 1
        # 6 rings x 8 hops = 48 = every directed NVLink exactly once
        assert all(use.get((i, j), 0) == DGX1[i][j] for i in range(8) for j in range(8))
        s = baseline("ring", f, "allgather")
        assert s.chunks_per_rank == 6 and s.num_steps == 7 and s.num_rounds == 7
        assert len(s.meta["rings"]) == 6


def test_ring_allgather_on_8_ring_takes_7_steps():
    f = fabric("ring8")
    assert len(find_rings(f).rings) == 2  # both directions
    s = baseline("ring", f, "allgather", chunks=1)
    assert (s.num_steps, s.num_rounds) == (7, 7)
    s = baseline("ring", f, "allreduce", chunks=1)
    assert (s.num_steps, s.num_rounds) == (14, 14)


def test_switch_rings_fill_the_gpu_ports():
    # DGX-A100: 12 NVLinks per GPU into the switches, unit = 1 link -> 12 rings in one round
    assert len(find_rings(fabric("dgx-a100")).rings) == 12
    assert len(find_rings(fabric("dgx-h100")).rings) == 18
    assert len(find_rings(fabric("dgx2")).rings) == 6
    # MI300X: one link per pair; at least the 4 rotations r -> r+k (k odd) are disjoint
    assert len(find_rings(fabric("mi300x")).rings) >= 4


def test_partial_dgx1_rings_and_relays():
    f = fabric("dgx1[0-5]")
    plan = find_rings(f)
    assert not plan.relayed and len(plan.rings) >= 1
    # GPUs 0-4: GPU 4's only NVLink peer is GPU 0, so no Hamiltonian ring: relay through GPU 0
    f5 = fabric("dgx1[0-4]")
    plan = find_rings(f5)
    assert plan.relayed and len(plan.rings) == 1
    assert any(len(p) > 2 and 0 in p[1:-1] for p in plan.hops[0])
    for coll in COLLECTIVES:
        s = baseline("ring", f5, coll, chunks=1)
        assert s.meta["relayed"] is True
        check_schedule(s, f5, "ring", coll)


# ---------------------------------------------------------------- step counts and rounds, hand-computed
def test_step_counts():
    fa = fabric("dgx-a100")
    steps = lambda name, coll, **kw: baseline(name, fa, coll, **kw).num_steps  # noqa: E731
    assert steps("rhd", "allreduce") == 6 and steps("rhd", "allgather") == 3
    assert steps("bruck", "allgather") == 3 and steps("bruck", "alltoall") == 3
    assert steps("direct", "allgather") == 1 and steps("direct", "allreduce") == 2
    # NCCL tree over 8: 0 -> 4 -> {2, 6} -> leaves: depth 3; broadcast chunk m at depth d at m + d
    assert steps("tree", "broadcast", chunks=2) == 3 and steps("tree", "broadcast", chunks=4) == 4
    # ring broadcast with C=1: n-1 steps; pipelined with C = 2 x 12 rings: 1 extra step
    assert steps("ring", "broadcast", chunks=1) == 7 and steps("ring", "broadcast", chunks=24) == 8
    assert baseline("bruck", fabric("full5"), "allgather").num_steps == 3  # ceil(log2 5)


def test_direct_rounds_match_port_arithmetic():
    # DGX-2: 6 NVLinks per GPU port; direct allgather pushes 15 chunks through it: ceil(15/6) = 3
    assert baseline("direct", fabric("dgx2"), "allgather").num_rounds == 3
    # DGX-A100: 7 chunks through 12 links: 1 round; with C=2 14 chunks: 2 rounds
    assert baseline("direct", fabric("dgx-a100"), "allgather", chunks=2).num_rounds == 2
    # MI300X: one 64 GB/s link per pair, so all 7 chunks leave at once
    assert baseline("direct", fabric("mi300x"), "alltoall").num_rounds == 1


def test_nccl_tree_shapes():
    assert btree_parents(8) == [None, 2, 4, 2, 0, 6, 4, 6]
    t1, t2 = nccl_trees(8)
    inner1 = {p for p in t1.parent if p is not None}
    inner2 = {p for p in t2.parent if p is not None}
    assert inner1 == {0, 2, 4, 6} and inner2 == {7, 5, 3, 1}  # complementary
    s = baseline("tree", fabric("dgx-a100"), "allreduce")
    assert s.meta["trees"] == "nccl" and s.meta["roots"] == [0, 7]
    s = baseline("tree", fabric("dgx1-v100"), "allreduce")
    assert s.meta["trees"] == "bfs"  # NCCL's 4 -> 2 edge is not an NVLink on a DGX-1
    for parents in s.meta["parents"]:
        assert all(p is None or DGX1[v][p] for v, p in enumerate(parents))


def test_unsupported_reasons():
    f = fabric("dgx1-v100")
    with pytest.raises(UnsupportedCollective, match="tree: allgather is not available"):
        baseline("tree", f, "allgather")
    with pytest.raises(UnsupportedCollective, match=r"direct: rank 0 -> 5 is not a channel"):
        baseline("direct", f, "allgather")
    with pytest.raises(UnsupportedCollective, match="bruck: rank 0 -> 7 is not a channel"):
        baseline("bruck", f, "allgather")
    with pytest.raises(UnsupportedCollective, match="6 ranks is not a power of two"):
        baseline("rhd", fabric("dgx1[0-5]"), "allgather")
    with pytest.raises(InvalidArgument, match="unknown baseline"):
        baseline("butterfly", f, "allgather")
    with pytest.raises(InvalidArgument, match="chunks must be an integer"):
        baseline("ring", f, "allgather", chunks=0)
    with pytest.raises(InvalidArgument, match="takes no root"):
        baseline("ring", f, "allgather", root=1)


def test_ring_bandwidth_matches_reference_shares():
    # DGX-1 rings are bandwidth-optimal: ring allgather moves (n-1)/n of the data per GPU over
    # 6 links: 7 rounds for C = 6 chunks per rank -> 7/6 rounds per chunk = the published bound
    s = baseline("ring", fabric("dgx1-v100"), "allgather")
    assert math.isclose(s.num_rounds / s.chunks_per_rank, 7 / 6)


# ---------------------------------------------------------------- property: mutated baselines
MUTANT_POOL = [("tree", "dgx1-v100", "allreduce"), ("rhd", "dgx1-v100", "allreduce"),
               ("ring", "dgx1[0-4]", "allreduce"), ("bruck", "mi300x", "alltoall"),
               ("direct", "dgx-a100", "reducescatter"), ("tree", "dgx-a100", "gather")]


@settings(derandomize=True, max_examples=150, deadline=None)
@given(which=st.integers(0, len(MUTANT_POOL) - 1), ops=st.lists(
    st.tuples(st.booleans(), st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6)),
    min_size=1, max_size=3))
def test_mutated_baselines_are_rejected_or_still_correct(which, ops):
    name, topo, coll = MUTANT_POOL[which]
    f = fabric(topo)
    s = baseline(name, f, coll, chunks=1)
    steps = [list(x.transfers) for x in s.steps]
    for move, a, b, c in ops:
        si = a % len(steps)
        if steps[si]:
            t = steps[si].pop(b % len(steps[si]))
            if move:
                steps[c % len(steps)].append(t)
    mutated = s.with_(steps=tuple(Step(x.rounds, tuple(ts)) for x, ts in zip(s.steps, steps)))
    rep = verify(mutated)
    if rep.ok:
        assert numpy_correct(mutated, seed=len(ops))
    else:
        assert rep.violations[0].rule in RULES


def test_one_nvlink_domain_beyond_the_ring_search_gets_the_natural_ring():
    """GB200 NVL72: 72 GPUs behind NVLink switches, more than the ring search takes and not a
    cluster of identical hosts; every consecutive pair is a channel, so the ring is 0..71 (hand:
    an all-reduce ring of n ranks takes 2 (n - 1) steps) and it verifies."""
    from synth.baselines.ringsearch import SEARCH_MAX_RANKS, find_rings
    from synth.ir.verifier import check as verify
    f = build_fabric(get_preset("gb200-nvl72"))
    assert f.num_ranks == 72 > SEARCH_MAX_RANKS
    assert find_rings(f).rings[0] == tuple(range(72))
    s = baseline("ring", f, "allreduce")
    verify(s, f)
    assert s.num_steps == 2 * (72 - 1)


@pytest.mark.parametrize("n", [2, 5, 8, 13])
@pytest.mark.parametrize("C", [1, 3])
def test_bruck_alltoall_refuses_up_front_at_the_count_it_builds(monkeypatch, n, C):
    """bruck's alltoall expects exactly the transfers it builds: with MAX_TRANSFERS at that count it
    is built, one below it is refused (TooManyTransfers) before a single transfer is added."""
    import synth.baselines._common as common
    f = build_fabric(fully_connected(n))
    built = sum(len(st.transfers) for st in baseline("bruck", f, "alltoall", chunks=C).steps)
    monkeypatch.setattr(common, "MAX_TRANSFERS", built)
    assert sum(len(st.transfers) for st in baseline("bruck", f, "alltoall", chunks=C).steps) == built
    monkeypatch.setattr(common, "MAX_TRANSFERS", built - 1)
    added = []
    real_add = common.Builder.add
    monkeypatch.setattr(common.Builder, "add", lambda self, *a: (added.append(a), real_add(self, *a))[1])
    with pytest.raises(common.TooManyTransfers, match="more than"):
        baseline("bruck", f, "alltoall", chunks=C)
    assert len(added) == 1              # the refusal of Builder.expect, not a built transfer


@pytest.mark.parametrize("coll", ["allgather", "allreduce", "reduce"])
def test_direct_adds_its_steps_in_batches_as_one_by_one(monkeypatch, coll):
    """direct's batches (Builder.extend) give the schedule of one Builder.add per move, and the
    same refusal past MAX_TRANSFERS."""
    import synth.baselines._common as common
    from synth.baselines import direct
    f = build_fabric(fully_connected(6))
    spec = common.make_spec("direct", f, coll, None, 2, 1)
    b = common.Builder("direct", spec, f)
    for step, chunk, src, dst, op in direct._moves(spec, 0):
        b.add(step, chunk, src, dst, op)
    assert baseline("direct", f, coll, chunks=2) == b.finish("direct", {})
    built = len(direct._moves(spec, 0))
    monkeypatch.setattr(common, "MAX_TRANSFERS", built - 1)
    with pytest.raises(common.TooManyTransfers, match=f"direct {coll} on 6 ranks with 2 chunks per rank needs more"):
        baseline("direct", f, coll, chunks=2)
    monkeypatch.setattr(common, "MAX_TRANSFERS", built)
    assert sum(len(st.transfers) for st in baseline("direct", f, coll, chunks=2).steps) == built
