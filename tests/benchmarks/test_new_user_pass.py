"""benchmarks/new_user_pass.py: the pass's detectors fire on planted faults (a file written outside
a command's target, a file re-stamped in place, a traceback, a wrong exit, a committed result
left dirty after regenerating it) and stay quiet on a clean command and on a command that writes
only its declared output."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from _paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import new_user_pass as nup  # noqa: E402


@pytest.fixture()
def clone(tmp_path):
    c = tmp_path / "clone"
    (c / "results" / "mine").mkdir(parents=True)
    (c / "README.md").write_text("# hi\n")
    (c / "results" / "mine" / "old.txt").write_text("old\n")
    (c / ".git").mkdir()
    (c / ".git" / "HEAD").write_text("ref\n")
    return c


def _pass(clone, tmp_path, cmds):
    env = nup.tool_env(clone, tmp_path / "bin", tmp_path / "home")
    return nup.run_pass(cmds, clone, tmp_path / "runs", env, timeout=60, log=lambda line: None)


def test_planted_stray_file_and_traceback_are_reported_and_clean_commands_are_not(clone, tmp_path):
    py = "python -c"
    cmds = [
        nup.Cmd("clean", f"{py} 'print(42)'"),
        nup.Cmd("declared output", f"{py} \"open('results/mine/new.txt', 'w').write('x')\"", targets=("results/mine/",)),
        nup.Cmd("planted: stray file", f"{py} \"open('stray.txt', 'w').write('x')\""),
        nup.Cmd("planted: traceback", f"{py} 'import json; json.loads(\"{{\")'", expect=(0, 1, 2)),
        nup.Cmd("planted: wrong exit", "exit 1", expect=(2,)),
        nup.Cmd("planted: re-stamped", "touch -d '2001-01-01' README.md"),
        nup.Cmd("a GPU command", "nvidia-smi", skip="needs a GPU"),
    ]
    out = {o.cmd.label: o for o in _pass(clone, tmp_path, cmds)}
    assert [out["clean"].rc, out["clean"].touched, out["clean"].failed, out["clean"].traceback] == [0, [], False, False]
    assert not out["declared output"].failed and (clone / "results/mine/new.txt").exists()
    assert out["planted: stray file"].touched == ["stray.txt"] and out["planted: stray file"].failed
    tb = out["planted: traceback"]
    assert tb.rc == 1 and tb.traceback and tb.failed and tb.problems == ["printed a traceback"]
    assert out["planted: wrong exit"].problems == ["exit 1, expected 2: (no output)"]
    assert out["planted: re-stamped"].touched == ["README.md"]       # same bytes, new mtime
    assert out["a GPU command"].rc is None and not out["a GPU command"].failed
    assert nup.totals(list(out.values())) == (
        "6 commands, 4 failures, 1 tracebacks, 2 files touched outside their target")
    text = nup.render(list(out.values()), "python benchmarks/new_user_pass.py", "abc (x)", "?? stray.txt\n", 1.0)
    assert "**6 commands, 4 failures, 1 tracebacks, 2 files touched outside their target**" in text
    assert "- `nvidia-smi` (a GPU command): needs a GPU" in text and "?? stray.txt" in text
    row = next(x for x in text.splitlines() if x.startswith("| `python -c \"open('stray.txt'"))
    assert "| 0 **FAIL** |" in row and "| stray.txt |" in row


def test_a_rewrite_that_keeps_mtime_and_size_is_caught_by_its_hash(clone):
    before = nup.snapshot(clone)
    p = clone / "README.md"
    st = p.stat()
    time.sleep(0.01)
    p.write_text("# ho\n")                                   # same size
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))          # same mtime
    assert nup.touched(before, nup.snapshot(clone, before)) == ["README.md"]
    assert ".git/HEAD" not in nup.snapshot(clone)


def test_documented_outputs_are_redirected_and_four_ranks_become_two(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "examples").mkdir()
    (tmp_path / "README.md").write_text(
        "Try:\n\n    topo-probe --topology x --json t.json --nccl-xml t.xml\n"
        "    synthesize --topology dgx-h100 --nccl-tuner-conf $PWD/nccl_tuner.conf\n"
        "    mpirun -n 4 sweep all_reduce --backend mpi\n    pip install -e '.[mpi]'\n")
    (tmp_path / "examples" / "README.md").write_text("")
    cmds = nup.doc_commands(tmp_path)
    assert [c.shell for c in cmds] == ["topo-probe --topology x --json {out}/t.json --nccl-xml {out}/t.xml",
                                       "synthesize --topology dgx-h100 --nccl-tuner-conf {out}/nccl_tuner.conf",
                                       "mpirun -n 2 sweep all_reduce --backend mpi", "pip install -e '.[mpi]'"]
    assert cmds[1].targets == ("results/dgx-h100/",) and cmds[3].skip.startswith("installs")


def test_a_command_that_hangs_is_stopped_with_its_children_and_reported(clone, tmp_path):
    env = nup.tool_env(clone, tmp_path / "bin", tmp_path / "home")
    t0 = time.perf_counter()
    (res,) = nup.run_pass([nup.Cmd("hangs", "sleep 30 & sleep 30; wait")], clone, tmp_path / "runs", env,
                          timeout=1, log=lambda line: None)
    assert time.perf_counter() - t0 < 10 and res.rc is None and res.problems == ["timed out after 1 s"]


ROOTED = ("broadcast", "reduce", "gather", "scatter")


def _summary(topology, roots=None, time_limit=60.0, colls=None):
    """What synthesize's summary.json records of how it was made (the fields the pass reads)."""
    colls = colls or ["allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather", "scatter", "alltoall"]
    roots = roots or {}
    return json.dumps({"topology": topology, "fingerprint": "0123456789abcdef", "ranks": 8,
                       "options": {"time_limit_s": time_limit, "max_sat_ranks": 8, "max_sat_steps": 8,
                                   "max_sat_chunks": 6, "model": "m"},
                       "collectives": {c: {"collective": c, "root": roots.get(c, 0 if c in ROOTED else None)}
                                       for c in colls}}, indent=1)


@pytest.fixture()
def repo(tmp_path):
    """A git repository with three committed synthesize results and one folder of another tool."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git not installed")
    c = tmp_path / "repo"
    files = {"results/p/summary.json": _summary("dgx-h100"), "results/p/report.md": "# Synthesis report\n",
             "results/q/summary.json": _summary("dgx1-v100[0,1,2]", {"broadcast": 2}, 5.0, ["allgather", "broadcast"]),
             "results/q/nccl_tuner.conf": "# tuner\n", "results/r/summary.json": _summary("my machine"),
             "results/bench/summary.json": json.dumps({"rows": []})}
    for rel, text in files.items():
        (c / rel).parent.mkdir(parents=True, exist_ok=True)
        (c / rel).write_text(text)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "results"]):
        subprocess.run([git, "-C", str(c), *args], check=True, env=env, capture_output=True)
    return c


def test_each_committed_result_is_regenerated_with_the_options_its_summary_records(repo):
    cmds = nup.regen_commands(repo)
    assert [(c.regen, c.shell) for c in cmds] == [
        ("results/p", "synthesize --topology dgx-h100 --out results/p --force --no-progress"),
        ("results/q", "synthesize --topology dgx1-v100 --gpus 0,1,2 --out results/q --force --no-progress "
                      "--time-limit 5 --collectives allgather,broadcast --root 2 "
                      "--nccl-tuner-conf results/q/nccl_tuner.conf"),
        ("results/r", "synthesize --topology results/r/topology.json --out results/r --force --no-progress")]
    assert not any(c.skip for c in cmds)


def test_a_planted_dirty_file_after_regenerating_is_reported(repo, tmp_path):
    planted = {"results/p": "echo x >> results/p/report.md",       # a committed file changed
               "results/q": "touch results/q/nccl_tuner.conf",     # its tuner file rewritten, the same bytes: fine
               "results/r": "echo x > results/r/stray.txt"}        # a file left that git does not know
    cmds = [dataclasses.replace(c, shell=planted[c.regen]) for c in nup.regen_commands(repo)]
    out = {o.cmd.regen: o for o in _pass(repo, tmp_path, cmds)}
    assert out["results/p"].problems == ["touched results/p/report.md",
                                         "git status not clean:  M results/p/report.md"]
    assert not out["results/q"].failed and out["results/q"].written == ["results/q/nccl_tuner.conf"]
    assert out["results/r"].problems == ["touched results/r/stray.txt",
                                         "git status not clean: ?? results/r/stray.txt"]
    text = nup.render(list(out.values()), "python benchmarks/new_user_pass.py", "abc (x)",
                      "?? results/r/stray.txt\n", 1.0, "openblas Haswell kernels, 2 threads")
    assert "**3 of 3 committed results regenerated, 1 with `git status` of their folder clean, 2 failures**" in text
    row = next(x for x in text.splitlines() if x.startswith("| `results/p/` |"))
    assert "| 0 **FAIL** |" in row and "git status not clean:  M results/p/report.md" in row
    assert not any(x.startswith("| `echo x") for x in text.splitlines())      # not in the table of documented commands
    assert "BLAS in the clone's environment: openblas Haswell kernels, 2 threads." in text
