"""How ``simulate`` ends when its reader goes away or it is interrupted: exit 0 and no traceback
on a closed stdout (``| head``), one line and exit 130 on Ctrl-C / SIGTERM; an empty GPU list is
one line and exit 2."""

from __future__ import annotations

import subprocess
import sys

from synth.cli import simulate

SIMULATE = [sys.executable, "-c", "import sys; from synth.cli.simulate import main; sys.exit(main())",
            "--topology", "dgx-a100", "--collective", "allreduce", "--baseline", "ring", "-b", "8", "-e", "1M"]


def test_closed_stdout_exits_0_without_traceback():
    # the reader is gone before the first line is written: every write fails with EPIPE
    p = subprocess.Popen(SIMULATE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    _, err = p.communicate(timeout=120)
    assert "Traceback" not in err.decode(), err.decode()
    assert p.returncode == 0, err.decode()


def test_simulate_interrupted_is_one_line(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt("SIGINT")
    monkeypatch.setattr(simulate, "run", interrupted)
    assert simulate.main(["--topology", "dgx-a100", "--collective", "allreduce"]) == 130
    assert capsys.readouterr().err.strip() == "simulate: interrupted"


def test_empty_gpu_list_is_refused(capsys):
    assert simulate.main(["--topology", "dgx-a100", "--gpus", "", "--collective", "allreduce"]) == 2
    assert "empty GPU list" in capsys.readouterr().err
