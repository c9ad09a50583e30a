"""MPICommunicator under ``mpirun -n 4``: the one-shot all-reduce (float32, float16, bfloat16, in
and out of place) gives every rank the rank-order sum ((x_0 + x_1) + x_2) + x_3 NumPy's fold
gives, bit for bit, so every rank holds the same bits.  Skipped with a reason without MPI."""

from __future__ import annotations

import hashlib
import json
import sys
import warnings
from pathlib import Path

import ml_dtypes  # noqa: F401 - registers bfloat16 with NumPy
import numpy as np

from _mpi import worker_results

DTYPES = ("float32", "float16", "bfloat16")


def _inputs(n: int, count: int, dtype: str) -> list[np.ndarray]:
    rng = np.random.default_rng(count)
    return [(rng.standard_normal(count) * 10.0 ** rng.integers(-3, 4, count)).astype(dtype) for _ in range(n)]


def worker(out_path: str) -> None:
    from kernels.mpi.communicator import MPICommunicator
    from synth.baselines import baseline
    from synth.ir.fabric import build_fabric
    warnings.simplefilter("ignore")
    comm = MPICommunicator.from_mpi(plan=False, timeout_s=30)
    n, r = comm.size, comm.rank
    sched = baseline("oneshot", build_fabric(comm.topology), "allreduce")
    res = {}
    for dtype in DTYPES:
        for inplace in (False, True):
            xs = _inputs(n, 1001, dtype)
            want = xs[0].copy()
            for x in xs[1:]:
                want = (want + x).astype(dtype)
            send = xs[r].copy()
            recv = send if inplace else np.zeros_like(send)
            comm.run_schedule(sched, send, recv)
            key = f"{dtype}:{'in' if inplace else 'out'}"
            res[key] = [bool(np.array_equal(recv.view(np.uint8), want.view(np.uint8))),
                        hashlib.sha256(recv.tobytes()).hexdigest()]
    every = comm.allgather_object(res)
    if r == 0:
        Path(out_path).write_text(json.dumps(every))
    comm.barrier()


def test_one_shot_is_the_rank_order_sum_on_every_rank(tmp_path):
    every = worker_results(4, Path(__file__).resolve(), tmp_path / "res.json")
    assert len(every) == 4 and set(every[0]) == {f"{d}:{w}" for d in DTYPES for w in ("in", "out")}
    for key in every[0]:
        assert all(res[key][0] for res in every), (key, [res[key][0] for res in every])
        assert len({res[key][1] for res in every}) == 1, key


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "worker":
    worker(sys.argv[2])
