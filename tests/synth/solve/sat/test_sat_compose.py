"""Tests of synth.solve.sat.compose: reversed fabrics, duality, AllReduce composition, refinement.

Composed schedules are executed by a small NumPy simulation written here (independent of the
verifier): every rank starts with random integers per chunk, transfers apply step by step
(reading the state at the start of the step), and the result is compared with np.sum."""

from fractions import Fraction

import numpy as np
import pytest
from _topologies import DGX1_LINKS, dgx1_hand  # noqa: E402,F401

from synth.ir.collectives import CollectiveSpec
from synth.ir.fabric import build_fabric
from synth.ir.verifier import check
from synth.solve.sat.compose import (
    compose_allreduce,
    refine,
    reverse_fabric,
    reverse_schedule,
    solve_allreduce,
    solve_dual,
)
from synth.solve.sat.instance import solve_instance
from topo_probe.errors import InvalidArgument, ScheduleInvalid, SynthesisInfeasible
from topo_probe.topology.model import Topology


@pytest.fixture(scope="module")
def dgx1():
    t = dgx1_hand()
    return build_fabric(t)


@pytest.fixture(scope="module")
def lopsided():
    """3 GPUs in a directed ring 0->1->2->0 of 2 links, back edges of 1 link (asymmetric)."""
    t = Topology("lopsided")
    for i in range(3):
        t.add_gpu(i)
    for i in range(3):
        j = (i + 1) % 3
        t.add_link(f"gpu{i}", f"gpu{j}", kind="nvlink", links=2, bandwidth_gbps=50.0, both=False)
        t.add_link(f"gpu{j}", f"gpu{i}", kind="nvlink", links=1, bandwidth_gbps=25.0, both=False)
    return build_fabric(t)


def simulate(schedule, seed=0, width=5):
    """Execute ``schedule`` on random int64 data; returns (state, contributions).

    state[rank][chunk] is an array or None; contributions[rank][chunk] the initial data."""
    spec = CollectiveSpec(schedule.collective, schedule.ranks, schedule.chunks_per_rank, schedule.root)
    rng = np.random.default_rng(seed)
    n, m = spec.ranks, spec.num_chunks
    init = rng.integers(-1000, 1000, size=(n, m, width))
    state = [[None] * m for _ in range(n)]
    for c in spec.chunks():
        for r in c.pre:
            state[r][c.id] = init[r, c.id].copy()
    for st in schedule.steps:
        snap = [[None if v is None else v.copy() for v in row] for row in state]
        for t in st.transfers:
            val = snap[t.src][t.chunk]
            assert val is not None, f"rank {t.src} sends chunk {t.chunk} before holding it"
            if t.op == "copy":
                state[t.dst][t.chunk] = val.copy()
            else:
                state[t.dst][t.chunk] = state[t.dst][t.chunk] + val
    return state, init


def assert_reduces_correctly(schedule):
    spec = CollectiveSpec(schedule.collective, schedule.ranks, schedule.chunks_per_rank, schedule.root)
    state, init = simulate(schedule)
    for c in spec.chunks():
        want = np.sum(init[list(c.pre), c.id], axis=0)
        for r in c.post:
            np.testing.assert_array_equal(state[r][c.id], want, err_msg=f"rank {r} chunk {c.id}")


def test_reverse_fabric_flips_routes_and_capacities(lopsided):
    rev = reverse_fabric(lopsided)
    # forward 0->1 has 2 links; in the reversed fabric the channel 1->0 carries that route
    assert rev.channels[(1, 0)] == [(("gpu1", "gpu0"), Fraction(1))]
    assert rev.resources[("gpu1", "gpu0")].bandwidth_gbps == 50.0
    assert rev.resources[("gpu0", "gpu1")].bandwidth_gbps == 25.0
    assert reverse_fabric(rev) == lopsided
    assert rev.fingerprint != lopsided.fingerprint


def test_reducescatter_by_duality_verifies_and_executes(dgx1):
    rs = solve_dual(dgx1, CollectiveSpec("reducescatter", 8, 2), 2, 3)
    check(rs, dgx1)
    assert all(t.op == "reduce" for st in rs.steps for t in st.transfers)
    assert (rs.num_steps, rs.num_rounds) == (2, 3)
    assert_reduces_correctly(rs)
    with pytest.raises(SynthesisInfeasible):  # mirror of allgather (2, 2, 2)
        solve_instance(dgx1, "reducescatter", 2, 2, 2)


def test_duality_on_an_asymmetric_fabric(lopsided):
    # reducescatter on 0->1->2->0 (2 links) needs the allgather of the reversed fabric
    rs = solve_instance(lopsided, "reducescatter", 1, 1, 1)
    check(rs, lopsided)
    assert_reduces_correctly(rs)
    rd = solve_instance(lopsided, "reduce", 2, 2, 2, root=0)
    check(rd, lopsided)
    assert_reduces_correctly(rd)


def test_duality_uses_the_reversed_links():
    # 2 GPUs: 0->1 has 2 links, 1->0 has 1.  Broadcasting 2 chunks from 0 takes 1 round, but
    # reducing 2 chunks onto 0 pushes both through the single 1->0 link: 2 rounds.
    t = Topology("two-way")
    t.add_gpu(0), t.add_gpu(1)
    t.add_link("gpu0", "gpu1", kind="nvlink", links=2, bandwidth_gbps=50.0, both=False)
    t.add_link("gpu1", "gpu0", kind="nvlink", links=1, bandwidth_gbps=25.0, both=False)
    f = build_fabric(t)
    check(solve_instance(f, "broadcast", 1, 1, 2, root=0), f)
    with pytest.raises(SynthesisInfeasible):
        solve_instance(f, "reduce", 1, 1, 2, root=0)
    rd = solve_instance(f, "reduce", 1, 2, 2, root=0)
    check(rd, f)
    assert_reduces_correctly(rd)


def test_allreduce_composition_verifies_and_executes(dgx1):
    rs = solve_instance(dgx1, "reducescatter", 2, 3, 2)
    ag = solve_instance(dgx1, "allgather", 2, 3, 2)
    ar = compose_allreduce(rs, ag, dgx1)
    check(ar, dgx1)
    assert (ar.collective, ar.num_steps, ar.num_rounds, ar.chunks_per_rank) == ("allreduce", 4, 6, 2)
    assert_reduces_correctly(ar)
    # the chunk mapping is what makes it work: swapping two AllGather chunks breaks it
    swapped = tuple(st.__class__(st.rounds, tuple(t.__class__({0: 2, 2: 0}.get(t.chunk, t.chunk), t.src, t.dst, t.op)
                                                   for t in st.transfers)) for st in ag.steps)
    with pytest.raises(ScheduleInvalid):
        compose_allreduce(rs, ag.with_(steps=swapped), dgx1)


def test_allreduce_instance_and_refinement(lopsided, dgx1):
    ar = solve_allreduce(lopsided, 2, 2, 1)
    check(ar, lopsided)
    assert_reduces_correctly(ar)
    ag = solve_instance(dgx1, "allgather", 2, 3, 2)
    fine = refine(ag, 3, dgx1)
    assert (fine.num_steps, fine.num_rounds, fine.chunks_per_rank) == (2, 9, 6)
    check(fine, dgx1)
    with pytest.raises(InvalidArgument):
        compose_allreduce(solve_instance(dgx1, "reducescatter", 2, 2, 1), ag, dgx1)


def test_reverse_schedule_round_trip(dgx1):
    ag = solve_instance(dgx1, "allgather", 2, 3, 2)
    rs = reverse_schedule(ag, "reducescatter", reverse_fabric(dgx1))
    back = reverse_schedule(rs, "allgather", dgx1)
    assert back.steps == ag.steps
