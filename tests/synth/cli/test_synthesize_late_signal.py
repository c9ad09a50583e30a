"""Issue 38's signals at the very end of ``synthesize``: whatever instant a Ctrl-C or SIGTERM
lands, the run ends finished (exit 0) or interrupted (exit 130) with one line that says truthfully
which results are in place: the previous ones, or this run's complete new ones."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import synth.pipeline.synthesize as pipeline
from synth.cli.synthesize import main

ROOT = Path(__file__).resolve().parents[3]


def _previous(out: Path) -> None:
    out.mkdir()
    (out / "summary.json").write_text(json.dumps({"run": "previous"}))


def test_a_signal_after_the_new_results_are_in_place_says_so(tmp_path, monkeypatch, capsys):
    """The signal lands after publishing (here: the new summary is renamed in, then the interrupt):
    the line must not say 'previous results kept' over this run's results."""
    out = tmp_path / "res"
    _previous(out)

    def published_then_interrupted(topo, out_dir, opts, force=False):
        new = Path(out_dir) / ".summary.json.tmp"
        new.write_text(json.dumps({"run": "new"}))
        new.replace(Path(out_dir) / "summary.json")
        raise KeyboardInterrupt("SIGTERM")
    monkeypatch.setattr(pipeline, "run", published_then_interrupted)
    assert main(["--topology", "full:4", "--out", str(out), "--force", "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert err == f"synthesize: interrupted after its results were in place; {out}/ holds this run's complete results\n"
    assert json.loads((out / "summary.json").read_text()) == {"run": "new"}


def test_a_signal_before_publishing_keeps_and_names_the_previous_results(tmp_path, monkeypatch, capsys):
    out = tmp_path / "res"
    _previous(out)

    def interrupted(topo, out_dir, opts, force=False):
        raise KeyboardInterrupt("SIGINT")
    monkeypatch.setattr(pipeline, "run", interrupted)
    assert main(["--topology", "full:4", "--out", str(out), "--force", "--no-progress"]) == 130
    assert capsys.readouterr().err == "synthesize: interrupted; previous results kept\n"
    assert json.loads((out / "summary.json").read_text()) == {"run": "previous"}


def test_an_interrupt_that_passed_through_pyrun_string_leaves_the_commands_status(tmp_path):
    """The exit -2 of the signal campaign: under ``python -m``, CPython 3.11 remembers a
    KeyboardInterrupt that left a ``PyRun_String`` call (pybind11 code does that) even when it was
    caught, and at exit kills the process with SIGINT: 'interrupted', then -2.  Here the command
    catches such an interrupt and returns 130; the process must exit 130."""
    (tmp_path / "caught_command.py").write_text(
        "import ctypes\napi = ctypes.pythonapi\napi.PyRun_String.restype = ctypes.py_object\n"
        "api.PyRun_String.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.py_object, ctypes.py_object]\n"
        "def main(argv=None):\n    try:\n        api.PyRun_String(b'raise KeyboardInterrupt', 257, {}, {})\n"
        "    except KeyboardInterrupt:\n        print('demo: interrupted', flush=True)\n        return 130\n")
    (tmp_path / "caught_main.py").write_text(
        "import sys\nfrom topo_probe.cli.entry import run_command\n"
        "if __name__ == '__main__':\n    sys.exit(run_command('demo', 'caught_command', exiting=True))\n")
    proc = subprocess.run([sys.executable, "-m", "caught_main"], cwd=tmp_path, capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "demo: interrupted\n", "")
