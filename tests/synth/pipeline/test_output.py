"""The ``synthesize --out`` folder (synth.pipeline.output): which folders it writes into, that it
never touches other files, and that a kill at every filesystem step of a run leaves the old or
the new complete results at the documented paths, with leftovers cleaned by the next run."""

import hashlib
import json
import os
import re
import shlex
import shutil
import stat
from pathlib import Path

import pytest

from synth.cli.synthesize import main
from synth.pipeline import synthesize as synth_mod
from _synth_results import ENTRIES, NEW, OLD, _only_ours_left, _results_at_documented_paths, _run
from topo_probe.errors import InvalidArgument


def _as_older_versions_wrote(results: Path, dest: Path) -> Path:
    """A copy of ``results`` without the marker: what versions before it wrote (and the
    repository commits under results/<preset>/)."""
    shutil.copytree(results, dest, ignore=shutil.ignore_patterns(".topocoll-result"))
    return dest


def _linked_layout(results: Path, dest: Path) -> Path:
    """``results`` in the layout of the versions before plain files: the marker, a ``.v-*``
    folder, ``.current`` linking to it and every documented path a link through ``.current``."""
    version = dest / ".v-20240101T000000-4242-0"
    shutil.copytree(results, version, ignore=shutil.ignore_patterns(".topocoll-result"))
    shutil.copy2(results / ".topocoll-result", dest / ".topocoll-result")
    os.symlink(version.name, dest / ".current")
    for name in ENTRIES:
        os.symlink(f".current/{name}", dest / name)
    return dest


def _one_line_refusal(capsys, argv, needle):
    rc = main(["--topology", "ring:3", "--collectives", "allgather", "--time-limit", "5", "--no-progress"] + argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err


def test_folder_with_other_files_is_refused_and_left_alone(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    (out / "data").mkdir()
    _one_line_refusal(capsys, ["--out", str(out)], "did not write (data, notes.txt)")
    _one_line_refusal(capsys, ["--out", str(out), "--force"], "did not write")
    assert sorted(os.listdir(out)) == ["data", "notes.txt"] and (out / "notes.txt").read_text() == "my notes"
    assert os.listdir(tmp_path) == ["mine"]


def test_file_as_out_is_refused_and_kept(tmp_path, capsys):
    f = tmp_path / "precious.txt"
    f.write_text("keep me")
    _one_line_refusal(capsys, ["--out", str(f)], "is a file, not a folder")
    assert f.read_text() == "keep me" and os.listdir(tmp_path) == ["precious.txt"]


@pytest.mark.parametrize("out", [".", "..", "CWD"])
def test_current_folder_and_its_parents_are_refused(out, tmp_path, capsys, monkeypatch):
    work = tmp_path / "w"
    work.mkdir()
    (work / "thesis.tex").write_text("x")
    monkeypatch.chdir(work)
    _one_line_refusal(capsys, ["--out", str(work) if out == "CWD" else out], "current folder")
    assert os.listdir(work) == ["thesis.tex"] and sorted(os.listdir(tmp_path)) == ["w"]


@pytest.mark.parametrize("out", ["/proc/x", "/sys/x", "/dev/x", "/proc"])
def test_system_folders_are_refused(out, capsys):
    _one_line_refusal(capsys, ["--out", out], "not a place for results")


def test_uncreatable_folder_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "f"
    blocker.write_text("x")
    _one_line_refusal(capsys, ["--out", str(blocker / "sub")], "cannot be created")
    assert blocker.read_text() == "x"


def test_empty_folder_is_used_and_marked(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    _run(out)
    assert _results_at_documented_paths(out) == OLD
    _only_ours_left(out)
    assert json.loads((out / ".topocoll-result").read_text())["written_by"] == "topocoll synthesize"


def test_force_redoes_ours_and_keeps_the_users_files(tmp_path, synthesized):
    out = tmp_path / "res"
    synthesized(out)
    (out / "my-notes.md").write_text("mine")
    (out / "extra").mkdir()
    (out / "extra" / "a.csv").write_text("1,2")
    _run(out, NEW)
    assert _results_at_documented_paths(out) == NEW
    assert (out / "my-notes.md").read_text() == "mine" and (out / "extra" / "a.csv").read_text() == "1,2"
    _only_ours_left(out, extra=("my-notes.md", "extra"))


def test_a_users_file_in_place_of_ours_is_refused(tmp_path, capsys, synthesized):
    out = tmp_path / "res"
    synthesized(out)
    (out / "plan.json").unlink()
    (out / "plan.json").write_text("{\"my\": \"own plan\"}")
    with pytest.raises(InvalidArgument, match="plan.json"):
        _run(out, NEW)
    assert json.loads((out / "plan.json").read_text()) == {"my": "own plan"}


def test_results_of_versions_before_the_marker_are_adopted(tmp_path, synthesized):
    out = tmp_path / "res"
    synthesized(out)
    legacy = _as_older_versions_wrote(out, tmp_path / "legacy")  # real files, no marker
    before = (legacy / "summary.json").read_text()
    _run(legacy, OLD, force=False)  # reuse: nothing written
    assert not (legacy / ".topocoll-result").exists() and (legacy / "summary.json").read_text() == before
    _run(legacy, NEW)
    assert _results_at_documented_paths(legacy) == NEW
    _only_ours_left(legacy)


def test_an_nccl_tuner_conf_beside_older_results_is_accepted_and_left_alone(tmp_path, synthesized):
    """Results committed before the marker sit beside the NCCL tuner CSV that the README's command
    writes into the same folder: reused as they are, adopted on a new run, the CSV untouched."""
    out = tmp_path / "res"
    synthesized(out)
    legacy = _as_older_versions_wrote(out, tmp_path / "legacy")
    (legacy / "nccl_tuner.conf").write_text("mine\n")
    _run(legacy, OLD, force=False)
    assert not (legacy / ".topocoll-result").exists()
    _run(legacy, NEW)
    assert _results_at_documented_paths(legacy) == NEW and (legacy / "nccl_tuner.conf").read_text() == "mine\n"
    _only_ours_left(legacy, extra=("nccl_tuner.conf",))
    (legacy / "other.txt").write_text("x")     # a marked folder may hold it; an unmarked one may not
    plain = _as_older_versions_wrote(out, tmp_path / "plain")
    (plain / "other.txt").write_text("x")
    with pytest.raises(InvalidArgument, match="other.txt"):
        _run(plain, OLD, force=False)


def test_leftovers_of_killed_runs_are_cleaned(tmp_path, synthesized):
    out = tmp_path / "res"
    synthesized(out)
    (out / ".v-20990101T000000-999999-0").mkdir()  # an unfinished version of a killed run
    (out / ".v-20990101T000000-999999-0" / "plan.json").write_text("{")
    os.symlink(".v-x", out / ".current.tmp-999999")
    dead = 2**22 + 12345  # above pid_max's default range: never alive
    (tmp_path / f".res.partial-{dead}" / "schedules").mkdir(parents=True)  # older versions' leftovers
    _run(out, NEW)
    _only_ours_left(out)
    assert sorted(os.listdir(tmp_path)) == ["res"]


def test_old_results_stranded_by_the_old_two_rename_swap_come_back(tmp_path, synthesized):
    out = tmp_path / "res"
    synthesized(out)
    stranded = _as_older_versions_wrote(out, tmp_path / f".res.old-{2**22 + 12345}")
    shutil.rmtree(out)  # killed between "out -> .out.old" and ".partial -> out"
    _run(out, OLD, force=False)  # reused: the old results are back in place
    assert _results_at_documented_paths(out) == OLD and not stranded.exists()


def test_files_follow_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        _run(tmp_path / "res")
    finally:
        os.umask(old)
    cur = tmp_path / "res"
    for p in [cur / "topology.json", cur / "plan.json", cur / "summary.json", cur / "report.md",
              cur / "busbw.png", *cur.glob("schedules/*.json")]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o640, p


def test_a_second_run_into_the_same_folder_is_refused(tmp_path, synthesized):
    out = tmp_path / "res"
    synthesized(out)
    from synth.pipeline.output import ResultsFolder
    with ResultsFolder(out):
        with pytest.raises(InvalidArgument, match="another synthesize run"):
            _run(out, NEW)
    assert _results_at_documented_paths(out) == OLD


def test_force_over_committed_results_leaves_plain_files_git_sees_as_modified(tmp_path, synthesized):
    """results/<preset>/ as the repository commits it, regenerated with --force: every committed
    file is still a plain file (git shows them modified, none deleted or changed in type)."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git not installed")
    import subprocess
    synthesized(tmp_path / "made")
    out = _as_older_versions_wrote(tmp_path / "made", tmp_path / "repo" / "res")

    def sh(*args):
        return subprocess.run([git, "-C", str(tmp_path / "repo"), *args], check=True, capture_output=True,
                              text=True, env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                                              "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}).stdout
    sh("init", "-q")
    sh("add", "-A")
    sh("commit", "-qm", "results")
    _run(out, NEW)
    assert _results_at_documented_paths(out) == NEW
    _only_ours_left(out)
    status = sh("status", "--porcelain", "--untracked-files=all").splitlines()
    assert " M res/plan.json" in status and "?? res/.topocoll-result" in status, status
    assert all(line[:2] in (" M", "??") for line in status), status     # nothing deleted or now a link


def test_results_in_the_linked_layout_become_plain_files_also_on_reuse(tmp_path, synthesized):
    made = tmp_path / "made"
    synthesized(made)
    out = tmp_path / "res"
    out.mkdir()
    _linked_layout(made, out)
    assert _run(out, OLD, force=False).get("reused")
    assert _results_at_documented_paths(out) == OLD
    _only_ours_left(out)


def test_a_users_folder_named_current_is_left_alone(tmp_path, capsys, synthesized):
    """The link of the linked layout replaced by a folder of the user's own: never deleted."""
    made = tmp_path / "made"
    synthesized(made)
    out = tmp_path / "res"
    out.mkdir()
    _linked_layout(made, out)
    (out / ".current").unlink()
    (out / ".current").mkdir()
    (out / ".current" / "MYNOTE.txt").write_text("mine\n")
    assert main(["--topology", "ring:3", "--collectives", "allgather", "--time-limit", "5", "--no-progress",
                 "--out", str(out)]) == 0
    assert (out / ".current" / "MYNOTE.txt").read_text() == "mine\n"
    assert _results_at_documented_paths(out) == OLD
    _only_ours_left(out, extra=(".current",))


def _killed_runs_leftovers(out: Path) -> list[Path]:
    """What killed runs leave: an unfinished version folder, a temporary name."""
    version = out / ".v-20990101T000000-999999-0"
    (version / "schedules").mkdir(parents=True)
    (version / "schedules" / "allgather-ring.json").write_text("{")
    os.symlink(".current/plan.json", out / ".plan.json.tmp-999999")
    return [version, out / ".plan.json.tmp-999999"]


def test_a_reusing_run_removes_what_a_killed_run_left(tmp_path, synthesized):
    out = tmp_path / "res"
    synthesized(out)
    _killed_runs_leftovers(out)
    assert _run(out, force=False).get("reused")
    _only_ours_left(out)


def test_leftovers_that_are_not_recognisably_ours_are_left_with_one_warning(tmp_path, capsys, synthesized):
    out = tmp_path / "res"
    synthesized(out)
    foreign, _ = _killed_runs_leftovers(out)
    mixed = out / ".v-20990101T000000-999998-0"
    mixed.mkdir()
    (mixed / "thesis.tex").write_text("mine")              # a file synthesize does not write
    if os.geteuid() == 0:
        os.chown(foreign, 4242, 4242)                       # another user's
    else:
        foreign = None
    assert main(["--topology", "ring:3", "--collectives", "allgather", "--time-limit", "5",
                 "--no-progress", "--out", str(out), "--force"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("synthesize: warning: ") and mixed.name in err[0], err
    assert (mixed / "thesis.tex").read_text() == "mine"
    if foreign is not None:
        assert foreign.is_dir() and "owned by user 4242" in err[0], err
    assert not (out / ".plan.json.tmp-999999").is_symlink()


# -- a kill at each filesystem step ---------------------------------------------------------

_copytree = shutil.copytree


class Killed(BaseException):
    """Stands for SIGKILL: nothing runs after it (every later filesystem call fails too)."""


_MUTATORS = [(os, "replace"), (os, "rename"), (os, "symlink"), (os, "link"), (os, "mkdir"), (os, "unlink"),
             (os, "rmdir"), (shutil, "rmtree"), (shutil, "copytree"), (shutil, "copy2"),
             ("synth.pipeline.publish", "_exchange")]


def _kill_at(monkeypatch, out: Path, k: int) -> list:
    """Patch every filesystem mutation that touches ``out`` itself (not inside a version folder):
    step ``k`` and everything after it raise Killed.  Returns the list of steps seen."""
    seen: list = []

    def touches_out(args) -> bool:
        for a in args:
            if isinstance(a, (str, os.PathLike)) and Path(os.fspath(a)).parent in (out, out.parent):
                return True
        return False

    for mod, name in _MUTATORS:
        if isinstance(mod, str):
            mod = __import__(mod, fromlist=["x"])
        real = getattr(mod, name)

        def fake(*args, _real=real, _name=name, **kw):
            if seen and seen[-1] == "KILLED":
                raise Killed
            if touches_out(args):
                seen.append((_name, [Path(os.fspath(a)).name for a in args if isinstance(a, (str, os.PathLike))]))
                if len(seen) == k:
                    seen.append("KILLED")
                    raise Killed
            return _real(*args, **kw)
        monkeypatch.setattr(mod, name, fake)
    return seen


def _state_after_kill(out: Path, start: str):
    """What the documented paths of ``out`` hold: the collectives of a complete result set,
    "nothing" (a first run's), or ("publishing", the collectives of the complete result set that
    ``.publishing`` names) while summary.json is gone: the next run puts that set in place."""
    if (out / ".publishing").is_symlink() and not (out / "summary.json").exists():
        return "publishing", _results_at_documented_paths(out / os.readlink(out / ".publishing"))
    if start == "first" and not (out / "summary.json").exists():
        return "nothing"
    colls = _results_at_documented_paths(out)
    linked = [n for n in ENTRIES if (out / n).is_symlink()]
    assert not linked or (start == "linked" and colls == OLD), linked   # new results: plain files
    return colls


@pytest.mark.parametrize("start", ["rerun", "legacy", "linked", "first"])
def test_a_kill_at_every_step_leaves_old_or_new_complete_results(start, tmp_path, monkeypatch, synthesized):
    """For a re-run over our results, over results of versions before the marker, over results
    in the linked layout of versions before plain files, and a first run: kill at step k = 1, 2,
    ... until a run gets through; after each kill the documented paths hold the old or the new
    complete results, or the new ones are complete in the folder being put in place; the next
    run, one that reuses the results where it can, finishes that and cleans up."""
    template, fresh = tmp_path / "template", tmp_path / "fresh"
    synthesized(template, OLD)
    synthesized(fresh, NEW)
    summary = json.loads((fresh / "summary.json").read_text())

    def synthesize_into(work, *args):  # the solving is tested elsewhere: copy its results
        _copytree(fresh, work, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".topocoll-result"))
        return summary, None
    monkeypatch.setattr(synth_mod, "_synthesize_into", synthesize_into, raising=False)
    k, states = 0, set()
    while True:
        k += 1
        out = tmp_path / f"k{k}"
        if start == "rerun":
            shutil.copytree(template, out, symlinks=True)
        elif start == "legacy":
            _as_older_versions_wrote(template, out)
        elif start == "linked":
            out.mkdir()
            _linked_layout(template, out)
        with monkeypatch.context() as m:
            seen = _kill_at(m, out, k)
            try:
                _run(out, NEW)
                finished = True
            except Killed:
                finished = False
        states.add(_state_after_kill(out, start))
        _run(out, NEW, force=False)  # the next run: completes and leaves nothing of the killed one
        assert _results_at_documented_paths(out) == NEW
        _only_ours_left(out)
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
        shutil.rmtree(out)
        if finished:
            break
        assert k < 80, seen
    assert k > {"rerun": 25, "legacy": 25, "linked": 45, "first": 22}[start], seen  # every publishing step was hit
    want = {"first": {"nothing", NEW, ("publishing", NEW)},
            "linked": {OLD, NEW, ("publishing", OLD), ("publishing", NEW)}}
    assert states == want.get(start, {OLD, NEW, ("publishing", NEW)}), states


@pytest.mark.parametrize("start", ["rerun", "legacy"])
def test_publishing_without_renameat2_still_ends_in_plain_files(start, tmp_path, monkeypatch, synthesized):
    """Where the atomic exchange is missing (not Linux, old kernel) a folder is replaced with two
    renames (a moment without it, while summary.json is gone); the outcome is the same."""
    from synth.pipeline import publish
    out = tmp_path / "res"
    synthesized(out)
    if start == "legacy":
        out = _as_older_versions_wrote(out, tmp_path / "legacy")
    monkeypatch.setattr(publish, "_exchange", lambda a, b: False)
    _run(out, NEW)
    assert _results_at_documented_paths(out) == NEW
    _only_ours_left(out)


def test_exchange_swaps_a_folder_and_a_link(tmp_path):
    from synth.pipeline.publish import _exchange
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    os.symlink("elsewhere", tmp_path / "l")
    if not _exchange(tmp_path / "l", tmp_path / "d"):
        pytest.skip("renameat2(RENAME_EXCHANGE) not available here")
    assert os.readlink(tmp_path / "d") == "elsewhere" and (tmp_path / "l" / "f").read_text() == "x"


# ---------------------------------------------------------------- default folder names
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from synth.pipeline.output import folder_name  # noqa: E402

_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _gpus_of(folder: str, base: str) -> list[int]:
    """Read a subset's GPUs back from its folder name (``a-b`` runs joined by ``.``)."""
    head, _, tail = folder.rpartition("-gpus")
    assert head == base, folder
    out = []
    for part in tail.split("."):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=60))
def test_any_topology_name_gives_one_shell_safe_folder(name):
    folder = folder_name(name)
    assert _SAFE.fullmatch(folder) and shlex.quote(folder) == folder, folder
    assert len(folder) <= 255 and folder not in (".", "..")
    assert folder_name(name) == folder                               # deterministic


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 1023), min_size=1, max_size=24, unique=True))
def test_a_subsets_folder_names_its_gpus_in_order(gpus):
    """Injective: the GPUs (order included) read back from the name, so two subsets never share."""
    name = f"dgx-h100[{','.join(map(str, gpus))}]"
    assert _gpus_of(folder_name(name), "dgx-h100") == gpus


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20))
def test_two_names_never_share_a_folder(a, b):
    if a != b:
        assert folder_name(a) != folder_name(b)


def test_a_subset_too_long_to_spell_is_shortened_and_still_its_own():
    evens, odds = (f"dgx-h100[{','.join(map(str, range(k, 1024, 2)))}]" for k in (0, 1))
    fe, fo = folder_name(evens), folder_name(odds)
    assert fe != fo and all(len(f) <= 160 and _SAFE.fullmatch(f) for f in (fe, fo))
    assert fe.endswith("-x" + hashlib.sha256(evens.encode()).hexdigest()[:8])


@pytest.mark.parametrize("a, b", [("x[0,1]", "x-gpus0-1"), ("x[0,1]", "x[1,0]"), ("x[0,1,2]", "x[0,2]"),
                                  ("a/b", "a_b"), ("a b", "a_b"), ("[0]", "_0_"), ("x[7]", "x[007]"),
                                  ("t-x0123abcd", "t")])
def test_names_that_look_alike_get_different_folders(a, b):
    fa, fb = folder_name(a), folder_name(b)
    assert fa != fb and _SAFE.fullmatch(fa) and _SAFE.fullmatch(fb)


def test_safe_names_and_committed_folders_keep_their_folder():
    """Reuse: every preset's folder is its name, as committed under results/."""
    from topo_probe import PRESETS
    assert all(folder_name(p) == p for p in PRESETS)
    assert folder_name("dgx1-v100[0,1,2,3,4,5]") == "dgx1-v100-gpus0-5"
