"""Our all_reduce over MPI vs the MPI library's own ``Allreduce``, same processes, same sizes.

Run under ``mpirun`` once per process count; rank 0 writes ``OUT/allreduce_n{N}.csv`` and
regenerates ``OUT/report.md`` from every ``allreduce_n*.csv`` in ``OUT``::

    mpirun -n 2 python benchmarks/bench_mpi_allreduce.py --out results/mpi
    mpirun --oversubscribe -n 4 python benchmarks/bench_mpi_allreduce.py --out results/mpi
    python benchmarks/bench_mpi_allreduce.py --report-only --out results/mpi

Method: float32 sum, out of place, sizes ``--min`` .. ``--max`` bytes by ``--factor``.  For each
size both implementations run ``rounds`` alternating rounds (ours, MPI, ours, MPI, ...) of
``iters`` back-to-back calls after a barrier, so that background load hits both alike, split
over ``passes`` passes over the sizes (up, down, ...) so that one burst of load cannot own a size; a
round's time is the slowest rank's mean per call, the reported times are the median rounds and
the ratio is the median over rounds of ours / MPI (each pair of adjacent rounds).
Our result is checked against MPI's on every rank (inputs are small integers, so both are exact).
Files are written atomically by rank 0 after the last size: no partial output.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from synth.formats.nccl_tests.sizes import parse_size  # noqa: F401  (the -b/-e syntax, also used by the tests)
sys.path.insert(0, str(Path(__file__).resolve().parent))     # benchmarks/, also where a test loads this file
from shown_paths import mpirun_python, script_command  # noqa: E402

FIELDS = ("ranks", "bytes", "count", "schedule", "steps", "chunks_per_rank", "ours_us", "mpi_us", "ratio",
          "ours_busbw_gbps", "mpi_busbw_gbps", "correct", "rounds", "iters", "load_avg", "command")


def measure(comm, world, nbytes: int, rounds: int, budget_s: float, raw: dict | None = None) -> dict:
    """Time ``rounds`` alternating rounds at ``nbytes``; ``raw`` (from an earlier pass over
    the sizes) accumulates the rounds so that a size's rounds are spread over the run."""
    from mpi4py import MPI
    r = comm.rank
    count = nbytes // 4
    x = (np.arange(count, dtype=np.int64) % 7 + r).astype(np.float32)
    ours, ref = np.empty(count, np.float32), np.empty(count, np.float32)

    def run_ours():
        comm.all_reduce(x, ours)

    def run_mpi():
        world.Allreduce([x, MPI.FLOAT], [ref, MPI.FLOAT], op=MPI.SUM)
    run_ours()
    run_mpi()
    raw = raw if raw is not None else {"ours": [], "mpi": [], "correct": 1}
    raw["correct"] = min(raw["correct"], world.allreduce(int(np.array_equal(ours, ref)), op=MPI.MIN))
    if "iters" not in raw:
        t1 = max(_max(world, _once(run_ours)), _max(world, _once(run_mpi)), 1e-6)
        raw["iters"] = max(1, min(1000, int(budget_s / t1)))
    for _ in range(rounds):
        raw["ours"].append(_max(world, _mean(run_ours, raw["iters"], world)))
        raw["mpi"].append(_max(world, _mean(run_mpi, raw["iters"], world)))
    return raw


def summarize(comm, nbytes: int, raw: dict) -> dict:
    """One CSV row from the accumulated rounds of a size."""
    n, t_ours, t_mpi = comm.size, raw["ours"], raw["mpi"]
    sched = comm.schedule_for("allreduce", nbytes)
    ours_us, mpi_us = statistics.median(t_ours) * 1e6, statistics.median(t_mpi) * 1e6
    ratio = statistics.median(a / b for a, b in zip(t_ours, t_mpi))   # adjacent rounds share the load
    factor = 2 * (n - 1) / n
    return {"ranks": n, "bytes": nbytes, "count": nbytes // 4,
            "schedule": sched.name or sched.meta.get("baseline", "?"),
            "steps": sched.num_steps, "chunks_per_rank": sched.chunks_per_rank,
            "ours_us": _sig(ours_us), "mpi_us": _sig(mpi_us), "ratio": _sig(ratio, 4),
            "ours_busbw_gbps": _sig(nbytes / ours_us / 1e3 * factor),
            "mpi_busbw_gbps": _sig(nbytes / mpi_us / 1e3 * factor),
            "correct": bool(raw["correct"]), "rounds": len(t_ours), "iters": raw["iters"],
            "load_avg": round(os.getloadavg()[0], 2)}


def _sig(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}")


def _once(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _mean(fn, iters: int, world) -> float:
    world.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def _max(world, value: float) -> float:
    from mpi4py import MPI
    return world.allreduce(value, op=MPI.MAX)


def write_csv(path: Path, rows: list[dict]) -> None:
    from synth.ir.schedule import atomic_write_text
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS)
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def _size_label(b: int) -> str:
    for unit, k in (("M", 1 << 20), ("K", 1 << 10)):
        if b >= k and b % k == 0:
            return f"{b // k} {unit}B"
    return f"{b} B"


def write_report(out: Path) -> Path:
    """Regenerate ``out/report.md`` from every ``allreduce_n*.csv`` in ``out``."""
    from synth.ir.schedule import atomic_write_text
    lines = ["# Our all_reduce over MPI vs the MPI library's Allreduce", "",
             "Same processes, same buffers (float32 sum, out of place), alternating rounds; time = median "
             "over rounds of the slowest rank's mean per call; ratio = median over rounds of ours / MPI "
             "(lower is better; target <= 1.5 at >= 1 MB).  Generated by `benchmarks/bench_mpi_allreduce.py`.", ""]
    for path in sorted(out.glob("allreduce_n*.csv")):
        rows = list(csv.DictReader(path.open()))
        if not rows:
            continue
        big = [float(r["ratio"]) for r in rows if int(r["bytes"]) >= 1 << 20]
        lines += [f"## {rows[0]['ranks']} ranks (`{path.name}`)", "", f"Command: `{rows[0]['command']}`", "",
                  "| size | schedule (steps, chunks/rank) | ours (µs) | MPI (µs) | ratio | ours busbw (GB/s) | "
                  "MPI busbw (GB/s) | correct |", "|---:|---|---:|---:|---:|---:|---:|:---:|"]
        for r in rows:
            lines.append(f"| {_size_label(int(r['bytes']))} | {r['schedule']} ({r['steps']}, {r['chunks_per_rank']}) "
                         f"| {float(r['ours_us']):.1f} | {float(r['mpi_us']):.1f} | {float(r['ratio']):.2f} "
                         f"| {float(r['ours_busbw_gbps']):.3f} | {float(r['mpi_busbw_gbps']):.3f} | {r['correct']} |")
        if big:
            lines += ["", f"Sizes >= 1 MB: ratio median {statistics.median(big):.2f}, max {max(big):.2f} "
                          f"(load average during the run: {rows[-1]['load_avg']})."]
        lines.append("")
    path = out / "report.md"
    notes = out / "notes.md"
    if notes.is_file():
        lines += [notes.read_text()]
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--min", default="1K")
    p.add_argument("--max", default="256M")
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--rounds", type=int, default=7, help="alternating rounds (3 at most from 64 MB)")
    p.add_argument("--budget", type=float, default=0.2, help="seconds per timed round (sets iters)")
    p.add_argument("--passes", type=int, default=2, help="passes over the sizes sharing the rounds")
    p.add_argument("--algo", default=None, help="force a baseline (ring, rhd, direct, tree)")
    p.add_argument("--out", default="results/mpi")
    p.add_argument("--report-only", action="store_true", help="only rebuild report.md from the CSVs")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.report_only:
        print(write_report(out))
        return 0
    try:
        lo, hi = parse_size(args.min), parse_size(args.max)
    except ValueError as e:
        print(f"bench_mpi_allreduce: error: {e}", file=sys.stderr)
        return 2
    if lo < 4 or hi < lo or args.factor < 2 or args.rounds < 1 or args.passes < 1:
        print("bench_mpi_allreduce: error: need 4 <= --min <= --max, --factor >= 2, --rounds >= 1, --passes >= 1",
              file=sys.stderr)
        return 2
    import warnings

    from mpi4py import MPI

    from kernels.mpi.communicator import MPICommunicator
    warnings.simplefilter("ignore")
    world = MPI.COMM_WORLD
    comm = MPICommunicator.from_mpi(world, plan="auto" if args.algo is None else False, algo=args.algo)
    command = script_command(__file__, sys.argv[1:] if argv is None else argv,
                             mpirun_python(comm.size, os.cpu_count() or 1))
    sizes, size = [], lo
    while size <= hi:
        sizes.append(size)
        size *= args.factor
    raw: dict[int, dict] = {}
    for p in range(args.passes):   # later passes walk the sizes backwards: rounds spread over time
        for size in (sizes if p % 2 == 0 else sizes[::-1]):
            rounds = args.rounds if size < (64 << 20) else max(1, min(args.rounds, 3))
            raw[size] = measure(comm, world, size, -(-rounds // args.passes), args.budget, raw.get(size))
    rows = []
    for size in sizes:
        row = summarize(comm, size, raw[size])
        row["command"] = command
        rows.append(row)
        if comm.rank == 0:
            print(f"{_size_label(size):>8}  ours {row['ours_us']:12.1f} us  MPI {row['mpi_us']:12.1f} us  "
                  f"ratio {row['ratio']:6.2f}  {'ok' if row['correct'] else 'WRONG'}", flush=True)
    if comm.rank == 0:
        write_csv(out / f"allreduce_n{comm.size}{'_' + args.algo if args.algo else ''}.csv", rows)
        print(write_report(out))
    comm.barrier()
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
