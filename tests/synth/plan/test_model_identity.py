"""plan.json's ``model``: the models that made the plan.  A plan made by other models than the
installed ones still runs (every schedule verified, results as NumPy's) and is said once per plan
file per process, naming the file, both identities and the fix; a current plan and a plan
recording none (hand-written, made before the key) are not; a hostile value is one line."""

import json
import shutil
import warnings

import numpy as np
import pytest
from _paths import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import Communicator
from synth.plan.model_identity import MAX_MODEL_CHARS, installed_model_version, model_version
from synth.plan.selector import ScheduleSelector
from synth.plan.size_plan import Plan
from synth.sweep.driver import make_selector
from topo_probe import get_preset
from topo_probe.errors import ScheduleFormatError

SRC = ROOT / "results" / "dgx1-v100"
#: an identity as an older install wrote it (another results version and models' code)
OLD = "results 1, cost model 000000000000, NCCL model 2.18, code 111111111111"


@pytest.fixture(scope="module")
def topo():
    return get_preset("dgx1-v100")


def _plan(folder, model=None, drop=False):
    """A copy of the committed dgx1-v100 plan and schedules in ``folder``, its ``model`` set (or removed)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(SRC / "schedules", folder / "schedules")
    doc = json.loads((SRC / "plan.json").read_text())
    doc.pop("model", None) if drop else doc.update(model=model)
    (folder / "plan.json").write_text(json.dumps(doc))
    return folder / "plan.json"


def _said(make):
    """The warnings ``make()`` gives (every one recorded, none filtered)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make()
    return [str(w.message) for w in caught]


def test_a_stale_plan_is_said_once_per_file_naming_both_identities_and_still_runs_right(tmp_path, topo):
    path = _plan(tmp_path / "old", OLD)
    said = _said(lambda: Communicator(8, topology=topo, plan=path))
    assert len(said) == 1, said
    assert said[0].startswith(f"{path}: plan made by other models ({OLD}; installed: {model_version()})")
    assert f"rerun synthesize --topology dgx1-v100 --out {path.parent}" in said[0] and "\n" not in said[0]
    comm = []
    assert _said(lambda: comm.append(Communicator(8, topology=topo, plan=path))) == []     # once per file
    xs = [np.arange(1000, dtype=np.float32) * (r + 1) for r in range(8)]
    ys = [np.empty(1000, np.float32) for _ in range(8)]
    comm[0].all_reduce(xs, ys, op="sum")
    for y in ys:                                                     # NumPy's sum, exact in float32 here
        np.testing.assert_array_equal(y, np.sum(xs, axis=0, dtype=np.float64).astype(np.float32))
    assert comm[0].last_route.plan == str(path) and comm[0].last_route.ran.startswith("schedules/")
    other = _plan(tmp_path / "other", OLD)                            # another file: said again
    assert len(_said(lambda: ScheduleSelector(topo, plan=other))) == 1


def test_the_sweep_and_the_torch_backend_say_it_too(tmp_path, topo, monkeypatch):
    path = _plan(tmp_path / "sweep", OLD)
    assert _said(lambda: make_selector("allreduce", topo, "ring", plan=path)) == []   # a forced algorithm reads none
    assert [m.split(":")[0] for m in _said(lambda: make_selector("allreduce", topo, "plan", plan=path))] == [str(path)]
    pytest.importorskip("torch")
    from kernels.pytorch.plan_choice import make_selector as torch_selector
    path = _plan(tmp_path / "torch", OLD)
    monkeypatch.setenv("TOPOCOLL_TOPOLOGY", "dgx1-v100")
    monkeypatch.setenv("TOPOCOLL_PLAN", str(path))
    said = _said(lambda: torch_selector(8, rank=3))
    assert len(said) == 1 and said[0].startswith(f"{path}: plan made by other models ({OLD};"), said


def test_a_current_plan_and_a_plan_without_the_key_load_without_a_word(tmp_path, topo):
    current = _plan(tmp_path / "current", model_version())
    assert Plan.load(current).model == installed_model_version() == model_version()
    bare = _plan(tmp_path / "bare", drop=True)                       # hand-written, or made before the key
    assert Plan.load(bare).model is None and "model" not in Plan.load(bare).to_dict()
    for path in (current, bare):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sel = ScheduleSelector(topo, plan=path)
        assert sel.plan.path == path and len(sel.notes) == 1, sel.notes


def test_a_plan_made_in_memory_with_a_stale_model_is_said_once(topo):
    plan = Plan.load(SRC / "plan.json")
    plan.model, plan.path = OLD, None
    said = _said(lambda: ScheduleSelector(topo, plan=plan)) + _said(lambda: ScheduleSelector(topo, plan=plan))
    assert len(said) == 1 and said[0].startswith(f"the plan given: plan made by other models ({OLD};"), said


def test_plans_made_in_memory_and_dropped_in_turn_are_each_said_once():
    """Different in-memory stale plans, each made, given to a selector twice and freed in turn until CPython
    hands a freed plan's id() to a new one: each is said exactly once (the reference: one warning per plan).
    A plan is freed by its last reference going (checked by a weak reference); gc.collect() only if a
    cycle kept it, as a full collection of a whole suite's heap costs seconds per plan."""
    import gc
    import weakref

    from synth.plan.size_plan import PlanEntry
    from topo_probe.machines.generators import fully_connected
    small, seen = fully_connected(4), set()
    for k in range(200):
        plan = Plan(small.name, small.fingerprint(), [PlanEntry("allreduce", 0, None, "nccl")], model=f"{OLD} #{k}")
        said = _said(lambda: ScheduleSelector(small, plan=plan)) + _said(lambda: ScheduleSelector(small, plan=plan))
        assert len(said) == 1 and f"#{k};" in said[0], (k, said)
        reused, key = id(plan) in seen, id(plan)
        seen.add(key)
        freed = weakref.ref(plan)
        del plan
        if freed() is not None:
            gc.collect()
        assert freed() is None, f"plan #{k} is still alive: its id() cannot be handed on"
        if reused:
            return
    pytest.fail("no id() was reused in 200 plans: the test did not exercise the reuse")


@pytest.mark.parametrize("machine", ["dgx1-v100", "2xdgx-a100", "dgx1-v100[0,1,2]", "full3", "nvsmi_p100x4_driver384_soc"])
def test_the_fix_the_warning_names_is_a_command_synthesize_takes(tmp_path, machine):
    """``rerun synthesize --topology X``: X is what load_topology (synthesize's --topology) accepts, else a
    placeholder naming the machine; a plan's topology name is a preset only for a whole preset machine (a
    cluster is ``2xdgx-a100``, kept GPUs ``dgx1-v100[0,1,2]``, a user's file its stem)."""
    from synth.plan.model_identity import stale_plan_note
    from topo_probe import load_topology
    note = stale_plan_note(Plan(machine, "", [], tmp_path, tmp_path / "plan.json", model=OLD))
    arg = note.split("rerun synthesize --topology ", 1)[1].split(f" --out {tmp_path}")[0]
    if arg.startswith("<"):
        assert repr(machine) in arg and machine != "dgx1-v100", note
    else:
        assert arg == machine and load_topology(arg).name == machine, note


def _write(tmp_path, model_json: str):
    doc = json.dumps({"format": "topocoll.plan", "version": 1, "topology": {"name": "t", "fingerprint": ""},
                      "model": "@@", "entries": []})
    path = tmp_path / "plan.json"
    path.write_bytes(doc.replace('"@@"', model_json).encode("utf-8", "surrogateescape"))
    return path


@pytest.mark.parametrize("model_json, words", [
    ("5", "model must be one printable line of 1 to 256 characters (the models that made the plan), got 5"),
    ("[\"results 2\"]", "model must be one printable line"),
    ('""', "model must be one printable line"),
    ('"a\\nb"', "model must be one printable line"),
    (json.dumps("x" * (MAX_MODEL_CHARS + 1)), "got 'xxxxxxxx"),
    (json.dumps("x" * 10_000_000), "got 'xxxxxxxx"),
    ('"\\udcff"', "unpaired surrogate"),
    ('"results \udcff"', "UTF-8"),                  # the byte 0xff in the file
])
def test_a_hostile_model_is_one_line_naming_the_file(tmp_path, model_json, words):
    path = _write(tmp_path, model_json)
    with pytest.raises(ScheduleFormatError) as bad:
        Plan.load(path)
    text = str(bad.value)
    assert text.startswith(str(path)) and words in text and "\n" not in text and len(text) < 400, text


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                 st.text(max_size=300), st.lists(st.text(max_size=5), max_size=3),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
def test_any_json_model_loads_as_itself_or_is_refused_in_one_line(tmp_path_factory, value):
    path = _write(tmp_path_factory.mktemp("m"), json.dumps(value))
    fine = value is None or (isinstance(value, str) and 0 < len(value) <= 256 and value.isprintable())
    try:
        assert Plan.load(path).model == value and fine
    except ScheduleFormatError as bad:
        assert not fine and str(bad).startswith(f"{path}: model") and "\n" not in str(bad)   # names the field


def test_the_installed_identity_follows_what_a_test_replaces_in_any_order(monkeypatch):
    """installed_model_version was lru_cached whole: once read (here first, as by any earlier test on the worker),
    a test replacing RESULTS_VERSION or the code digest got the old identity, and one that read it while replaced
    left the replaced identity to every later test (pytest -n order)."""
    from synth.plan import model_identity
    before = installed_model_version()
    monkeypatch.setattr(model_identity, "RESULTS_VERSION", model_identity.RESULTS_VERSION + 1)
    monkeypatch.setattr(model_identity, "model_code_digest", lambda model_dir=None: "f" * 12)
    patched = installed_model_version()
    assert patched.startswith(f"results {model_identity.RESULTS_VERSION}, ") and patched.endswith(", code " + "f" * 12)
    assert patched == model_version() != before
    monkeypatch.undo()
    assert installed_model_version() == before == model_version()
