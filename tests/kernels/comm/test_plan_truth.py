"""What runs equals plan.json: every entry of every committed preset plan (results/*/plan.json,
whatever it holds) and of a plan built here for a small topology, at sampled sizes (each
range's ends and middle and every power-of-two size in it) through the Communicator on the host
path and on the GPU path with the CPU stand-in of CuPy (tests/_plan_truth.py): the route each
call took against a linear scan of plan.json, and the result against NumPy."""

from __future__ import annotations

import json

import pytest
from _paths import ROOT
from _plan_truth import EXEC_BYTES, PlanTruth

from synth.formats.schedule_file import load_schedule
from synth.plan.decision import EXECUTOR_COSTS, busiest_rank_records
from synth.plan.versus_nccl import MARGIN
from topo_probe import get_preset

PLANS = sorted(ROOT.glob("results/*/plan.json"))


def _check(samples, plan, n_exec_min: int = 1) -> None:
    bad = [s for s in samples if s.mismatch]
    assert not bad, f"{len(bad)} of {len(samples)} sampled calls ran something else than plan.json: {bad[:3]}"
    for k, e in enumerate(plan.entries):          # every entry sampled, and run where it has small sizes
        mine = [s for s in samples if s.collective == e.collective and s.root == e.root and e.covers(s.nbytes)]
        assert mine, f"entry {k} ({e.collective} [{e.min_bytes}, {e.max_bytes})) has no sampled size"
        if e.min_bytes <= EXEC_BYTES // 2:
            assert sum(s.executed for s in mine) >= n_exec_min, f"entry {k}: no sampled call ran"
    if any(e.schedule == "nccl" and e.collective == "allreduce" for e in plan.entries):
        assert any(s.gpu == "nccl" for s in samples), "no sampled call ran NCCL on the stand-in GPU path"


def test_the_committed_plans_are_there():
    names = {p.parent.name for p in PLANS}
    assert {"dgx1-v100", "dgx-a100", "dgx-h100", "mi300x", "pcie-8gpu-2socket"} <= names, names


@pytest.mark.parametrize("plan_path", PLANS, ids=[p.parent.name for p in PLANS])
def test_every_committed_plan_entry_runs_what_plan_json_says(plan_path):
    topology = get_preset(json.loads(plan_path.read_text())["topology"]["name"])
    truth = PlanTruth(plan_path, topology)
    assert truth.plan.topology_fingerprint in ("", topology.fingerprint())
    _check(truth.run(exec_per_entry=2), truth.plan)


@pytest.fixture(scope="module")
def fresh_plan(tmp_path_factory):
    """A plan built here: DGX A100's GPUs 0-3, all eight collectives (baselines and bandwidth-
    optimal schedules; no SAT), the one decision of synth.plan.decision."""
    from synth.pipeline import synthesize as synth_mod
    topo = get_preset("dgx-a100").subset([0, 1, 2, 3])
    out = tmp_path_factory.mktemp("fresh")
    opts = synth_mod.SynthesisOptions(time_limit_s=5, progress=False, max_sat_ranks=0, log=lambda s: None)
    synth_mod.run(topo, out, opts, force=True)
    return out / "plan.json", topo


def test_a_freshly_built_plan_runs_what_it_says(fresh_plan):
    path, topo = fresh_plan
    truth = PlanTruth(path, topo)
    samples = truth.run()
    _check(samples, truth.plan, n_exec_min=2)
    assert any(s.planned == "nccl" and s.host != "nccl" and s.executed for s in samples)   # fallbacks ran


def test_a_fresh_plan_records_the_decision_it_made(fresh_plan):
    """Every entry says what its decision counted, and the numbers agree with the rule: the
    native executor's 4 us + 1 us per record of the busiest rank (counted again here from the
    schedule file), ours kept only >= 5 % faster than NCCL, ``nccl`` entries naming a fallback
    schedule of the same collective and root."""
    path, _ = fresh_plan
    from synth.plan.size_plan import Plan
    plan = Plan.load(path)
    native = EXECUTOR_COSTS["native"]
    assert (native.call_us, native.record_us) == (4.0, 1.0)
    for e in plan.entries:
        d = e.decision
        assert d is not None and d["executor"] == "native", e
        file = e.fallback if e.schedule == "nccl" else e.schedule
        sched = load_schedule(path.parent / file)
        assert (sched.collective, sched.root) == (e.collective, e.root)
        assert d["records"] == busiest_rank_records(sched)
        assert d["executor_us"] == pytest.approx(4.0 + d["records"])
        margin = d["nccl_us"] / (d["schedule_us"] + d["executor_us"])
        assert d["margin"] == pytest.approx(margin, abs=1e-3)
        if e.schedule == "nccl":
            assert margin < MARGIN and e.predicted_us == pytest.approx(d["nccl_us"]), e
        else:
            assert margin >= MARGIN - 1e-3 and e.fallback is None, e
