"""Where our MPI all_reduce spends its time beyond the MPI library's own ``Allreduce``.

Run under ``mpirun -n N``.  Same processes, same buffers (float32 sum), the variants alternate
round by round (each round starting with another variant); time = median over rounds of the slowest rank's mean per call, ratio = that
over MPI's.  Variants, each adding one layer to the one before:

* ``mpi``: ``MPI_Allreduce``.
* ``floor``: the same schedule written by hand in mpi4py (reduce-scatter by all pairs, NumPy
  adds, all-gather by all pairs; ``Testsome`` + yield polling): what Python + MPI point-to-point
  cost at least.
* ``floor_persistent``: the same by hand on persistent requests (``Send_init``/``Recv_init``
  once, ``Startall`` per phase).
* ``executor``: :func:`kernels.mpi.transport.execute` of the communicator's rank plan (its
  dependency tracking, temporaries, deadline-bounded waits; what a call on new buffers runs),
  no per-call agreement.
* ``bound``: the same rank plan on persistent requests (:class:`kernels.mpi.persistent.BoundPlan`;
  what repeated calls on the same buffers run), no per-call agreement.
* ``no_agreement``: ``MPICommunicator.all_reduce`` with the per-call agreement switched off
  (argument checks or their replay, schedule choice, buffer binding).
* ``communicator``: ``MPICommunicator.all_reduce`` as users call it (headers to every peer).

Writes ``OUT/overhead_n{N}.csv`` and prints the table.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from shown_paths import mpirun_python, script_command  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", type=int, default=1 << 20, help="message size (nccl-tests size), bytes")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--out", default="results/mpi")
    args = ap.parse_args()
    from mpi4py import MPI

    import kernels.mpi.persistent as kp
    import kernels.mpi.transport as mt
    from kernels.mpi.communicator import MPICommunicator
    from synth.ir.schedule import atomic_write_text
    warnings.simplefilter("ignore")
    world = MPI.COMM_WORLD
    r, n = world.rank, world.size
    count = args.bytes // 4
    chunk = count // n
    a = np.arange(count, dtype=np.float32) % 7 + r
    b = np.empty_like(a)
    tmp = np.empty((n, chunk), np.float32)
    comm = MPICommunicator.from_mpi(plan=False)
    comm.all_reduce(a, b)
    expect = sum(np.arange(count, dtype=np.float32) % 7 + q for q in range(n))
    byte = MPI.BYTE

    def poll(reqs):
        while reqs:
            done = MPI.Request.Testsome(reqs)
            if done:
                reqs = [q for k, q in enumerate(reqs) if k not in set(done)]
            else:
                os.sched_yield()

    def floor():
        peers = [p for p in range(n) if p != r]
        reqs = [world.Irecv([tmp[p], byte], source=p, tag=1) for p in peers]
        reqs += [world.Isend([a[p * chunk:(p + 1) * chunk], byte], dest=p, tag=1) for p in peers]
        poll(reqs)
        mine = b[r * chunk:(r + 1) * chunk]
        np.copyto(mine, a[r * chunk:(r + 1) * chunk])
        for p in peers:
            np.add(mine, tmp[p], out=mine)
        reqs = [world.Irecv([b[p * chunk:(p + 1) * chunk], byte], source=p, tag=2) for p in peers]
        reqs += [world.Isend([mine, byte], dest=p, tag=2) for p in peers]
        poll(reqs)

    mine = b[r * chunk:(r + 1) * chunk]
    phase1 = ([world.Recv_init([tmp[p], byte], source=p, tag=3) for p in range(n) if p != r]
              + [world.Send_init([a[p * chunk:(p + 1) * chunk], byte], dest=p, tag=3) for p in range(n) if p != r])
    phase2 = ([world.Recv_init([b[p * chunk:(p + 1) * chunk], byte], source=p, tag=4) for p in range(n) if p != r]
              + [world.Send_init([mine, byte], dest=p, tag=4) for p in range(n) if p != r])

    def wait_all(reqs):
        while not MPI.Request.Testall(reqs):
            os.sched_yield()

    def floor_persistent():
        MPI.Prequest.Startall(phase1)
        wait_all(phase1)
        np.copyto(mine, a[r * chunk:(r + 1) * chunk])
        for p in range(n):
            if p != r:
                np.add(mine, tmp[p], out=mine)
        MPI.Prequest.Startall(phase2)
        wait_all(phase2)

    sched = comm.schedule_for("allreduce", args.bytes)
    plan = comm._rank_plan(sched, count, a.dtype, False, "sum")[3]
    wire = mt.HostWire()

    def executor():
        wire.begin()
        mt.execute(plan, {"input": a, "output": b}, wire, comm._data, comm.waiter, op="sum", nranks=n)

    bound = kp.BoundPlan(plan, {"input": a, "output": b}, comm._data, "sum", n)
    start = comm.agreement.start

    def no_agreement():
        comm.agreement.start = lambda digest, header: None
        try:
            comm.all_reduce(a, b)
        finally:
            comm.agreement.start = start

    variants = {"mpi": lambda: world.Allreduce(a, b), "floor": floor, "floor_persistent": floor_persistent,
                "executor": executor, "bound": lambda: bound.execute(comm.waiter, "bound"),
                "no_agreement": no_agreement, "communicator": lambda: comm.all_reduce(a, b)}
    for name, f in variants.items():
        b[:] = 0
        f()
        if not np.allclose(b, expect):
            raise SystemExit(f"rank {r}: variant {name} gave a wrong sum")
    times: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for k in range(args.rounds):
        for name in names[k % len(names):] + names[:k % len(names)]:   # each round starts elsewhere
            f = variants[name]
            for _ in range(3):
                f()
            world.Barrier()
            t = time.perf_counter()
            for _ in range(args.iters):
                f()
            times[name].append(world.allreduce((time.perf_counter() - t) / args.iters, MPI.MAX))
    if r == 0:
        mpi_t = times["mpi"]
        rows = []
        for name, ts in times.items():
            ratios = sorted(x / m for x, m in zip(ts, mpi_t))
            rows.append({"ranks": n, "bytes": args.bytes, "variant": name, "schedule": sched.name,
                         "median_us": round(sorted(ts)[len(ts) // 2] * 1e6, 1),
                         "ratio_to_mpi": round(ratios[len(ratios) // 2], 3), "rounds": args.rounds,
                         "iters": args.iters, "load_avg": round(os.getloadavg()[0], 2),
                         "command": script_command(__file__, sys.argv[1:],
                                                    mpirun_python(n, os.cpu_count() or 1))})
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"overhead_n{n}.csv"
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
        atomic_write_text(path, buf.getvalue())
        for row in rows:
            print(f"{row['variant']:>14s} {row['median_us']:9.1f} us  ratio {row['ratio_to_mpi']:.2f}")
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
