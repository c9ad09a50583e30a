"""Bandwidth-optimal schedules on randomized irregular topologies meet the cut bound exactly
enough (within 0.5 %) and are the same on every run.

Topologies (:mod:`_random_topologies`): meshes with uneven link counts, partial allocations of
presets (pairs without NVLink go over PCIe) and sparse NVLink graphs over PCIe trees.  The
reference is the cut bound of :func:`synth.model.bounds.lower_bounds` (allreduce: the bound of
reduce-scatter then all-gather, :func:`synth.model.bounds.phased_allreduce_bound`), and the
achieved term is recomputed from the schedule's transfers (:func:`bandwidth_term`), never read
from the solver's metadata.
"""

from __future__ import annotations

import random
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _random_topologies import PARTIAL_PRESETS, mixed_nvlink_pcie, partial_allocation, uneven_mesh
from synth.ir.fabric import build_fabric
from synth.ir.verifier import check
from synth.model.bounds import lower_bounds, phased_allreduce_bound
from synth.solve.bwopt.bandwidth_term import bandwidth_term
from synth.solve.bwopt.optimal import bandwidth_optimal
from synth.solve.bwopt.staging import fits
from synth.solve.bwopt.tree_batch import rational_batch
from synth.solve.bwopt.trees import ChannelModel, pack_trees
from topo_probe.machines.generators import parity_mesh

#: largest accepted ratio of the achieved bandwidth term to its bound
GOOD = 1.005


@st.composite
def irregular(draw, max_gpus: int):
    """A small irregular single-host topology of 4 to ``max_gpus`` GPUs; its link counts and GPU
    choice come from a generator seeded by Hypothesis (so even the first draws, seed 0, have
    uneven counts, not the all-zero lists Hypothesis tries first)."""
    n = draw(st.integers(4, max_gpus))
    kind = draw(st.sampled_from(["mesh", "partial", "mixed"]))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    pairs = n * (n - 1) // 2
    if kind == "mesh":
        return uneven_mesh(n, [rng.randint(0, 7) for _ in range(pairs)], rng.choice(["nvlink", "infinity_fabric"]))
    if kind == "partial":
        return partial_allocation(rng.choice(PARTIAL_PRESETS), rng.sample(range(8), n))
    return mixed_nvlink_pcie(n, [rng.randint(0, 5) for _ in range(pairs)], rng.choice([1, 2]))


def _same(a, b) -> bool:
    """Two schedules equal in everything but the wall-clock solve time."""
    strip = lambda s: s.with_(meta={k: v for k, v in s.meta.items() if k != "solve_s"})  # noqa: E731
    return strip(a) == strip(b)


def _assert_exact(topo, collectives, rerun) -> None:
    """Each of ``collectives`` meets its bound; those in ``rerun`` also give the same schedule
    when solved again."""
    f = build_fabric(topo)
    for name in collectives:
        s = bandwidth_optimal(f, name)
        check(s, f)
        achieved = bandwidth_term(s, f)
        cut = lower_bounds(f, name).bandwidth_rounds_per_block
        assert achieved >= cut, f"{topo.name} {name}: {achieved} beats the cut bound {cut}"
        bound = phased_allreduce_bound(f) if name == "allreduce" else cut
        assert achieved <= GOOD * bound, f"{topo.name} {name}: {achieved} vs bound {bound}"
        assert "wall_limit_hit" not in s.meta
        if name in rerun:
            assert _same(s, bandwidth_optimal(f, name)), f"{topo.name} {name}: a re-run differs"


#: the collectives of the two properties below
UNROOTED, ROOTED = ("allgather", "reducescatter", "allreduce"), ("broadcast", "reduce")


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(irregular(6))
def test_random_irregular_topologies_meet_the_bound_on_every_run(topo):
    _assert_exact(topo, UNROOTED, rerun=UNROOTED)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(irregular(8))
def test_random_irregular_topologies_up_to_8_gpus(topo):
    """Re-solved for determinism: the rooted collectives only.  The unrooted ones are re-solved
    on the same generators up to 6 GPUs above, and at 8 GPUs the uneven mesh's all-gather is
    solved in two processes (tests/synth/pipeline/test_determinism.py)."""
    _assert_exact(topo, UNROOTED + ROOTED, rerun=ROOTED)


def test_a_mesh_of_81_links_per_gpu_meets_its_bound_exactly():
    """8 GPUs, 11 links between GPUs of equal parity and 12 otherwise: 81 links per GPU, so the
    cut bound 7/81 needs a batch of 81 chunks per source (a multiple of 81); batches of at most
    2 x 32 chunks reach 2/23 at best (0.6 % above the bound)."""
    f = build_fabric(parity_mesh(8, 25.0, 11, 12, latency_us=0.0))
    assert lower_bounds(f, "allgather").bandwidth_rounds_per_block == Fraction(7, 81)
    s = bandwidth_optimal(f, "allgather")
    check(s, f)
    assert bandwidth_term(s, f) == Fraction(7, 81)
    assert s.chunks_per_rank % 81 == 0


def test_rational_rounding_of_the_lp_weights_meets_the_bound():
    """Five GPUs of sparse NVLink over a two-socket PCIe tree: the cut bound is 200/63 rounds per
    block (PCIe at 31.5 GB/s over a 25 GB/s round).  The LP's tree weights, read as exact
    fractions, give a batch of 63 chunks per source in exactly 200 rounds, checked here on the
    batch's exact loads."""
    f = build_fabric(mixed_nvlink_pcie(5, [1, 0, 1, 0, 0, 1, 2, 0, 0, 2], 2))
    bound = lower_bounds(f, "allgather").bandwidth_rounds_per_block
    model = ChannelModel(f)
    packing = pack_trees(model, list(range(5)))
    batch = rational_batch(model, packing, bound, max_chunks=256)
    assert batch is not None and Fraction(batch.rounds, batch.chunks) == bound
    assert all(sum(m for _, m in ts) == batch.chunks for ts in batch.counts.values())
    load = sum(m * model.tree_load(p, exact_q=True) for ts in batch.counts.values() for p, m in ts)
    assert fits(model, load, batch.rounds)
    assert not fits(model, load, batch.rounds - 1)
    assert rational_batch(model, packing, bound, max_chunks=batch.chunks - 1) is None


SCRIPT = """
import hashlib, sys
sys.path.insert(0, "tests")
from _random_topologies import mixed_nvlink_pcie, uneven_mesh
from synth.ir.fabric import build_fabric
from synth.pipeline.synthesize import run_independent
from synth.solve.bwopt.optimal import bandwidth_optimal
for t in (uneven_mesh(4, [7, 7, 2, 3, 7, 3]), mixed_nvlink_pcie(4, [1, 2, 1, 2, 2, 2]),
          uneven_mesh(5, [7, 7, 3, 2, 7, 2, 1, 7, 4, 2])):
    f = build_fabric(t)
    for name in ("allgather", "allreduce"):
        s = bandwidth_optimal(f, name)
        print(t.name, name, hashlib.sha256(s.with_(meta=run_independent(s.meta)).to_json().encode()).hexdigest())
"""


def test_two_processes_give_the_same_schedules_on_irregular_topologies():
    """Separate processes (other hash seeds, other memory layouts) write the same schedules; a set
    of CP-SAT variables once ordered the staging's constraints by memory address, so re-runs of
    the same 4-GPU mesh gave other schedules."""
    import os
    import subprocess
    import sys

    from _paths import ROOT
    runs = [subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, check=True, capture_output=True, text=True,
                           env=dict(os.environ, PYTHONHASHSEED=str(seed), PYTHONPATH=str(ROOT))).stdout
            for seed in (1, 999)]
    assert runs[0].count("\n") == 6
    assert runs[0] == runs[1]
