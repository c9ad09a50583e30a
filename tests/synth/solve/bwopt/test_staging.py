"""Staging is solved once per distinct problem in a process: a repeat returns what a fresh solve
returns (the reference: the same call with the store emptied) and charges the deterministic clock
as much as that solve cost, so later budgets do not change; a different problem is solved anew."""

from __future__ import annotations

from fractions import Fraction

import pytest

from _topologies import dgx1_hand
from synth.ir.fabric import build_fabric
from synth.solve import clock
from synth.solve.bwopt import staging
from synth.solve.bwopt.forest import Forest
from synth.solve.bwopt.trees import ChannelModel


def _solved_forest() -> Forest:
    """DGX-1 allgather trees (every rank a source; cut bound 7/6 rounds per block, published)."""
    forest = Forest(build_fabric(dgx1_hand()), False, list(range(8)))
    forest.solve(Fraction(7, 6), 32, 4.0)
    return forest


def _staged(forest: Forest) -> tuple[staging.Staged, float]:
    t0 = clock.now()
    got = staging.stage(forest.model, forest._stage_bundles(), forest.batch, 20.0, forest.chains,
                        forest.packing.upper)
    return got, clock.now() - t0


def test_a_repeated_staging_equals_a_fresh_solve_and_costs_the_same_clock():
    forest = _solved_forest()
    staging._solved.clear()
    fresh, fresh_s = _staged(forest)
    assert fresh_s > 0.1
    again, again_s = _staged(forest)
    assert (again.chunks, again.rounds, again.z, again.counts) == (fresh.chunks, fresh.rounds, fresh.z, fresh.counts)
    assert again_s == pytest.approx(fresh_s, rel=1e-12)
    again.counts[0].clear()                # a copy: the stored answer is not the caller's object
    third, _ = _staged(forest)
    assert third.counts == fresh.counts


def test_equal_fabrics_share_a_key_and_another_orientation_does_not():
    one = ChannelModel(build_fabric(dgx1_hand()))
    two = ChannelModel(build_fabric(dgx1_hand()))
    assert staging._model_key(one) == staging._model_key(two)
    half = ChannelModel(build_fabric(dgx1_hand()), efficiency=lambda kind: 0.5)
    assert staging._model_key(half) != staging._model_key(one)
