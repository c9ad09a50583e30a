"""A plan entry whose schedule file cannot run that entry is refused when the Communicator is built
(issue 37: "our own Communicator must run exactly what plan.json says"), in one line naming the plan
file, the entry and the field, not at the first call of that size.  The reference for "cannot run" is
read here from the schedule file itself (its ``collective``, ``root`` and ``ranks`` fields, plain JSON),
not from the code under test."""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
from _paths import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels import Communicator
from topo_probe import get_preset
from topo_probe.errors import TopocollError

SRC = ROOT / "results" / "dgx1-v100"
FILES = sorted(p.name for p in (SRC / "schedules").glob("*.json"))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The committed dgx1-v100 schedules in a folder of their own, plus one 4-rank schedule."""
    from synth.baselines import baseline
    from synth.formats.schedule_file import save_schedule
    from synth.ir.fabric import build_fabric
    from topo_probe.machines.generators import fully_connected
    out = tmp_path_factory.mktemp("plan_at_build")
    shutil.copytree(SRC / "schedules", out / "schedules")
    save_schedule(baseline("ring", build_fabric(fully_connected(4)), "allgather"), out / "schedules" / "ag4.json")
    return out


def _doc():
    return json.loads((SRC / "plan.json").read_text())


def _header(folder, file):
    d = json.loads((folder / file).read_text())
    return d["collective"], d["root"], d["ranks"]


def _build(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Communicator(8, topology=get_preset("dgx1-v100"), plan=str(path))


@pytest.mark.parametrize("field,file,why", [
    ("schedule", "schedules/broadcast-ring.json", "another collective"),
    ("schedule", "schedules/absent.json", "missing"),
    ("schedule", "schedules/ag4.json", "another rank count"),
    ("fallback", "schedules/reduce-ring.json", "another collective"),
    ("fallback", "schedules/absent.json", "missing"),
])
def test_a_bad_schedule_file_is_refused_at_build_naming_plan_entry_and_field(folder, field, file, why):
    doc = _doc()
    k = next(i for i, e in enumerate(doc["entries"]) if e["collective"] == "allgather"
             and ((e["schedule"] != "nccl") if field == "schedule" else bool(e.get("fallback"))))
    doc["entries"][k][field] = file
    path = folder / f"plan-{field}-{why.replace(' ', '-')}.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TopocollError) as info:
        _build(path)
    line = str(info.value)
    assert "\n" not in line and str(path) in line and f"entries[{k}].{field}" in line, line


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_swapped_schedule_file_builds_exactly_when_its_header_fits_the_entry(folder, data):
    """Any entry's schedule (or fallback) swapped for any file of the folder: the build is refused
    (one line naming the file, the entry, the field) exactly when the file's collective, root or rank
    count differs from the entry's; else the Communicator is built."""
    doc = _doc()
    k = data.draw(st.integers(0, len(doc["entries"]) - 1))
    e = doc["entries"][k]
    field = "schedule" if e["schedule"] != "nccl" or not e.get("fallback") else data.draw(
        st.sampled_from(["schedule", "fallback"]))
    file = "schedules/" + data.draw(st.sampled_from(FILES + ["ag4.json"]))
    if field == "schedule" and e["schedule"] == "nccl":
        return
    e[field] = file
    path = folder / f"plan-swap-{k}-{field}.json"
    path.write_text(json.dumps(doc))
    fits = _header(folder, file) == (e["collective"], e["root"], 8)
    try:
        _build(path)
        assert fits, f"entries[{k}].{field} = {file} ({_header(folder, file)}) was taken for {e['collective']}"
    except TopocollError as err:
        line = str(err)
        assert not fits or "verif" in line.lower(), line   # a fitting header may still fail the verifier
        assert "\n" not in line and str(path) in line and f"entries[{k}].{field}" in line, line


def test_the_committed_plan_builds():
    comm = _build(SRC / "plan.json")
    assert comm.plan is not None and len(comm.plan.entries) == len(_doc()["entries"])


def test_an_entry_shadowed_at_its_start_by_an_earlier_overlapping_entry_is_checked_too(folder):
    """An in-memory plan may overlap (the loader refuses overlaps; Plan.select then takes list order):
    entry 1 starts inside entry 0's range, so a lookup at entry 1's min_bytes answers entry 0, but a
    call above entry 0's range runs entry 1.  Entry 1's missing file is refused at build all the same."""
    from synth.plan.size_plan import Plan, PlanEntry
    topo = get_preset("dgx1-v100")
    good = next(e for e in _doc()["entries"] if e["collective"] == "allgather" and e["schedule"] != "nccl")
    plan = Plan(topo.name, topo.fingerprint(), [PlanEntry("allgather", 0, 1 << 20, good["schedule"]),
                                                PlanEntry("allgather", 1 << 10, None, "schedules/absent.json")],
                base_dir=folder)
    with pytest.raises(TopocollError) as info:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Communicator(8, topology=topo, plan=plan)
    assert "\n" not in str(info.value) and "entries[1].schedule" in str(info.value), info.value


def test_a_second_build_on_unchanged_files_skips_the_check_and_a_changed_file_is_checked_again(folder, tmp_path,
                                                                                                monkeypatch):
    """The check is remembered per plan file, schedule files (path, time, size), entries and topology:
    building again on the same files verifies nothing at build; a schedule file replaced afterwards by
    one of another collective is refused at the next build, naming the entry."""
    import os
    import synth.ir.verifier as verifier
    shutil.copytree(folder / "schedules", tmp_path / "schedules")
    (tmp_path / "plan.json").write_text(json.dumps(_doc()))
    calls = []
    real = verifier.check
    monkeypatch.setattr(verifier, "check", lambda *a, **k: calls.append(1) or real(*a, **k))
    _build(tmp_path / "plan.json")
    first = len(calls)
    _build(tmp_path / "plan.json")
    assert first > 0 and len(calls) == first, (first, len(calls))
    e = next(e for e in _doc()["entries"] if e["collective"] == "allgather" and e["schedule"] != "nccl")
    target = tmp_path / e["schedule"]
    target.write_bytes((folder / "schedules" / "broadcast-ring.json").read_bytes())
    os.utime(target, ns=(target.stat().st_atime_ns, target.stat().st_mtime_ns + 10**9))
    with pytest.raises(TopocollError) as info:
        _build(tmp_path / "plan.json")
    assert f"{e['schedule']}: holds broadcast root 0" in str(info.value), info.value   # the first entry naming it
