"""A synthesized two-host AllGather (``synthesize --topology dgx-h100 --nodes 2``, 16 ranks) runs
correctly under ``mpirun --oversubscribe -np 16``: through the plan at several sizes, and every
saved schedule (JSON and .json.gz) run explicitly, each rank's output against NumPy.

This file is also the worker: ``python tests/kernels/mpi/test_mpi_cluster.py worker RESULTS_DIR OUT.json``.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from _mpi import run_mpi

COUNTS = (1, 1000, 40_000)


def inputs(rank: int, count: int) -> np.ndarray:
    return (np.arange(count, dtype=np.int64) * 16 + rank).astype(np.float32)


def worker(results: str, out_path: str) -> None:
    from mpi4py import MPI

    from kernels.mpi.communicator import MPICommunicator
    from synth.formats.schedule_file import load_schedule
    warnings.simplefilter("ignore")
    base = Path(results)
    comm = MPICommunicator.from_mpi(topology=str(base / "topology.json"), plan=str(base / "plan.json"),
                                    ipc="never", timeout_s=120)
    n, r = comm.size, comm.rank
    errors: dict[str, str] = {}

    def want(count: int) -> np.ndarray:
        return np.concatenate([inputs(k, count) for k in range(n)])
    for count in COUNTS:
        out = np.full(n * count, -1, np.float32)
        try:
            comm.all_gather(inputs(r, count), out)
            if not np.array_equal(out, want(count)):
                errors[f"plan/{count}"] = f"{int(np.count_nonzero(out != want(count)))} wrong elements"
        except Exception as e:  # noqa: BLE001 - reported, not raised, so every rank reports
            errors[f"plan/{count}"] = f"{type(e).__name__}: {e}"
    for path in sorted((base / "schedules").iterdir()):
        out = np.full(n * 1000, -1, np.float32)
        try:
            comm.run_schedule(load_schedule(path), inputs(r, 1000), out)
            if not np.array_equal(out, want(1000)):
                errors[path.name] = f"{int(np.count_nonzero(out != want(1000)))} wrong elements"
        except Exception as e:  # noqa: BLE001
            errors[path.name] = f"{type(e).__name__}: {e}"
    every = MPI.COMM_WORLD.gather({"rank": r, "errors": errors, "ran": len(COUNTS) + len(list(
        (base / "schedules").iterdir()))}, root=0)
    if r == 0:
        Path(out_path).write_text(json.dumps(every))


@pytest.mark.slow
def test_two_host_allgather_under_mpirun(tmp_path):
    from synth.cli.synthesize import main
    out = tmp_path / "dgx-h100x2"
    assert main(["--topology", "dgx-h100", "--nodes", "2", "--collectives", "allgather", "--time-limit", "5",
                 "--out", str(out), "--no-progress"]) == 0
    names = {p.name for p in (out / "schedules").iterdir()}
    assert "allgather-bwopt.json" in names or "allgather-bwopt.json.gz" in names
    report = tmp_path / "mpi.json"
    proc = run_mpi(16, [str(Path(__file__)), "worker", str(out), str(report)], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = json.loads(report.read_text())
    assert sorted(x["rank"] for x in ranks) == list(range(16))
    assert all(x["ran"] == len(COUNTS) + len(names) for x in ranks)
    bad = {x["rank"]: x["errors"] for x in ranks if x["errors"]}
    assert not bad, bad


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "worker":
    worker(sys.argv[2], sys.argv[3])
