"""The selector's plan discovery and plan entries: a plan the user points at is the plan that
runs, and a plan that cannot run what it says is refused in one line naming the plan file and
the field (never a baseline run in its place, never an error of another class)."""

import json
import os
import re
import shutil
import warnings

import pytest
from _paths import ROOT

from synth.plan.selector import ScheduleSelector, find_plan
from topo_probe import get_preset
from topo_probe.errors import ScheduleFormatError, ScheduleInvalid, TopocollError, TopologyError

SRC = ROOT / "results" / "dgx1-v100"


@pytest.fixture(scope="module")
def topo():
    return get_preset("dgx1-v100")


def _copy(folder):
    """A copy of the committed dgx1-v100 plan (plan.json and schedules/) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(SRC / "plan.json", folder / "plan.json")
    shutil.copytree(SRC / "schedules", folder / "schedules")
    return folder


def _edit(folder, change):
    doc = json.loads((folder / "plan.json").read_text())
    change(doc)
    (folder / "plan.json").write_text(json.dumps(doc))


def _first(doc, collective):
    """The index and entry of ``collective``'s first entry naming a schedule file (not ``nccl``) in a plan document."""
    return next((k, e) for k, e in enumerate(doc["entries"])
                if e["collective"] == collective and e["schedule"] != "nccl")


def test_the_folder_synthesize_wrote_is_its_plan(tmp_path, topo):
    """``synthesize --out X`` writes X/plan.json; plan=X must run it (before: X was searched for
    X/*/plan.json only, found nothing, and every call ran a baseline)."""
    folder = _copy(tmp_path / "out")
    plan, note = find_plan(topo, folder)
    assert plan is not None and plan.path == folder / "plan.json", note
    _, entry = _first(json.loads((folder / "plan.json").read_text()), "allreduce")
    label = ScheduleSelector(topo, plan=folder).select("allreduce", entry["min_bytes"]).label
    assert label == f"plan:{entry['schedule']}", label


def test_a_folder_holding_another_machines_plan_is_refused_naming_the_file(tmp_path):
    folder = _copy(tmp_path / "out")
    fp = json.loads((folder / "plan.json").read_text())["topology"]["fingerprint"]
    with pytest.raises(TopologyError, match=rf"{folder / 'plan.json'}: topology.fingerprint {fp} "):
        find_plan(get_preset("dgx-a100"), folder)


def test_another_machines_plan_json_names_the_file_and_field(tmp_path, topo):
    """A plan of 8 ranks given to 4 of them: the rank counts and the field in one line."""
    path = _copy(tmp_path / "out") / "plan.json"
    with pytest.raises(TopologyError) as err:
        find_plan(topo.subset([0, 1, 2, 3]), path)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{path}: topology.fingerprint"), line
    assert "4 GPUs" in line and "a plan made for another machine" in line, line


@pytest.mark.parametrize("kind", ["symlink loop", "directory"])
def test_the_topologys_own_plan_that_cannot_be_read_is_refused(tmp_path, topo, kind):
    """``<results>/<name>/plan.json`` there but not a readable file: refused (before: skipped as
    if absent, and baselines ran)."""
    own = tmp_path / "results" / topo.name
    own.mkdir(parents=True)
    if kind == "directory":
        (own / "plan.json").mkdir()
    else:
        os.symlink(own / "plan.json", own / "plan.json")
    with pytest.raises(ScheduleFormatError, match=str(own / "plan.json")):
        find_plan(topo, tmp_path / "results")


def test_a_plan_path_that_is_a_directory_is_refused(tmp_path, topo):
    (tmp_path / "plan.json").mkdir()
    with pytest.raises(ScheduleFormatError, match=rf"{tmp_path / 'plan.json'}: .*not a plan file"):
        find_plan(topo, tmp_path / "plan.json")


def test_discovery_takes_no_unfingerprinted_plan_of_another_machine(tmp_path, topo):
    """A plan without a fingerprint is only its own topology's: discovery must not hand another
    machine's (here 8 ranks) to a 4-rank topology (before: taken, then refused at the first
    call by the verifier)."""
    other = _copy(tmp_path / "results" / "someone-else")
    _edit(other, lambda doc: doc["topology"].update(fingerprint=""))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan, note = find_plan(topo.subset([0, 1, 2, 3]), tmp_path / "results")
    assert plan is None, note


def _entry_error(tmp_path, topo, change, collective="allreduce"):
    folder = _copy(tmp_path / "out")
    doc = json.loads((folder / "plan.json").read_text())
    k, entry = _first(doc, collective)
    nbytes = entry["min_bytes"]
    change(folder, entry)
    (folder / "plan.json").write_text(json.dumps(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sel = ScheduleSelector(topo, plan=folder / "plan.json")
    with pytest.raises(TopocollError) as err:
        sel.select(collective, nbytes)
    return str(err.value), folder, k, err.value


def _missing(folder, entry):
    (folder / entry["schedule"]).unlink()


def _loop(folder, entry):
    path = folder / entry["schedule"]
    path.unlink()
    os.symlink(path.name, path)


def _other_collective(folder, entry):
    entry["schedule"] = "schedules/allgather-rhd.json"


def _cut(folder, entry):
    path = folder / entry["schedule"]
    doc = json.loads(path.read_text())
    doc["steps"] = doc["steps"][:-1]
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("change, error, words", [
    (_missing, ScheduleFormatError, "cannot read"),
    (_loop, ScheduleFormatError, "cannot resolve|cannot read"),
    (_other_collective, ScheduleInvalid, "holds allgather"),
    (_cut, ScheduleInvalid, "postcondition|missing"),
], ids=["missing", "symlink-loop", "other-collective", "fails-verifier"])
def test_an_entry_whose_schedule_cannot_run_is_named_in_one_line(tmp_path, topo, change, error, words):
    line, folder, k, err = _entry_error(tmp_path, topo, change)
    assert isinstance(err, error), (type(err), line)
    assert "\n" not in line, line
    assert line.startswith(f"{folder / 'plan.json'}: entries[{k}].schedule"), line
    assert re.search(words, line), line


def test_an_nccl_entrys_fallback_of_another_collective_is_named(tmp_path, topo):
    def change(folder, entry):
        entry.update(schedule="nccl", fallback="schedules/allgather-rhd.json")
    line, folder, k, err = _entry_error(tmp_path, topo, change)
    assert isinstance(err, ScheduleInvalid) and line.startswith(f"{folder / 'plan.json'}: entries[{k}].fallback"), line


def test_an_unfingerprinted_plan_of_another_machine_names_the_entry(tmp_path, topo):
    """Given explicitly, a plan without a fingerprint runs; its schedules made for 8 ranks are
    refused on 4 naming the plan's entry (the verifier's wrong-topology rule)."""
    folder = _copy(tmp_path / "out")
    _edit(folder, lambda doc: doc["topology"].update(fingerprint=""))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sel = ScheduleSelector(topo.subset([0, 1, 2, 3]), plan=folder / "plan.json")
    k, entry = _first(json.loads((folder / "plan.json").read_text()), "allreduce")
    with pytest.raises(ScheduleInvalid, match=rf"^{folder / 'plan.json'}: entries\[{k}\].schedule .*wrong-topology"):
        sel.select("allreduce", entry["min_bytes"])


def test_a_folder_whose_plan_json_is_a_symlink_loop_is_refused(tmp_path, topo):
    os.symlink(tmp_path / "plan.json", tmp_path / "plan.json")
    with pytest.raises(ScheduleFormatError, match=rf"^{tmp_path / 'plan.json'}: cannot read"):
        find_plan(topo, tmp_path)


def test_topocoll_results_naming_a_synthesize_out_folder(tmp_path, topo, monkeypatch):
    """``TOPOCOLL_RESULTS=X`` (``"auto"``) with X/plan.json: this topology's plan is used; another
    machine's is skipped with a warning, as ``<results>/<name>/plan.json`` of another topology is."""
    folder = _copy(tmp_path / "out")
    monkeypatch.setenv("TOPOCOLL_RESULTS", str(folder))
    plan, _ = find_plan(topo, "auto")
    assert plan is not None and plan.path == folder / "plan.json"
    with pytest.warns(UserWarning, match="plan made for another topology"):
        plan, note = find_plan(get_preset("dgx-a100"), "auto")
    assert plan is None and str(folder / "plan.json") in note


def test_a_schedule_file_shared_by_entries_of_two_collectives_is_refused_for_the_other(tmp_path, topo):
    """Two entries naming one schedule file (allreduce's, by a hand edit, also for allgather): after
    the allreduce call loaded and verified it, the allgather call must still be refused naming its
    entry (before: the verified-schedule cache was keyed by the file alone and handed allgather the
    allreduce schedule, which the Communicator then ran: a silent wrong answer)."""
    folder = _copy(tmp_path / "out")
    doc = json.loads((folder / "plan.json").read_text())
    (_, ar), (k, ag) = _first(doc, "allreduce"), _first(doc, "allgather")
    ag["schedule"] = ar["schedule"]
    (folder / "plan.json").write_text(json.dumps(doc))
    sel = ScheduleSelector(topo, plan=folder / "plan.json")
    assert sel.select("allreduce", ar["min_bytes"]).schedule.collective == "allreduce"
    with pytest.raises(ScheduleInvalid, match=rf"^{folder / 'plan.json'}: entries\[{k}\].schedule .*holds allreduce"):
        sel.select("allgather", ag["min_bytes"])


def test_auto_takes_no_unfingerprinted_plan_of_another_machine_from_a_synthesize_out_folder(tmp_path, topo,
                                                                                            monkeypatch):
    """``TOPOCOLL_RESULTS=X`` with an X/plan.json without a fingerprint made for another machine (8
    ranks, named dgx1-v100): skipped with a warning for a 4-rank topology, as the same file in
    ``<results>/<other>/plan.json`` is (before: taken, then refused at the first call)."""
    folder = _copy(tmp_path / "out")
    _edit(folder, lambda doc: doc["topology"].update(fingerprint=""))
    monkeypatch.setenv("TOPOCOLL_RESULTS", str(folder))
    four = topo.subset([0, 1, 2, 3])
    assert four.name != topo.name
    with pytest.warns(UserWarning, match="plan made for another topology"):
        plan, note = find_plan(four, "auto")
    assert plan is None and str(folder / "plan.json") in note, note
    plan, _ = find_plan(topo, "auto")           # the topology it names: still its plan
    assert plan is not None and plan.path == folder / "plan.json"


@pytest.mark.parametrize("collective", ["broadcast", "reduce"])
def test_a_rooted_entry_naming_no_rank_of_the_machine_is_refused_naming_the_file(tmp_path, topo, collective):
    """A plan entry whose root is past the machine's last rank (8 on 8 GPUs) is refused when the plan is taken, in
    one line naming the file and entry (before: it loaded, and a call of that root later failed with
    "broadcast: root must be a rank in 0..7, got 8", naming no file: found by the mutated-plan campaign)."""
    folder = _copy(tmp_path / "out")
    k = next(k for k, e in enumerate(json.loads((folder / "plan.json").read_text())["entries"])
             if e["collective"] == collective)
    _edit(folder, lambda doc: doc["entries"][k].update(root=topo.num_gpus))
    with pytest.raises(ScheduleFormatError) as err:
        ScheduleSelector(topo, plan=folder)
    line = str(err.value)
    assert "\n" not in line and line.startswith(str(folder / "plan.json")), line
    assert f"entries[{k}].root: {topo.num_gpus} is not a rank" in line, line
    _edit(folder, lambda doc: doc["entries"][k].update(root=topo.num_gpus - 1))     # the last rank is one
    assert ScheduleSelector(topo, plan=folder).plan.entries[k].root == topo.num_gpus - 1


@pytest.mark.parametrize("plan", [7, 1.5, True, ["plan.json"], {"entries": []}, b"plan.json"])
@pytest.mark.parametrize("algo", [None, "ring"])
def test_a_plan_argument_that_is_not_a_plan_is_refused_by_the_selector_in_one_line(topo, plan, algo):
    """``plan`` is a Plan, a plan.json file or folder, "auto", None or False (the class docstring); the
    selector refuses anything else in one line naming its owner and the value, whether or not ``algo``
    makes it ignore the plan (a wrong argument is wrong either way).  Reference: the hand-written line.
    Old: a TypeError from pathlib ("expected str, bytes or os.PathLike object, not int"), and with
    ``algo`` nothing at all; every caller (Communicator, MPICommunicator) wrote its own check."""
    want = (f"plan must be a Plan, a plan.json file or folder, 'auto', None or False; "
            f"got {type(plan).__name__} {plan!r}")
    with pytest.raises(TopocollError) as info:
        ScheduleSelector(topo, plan=plan, algo=algo)
    assert str(info.value) == f"ScheduleSelector: {want}"
    with pytest.raises(TopocollError) as info:
        ScheduleSelector(topo, plan=plan, algo=algo, owner="sweep")
    assert str(info.value) == f"sweep: {want}"


def test_a_plan_argument_whose_repr_spans_lines_is_refused_in_one_line(topo):
    """A value whose repr holds line breaks is still named on one line (cut to 300 characters)."""
    class Odd:
        def __repr__(self):
            return "odd\nplan\r\n" + "x" * 500
    with pytest.raises(TopocollError) as info:
        ScheduleSelector(topo, plan=Odd(), owner="Communicator")
    line = str(info.value)
    assert "\n" not in line and "\r" not in line and len(line) <= 300, line
    assert line.startswith("Communicator: plan must be a Plan") and "got Odd odd plan" in line, line


def test_a_refused_plan_argument_is_named_as_given(topo):
    """The refusal names the value by its repr, spaces kept (only line breaks become spaces).  Reference:
    Python's own repr.  Guards against squeezing runs of spaces, which would name ``('results dir',)``."""
    plan = ("results  dir",)
    with pytest.raises(TopocollError) as info:
        ScheduleSelector(topo, plan=plan)
    assert str(info.value) == ("ScheduleSelector: plan must be a Plan, a plan.json file or folder, 'auto', None or "
                               f"False; got tuple {plan!r}")


@pytest.mark.parametrize("plan", [7, ["plan.json"]])
def test_find_plan_refuses_a_plan_argument_that_is_not_a_plan_in_one_line(topo, plan):
    """find_plan is public and takes the selector's ``plan`` argument: it runs the one check itself, naming
    find_plan.  Reference: check_plan_arg's line, by hand.  Old: only ScheduleSelector checked it, so
    find_plan raised pathlib's TypeError ("expected str, bytes or os.PathLike object, not int")."""
    with pytest.raises(TopocollError) as info:
        find_plan(topo, plan)
    assert str(info.value) == ("find_plan: plan must be a Plan, a plan.json file or folder, 'auto', None or False; "
                               f"got {type(plan).__name__} {plan!r}")


#: the algorithm rule's tail, written out by hand from synth.baselines.BASELINES
ALGO_TAIL = "not 'plan', 'nccl', a baseline (ring, tree, direct, rhd, bruck, oneshot) or an existing schedule file"


@pytest.mark.parametrize("owner", [None, "MPICommunicator", "sweep"])
@pytest.mark.parametrize("algo", ["bogus", "", "ring  ", "a\nb", 7])
def test_an_algorithm_refusal_names_the_owner_the_plan_refusal_names(topo, owner, algo):
    """The algorithm refusal starts with the same owner as the plan refusal (the caller that made the
    selector; ScheduleSelector by default), the value by its repr, in one line.  Reference: the lines by hand.
    Old: "algorithm 'bogus': not 'plan', ..." naming no one; an algo of 7 was quoted as the string '7'."""
    who = owner or "ScheduleSelector"
    with pytest.raises(TopocollError) as info:
        ScheduleSelector(topo, plan=False, algo=algo, owner=owner)
    assert str(info.value) == f"{who}: algorithm {algo!r}: {ALGO_TAIL}", str(info.value)
    with pytest.raises(TopocollError) as info:            # the plan refusal: the same owner
        ScheduleSelector(topo, plan=7, algo="ring", owner=owner)
    assert str(info.value).startswith(f"{who}: plan must be"), str(info.value)


def test_an_algorithm_that_only_claims_to_be_a_baseline_is_refused(topo):
    """A str subclass equal to everything passes ``name in BASELINES`` by its own ``__eq__``; the rule must look
    at the value it marks as checked (CheckedAlgo, taken later without a second look).  Reference: the line
    by hand.  Old (kern74): marked CheckedAlgo('bogus'), then the selector tried to load a file 'bogus'."""
    from synth.plan.arguments import check_algo_arg

    class Liar(str):
        def __eq__(self, other):
            return True
        __hash__ = str.__hash__
    with pytest.raises(TopocollError) as info:
        check_algo_arg(Liar("bogus"), "sweep")
    assert str(info.value) == f"sweep: algorithm 'bogus': {ALGO_TAIL}", str(info.value)
    with pytest.raises(TopocollError) as info:
        ScheduleSelector(topo, plan=False, algo=Liar("bogus"), owner="MPICommunicator")
    assert str(info.value) == f"MPICommunicator: algorithm 'bogus': {ALGO_TAIL}", str(info.value)
    assert str.__str__(check_algo_arg(Liar("ring"))) == "ring"


@pytest.mark.parametrize("algo", ["x" * 5000, "a/" * 3000])
def test_an_algorithm_name_too_long_for_a_path_is_the_rules_one_line(topo, algo):
    """A name the file system cannot even look up (ENAMETOOLONG) is no schedule file: the rule's one line
    naming the owner, the value cut by topo_probe.errors.show.  Reference: the line by hand.  Old: OSError
    "[Errno 36] File name too long: '<the whole name>'" from Path.is_file, naming no one (the sweep printed
    it as a 5000-character line)."""
    with pytest.raises(TopocollError) as info:
        ScheduleSelector(topo, plan=False, algo=algo, owner="sweep")
    assert str(info.value) == f"sweep: algorithm {repr(algo)[:57]}...: {ALGO_TAIL}", str(info.value)


def test_an_empty_plan_path_is_refused_not_read_as_the_current_folder(topo):
    """``plan=""`` went to ``Path("")``, which is ``.``: the selector searched whatever folder the process ran in
    for a plan.json, a plan the caller never named.  Reference: the refusal line written out by hand; ``"auto"``
    and None still choose without an error (an unset or empty TOPOCOLL_PLAN is read as "auto" before this)."""
    with pytest.raises(TopocollError) as info:
        ScheduleSelector(topo, plan="")
    assert str(info.value) == ("ScheduleSelector: plan must be a Plan, a plan.json file or folder, 'auto', None or "
                               "False; got str ''")
    ScheduleSelector(topo, plan=None)
