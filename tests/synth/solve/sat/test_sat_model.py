"""Tests of synth.solve.sat.model: single CP-SAT instances, checked against hand-computed facts and an
independent replay that knows nothing of the Fabric (only link counts / capacities per pair)."""

from fractions import Fraction

import pytest

# REFERENCE.md: DGX-1 NVLink counts, 25 GB/s per link per direction
from _topologies import DGX1_LINKS, dgx1_hand  # noqa: E402,F401

from synth.ir.collectives import CollectiveSpec
from synth.ir.fabric import build_fabric
from synth.ir.verifier import check
from synth.solve.budget import SolveBudget
from synth.solve.sat.instance import solve_instance
from synth.solve.sat.model import hop_distances, latency_lower_bound
from topo_probe.errors import SynthesisInfeasible, SynthesisTimeout
from topo_probe.machines.clusters import cluster
from topo_probe.machines.generators import add_pcie_tree, line, ring
from topo_probe.topology.model import Topology


def dgx1() -> Topology:
    t = dgx1_hand()
    return t


def replay(schedule, per_round):
    """Independent check of a copy-only schedule: ``per_round[i][j]`` = chunks pair i->j may
    carry per round (direct links only).  Returns the final holder sets."""
    spec = CollectiveSpec(schedule.collective, schedule.ranks, schedule.chunks_per_rank, schedule.root)
    have = {c.id: set(c.pre) for c in spec.chunks()}
    for st in schedule.steps:
        load = {}
        for t in st.transfers:
            assert t.src in have[t.chunk], f"rank {t.src} sends chunk {t.chunk} it does not hold"
            load[t.src, t.dst] = load.get((t.src, t.dst), 0) + 1
        for (i, j), k in load.items():
            assert k <= st.rounds * per_round[i][j], f"pair {i}->{j} overloaded: {k} > {st.rounds}*{per_round[i][j]}"
        for t in st.transfers:
            have[t.chunk].add(t.dst)
    for c in spec.chunks():
        assert set(c.post) <= have[c.id], f"chunk {c.id} misses ranks {set(c.post) - have[c.id]}"
    return have


@pytest.fixture(scope="module")
def dgx1_fabric():
    return build_fabric(dgx1())


def test_dgx1_allgather_2_3_2_found_and_verified(dgx1_fabric):
    s = solve_instance(dgx1_fabric, "allgather", 2, 3, 2, time_limit_s=60)
    check(s, dgx1_fabric)
    replay(s, DGX1_LINKS)
    assert (s.num_steps, s.num_rounds, s.chunks_per_rank) == (2, 3, 2)
    assert s.name == "sat-S2-R3-C2" and s.meta["status"] in ("OPTIMAL", "FEASIBLE")
    assert s.topology_fingerprint == dgx1_fabric.fingerprint


def test_dgx1_allgather_2_2_2_is_proved_infeasible(dgx1_fabric):
    # rank 0 must receive 14 chunks; in 2 rounds its 6 incoming links carry at most 12
    with pytest.raises(SynthesisInfeasible):
        solve_instance(dgx1_fabric, "allgather", 2, 2, 2, time_limit_s=60)


def test_dgx1_allgather_one_step_is_infeasible_by_latency(dgx1_fabric):
    assert latency_lower_bound(dgx1_fabric, CollectiveSpec("allgather", 8, 1)) == 2  # diameter 2
    with pytest.raises(SynthesisInfeasible, match="latency bound"):
        solve_instance(dgx1_fabric, "allgather", 1, 10, 1)


def test_rounds_below_steps_is_infeasible(dgx1_fabric):
    with pytest.raises(SynthesisInfeasible):
        solve_instance(dgx1_fabric, "allgather", 3, 2, 1)


def test_dgx1_alltoall_least_steps_facts(dgx1_fabric):
    # SCCL (REFERENCE.md): least-steps DGX-1 alltoall is S=3 with R=S, C=1
    with pytest.raises(SynthesisInfeasible):
        solve_instance(dgx1_fabric, "alltoall", 2, 2, 1)
    s = solve_instance(dgx1_fabric, "alltoall", 3, 3, 1)
    assert s.meta["model"] == "FlowModel"
    check(s, dgx1_fabric)
    replay(s, DGX1_LINKS)


@pytest.mark.parametrize("coll", ["broadcast", "gather", "scatter"])
def test_rooted_on_ring(coll):
    # ring of 4, 1 link per edge: rank 2 is 2 hops from root 0, whose 2 links carry 2 chunks/round
    f = build_fabric(ring(4))
    per_round = [[1 if abs(i - j) in (1, 3) else 0 for j in range(4)] for i in range(4)]
    with pytest.raises(SynthesisInfeasible):
        solve_instance(f, coll, 1, 5, 1, root=0)
    s = solve_instance(f, coll, 2, 2, 1, root=0)
    check(s, f)
    replay(s, per_round)
    if coll != "broadcast":  # C=2: 6 chunks through the root's 2 links need 3 rounds
        with pytest.raises(SynthesisInfeasible):
            solve_instance(f, coll, 2, 2, 2, root=0)
        s = solve_instance(f, coll, 2, 3, 2, root=0)
        check(s, f)
        replay(s, per_round)


def hetero3() -> Topology:
    """GPUs 0 and 1 joined by 2 NVLinks; GPU 2 reaches both only through one PCIe switch."""
    t = Topology("hetero3")
    for i in range(3):
        t.add_gpu(i)
    t.add_link("gpu0", "gpu1", kind="nvlink", links=2, bandwidth_gbps=50.0)
    add_pcie_tree(t, [[[["gpu0", "gpu1", "gpu2"]]]], pcie_gbps=15.75, inter_socket_gbps=0.0)
    return t


def test_heterogeneous_nvlink_and_pcie():
    f = build_fabric(hetero3())
    assert f.unit_gbps == 15.75
    # GPU 2's single PCIe downlink (1 chunk per round) must bring it 2 chunks in one step
    with pytest.raises(SynthesisInfeasible):
        solve_instance(f, "allgather", 1, 1, 1)
    s = solve_instance(f, "allgather", 1, 2, 1)
    check(s, f)
    # GPU 2 gets both chunks through its one PCIe downlink (1 chunk per round, 2 rounds)
    assert sum(1 for t in s.steps[0].transfers if t.dst == 2) == 2
    # alltoall: GPU 2 sends 2 chunks up its one PCIe uplink as well
    with pytest.raises(SynthesisInfeasible):
        solve_instance(f, "alltoall", 1, 1, 1)
    check(solve_instance(f, "alltoall", 1, 2, 1), f)


def test_tiny_cluster_with_a_fractional_nic():
    base = line(2)
    base.add_node("nic0", "nic", speed_gbps=12.5, name="mlx5_0")
    add_pcie_tree(base, [[[["gpu0", "gpu1", "nic0"]]]], pcie_gbps=15.75, inter_socket_gbps=0.0)
    f = build_fabric(cluster(base, 2))
    assert f.unit_gbps == 15.75 and Fraction(12.5) / Fraction(15.75) == Fraction(50, 63)
    # one step: both GPUs of a host need both remote chunks -> 4 chunks through one 12.5 GB/s
    # NIC port = floor(50/63 * R) >= 4 -> R >= 6 (5 rounds carry only 3.97 chunks)
    with pytest.raises(SynthesisInfeasible):
        solve_instance(f, "allgather", 1, 5, 1)
    s = solve_instance(f, "allgather", 1, 6, 1)
    check(s, f)
    nic = [r for r in f.resources if r[0].endswith("nic0") and r[1] == "netswitch0"]
    for r in nic:
        load = sum(1 for t in s.steps[0].transfers if any(res == r for res, _ in f.channels[t.src, t.dst]))
        assert load <= 6 * 12.5 / 15.75


def test_tiny_time_limit_gives_timeout_not_none(dgx1_fabric):
    with pytest.raises(SynthesisTimeout):
        solve_instance(dgx1_fabric, "alltoall", 8, 8, 3, time_limit_s=0.01)


def test_dgx1_alltoall_s8_r8_c3_solves_within_five_deterministic_seconds(dgx1_fabric):
    """SCCL's unsolved instance (tests/fixtures/REFERENCE.md: > 300 s) within 5 clock seconds of a
    deterministic budget, verified by the independent replay; the five-strategy interleave over two
    threads that limit_cp_sat used before needed about 45 of them (bench_synthesis: 148 s wall)."""
    budget = SolveBudget()
    s = solve_instance(dgx1_fabric, "alltoall", 8, 8, 3, workers=2, time_limit_s=5.0, budget=budget)
    assert s.meta["status"] == "OPTIMAL" and budget.wall_stops == 0
    assert 0 < budget.now() <= 5.0
    replay(s, DGX1_LINKS)
    assert (s.num_steps, s.num_rounds, s.chunks_per_rank) == (8, 8, 3)


def test_the_step_search_answers_the_same_for_any_workers(dgx1_fabric):
    """workers > 1 selects one deterministic search, whatever the number: the same sends, rounds and
    deterministic time for 2 and 8 (a Pareto point of DGX-1 allgather, SCCL's (3,7,6))."""
    runs = []
    for workers in (2, 8):
        budget = SolveBudget()
        s = solve_instance(dgx1_fabric, "allgather", 3, 7, 6, workers=workers, time_limit_s=20.0, budget=budget)
        runs.append((_sends(s), budget.now()))
    assert runs[0] == runs[1]
    replay(s, DGX1_LINKS)


def test_hop_distances_match_link_matrix(dgx1_fabric):
    d = hop_distances(dgx1_fabric)
    for i in range(8):
        for j in range(8):
            want = 0 if i == j else 1 if DGX1_LINKS[i][j] else 2
            assert d[i][j] == want


def _sends(schedule):
    return [(st.rounds, sorted((t.chunk, t.src, t.dst, t.op) for t in st.transfers)) for st in schedule.steps]


@pytest.mark.parametrize("coll,steps,rounds,chunks,symmetry", [("allgather", 2, 3, 2, 0),   # StepModel
                                                               ("alltoall", 3, 3, 1, 1)])   # FlowModel
def test_hints_are_accepted_and_the_result_still_verified(dgx1_fabric, coll, steps, rounds, chunks, symmetry):
    """A complete, feasible hint is where the search starts, so the (single-worker, hence
    deterministic) solve answers exactly the hinted schedule; and what it answers is correct under
    the independent replay, with the S, R and C asked for."""
    hint = solve_instance(dgx1_fabric, coll, steps, rounds, chunks)
    replay(hint, DGX1_LINKS)
    got = solve_instance(dgx1_fabric, coll, steps, rounds, chunks, hint=hint, symmetry=symmetry, workers=1)
    assert _sends(got) == _sends(hint)
    replay(got, DGX1_LINKS)
    assert (got.num_steps, got.num_rounds, got.chunks_per_rank) == (steps, rounds, chunks)
    check(got, dgx1_fabric)
