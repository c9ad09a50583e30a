"""`synthesize` reuses earlier results only when everything that changes a result is the same:
the collectives, the root of a rooted collective, the time limit where a solver with a budget
ran, the model version (constants and code) and the topology with its NIC transport (``--net``)."""

import argparse
import json
import re
import shutil
from pathlib import Path

import pytest

from synth.cli.synthesize import main
from synth.pipeline import synthesize as synth_mod
from synth.plan import model_identity
from synth.plan.model_identity import MODEL_DIR, model_code_digest
from _paths import ROOT
from _synth_results import _run
from topo_probe.cli.options import apply_machine_arguments
from topo_probe.errors import InvalidArgument
from topo_probe.load import load_topology
from topo_probe.machines.generators import fully_connected

QUICK = ["--topology", "ring:3", "--time-limit", "5", "--no-progress"]


def _roots(out):
    return {e["root"] for e in json.loads((out / "plan.json").read_text())["entries"]}


def test_another_root_is_not_reused(tmp_path, capsys):
    out = tmp_path / "res"
    assert main(QUICK + ["--collectives", "broadcast", "--out", str(out)]) == 0
    assert _roots(out) == {0}
    capsys.readouterr()
    assert main(QUICK + ["--collectives", "broadcast", "--out", str(out), "--root", "2"]) == 2
    assert "broadcast root 0 that this run (broadcast root 2) would drop; add --force" in capsys.readouterr().err
    assert _roots(out) == {0}                             # not dropped silently
    assert main(QUICK + ["--collectives", "broadcast", "--out", str(out), "--root", "2", "--force"]) == 0
    assert "reusing" not in capsys.readouterr().out
    assert _roots(out) == {2}
    assert main(QUICK + ["--collectives", "broadcast", "--out", str(out), "--root", "2"]) == 0
    assert "reusing" in capsys.readouterr().out          # the same root again: reused


def test_the_root_does_not_matter_for_unrooted_collectives(tmp_path, capsys):
    out = tmp_path / "res"
    assert main(QUICK + ["--collectives", "allgather", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(QUICK + ["--collectives", "allgather", "--out", str(out), "--root", "1"]) == 0
    assert "reusing" in capsys.readouterr().out


def test_a_root_out_of_range_is_refused_before_any_work(tmp_path, capsys):
    out = tmp_path / "res"
    assert main(QUICK + ["--collectives", "allgather", "--out", str(out)]) == 0
    before = (out / "summary.json").read_text()
    capsys.readouterr()
    assert main(QUICK + ["--collectives", "allgather,broadcast", "--out", str(out), "--root", "3"]) == 2
    err = capsys.readouterr().err
    assert "root" in err and len(err.strip().splitlines()) == 1, err
    assert (out / "summary.json").read_text() == before


def _opts(**kw):
    base = dict(collectives=("allgather",), time_limit_s=5, progress=False, max_sat_ranks=0, log=lambda s: None)
    return synth_mod.SynthesisOptions(**{**base, **kw})


def test_the_time_limit_counts_where_a_budgeted_solver_ran(tmp_path, synthesized):
    topo, out = fully_connected(3), synthesized(tmp_path / "res")     # what synth_mod.run(topo, out, _opts()) writes
    assert synth_mod.run(topo, out, _opts()).get("reused")
    assert not synth_mod.run(topo, out, _opts(time_limit_s=7)).get("reused")    # the LP ran with 5 s
    # alltoall on one host with step synthesis off: baselines only, no budget
    synth_mod.run(topo, out, _opts(collectives=("alltoall",)), force=True)
    assert synth_mod.run(topo, out, _opts(collectives=("alltoall",), time_limit_s=9)).get("reused")


def test_another_model_version_is_not_reused(tmp_path, monkeypatch, synthesized):
    topo, out = fully_connected(3), synthesized(tmp_path / "res")     # what synth_mod.run(topo, out, _opts()) writes
    monkeypatch.setattr(model_identity, "RESULTS_VERSION", model_identity.RESULTS_VERSION + 1)
    assert not synth_mod.run(topo, out, _opts()).get("reused")
    assert synth_mod.run(topo, out, _opts()).get("reused")


def test_results_of_other_model_code_are_not_reused(tmp_path, monkeypatch, synthesized):
    """The same constants with another formula (a changed NCCL-model or cost-model module) make
    other plans: the digest of the models' code is part of the key."""
    topo, out = fully_connected(3), synthesized(tmp_path / "res")
    assert synth_mod.run(topo, out, _opts()).get("reused")
    monkeypatch.setattr(model_identity, "model_code_digest", lambda: "0" * 12)
    assert not synth_mod.run(topo, out, _opts()).get("reused")
    assert synth_mod.run(topo, out, _opts()).get("reused")


def test_the_plan_records_the_models_of_its_run_and_a_plan_of_older_models_is_said(tmp_path, monkeypatch):
    """plan.json's ``model`` is summary.json's ``options.model``; after an upgrade (here: the results version
    moves on) the old plan still loads and is said to be stale, and the next run redoes it."""
    import warnings
    from synth.plan.selector import ScheduleSelector
    topo, out = fully_connected(3), tmp_path / "res"
    monkeypatch.setattr(model_identity, "RESULTS_VERSION", model_identity.RESULTS_VERSION + 1)   # the older install
    synth_mod.run(topo, out, _opts())
    old = json.loads((out / "plan.json").read_text())["model"]
    assert old == json.loads((out / "summary.json").read_text())["options"]["model"]
    assert old.startswith(f"results {model_identity.RESULTS_VERSION}, cost model ")
    monkeypatch.undo()                                                 # the upgrade
    new = synth_mod.model_version()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ScheduleSelector(topo, plan=out)
    assert [str(w.message).split(": its choices")[0] for w in caught] == [
        f"{out / 'plan.json'}: plan made by other models ({old}; installed: {new})"]
    assert not synth_mod.run(topo, out, _opts()).get("reused")
    assert json.loads((out / "plan.json").read_text())["model"] == new
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sel = ScheduleSelector(topo, plan=out)
    assert len(sel.notes) == 1, sel.notes      # the plan used only: this file was warned about already, the
                                               # warning alone could not tell a current plan from a stale one


def test_a_plan_recording_other_models_than_its_summary_is_not_reused(tmp_path, synthesized):
    """summary.json says the models are this run's, plan.json (put there by hand) says otherwise: the
    plan is not trusted, the run says why and synthesizes again."""
    out = synthesized(tmp_path / "res")
    doc = json.loads((out / "plan.json").read_text())
    doc["model"] = "results 1, cost model 000000000000, NCCL model 2.18, code 111111111111"
    (out / "plan.json").write_text(json.dumps(doc))
    said = []
    assert not synth_mod.run(fully_connected(3), out, _opts(log=said.append)).get("reused")
    assert any(f"not reusing {out}: {out / 'plan.json'} was made by other models ({doc['model']}; this run: "
               f"{synth_mod.model_version()}); synthesizing again" in line for line in said), said
    assert synth_mod.run(fully_connected(3), out, _opts()).get("reused")


def test_the_code_digest_follows_every_model_module_and_the_fitted_constants(tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(MODEL_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert model_code_digest(copy) == model_code_digest(MODEL_DIR)      # where it lies does not count
    seen = {model_code_digest(copy)}
    for edit in ("nccl/tuning.py", "physics.py", "nccl/fitted_params.json"):
        (copy / edit).write_text((copy / edit).read_text() + "\n")      # one byte more in one file
        seen.add(model_code_digest(copy))
    (copy / "nccl" / "new_term.py").write_text("")                         # a new module
    seen.add(model_code_digest(copy))
    assert len(seen) == 5


def test_the_committed_results_are_reused_on_a_fresh_clone():
    """README: a fresh clone's `synthesize --topology <preset>` finds the committed results and
    reuses them; that holds only while they were made by this model (constants and code)."""
    root = Path(__file__).resolve().parents[3] / "results"
    stale = {p.parent.name: json.loads(p.read_text())["options"]["model"]
             for p in sorted(root.glob("*/summary.json"))}
    assert len(stale) >= 5
    stale = {k: v for k, v in stale.items() if v != synth_mod.model_version()}
    assert not stale, f"regenerate with `synthesize --topology <name> --force`: {stale}"


def test_results_that_do_not_record_their_options_are_redone(tmp_path, synthesized):
    out = synthesized(tmp_path / "res")
    summary = json.loads((out / "summary.json").read_text())
    del summary["options"]                       # as versions before the options were recorded wrote it
    (out / "summary.json").unlink()
    (out / "summary.json").write_text(json.dumps(summary))
    assert not _run(out, force=False).get("reused")


def test_another_nic_transport_is_not_reused(tmp_path):
    out = tmp_path / "res"

    def two_hosts(net):
        return apply_machine_arguments(load_topology("ring:2"), argparse.Namespace(nodes=2, nic_gbps=25.0, net=net))
    synth_mod.run(two_hosts(None), out, _opts())
    assert synth_mod.run(two_hosts(None), out, _opts()).get("reused")
    with pytest.raises(InvalidArgument, match="another topology"):   # replaced only when asked
        synth_mod.run(two_hosts("efa"), out, _opts())
    assert not synth_mod.run(two_hosts("efa"), out, _opts(), force=True).get("reused")


def test_plan_lines_print_every_range_boundary_exactly():
    """A boundary that is no whole KiB/MiB/GiB prints in bytes, as before size_label: the committed dgx-a100
    plan has broadcast ranges 1 MiB-1,048,577 B and 1,048,577 B-2 MiB, which a one-decimal label shows as the
    empty-looking ``1 MiB-1.0 MiB`` and ``1.0 MiB-2 MiB``."""
    from synth.plan.size_plan import Plan, PlanEntry
    from synth.pipeline.reuse_check import plan_lines
    mib = 1 << 20
    plan = Plan("t", "f", [PlanEntry("broadcast", mib, mib + 1, "schedules/broadcast-tree.json", root=0),
                           PlanEntry("broadcast", mib + 1, 2 * mib, "nccl", root=0),
                           PlanEntry("allgather", 0, 1536, "nccl", fallback="ring.json"),
                           PlanEntry("allgather", 1536, None, "nccl", fallback="direct.json")])
    assert plan_lines(plan) == ["broadcast (root 0): 1 MiB broadcast-tree, 1048577 B-2 MiB nccl",
                                "allgather: 0 B-1536 B nccl (fallback ring), 1536 B-inf nccl (fallback direct)"]


def _printed_ranges(line: str) -> list[tuple[int, int | None, str]]:
    """A plan line read back: (first size, end (exclusive; None: no end), what runs) per printed range."""
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    out = []
    for part in line.split(": ", 1)[1].split(", "):
        m = re.fullmatch(r"(\d+) (B|KiB|MiB|GiB)(?:-(?:(\d+) (B|KiB|MiB|GiB)|(inf)))? (.+)", part)
        assert m, part
        lo = int(m[1]) * units[m[2]]
        hi = int(m[3]) * units[m[4]] if m[3] else None if m[5] else lo + 1     # one size alone: [lo, lo + 1)
        out.append((lo, hi, m[6]))
    return out


def test_adjacent_nccl_ranges_without_a_fallback_but_of_another_protocol_stay_apart():
    """An ``nccl`` entry without a ``fallback`` (plans made before that field) still gives its ``protocol`` to the
    baseline that runs where NCCL cannot (``plan_route`` passes the entry's protocol with it): two such adjacent
    entries, Simple then LL, run differently there, so the printout must not merge them into one ``nccl`` range.
    Before: ``0 B-inf nccl``."""
    from synth.pipeline.reuse_check import plan_lines
    from synth.plan.size_plan import Plan, PlanEntry
    plan = Plan("t", "f", [PlanEntry("allreduce", 0, 1 << 16, "nccl"),
                           PlanEntry("allreduce", 1 << 16, None, "nccl", protocol="ll")])
    assert plan_lines(plan) == ["allreduce: 0 B-64 KiB nccl, 64 KiB-inf nccl (fallback under LL)"]


def test_plan_lines_read_back_give_what_the_selector_runs_at_each_size():
    """The committed dgx-a100 plan printed: a range of one size alone (``1 MiB broadcast-tree (LL)``, before
    ``1 MiB-1048577 B``), adjacent ``nccl`` ranges told apart by the fallback each runs where NCCL cannot (before:
    ``64 KiB-512 KiB nccl, 512 KiB-1 MiB nccl`` with nothing to say why), and no two adjacent ranges printed the
    same.  Read back, every printed range's first and last size select (``Plan.select``, the selector's lookup)
    entries with that schedule and fallback, the ranges tile 0 B-inf, and neighbours differ."""
    from synth.plan.size_plan import Plan
    from synth.pipeline.reuse_check import plan_lines
    plan = Plan.load(ROOT / "results" / "dgx-a100" / "plan.json")
    lines = {line.split(": ", 1)[0]: line for line in plan_lines(plan)}
    assert "1 MiB broadcast-tree (LL)," in lines["broadcast (root 0)"], lines["broadcast (root 0)"]
    assert "512 KiB-1 MiB nccl (fallback allreduce-direct under LL)" in lines["allreduce"], lines["allreduce"]
    for head, line in lines.items():
        coll, root = head.split(" (root ")[0], (int(head.split("(root ")[1][:-1]) if "(root" in head else None)
        ranges = _printed_ranges(line)
        assert ranges[0][0] == 0 and ranges[-1][1] is None and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        assert all(a[2] != b[2] for a, b in zip(ranges, ranges[1:])), line
        for lo, hi, runs in ranges:
            for size in (lo, (hi or lo + 1) - 1):
                e = plan.select(coll, size, root)
                name = Path(e.schedule).stem
                want = (f"nccl (fallback {Path(e.fallback).stem}{' under LL' if e.protocol == 'll' else ''})"
                        if e.schedule == "nccl" else name + (" (LL)" if e.protocol == "ll" else ""))
                assert runs == want, (head, size, runs, want)


def test_report_plan_table_prints_every_range_boundary_exactly():
    """report.md's plan table had the same lossy label (committed dgx-a100 report: ``| 1 MiB | 1.0 MiB |``)."""
    from synth.pipeline.report import _plan_lines
    from synth.plan.size_plan import Plan, PlanEntry
    mib = 1 << 20
    plan = Plan("t", "f", [PlanEntry("broadcast", mib, mib + 1, "schedules/broadcast-tree.json", root=0),
                           PlanEntry("broadcast", mib + 1, None, "nccl", root=0)])
    rows = [line for line in _plan_lines(plan) if line.startswith("| broadcast")]
    assert [row.split(" | ")[1:3] for row in rows] == [["1 MiB", "1048577 B"], ["1048577 B", "∞"]]
