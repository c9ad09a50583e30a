"""Tests of synth.solve.sat.search: least steps, lower bounds and the Pareto frontier, against SCCL's
published DGX-1 results (tests/fixtures/REFERENCE.md) and hand-computed bounds."""

from fractions import Fraction

import numpy as np
import pytest
from _topologies import DGX1_LINKS, dgx1_hand  # noqa: E402,F401

from synth.ir.collectives import CollectiveSpec
from synth.ir.fabric import build_fabric
from synth.ir.verifier import check
from synth.solve.sat.search import bandwidth_lower_bound, least_steps, pareto
from topo_probe.errors import SynthesisTimeout
from topo_probe.machines.generators import fully_connected, hub_and_spoke, ring


@pytest.fixture(scope="module")
def dgx1():
    t = dgx1_hand()
    return build_fabric(t)


def test_least_steps_dgx1_allgather_is_2(dgx1):
    s = least_steps(dgx1, "allgather")
    check(s, dgx1)
    assert (s.num_steps, s.num_rounds, s.chunks_per_rank) == (2, 2, 1)
    assert s.meta["least_steps_proven"] is True


def test_least_steps_dgx1_alltoall_is_3(dgx1):
    s = least_steps(dgx1, "alltoall")  # SCCL: S=3
    check(s, dgx1)
    assert s.num_steps == 3


def test_least_steps_hub_and_spoke_allgather_is_7():
    # each GPU's single switch port brings in 1 chunk per round: 7 chunks, R = S >= 7 (SCCL: 7)
    f = build_fabric(hub_and_spoke(8))
    s = least_steps(f, "allgather")
    check(s, f)
    assert s.num_steps == 7


def test_bandwidth_bounds_by_hand(dgx1):
    # ring of 4: each rank receives 3 chunks over 2 links
    assert bandwidth_lower_bound(build_fabric(ring(4)), "allgather") == Fraction(3, 2)
    # DGX-1: each rank receives 7 chunks over 6 links (REFERENCE.md: 7/6)
    assert bandwidth_lower_bound(dgx1, "allgather") == Fraction(7, 6)
    assert bandwidth_lower_bound(dgx1, "reducescatter") == Fraction(7, 6)
    # fully connected: alltoall needs 1 round per chunk on every direct link
    assert bandwidth_lower_bound(build_fabric(fully_connected(4)), "alltoall") == Fraction(1)
    # DGX-1 alltoall: >= 80 link-hops per C over 48 links (5/3); <= 8/3, which (2, 8, 3) achieves
    b = bandwidth_lower_bound(dgx1, "alltoall")
    assert Fraction(5, 3) <= b <= Fraction(8, 3)


def test_pareto_dgx1_allgather_matches_sccl(dgx1):
    seen = []
    pts = pareto(dgx1, "allgather", max_chunks=6, total_time_limit_s=100,
                 on_point=lambda S, R, C, s: seen.append((S, R, C)))
    assert [(S, R, C) for S, R, C, _ in pts] == [(2, 3, 2), (3, 7, 6)]  # SCCL's frontier
    assert seen == [(2, 3, 2), (3, 7, 6)]
    for S, R, C, s in pts:
        check(s, dgx1)
        assert (s.num_steps, s.num_rounds, s.chunks_per_rank) == (S, R, C)
        assert s.meta["dominance_proven"] is True


def test_pareto_dgx1_reducescatter_by_duality(dgx1):
    pts = pareto(dgx1, "reducescatter", max_chunks=6)
    assert [(S, R, C) for S, R, C, _ in pts] == [(2, 3, 2), (3, 7, 6)]
    for *_, s in pts:
        check(s, dgx1)


def test_pareto_points_dominate_nothing_of_each_other(dgx1):
    pts = pareto(dgx1, "allreduce", max_chunks=6)
    keys = [(S, Fraction(R, C)) for S, R, C, _ in pts]
    for a in keys:
        for b in keys:
            assert a == b or not (b[0] <= a[0] and b[1] <= a[1])
    for S, R, C, s in pts:
        check(s, dgx1)
        # execute the composed allreduce on random integers
        spec = CollectiveSpec("allreduce", 8, C)
        rng = np.random.default_rng(1)
        data = rng.integers(-99, 99, size=(8, spec.num_chunks))
        state = [dict(enumerate(row)) for row in data.tolist()]
        for st in s.steps:
            snap = [dict(d) for d in state]
            for t in st.transfers:
                state[t.dst][t.chunk] = (snap[t.src][t.chunk] if t.op == "copy"
                                         else state[t.dst][t.chunk] + snap[t.src][t.chunk])
        assert all(state[r][c] == int(data[:, c].sum()) for r in range(8) for c in range(spec.num_chunks))


def test_pareto_gives_up_with_timeout_when_out_of_time(dgx1):
    with pytest.raises(SynthesisTimeout):
        pareto(dgx1, "allgather", max_chunks=6, total_time_limit_s=0.0)
