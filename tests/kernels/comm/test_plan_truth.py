"""What runs equals plan.json: every entry of every committed preset plan (results/*/plan.json,
whatever it holds) and of a plan built here for a small topology, at sampled sizes (each
range's ends and middle and every power-of-two size in it) through the Communicator on the host
path and on the GPU path with the CPU stand-in of CuPy (tests/_plan_truth.py): the route each
call took against a linear scan of plan.json, and the result against NumPy.  The same for plans
synthesize writes for machines no preset has (the user's files of tests/fixtures, 2-6 GPUs), and
for hostile edits of a committed plan: each runs what the edited file says or is refused in one
line naming the file."""

from __future__ import annotations

import json
import warnings

import pytest
from _campaign import examples
from _paths import ROOT
from _plan_truth import EXEC_BYTES, UNSEEN, PlanTruth, sampled_counts, unseen_plan
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels import Communicator
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


# --------------------------------------------------------------------------- mutated plans
#: values a hand edit (or a hostile file) puts into an entry's fields
HOSTILE = {
    "min_bytes": [-1, 0, 1, 4095, 65536, 2 ** 63, 2 ** 70, 1.5, "12", None, True, float("nan")],
    "max_bytes": [-1, 0, 1, 4096, 65537, 2 ** 62, 2 ** 70, 1.5, "12", None, False, float("inf")],
    "schedule": ["nccl", "schedules/absent.json", "../plan.json", "/etc/passwd", "", 3, None,
                 "schedules/allgather-rhd.json", "schedules/allreduce-tree.json", "schedules/broadcast-ring.json"],
    "fallback": [None, "nccl", "schedules/absent.json", "schedules/allreduce-tree.json",
                 "schedules/gather-tree.json", "schedules/reduce-ring.json", 7],
    "collective": ["allreduce", "all_gather", "gather", "reduce", "allreduce2", "", 3, None],
    "root": [None, 0, 1, 7, 8, -1, 1.0, "0"],
    "protocol": ["simple", "ll", "LL", None, 1],
}


def _mutated(doc, data):
    """``doc`` with one to three hostile edits: an entry's field, a removed, duplicated or moved
    entry, or another fingerprint (what the edit was, for the failure message)."""
    doc, what = json.loads(json.dumps(doc)), []
    for _ in range(data.draw(st.integers(1, 3))):
        k = data.draw(st.integers(0, len(doc["entries"]) - 1))
        kind = data.draw(st.sampled_from(sorted(HOSTILE) + ["drop", "duplicate", "move", "fingerprint"]))
        if kind == "drop" and len(doc["entries"]) > 1:
            doc["entries"].pop(k)
        elif kind == "duplicate":
            doc["entries"].append(dict(doc["entries"][k]))
        elif kind == "move":
            doc["entries"].insert(0, doc["entries"].pop(k))
        elif kind == "fingerprint":
            doc["topology"]["fingerprint"] = data.draw(st.sampled_from(["", "0123456789abcdef", 5]))
        elif kind in HOSTILE:
            doc["entries"][k][kind] = data.draw(st.sampled_from(HOSTILE[kind]))
        what.append(f"{kind} entries[{k}]")
    return doc, what


@pytest.fixture(scope="module")
def dgx1_copy(tmp_path_factory):
    """The committed dgx1-v100 plan and its schedules in a folder of their own."""
    import shutil
    folder = tmp_path_factory.mktemp("dgx1")
    shutil.copytree(ROOT / "results" / "dgx1-v100" / "schedules", folder / "schedules")
    return folder, json.loads((ROOT / "results" / "dgx1-v100" / "plan.json").read_text()), get_preset("dgx1-v100")


@settings(max_examples=examples(100, 1000), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_mutated_committed_plan_runs_what_it_says_or_is_refused_in_one_line(dgx1_copy, data):
    """Every edit of the committed plan either is refused in one line naming the plan file (its
    field or entry) or a schedule file of its folder, or runs what the edited plan.json says,
    by a linear scan of its entries, on both paths, with NumPy's results (tests/_plan_truth.py)."""
    import numpy as np

    from topo_probe.errors import TopocollError
    folder, doc, topo = dgx1_copy
    bad, what = _mutated(doc, data)
    path = folder / f"plan-{data.draw(st.integers(0, 10 ** 9))}.json"
    path.write_text(json.dumps(bad))
    try:
        truth = PlanTruth(path, topo)
        entries = truth.plan.entries
        picks = data.draw(st.lists(st.integers(0, len(entries) - 1), min_size=1, max_size=3)) if entries else []
        for k in picks:
            counts = sampled_counts(entries[k], topo.num_gpus)
            if counts:
                sample = truth.sample(entries[k], counts[0], np.random.default_rng(k))
                assert not sample.mismatch, (what, sample)
    except TopocollError as err:
        line = str(err)
        assert "\n" not in line, (what, line)
        assert str(path) in line or str(folder / "schedules") in line, (what, line)
    finally:
        path.unlink()


# --------------------------------------------------------------------------- machines no preset has
def test_the_unseen_machines_are_those_before_the_one_list_of_machines_no_preset_has():
    """tests/_other_machines.py's list, filtered for this helper, gives the machines its own list gave
    (as tests/_plan_truth.py spelled them before, at 4c98a676; benchmarks/bench_plan_truth.py prints them in
    this order)."""
    assert list(UNSEEN.items()) == [("vm-2xA100-no-sysfs", ("family/nccl_topo_dump_vm_no_sysfs.xml", None)),
                                    ("rtx4090-gpus0-2", ("nvsmi_topo_8x_rtx4090_sys.txt", [0, 1, 2])),
                                    ("p100x4-soc", ("family/nvsmi_p100x4_driver384_soc.txt", None)),
                                    ("dgx-a100-nvsmi-gpus0-5", ("nvsmi_topo_dgx_a100.txt", list(range(6))))]


@pytest.mark.parametrize("name", sorted(UNSEEN))
def test_a_plan_synthesize_writes_for_a_machine_no_preset_has_runs_what_it_says(name, tmp_path):
    """``synthesize --topology FILE [--gpus ...] --out X`` (the pipeline it runs, no SAT) for the
    user's files of tests/fixtures at 2, 3, 4 and 6 GPUs, then every entry of X/plan.json at
    sampled sizes through both paths against a linear scan of the file and NumPy; a Communicator
    handed the folder X, as a user would, takes X/plan.json (before: no plan, baselines ran)."""
    path, topo = unseen_plan(name, tmp_path)
    truth = PlanTruth(path, topo)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        by_folder = Communicator(topo.num_gpus, topology=topo, plan=tmp_path)
    assert by_folder.selector.plan is not None and by_folder.selector.plan.path == path
    _check(truth.run(exec_per_entry=2), truth.plan)
