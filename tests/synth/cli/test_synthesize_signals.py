"""`synthesize` under Ctrl-C, SIGTERM and SIGKILL, as real processes: stopped within 2 s with
"interrupted; previous results kept" and exit 130 even after CP-SAT has run (OR-Tools resets
SIGINT after a solve), nothing left behind; a SIGKILL at any moment leaves complete results and
the next run cleans up."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _synth_results import OLD, _only_ours_left, _results_at_documented_paths, _run

pytestmark = pytest.mark.slow


def _start(out: Path) -> subprocess.Popen:
    """A run that takes several seconds of CP-SAT (the DGX-1's allgather and allreduce Pareto
    fronts), with the progress lines that say when a solve has finished."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    return subprocess.Popen([sys.executable, "-m", "synth.cli.synthesize", "--topology", "dgx1-v100",
                             "--collectives", "allgather,allreduce", "--time-limit", "20",
                             "--out", str(out), "--force"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _after_first_solve(proc: subprocess.Popen, out: Path) -> None:
    """Wait until CP-SAT has returned a frontier point (its first solve is over): the run saves
    each point's schedule in its new version folder as it is found (a pipe shows no progress)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(out.glob(".v-*/schedules/*-sat-*")):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    raise AssertionError(f"no CP-SAT solve finished; stderr: {proc.stderr.read()}")


def _listing(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): (p.is_symlink() and os.readlink(p)) or p.stat().st_mtime_ns
            for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_after_a_solve_stop_within_2_s_and_keep_the_old_results(sig, tmp_path):
    out = tmp_path / "res"
    _run(out, OLD)
    before, beside = _listing(out), sorted(os.listdir(tmp_path))
    proc = _start(out)
    _after_first_solve(proc, out)
    time.sleep(0.3)
    t0 = time.monotonic()
    proc.send_signal(sig)
    rest, err = proc.communicate(timeout=30)
    took = time.monotonic() - t0
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert err.strip().splitlines()[-1] == "synthesize: interrupted; previous results kept"
    assert "Traceback" not in err and "wrote" not in rest
    assert took < 2.0, took
    assert _listing(out) == before and sorted(os.listdir(tmp_path)) == beside  # no leftovers
    assert _results_at_documented_paths(out) == OLD


def test_ctrl_c_on_a_first_run_leaves_no_folder(tmp_path):
    out = tmp_path / "new" / "res"
    proc = _start(out)
    _after_first_solve(proc, out)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err.strip().splitlines()[-1] == "synthesize: interrupted; nothing written"   # there were no results
    assert os.listdir(tmp_path) == []  # not even the parent it made


def test_sigkill_at_several_moments_leaves_complete_results(tmp_path):
    out = tmp_path / "res"
    _run(out, OLD)
    for delay in (0.0, 0.7, 2.0):
        proc = _start(out)
        _after_first_solve(proc, out)
        time.sleep(delay)
        proc.kill()
        proc.communicate(timeout=30)
        assert _results_at_documented_paths(out) == OLD
    assert len([p for p in os.listdir(out) if p.startswith(".v-")]) == 1  # the last killed run's version
    _run(out, OLD)  # the next run cleans them
    _only_ours_left(out)
    assert os.listdir(tmp_path) == ["res"]
