"""How ``sweep`` ends when its reader goes away or it is interrupted: exit 0 and no traceback on a
closed stdout (``| head``), one line and exit 130 on Ctrl-C / SIGTERM (``simulate``'s twin:
tests/synth/cli/test_simulate_exits.py)."""

from __future__ import annotations

import subprocess
import sys

from kernels.sweep import cli

SWEEP = [sys.executable, "-c", "import sys; from kernels.sweep.cli import main; sys.exit(main())",
         "all_reduce", "-b", "8", "-e", "64K", "-f", "2", "-g", "2", "-n", "2", "-w", "1"]


def test_closed_stdout_exits_0_without_traceback():
    # the reader is gone before the first line is written: every write fails with EPIPE
    p = subprocess.Popen(SWEEP, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    _, err = p.communicate(timeout=120)
    assert "Traceback" not in err.decode(), err.decode()
    assert p.returncode == 0, err.decode()


def test_sweep_interrupted_is_one_line(monkeypatch, capsys):
    def interrupted(args, argv):
        raise KeyboardInterrupt("SIGTERM")
    monkeypatch.setattr(cli, "_main", interrupted)
    assert cli.main(["all_reduce", "-b", "8", "-e", "8"]) == 130
    assert capsys.readouterr().err.strip() == "sweep: interrupted"
