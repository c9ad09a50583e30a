"""The console scripts' entry points: a Ctrl-C while a command's packages load ends in one line,
exit 130; the entry modules load nothing heavy, so that window is the interpreter's own start."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from topo_probe.cli.entry import run_command

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def test_ctrl_c_while_the_command_loads_is_one_line_and_exit_130(tmp_path, monkeypatch, capsys):
    (tmp_path / "slow_command.py").write_text("raise KeyboardInterrupt\n")   # Ctrl-C mid-import
    monkeypatch.syspath_prepend(str(tmp_path))
    assert run_command("demo", "slow_command") == 130
    assert capsys.readouterr().err == "demo: interrupted\n"


def test_the_command_runs_with_its_arguments_and_its_exit_code(tmp_path, monkeypatch):
    (tmp_path / "echo_command.py").write_text("def main(argv=None):\n    return len(argv)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert run_command("demo", "echo_command", ["a", "b", "c"]) == 3


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_each_console_script_enters_light_and_names_its_command(script):
    module, func = SCRIPTS[script].split(":")
    code = (f"import sys; import {module} as m; f = m.{func}; "
            "heavy = sorted(n for n in ('numpy', 'networkx', 'ortools', 'matplotlib', 'cupy', 'torch') "
            "if n in sys.modules); print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
    # the command it runs is the one the script is named for: --help names it
    help_out = subprocess.run([sys.executable, "-c", f"import sys; from {module} import {func}; sys.argv = "
                               f"['{script}', '--help']; sys.exit({func}())"], cwd=ROOT, capture_output=True, text=True)
    assert help_out.returncode == 0 and f"usage: {script}" in help_out.stdout


def test_running_out_of_memory_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """A run that asks for more memory than this process may have (here 1 PiB at once) ends in
    one line naming the way out, not in NumPy's or Python's MemoryError traceback."""
    (tmp_path / "greedy_command.py").write_text("def main(argv=None):\n    return len(bytearray(1 << 50))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert run_command("demo", "greedy_command") == 2
    err = capsys.readouterr().err
    assert err.startswith("demo: error: out of memory") and err.count("\n") == 1 and "Traceback" not in err


def test_running_out_of_memory_while_loading_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    (tmp_path / "greedy_import.py").write_text("BIG = bytearray(1 << 50)\n")      # at import time
    monkeypatch.syspath_prepend(str(tmp_path))
    assert run_command("demo", "greedy_import") == 2
    assert capsys.readouterr().err.startswith("demo: error: out of memory")


#: commands that have finished and printed 'done', then take 1 s to end: in an exit callback (the
#: interpreter's shutdown), or after leaving their signals_interrupt (printing the last line, returning)
ENDINGS = {"shutdown": "import atexit, time\natexit.register(time.sleep, 1.0)\n"
                       "def main(argv=None):\n    print('done', flush=True)\n    return 0\n",
           "after_handlers": "import time\nfrom topo_probe.cli.exits import signals_interrupt\n"
                             "def main(argv=None):\n    with signals_interrupt():\n        print('done', flush=True)\n"
                             "    time.sleep(1.0)\n    return 0\n"}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_while_a_finished_run_shuts_down_leaves_its_exit_status(tmp_path, sig, ending):
    """Issue 38's signals near the end of synthesize: once the command has finished, neither the
    interpreter's shutdown nor the moment between leaving its signal handling and returning is
    interrupted: exit 0, nothing printed, instead of a KeyboardInterrupt in an exit callback, a
    silent death by SIGTERM (-15) or a finished run turned into 'interrupted', exit 130."""
    import signal
    import time
    (tmp_path / "done_command.py").write_text(ENDINGS[ending])
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); from topo_probe.cli.entry import run_command; "
            "sys.exit(run_command('demo', 'done_command', exiting=True))")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline() == "done\n"
    time.sleep(0.3)
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and err == "", (proc.returncode, err)
