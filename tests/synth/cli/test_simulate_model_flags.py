"""The nccl-tests flags ``simulate`` takes whose work the model has none of: ``-w`` (warm-up runs), ``-a`` (how
rank times combine: NVIDIA/nccl-tests v2.19.6 src/common.cu lines 309-368, ``Allreduce(args, &deltaSec, average)``
line 783) and ``-n`` (timed runs).  The model predicts one steady-state time, the same on every rank, so each
changes no number of the table; ``simulate --help`` must say so instead of describing a run that never happens
(``-w`` read "warm-up iterations per size", ``-a`` "rank times: 0 rank 0, 1 mean, 2 min, 3 max")."""

from __future__ import annotations

import pytest

from synth.cli.simulate import build_parser, main

BASE = ["--topology", "dgx-a100", "--collective", "allgather", "-b", "1K", "-e", "64K", "-f", "8"]


def _numbers(out: str) -> list[list[str]]:
    return [ln.split() for ln in out.splitlines() if ln.strip() and not ln.startswith("#")]


@pytest.mark.parametrize("flag, values", [("-w", ["0", "7"]), ("-a", ["0", "2", "3"]), ("-n", ["1", "50"])])
def test_model_flags_change_no_number_and_help_says_so(capsys, flag, values):
    assert main(BASE) == 0
    plain = _numbers(capsys.readouterr().out)
    for v in values:
        assert main(BASE + [flag, v]) == 0
        assert _numbers(capsys.readouterr().out) == plain
    helps = {a.option_strings[0]: a.help for a in build_parser()._actions if a.option_strings}
    assert "the model" in helps[flag] and ("runs none" in helps[flag] or "every rank" in helps[flag])
