"""synth.sweep.sim_backend: a call of 0 elements costs 0 µs only from NCCL 2.20, the first release whose
``taskAppend`` discards an empty collective (NVIDIA/nccl v2.20.3-1 src/enqueue.cc line 1865; no such test in
v2.19.4-1, where a one-rank call goes to ``ncclLaunchOneRank``, line 1565, and the others are launched)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synth.baselines import baseline
from synth.cli.simulate import main
from synth.ir.fabric import build_fabric
from synth.model.cost import CostModel
from synth.sweep.driver import SweepConfig, make_selector, run_sweep
from synth.sweep.sim_backend import SimBackend
from topo_probe.load import load_topology


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


_ROOT = Path(__file__).resolve().parents[3]
_DGX_A100 = _ROOT / "results" / "dgx-a100"


def _plan_row_us(collective: str, nbytes: int, root: int = 0) -> float:
    """The out-of-place time (µs) of ``sweep COLLECTIVE --backend sim --algo plan`` on dgx-a100 at ``nbytes``, the
    committed plan (results/dgx-a100/plan.json) selecting."""
    topo = load_topology("dgx-a100")
    sel = make_selector(collective, topo, "plan", plan=_DGX_A100 / "plan.json")
    cfg = SweepConfig(collective, topo.num_gpus, minbytes=nbytes, maxbytes=nbytes, check=0, root=root)
    (row,) = run_sweep(cfg, SimBackend(sel), sel).rows
    assert row.in_place == row.out_of_place
    return row.out_of_place.time_us


def test_a_plan_row_counts_the_executor_the_decision_counted():
    """dgx-a100 all_reduce of 4 MiB: the plan runs allreduce-direct (Simple) from 4 MiB, whose decision counted the
    native executor for 8 records (4 µs + 8 x 1 µs = 12 µs) beside the schedule's 65.68 µs: the row is 77.68 µs, as
    report.md's plan µs (the row was 65.68 µs, the schedule alone)."""
    entry = next(e for e in json.loads((_DGX_A100 / "plan.json").read_text())["entries"]
                 if e["collective"] == "allreduce" and e["min_bytes"] == 1 << 22)
    assert entry["schedule"].endswith("allreduce-direct.json") and entry["protocol"] == "simple"
    assert (entry["decision"]["executor"], entry["decision"]["records"]) == ("native", 8)
    assert entry["decision"]["schedule_us"] == 65.68
    assert _plan_row_us("allreduce", 1 << 22) == pytest.approx(65.68 + 4.0 + 8 * 1.0, abs=1e-3)


def _report_plan_us() -> dict[tuple[str, str], float]:
    """report.md's *plan µs* per (collective, size label) of the dgx-a100 table."""
    cells = [ln.split("|")[1:-1] for ln in (_DGX_A100 / "report.md").read_text().splitlines() if ln.startswith("| ")]
    rows = [r for r in cells if len(r) == 11 and r[1].strip().endswith(("KiB", "MiB", "GiB"))]
    return {(r[0].strip(), r[1].strip()): float(r[3]) for r in rows}


@pytest.mark.parametrize("label, nbytes", [("1 KiB", 1 << 10), ("1 MiB", 1 << 20), ("1 GiB", 1 << 30)])
def test_every_plan_row_is_report_md_plan_us(label, nbytes):
    """Every collective of the dgx-a100 table: the sim plan row is report.md's plan µs (printed to 0.1 µs): NCCL's
    time where the plan runs nccl, else the schedule under the entry's protocol (LL: broadcast/reduce at 1 MiB, 49.0
    µs) plus the executor's fixed cost (gather at 1 GiB: 4267.1 µs)."""
    want = {coll: us for (coll, size), us in _report_plan_us().items() if size == label}
    pinned = {1 << 10: ("gather", 10.0), 1 << 20: ("broadcast", 49.0), 1 << 30: ("gather", 4267.1)}[nbytes]
    assert len(want) == 8 and want[pinned[0]] == pinned[1], (label, want)        # the table these were read off
    for coll, us in want.items():
        assert _plan_row_us(coll, nbytes) == pytest.approx(us, abs=0.051), coll


def test_a_baseline_row_counts_its_busiest_ranks_records():
    """--algo ring on dgx-a100 (one host: the native executor): the ring all_reduce there is 12 rings (12 chunks per
    rank) over 2 x 7 steps.  The plan's decision counts each rank's first step (12 reduces from one peer) as one
    record, each of the 6 later reduce steps 12 records (a chunk each) and each of the 7 copy steps 12: 1 + 6 x 12 +
    7 x 12 = 157 records, 4 + 157 x 1 µs = 161 µs over the cost model's Simple time.  That count is a lower bound:
    the native executor's device program (one channel, no slices) runs 168 on the busiest rank, since the next rank
    waits for each first-step chunk, so the 12 do not join (docs/executors.md says so)."""
    topo = load_topology("dgx-a100")
    sel = make_selector("allreduce", topo, "ring")
    cfg = SweepConfig("all_reduce", 8, minbytes=1 << 20, maxbytes=1 << 20, check=0)
    (row,) = run_sweep(cfg, SimBackend(sel), sel).rows
    sched = baseline("ring", build_fabric(topo), "allreduce")
    assert (sched.num_steps, sched.chunks_per_rank) == (14, 12)
    assert row.out_of_place.time_us == pytest.approx(CostModel(build_fabric(topo)).schedule_time_us(sched, 1 << 20)
                                                     + 4.0 + 157 * 1.0)
    import numpy as np

    from kernels.backends.executor import program_for
    from kernels.native.device_program import build_device_program
    dp = build_device_program(program_for(sched, 1 << 18, np.float32), 1, slices=1)
    native = int(max(dp.block_start[b + 1] - dp.block_start[b] for b in range(dp.num_blocks)))
    assert native == 1 * 12 + 6 * 12 + 7 * 12 == 168
    doc = " ".join((_ROOT / "docs" / "executors.md").read_text().split())
    assert "a lower bound of the native device program's" in doc and "157 counted, 168 run" in doc
