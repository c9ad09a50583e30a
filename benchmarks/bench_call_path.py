"""What one repeated collective call costs on the host: project-function calls and host time.

The call: ``Communicator(8, topology="dgx-a100", plan=results/dgx-a100/plan.json).all_reduce`` on
NumPy float32 arrays of 1 KiB per rank (256 elements), the same arrays every time.

* ``project calls``: cProfile's count of calls of functions defined in ``kernels/``,
  ``synth/`` and ``topo_probe/`` during one call (first call on a new communicator, and the
  repeated call after a warm-up);
* ``host us/call``: median over rounds of the mean wall time of ``--iters`` repeated calls:
  the host path (``backend="host"``), the native path through the CPU stand-in of CuPy
  (``tests/kernels/native/_fake_cupy.py``, as the tests use it: the bound launch
  :meth:`kernels.native.launcher.NativeContext.bound` a repeated GPU call replays, on the
  schedule the plan picks; the stand-in's NumPy interpretation of the kernel is part of the
  time) and the MPI path (``MPICommunicator.all_reduce`` under ``mpirun -n 8`` on this
  machine, oversubscribed: the slowest rank's mean).

Each run writes ``OUT/<label>.json``; ``OUT/report.md`` is rebuilt from every label there.

    python benchmarks/bench_call_path.py --label before --out results/call_path
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from shown_paths import script_command  # noqa: E402
PACKAGES = tuple(str(ROOT / p) + os.sep for p in ("kernels", "synth", "topo_probe"))
PLAN = ROOT / "results" / "dgx-a100" / "plan.json"
RANKS, COUNT = 8, 256          # 256 float32 = 1 KiB per rank


def project_calls(fn) -> int:
    """Calls of project functions (files under kernels/, synth/, topo_probe/) while ``fn`` runs."""
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    stats = pstats.Stats(prof).stats
    return sum(nc for (path, _, _), (_, nc, _, _, _) in stats.items() if path.startswith(PACKAGES))


def per_call_us(fn, iters: int, rounds: int) -> float:
    """Median over ``rounds`` of the mean time of ``iters`` calls of ``fn``, µs."""
    means = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        means.append((time.perf_counter() - t) / iters * 1e6)
    return statistics.median(means)


def arrays(rng):
    xs = [rng.standard_normal(COUNT).astype(np.float32) for _ in range(RANKS)]
    return xs, [np.empty(COUNT, np.float32) for _ in range(RANKS)], np.sum(xs, axis=0, dtype=np.float64)


def host_path(iters: int, rounds: int) -> dict:
    from kernels import Communicator
    xs, ys, want = arrays(np.random.default_rng(0))
    comm = Communicator(RANKS, topology="dgx-a100", plan=str(PLAN), backend="host")
    first = project_calls(lambda: comm.all_reduce(xs, ys))
    if not np.allclose(ys, want, rtol=1e-5, atol=1e-5):
        raise SystemExit("host path: wrong sum")
    for _ in range(5):
        comm.all_reduce(xs, ys)
    repeated = project_calls(lambda: comm.all_reduce(xs, ys))
    return {"first_call_project_calls": first, "repeated_call_project_calls": repeated,
            "host_us_per_call": round(per_call_us(lambda: comm.all_reduce(xs, ys), iters, rounds), 1),
            "route": f"{comm.last_route.ran} on {comm.last_route.layer}"}


def native_path(iters: int, rounds: int) -> dict:
    sys.path.insert(0, str(ROOT / "tests" / "kernels" / "native"))
    from _fake_cupy import DevArray, FakeCupy

    import kernels.native.launcher as launcher
    from kernels import Communicator
    from kernels.backends.executor import program_for
    cp = FakeCupy(seed=1, sms=132)
    launcher._cupy, launcher._KERNELS = (lambda: cp), {}
    comm = Communicator(RANKS, topology="dgx-a100", plan=str(PLAN), backend="host")
    route = comm.route("allreduce", COUNT * 4, dtype=np.float32, on_gpus=False)
    prog = program_for(route.schedule, COUNT, np.dtype(np.float32))
    xs, ys, want = arrays(np.random.default_rng(1))
    user = [{"send": x.view(DevArray), "recv": y.view(DevArray)} for x, y in zip(xs, ys)]
    bufs = [{name: user[r][which] for name, which in prog.bindings[r].items()} for r in range(RANKS)]
    call = launcher.NativeContext(prog, list(range(RANKS))).bound(bufs)
    for _ in range(3):                   # launch, capture, replay
        call()
    if not np.allclose(ys, want, rtol=1e-5, atol=1e-5):
        raise SystemExit("native path (CPU stand-in): wrong sum")
    return {"repeated_call_project_calls": project_calls(call),
            "host_us_per_call": round(per_call_us(call, max(iters // 10, 5), rounds), 1),
            "route": f"{route.ran} on the native launcher (CPU stand-in)"}


def mpi_worker(iters: int, rounds: int) -> None:
    from mpi4py import MPI

    from kernels.mpi.communicator import MPICommunicator
    warnings.simplefilter("ignore")
    world = MPI.COMM_WORLD
    comm = MPICommunicator.from_mpi(topology="dgx-a100", plan=str(PLAN))
    x = np.random.default_rng(world.rank).standard_normal(COUNT).astype(np.float32)
    y = np.empty_like(x)
    comm.all_reduce(x, y)
    want = world.allreduce(x.astype(np.float64))
    ok = world.allreduce(int(np.allclose(y, want, rtol=1e-5, atol=1e-5)), MPI.MIN)
    for _ in range(5):
        comm.all_reduce(x, y)
    world.Barrier()
    calls = project_calls(lambda: comm.all_reduce(x, y))
    means = []
    for _ in range(rounds):
        world.Barrier()
        t = time.perf_counter()
        for _ in range(iters):
            comm.all_reduce(x, y)
        means.append(world.allreduce((time.perf_counter() - t) / iters * 1e6, MPI.MAX))
    calls = world.allreduce(calls, MPI.MAX)
    if world.rank == 0:
        print("RESULT " + json.dumps({"repeated_call_project_calls": calls, "correct": bool(ok),
                                      "host_us_per_call": round(statistics.median(means), 1),
                                      "route": f"{comm.last_route.ran} on {comm.last_route.layer}"}))


def mpi_path(iters: int, rounds: int) -> dict:
    exe = Path(sys.executable).parent / "mpirun"
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return {"skipped": "mpi4py is not installed"}
    if not exe.exists():
        return {"skipped": f"no mpirun next to {Path(sys.executable).name}"}
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONWARNINGS="ignore", PYTHONPATH=str(ROOT))
    cmd = [str(exe), "--oversubscribe", "-n", str(RANKS), sys.executable, __file__, "--mpi-worker",
           "--iters", str(max(iters // 10, 5)), "--rounds", str(rounds)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if res.returncode or line is None:
        return {"skipped": f"mpirun failed (exit {res.returncode}): {(res.stderr or res.stdout)[-300:]}"}
    out = json.loads(line[len("RESULT "):])
    if not out.pop("correct"):
        raise SystemExit("MPI path: wrong sum")
    return out


NOTE = ("Project calls count every call of a function defined in the project's packages; on the MPI path "
        "they include the polling loops of the waits, so they vary with how the 8 oversubscribed ranks are "
        "scheduled. Times are wall clock on a shared 2-core machine: compare columns measured back to back.")


def report(out: Path) -> str:
    runs = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}
    labels = [k for k in ("before", "after") if k in runs] + [k for k in runs if k not in ("before", "after")]
    rows = [("host: project calls, first call", "host", "first_call_project_calls"),
            ("host: project calls, repeated call", "host", "repeated_call_project_calls"),
            ("host: µs per repeated call", "host", "host_us_per_call"),
            ("native (CPU stand-in): project calls per bound launch", "native", "repeated_call_project_calls"),
            ("native (CPU stand-in): µs per bound launch", "native", "host_us_per_call"),
            ("MPI (8 ranks, oversubscribed): project calls, repeated call", "mpi", "repeated_call_project_calls"),
            ("MPI (8 ranks, oversubscribed): µs per repeated call", "mpi", "host_us_per_call")]
    lines = ["# One repeated collective call on the host", "",
             "`Communicator(8, topology=\"dgx-a100\", plan=results/dgx-a100/plan.json).all_reduce` on NumPy "
             "float32, 1 KiB per rank, the same arrays every call (see the script's docstring for what each "
             "row measures). " + NOTE, "", "| measure | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for title, path, key in rows:
        cells = []
        for k in labels:
            part = runs[k].get(path, {})
            cells.append(str(part.get(key, part.get("skipped", "-"))))
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    lines += [""] + [f"- `{k}`: {runs[k]['command']} (commit {runs[k]['commit']}, {runs[k]['machine']}); routes: "
                     + ", ".join(f"{p} {runs[k][p]['route']}" for p in ("host", "native", "mpi")
                                 if "route" in runs[k].get(p, {})) for k in labels]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="after", help="name of this run in the report (before, after)")
    ap.add_argument("--out", default="results/call_path")
    ap.add_argument("--iters", type=int, default=2000, help="calls per round (host path; a tenth elsewhere)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-mpi", action="store_true", help="skip the MPI path")
    ap.add_argument("--commit", default="", help="the commit measured, where this tree is no git checkout "
                                                 "(git archive COMMIT | tar -x)")
    ap.add_argument("--mpi-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    if args.mpi_worker:
        mpi_worker(args.iters, args.rounds)
        return 0
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                           cwd=ROOT).stdout.strip()
    run = {"command": script_command(__file__, sys.argv[1:]), "commit": commit,
           "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
                      f"load average {os.getloadavg()[0]:.1f} at the start",
           "host": host_path(args.iters, args.rounds), "native": native_path(args.iters, args.rounds),
           "mpi": {"skipped": "--no-mpi"} if args.no_mpi else mpi_path(args.iters, args.rounds)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from synth.ir.schedule import atomic_write_text
    atomic_write_text(out / f"{args.label}.json", json.dumps(run, indent=1) + "\n")
    atomic_write_text(out / "report.md", report(out))
    print(report(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
