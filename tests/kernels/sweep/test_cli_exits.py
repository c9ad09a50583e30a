"""How ``simulate`` and ``sweep`` end when their reader goes away or they are interrupted: exit 0
and no traceback on a closed stdout (``| head``), one line and exit 130 on Ctrl-C / SIGTERM
(``simulate``'s Ctrl-C: tests/synth/cli/test_simulate_exits.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kernels.sweep import cli

SIMULATE = [sys.executable, "-c", "import sys; from synth.cli.simulate import main; sys.exit(main())",
            "--topology", "dgx-a100", "--collective", "allreduce", "--baseline", "ring", "-b", "8", "-e", "1M"]
SWEEP = [sys.executable, "-c", "import sys; from kernels.sweep.cli import main; sys.exit(main())",
         "all_reduce", "-b", "8", "-e", "64K", "-f", "2", "-g", "2", "-n", "2", "-w", "1"]


@pytest.mark.parametrize("command", [SIMULATE, SWEEP], ids=["simulate", "sweep"])
def test_closed_stdout_exits_0_without_traceback(command):
    # the reader is gone before the first line is written: every write fails with EPIPE
    p = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
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
