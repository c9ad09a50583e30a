"""Baselines left unbuilt by the dominance rule (:mod:`synth.pipeline.dominance`): the plan is the
same as with every baseline built, and the bound the rule uses is below the cost model's time of
the baselines it would skip (built here to compare)."""

from pathlib import Path

import pytest

from synth.baselines import baseline
from synth.ir.fabric import build_fabric
from synth.model.cost import CostModel
from synth.pipeline.dominance import dominated, lower_bound_us
from synth.pipeline.synthesize import SynthesisOptions, build_plan, synthesize_collective
from synth.plan.planner import PLAN_SIZES
from topo_probe.machines.clusters import cluster


def _run(fabric, colls, skip: bool, folder: Path):
    (folder / "schedules").mkdir(parents=True)
    opts = SynthesisOptions(collectives=colls, progress=False, log=lambda *a: None, time_limit_s=10.0,
                            skip_dominated=skip)
    return {c: synthesize_collective(fabric, c, opts, folder) for c in colls}


def test_skipping_leaves_the_plan_as_it_is(tmp_path):
    """4 x dgx-h100 (32 ranks): the alltoall ring is skipped (the allreduce, allgather and gather
    rings are not: their bounds are below the best at some size), and the plan entries (schedule per size
    range, predicted times) equal those of the run that builds every baseline."""
    topo = cluster("dgx-h100", 4)
    fabric = build_fabric(topo)
    colls = ("alltoall", "allreduce", "allgather", "gather")
    skipped = _run(fabric, colls, True, tmp_path / "skip")
    full = _run(fabric, colls, False, tmp_path / "full")
    assert "alltoall-ring" in full["alltoall"].schedules
    for c in ("alltoall",):
        assert f"{c}-ring" in full[c].schedules and f"{c}-ring" not in skipped[c].schedules
        assert any("baseline ring not built" in n for n in skipped[c].summary["notes"])
        assert not any("not built" in n for n in full[c].summary["notes"])
    for c in ("allreduce", "allgather", "gather"):         # not provably slower: built
        assert f"{c}-ring" in skipped[c].schedules
    plan_skip = build_plan(fabric, skipped, topo)[0]
    plan_full = build_plan(fabric, full, topo)[0]
    assert plan_skip.entries == plan_full.entries
    for c in colls:                              # the candidates kept are the same, in the same order
        kept = list(skipped[c].schedules)
        assert kept == [n for n in full[c].schedules if n in kept]
        assert {n: skipped[c].curves[n] for n in kept} == {n: full[c].curves[n] for n in kept}


CASES = [("dgx-a100", 2, c) for c in ("allgather", "reducescatter", "allreduce", "broadcast", "reduce",
                                      "gather", "scatter", "alltoall")] + \
    [("dgx-h100", 4, c) for c in ("allgather", "reducescatter", "allreduce", "alltoall")]


@pytest.mark.parametrize("preset, nodes, coll", CASES)
def test_the_bound_is_below_the_cost_model_time_of_the_ring(preset, nodes, coll):
    """The ring built and timed by the cost model at every plan size is never faster than the
    bound the rule skips it by."""
    fabric = build_fabric(cluster(preset, nodes))
    cost = CostModel(fabric)
    root = 0 if coll in ("broadcast", "reduce", "gather", "scatter") else None
    ring = baseline("ring", fabric, coll, root=root)
    bound = lower_bound_us(fabric, "ring", coll, root, PLAN_SIZES, cost.params)
    for nb, lb in zip(PLAN_SIZES, bound):
        assert lb <= cost.schedule_time_us(ring, nb) * (1 + 1e-12), (coll, nb)
    assert bound[0] >= cost.params.launch_us + (fabric.num_ranks - 1) * cost.params.step_overhead_us


def test_a_size_not_covered_keeps_the_baseline():
    """Skipped only when some candidate is strictly faster at every size: one tie keeps it."""
    sizes = [8, 16, 32]
    assert dominated([5.0, 5.0, 5.0], {"a": [1.0, 9.0, 1.0], "b": [9.0, 2.0, 9.0]}, sizes)
    assert dominated([5.0, 5.0, 5.0], {"a": [1.0, 5.0, 1.0]}, sizes) == ""
    assert dominated([5.0, 5.0, 5.0], {}, sizes) == ""


@pytest.mark.parametrize("coll", ["allgather", "reducescatter", "allreduce"])
def test_the_bound_is_tight_where_the_ring_is_optimal(coll):
    """On a ring of 8 GPUs with zero link latency the ring baseline is the bandwidth optimum with
    the fewest steps a ring takes: the bound meets the cost model's time at the smallest size
    (launch + steps x overhead) and, but for the allreduce (the cut bound is not the phased one),
    comes within the pipelining term at the largest, so a bound that overcounted steps or bytes
    would fail here."""
    from topo_probe.machines.generators import ring as ring_topology
    fabric = build_fabric(ring_topology(8, latency_us=0.0))
    cost = CostModel(fabric)
    ring = baseline("ring", fabric, coll)
    bound = lower_bound_us(fabric, "ring", coll, None, PLAN_SIZES, cost.params)
    times = [cost.schedule_time_us(ring, nb) for nb in PLAN_SIZES]
    assert all(lb <= t * (1 + 1e-12) for lb, t in zip(bound, times))
    assert bound[0] == pytest.approx(times[0], rel=0.01)
    if coll != "allreduce":
        assert bound[-1] == pytest.approx(times[-1], rel=0.02)


def test_the_per_step_bound_is_the_one_in_use_on_a_cluster():
    """4 x dgx-h100 allreduce at 1 GiB: the bound per ring step through host 0's cut is well above
    the plain one (steps x overhead + cut bound), so the comparisons with the built ring above
    check it; on one host it is not used."""
    import math
    from synth.pipeline import dominance
    from synth.solve.bounds_cache import fabric_bounds
    from topo_probe.machines.generators import ring as ring_topology
    fabric = build_fabric(cluster("dgx-h100", 4))
    p = CostModel(fabric).params
    b = fabric_bounds(fabric, "allreduce")
    bw = float(b.rounds_per_block(p)) * b.block_bytes(1 << 30) / (b.unit_gbps * 1e3)
    plain = p.launch_us + 2 * (fabric.num_ranks - 1) * p.step_overhead_us + bw + 2 * math.sqrt(p.slice_overhead_us * bw)
    assert lower_bound_us(fabric, "ring", "allreduce", None, [1 << 30], p)[0] > 1.5 * plain
    assert dominance._step_us_per_byte(build_fabric(ring_topology(8)), "allreduce", p) == 0.0
