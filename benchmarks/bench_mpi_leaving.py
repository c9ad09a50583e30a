"""What a rank leaving an MPICommunicator costs, and how soon its peers learn it (docs/mpi.md).

Run as ``python benchmarks/bench_mpi_leaving.py --out results/mpi``: it launches each job itself with
``mpirun --oversubscribe -n N`` (2 and 4 ranks; this script's ``--worker`` side), the jobs interleaved,
``TOPOCOLL_MPI_TIMEOUT=30`` unless said.  Metrics (seconds unless the name says ms):

* ``seen_s``: rank N-1 ends its script after call 3 (atexit sends its ``left`` notice, then mpi4py's
  ``MPI_Finalize``); each other rank's call 4 (an all-reduce) raises PeerFailed after this long.
* ``recv_s``: then each of those ranks receives from rank N-1, which sent nothing, on a second
  communicator: the ``recv`` raises PeerFailed after this long (``kernels.mpi.p2p.LEFT_GRACE_S``).
* ``leave_ms``: the time of one ``kernels.mpi.leaving.notify_departure`` (every rank, every communicator).
* ``exit_s`` (4 ranks): every rank makes 3 calls and ends; from the last rank's last statement to
  ``mpirun``'s end, ``notices on`` vs ``notices off`` (``notify_departure`` replaced by a no-op), interleaved.
* ``deadline_seen_s`` (2 ranks, ``notices off``, ``TOPOCOLL_MPI_TIMEOUT=2``): ``seen_s`` without the
  notice, i.e. what only the deadline sees.

Writes ``OUT/leaving.csv`` (one row per measurement) and ``OUT/leaving.md`` (medians and ranges, the
machine's load average before and after, the commands) atomically.  Exit 1 when a job fails or a
peer does not raise PeerFailed naming the leaver; 2 when mpirun or mpi4py is missing.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

COMMAND = "python benchmarks/bench_mpi_leaving.py --out results/mpi"
#: collective calls every rank makes before one leaves
CALLS = 3
#: the deadline of the jobs that are not about it (seconds): far above what a notice takes
DEADLINE_S = "30"


def _switch(off: bool, out: Path, rank_of) -> None:
    """Before any communicator exists: ``notify_departure`` replaced by a no-op (``off``) or timed into ``out``."""
    from kernels.mpi import leaving
    real = leaving.notify_departure

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        real(*args, **kwargs)
        ms = (time.perf_counter() - t0) * 1e3
        with open(out / f"leave_{rank_of()}_{time.perf_counter_ns()}.json", "w") as f:
            json.dump({"metric": "leave_ms", "value": ms}, f)
    leaving.notify_departure = (lambda *a, **k: None) if off else timed


def _attempt(fn) -> dict:
    t0 = time.monotonic()
    try:
        fn()
        return {"raised": None, "seconds": time.monotonic() - t0}
    except Exception as exc:  # noqa: BLE001 - reported to the driver
        return {"raised": type(exc).__name__, "rank": getattr(exc, "rank", None), "seconds": time.monotonic() - t0}


def worker(mode: str, off: bool, out: Path) -> None:
    """One rank of a job (``mode``: ``leave`` or ``finish``); writes ``out/rank<r>.json``."""
    import warnings

    import numpy as np
    from mpi4py import MPI
    warnings.simplefilter("ignore")
    _switch(off, out, lambda: MPI.COMM_WORLD.Get_rank())
    from kernels.mpi.communicator import MPICommunicator
    comm = MPICommunicator.from_mpi(plan=False, abort_on_error=False)
    p2p = MPICommunicator.from_mpi(plan=False, abort_on_error=False)
    leaver, x = comm.size - 1, np.arange(64, dtype=np.float32) + comm.rank
    for _ in range(CALLS):
        comm.all_reduce(x, np.empty_like(x))
    res: dict = {}
    if mode == "finish" or comm.rank == leaver:
        res["last"] = time.time()
    else:
        res["seen"] = _attempt(lambda: comm.all_reduce(x, np.empty_like(x)))
        if not off:
            res["recv"] = _attempt(lambda: p2p.recv(np.empty_like(x), leaver))
    (out / f"rank{comm.rank}.json").write_text(json.dumps(res))


def _mpirun() -> list[str]:
    exe = Path(sys.executable).parent / "mpirun"
    exe = str(exe) if exe.exists() else shutil.which("mpirun")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        exe = None
    if exe is None:
        raise SystemExit(2)
    return [exe, "--oversubscribe"]


def job(n: int, mode: str, off: bool, deadline: str) -> tuple[dict, float]:
    """Run one job; every rank's JSON and the wall-clock time at which ``mpirun`` returned."""
    with tempfile.TemporaryDirectory(prefix="bench-mpi-leaving-") as tmp:
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1", PYTHONWARNINGS="ignore", TOPOCOLL_MPI_TIMEOUT=deadline,
                   PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))))
        cmd = [*_mpirun(), "-n", str(n), sys.executable, str(Path(__file__).resolve()), "--worker", mode,
               "off" if off else "on", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)
        end = time.time()
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            print(f"bench_mpi_leaving: job {mode} -n {n} failed (exit {proc.returncode}): {' | '.join(tail)}",
                  file=sys.stderr)
            raise SystemExit(1)
        got = {p.name: json.loads(p.read_text()) for p in Path(tmp).glob("*.json")}
    return got, end


def _peer_rows(got: dict, n: int, run: int, scenario: str) -> list[dict]:
    rows = []
    for name, res in sorted(got.items()):
        if name.startswith("leave_"):
            rows.append(dict(scenario=scenario, ranks=n, run=run, rank=int(name.split("_")[1]), metric="leave_ms",
                             value=res["value"]))
            continue
        rank = int(name[4:-5])
        for key, metric in (("seen", "deadline_seen_s" if scenario == "notices off" else "seen_s"),
                            ("recv", "recv_s")):
            if key not in res:
                continue
            if res[key]["raised"] != "PeerFailed" or res[key]["rank"] != n - 1:
                print(f"bench_mpi_leaving: -n {n} run {run}: rank {rank}'s {key} did not raise PeerFailed naming "
                      f"rank {n - 1}: {res[key]}", file=sys.stderr)
                raise SystemExit(1)
            rows.append(dict(scenario=scenario, ranks=n, run=run, rank=rank, metric=metric, value=res[key]["seconds"]))
    return rows


def measure(reps: int, exit_runs: int, deadline_runs: int) -> list[dict]:
    """Every job, interleaved: (leave on 2, leave on 4) x reps, (exit on, exit off) x exit_runs, deadline x runs."""
    rows: list[dict] = []
    for run in range(reps):
        for n in (2, 4):
            got, _ = job(n, "leave", False, DEADLINE_S)
            rows += _peer_rows(got, n, run, "notices on")
    for run in range(exit_runs):
        for off in ((False, True) if run % 2 == 0 else (True, False)):
            got, end = job(4, "finish", off, DEADLINE_S)
            last = max(r["last"] for k, r in got.items() if k.startswith("rank"))
            rows.append(dict(scenario="notices off" if off else "notices on", ranks=4, run=run, rank=-1,
                             metric="exit_s", value=end - last))
    for run in range(deadline_runs):
        got, _ = job(2, "leave", True, "2")
        rows += _peer_rows(got, 2, run, "notices off")
    return rows


def summary(rows: list[dict]) -> list[tuple]:
    """(metric, scenario, ranks, count, median, min, max) per group, in first-seen order."""
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        groups.setdefault((r["metric"], r["scenario"], r["ranks"]), []).append(r["value"])
    return [(*k, len(v), statistics.median(v), min(v), max(v)) for k, v in groups.items()]


def report(rows: list[dict], load: tuple, wall_s: float, args) -> tuple[str, str]:
    """The CSV and the Markdown report."""
    from mpi4py import MPI
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["scenario", "ranks", "run", "rank", "metric", "value"], lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({**r, "value": f"{r['value']:.4f}"})
    fmt = {"leave_ms": "{:.2f}"}
    lines = ["# Leaving an MPICommunicator: cost and how soon the peers learn it", "",
             f"Command: `{COMMAND}` (`--reps {args.reps} --exit-runs {args.exit_runs} --deadline-runs "
             f"{args.deadline_runs}`); each job `mpirun --oversubscribe -n N python benchmarks/bench_mpi_leaving.py "
             f"--worker MODE on|off DIR`, `TOPOCOLL_MPI_TIMEOUT={DEADLINE_S}` (2 for `deadline_seen_s`).",
             f"Machine: {os.cpu_count()} cores, load average (1 min) {load[0]:.2f} before and {load[1]:.2f} after "
             f"({wall_s:.0f} s in all); {MPI.Get_library_version().splitlines()[0].split(',')[0]}, "
             f"mpi4py {__import__('mpi4py').__version__}.  Metrics: the module docstring of the command's script; "
             "every row: `leaving.csv`.", "",
             "| metric | scenario | ranks | count | median | min | max |", "|---|---|---|---|---|---|---|"]
    for metric, scenario, n, count, med, lo, hi in summary(rows):
        f = fmt.get(metric, "{:.2f}")
        lines.append(f"| {metric} | {scenario} | {n} | {count} | {f.format(med)} | {f.format(lo)} | {f.format(hi)} |")
    return buf.getvalue(), "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/mpi", help="folder for leaving.csv and leaving.md")
    ap.add_argument("--reps", type=int, default=5, help="jobs per rank count where one rank leaves")
    ap.add_argument("--exit-runs", type=int, default=6, help="4-rank jobs each with notices on and off")
    ap.add_argument("--deadline-runs", type=int, default=3, help="2-rank jobs without notices, 2 s deadline")
    ap.add_argument("--worker", nargs=3, metavar=("MODE", "ON_OFF", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        mode, onoff, folder = args.worker
        worker(mode, onoff == "off", Path(folder))
        return 0
    if min(args.reps, args.exit_runs, args.deadline_runs) < 1:
        print("bench_mpi_leaving: --reps, --exit-runs and --deadline-runs must be >= 1", file=sys.stderr)
        return 2
    out = Path(args.out)
    if any(p.exists() and not p.is_dir() for p in (out, *out.parents)):   # refused before minutes of jobs
        print(f"bench_mpi_leaving: --out {out}: not a folder", file=sys.stderr)
        return 2
    try:
        _mpirun()
    except SystemExit:
        print("bench_mpi_leaving: needs mpirun and mpi4py (pip install 'topocoll[mpi]')", file=sys.stderr)
        return 2
    from synth.ir.schedule import atomic_write_text
    t0, before = time.monotonic(), os.getloadavg()[0]
    rows = measure(args.reps, args.exit_runs, args.deadline_runs)
    table, text = report(rows, (before, os.getloadavg()[0]), time.monotonic() - t0, args)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "leaving.csv", table)
    atomic_write_text(out / "leaving.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
