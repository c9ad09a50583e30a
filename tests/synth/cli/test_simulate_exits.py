"""How ``simulate`` ends when it is interrupted (one line, exit 130) or given an empty GPU list (one
line, exit 2); on a closed stdout: tests/kernels/sweep/test_cli_exits.py, with ``sweep``."""

from __future__ import annotations

from synth.cli import simulate


def test_simulate_interrupted_is_one_line(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt("SIGINT")
    monkeypatch.setattr(simulate, "run", interrupted)
    assert simulate.main(["--topology", "dgx-a100", "--collective", "allreduce"]) == 130
    assert capsys.readouterr().err.strip() == "simulate: interrupted"


def test_empty_gpu_list_is_refused(capsys):
    assert simulate.main(["--topology", "dgx-a100", "--gpus", "", "--collective", "allreduce"]) == 2
    assert "empty GPU list" in capsys.readouterr().err
