"""MPICommunicator runs what plan.json says, and ``last_route`` says so: under ``mpirun -n 3``,
a plan with a schedule range, an ``nccl`` range (with its fallback schedule) and a collective
without entries; every rank checks its result against NumPy and its route against the plan.
A plan entry's protocol reaches the native path: an ``ll`` range runs as LL shares (their LL
regions exchanged between the processes), a ``simple`` range as Simple ones."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
from _mpi import run_mpi

N = 3


def write_plan(folder: Path) -> Path:
    """allreduce: ``direct`` below 4 KiB, ``nccl`` (fallback ``ring``) from 4 KiB; no allgather entry."""
    from _schedules import direct, ring

    from synth.formats.schedule_file import save_schedule
    from synth.plan.size_plan import Plan, PlanEntry
    from topo_probe.machines.generators import fully_connected
    topo = fully_connected(N)
    save_schedule(direct("allreduce", N), folder / "direct.json")
    save_schedule(ring("allreduce", N), folder / "ring.json")
    plan = Plan(topo.name, topo.fingerprint(), [PlanEntry("allreduce", 0, 4096, "direct.json"),
                                                PlanEntry("allreduce", 4096, None, "nccl", fallback="ring.json")])
    plan.save(folder / "plan.json")
    return folder / "plan.json"


def worker(plan_path: str, out_path: str) -> None:
    from kernels.mpi.communicator import MPICommunicator
    warnings.simplefilter("ignore")
    comm = MPICommunicator.from_mpi(plan=plan_path, timeout_s=30)     # fully_connected(N)
    r, errors = comm.rank, []
    for count, planned, ran, rng in ((64, "direct.json", "direct.json", [0, 4096]),
                                     (4096, "nccl", "ring.json", [4096, None])):
        x = np.arange(count, dtype=np.float32) * (r + 1)
        y = np.empty(count, np.float32)
        comm.all_reduce(x, y)
        route = comm.last_route
        if not np.array_equal(y, np.arange(count, dtype=np.float32) * sum(range(1, N + 1))):
            errors.append(f"rank {r}: all_reduce of {count} wrong")
        got = (route.planned, route.ran, list(route.range), route.plan, route.layer, route.schedule.name)
        want = (planned, ran, rng, plan_path, "mpi", ran[:-len(".json")])
        if got != want:
            errors.append(f"rank {r}: route {got} != {want}")
        if (planned == "nccl") != ("MPICommunicator runs no NCCL" in route.reason):
            errors.append(f"rank {r}: reason {route.reason!r}")
    x = np.full(5, r, np.int32)
    y = np.empty(5 * N, np.int32)
    comm.all_gather(x, y)
    if not np.array_equal(y, np.repeat(np.arange(N, dtype=np.int32), 5)):
        errors.append(f"rank {r}: all_gather wrong")
    if comm.last_route.range is not None or "no plan entry" not in comm.last_route.reason:
        errors.append(f"rank {r}: all_gather route {comm.last_route}")
    every = comm.allgather_object(errors)
    if r == 0:
        Path(out_path).write_text(json.dumps([e for errs in every for e in errs]))
    comm.barrier()


def write_ll_plan(folder: Path) -> Path:
    """allreduce: ``ring`` under LL below 4 KiB, under Simple from 4 KiB."""
    from _schedules import ring

    from synth.formats.schedule_file import save_schedule
    from synth.plan.size_plan import Plan, PlanEntry
    from topo_probe.machines.generators import fully_connected
    topo = fully_connected(N)
    save_schedule(ring("allreduce", N), folder / "ring.json")
    plan = Plan(topo.name, topo.fingerprint(), [PlanEntry("allreduce", 0, 4096, "ring.json", protocol="ll"),
                                                PlanEntry("allreduce", 4096, None, "ring.json")])
    plan.save(folder / "plan.json")
    return folder / "plan.json"


def ll_worker(plan_path: str, out_path: str) -> None:
    """Native calls over the emulated share backend (NumPy in shared memory, see
    ``_native_shares.py``): each call's share, protocol and LL mappings against the plan."""
    from _native_shares import ShmShareBackend

    from kernels.mpi.communicator import MPICommunicator
    warnings.simplefilter("ignore")
    be = ShmShareBackend(seed=7)
    comm = MPICommunicator.from_mpi(plan=plan_path, native=be, timeout_s=60)
    r, errors, runner = comm.rank, [], comm._native

    def shm(x):
        a = be.empty(x.size, x.dtype)
        a[...] = x
        return a
    for count, protocol in ((64, "ll"), (2048, "simple")):          # 256 B and 8 KiB of float32
        for call in range(2):
            x, y = shm(np.arange(count, dtype=np.float32) * (r + 1)), shm(np.zeros(count, np.float32))
            before = runner.launches
            comm.all_reduce(x, y)
            if not np.array_equal(y, np.arange(count, dtype=np.float32) * sum(range(1, N + 1))):
                errors.append(f"rank {r}: all_reduce of {count}, call {call}: wrong")
            if comm.last_route.protocol != protocol or runner.launches != before + 1:
                errors.append(f"rank {r}: {count}: protocol {comm.last_route.protocol}, "
                              f"{runner.launches - before} launches")
        share = next(reversed(runner.shares.values()))
        if share.dp.protocol != protocol or bool(share.peer_ll) != (protocol == "ll"):
            errors.append(f"rank {r}: {count}: share under {share.dp.protocol}, LL regions of {sorted(share.peer_ll)}")
    every = comm.allgather_object(errors)
    runner.drop()
    be.release()
    if r == 0:
        Path(out_path).write_text(json.dumps([e for errs in every for e in errs]))
    comm.barrier()


def test_a_plan_entrys_protocol_reaches_the_native_path(tmp_path):
    plan = write_ll_plan(tmp_path)
    out = tmp_path / "res.json"
    proc = run_mpi(N, [str(Path(__file__).resolve()), "worker-ll", str(plan), str(out)], timeout=180)
    assert proc.returncode == 0 and out.exists(), f"mpirun failed (rc {proc.returncode}): {proc.stderr[-3000:]}"
    assert json.loads(out.read_text()) == []


def test_mpi_communicator_runs_the_plan_and_says_what_ran(tmp_path):
    plan = write_plan(tmp_path)
    out = tmp_path / "res.json"
    proc = run_mpi(N, [str(Path(__file__).resolve()), "worker", str(plan), str(out)], timeout=120)
    assert proc.returncode == 0 and out.exists(), f"mpirun failed (rc {proc.returncode}): {proc.stderr[-3000:]}"
    assert json.loads(out.read_text()) == []


if __name__ == "__main__" and len(sys.argv) > 3 and sys.argv[1] in ("worker", "worker-ll"):
    (worker if sys.argv[1] == "worker" else ll_worker)(sys.argv[2], sys.argv[3])
