"""synth.sweep.sim_backend: a call of 0 elements costs 0 µs only from NCCL 2.20, the first release whose
``taskAppend`` discards an empty collective (NVIDIA/nccl v2.20.3-1 src/enqueue.cc line 1865; no such test in
v2.19.4-1, where a one-rank call goes to ``ncclLaunchOneRank``, line 1565, and the others are launched)."""

from __future__ import annotations

import pytest

from synth.cli.simulate import main
from synth.sweep.driver import SweepConfig, run_sweep
from synth.sweep.sim_backend import SimBackend


def _row(out: str) -> list[str]:
    (row,) = [ln.split() for ln in out.splitlines() if ln.strip() and not ln.startswith("#")]
    return row


@pytest.mark.parametrize("version, free", [("2.19", False), ("2.19.4", False), ("2.12.12", False),
                                           ("2.20", True), ("2.20.3", True), ("2.28.9", True)])
def test_an_empty_nccl_call_is_free_from_2_20_only(capsys, version, free):
    """Before 2.20 the empty all_reduce keeps the NCCL model's time at 0 bytes (its launch and base latency: several
    µs on 8 x A100), from 2.20 it costs 0 µs (was 0 µs at every version)."""
    argv = ["--topology", "dgx-a100", "-b", "0", "-e", "0", "--baseline", "nccl", "--collective", "allreduce"]
    assert main(argv + ["--nccl-version", version]) == 0
    row = _row(capsys.readouterr().out)
    assert row[:2] == ["0", "0"]
    if free:
        assert row[5] == row[9] == "0.00"
    else:
        assert float(row[5]) == float(row[9]) > 1.0


def test_our_schedules_empty_call_is_free_at_any_nccl_version(capsys):
    """Our communicators return at count 0 whatever NCCL the model follows."""
    argv = ["--topology", "dgx-a100", "-b", "0", "-e", "0", "--baseline", "ring", "--collective", "allgather"]
    assert main(argv + ["--nccl-version", "2.19"]) == 0
    assert _row(capsys.readouterr().out)[5] == "0.00"


@pytest.mark.parametrize("version, time_us", [((2, 19, 4), 6.6), ((2, 19), 6.6), ((2, 20, 3), 0.0), ((2, 20), 0.0),
                                              (None, 0.0)])
def test_an_empty_one_rank_call_launches_before_2_20(version, time_us):
    """One rank, 0 bytes: before 2.20 NCCL still launches the one-rank call, so the row is the model's fixed 6.6 µs
    call (a fabric without a topology); from 2.20 (and the model's default, 2.28) 0 µs."""
    cfg = SweepConfig("broadcast", nranks=1, minbytes=0, maxbytes=0)
    (row,) = run_sweep(cfg, SimBackend(None, nccl_version=version), None).rows
    assert row.out_of_place.time_us == row.in_place.time_us == time_us
