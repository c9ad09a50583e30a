"""CPU time of ``sweep all_reduce -b 8 -e 8 -g G --backend sim`` as the rank count grows.

Each run is a fresh process (imports, the fully connected topology of G GPUs, its fabric, every
applicable baseline built and verified, the cost model's choice); the CPU time is the child's user
plus system time (``os.wait4``), which a loaded machine does not inflate as it does the wall
time; the peak resident memory is the child's ``ru_maxrss``.  ``--code DIR`` runs another
checkout (e.g. ``git archive`` of an older commit) to measure "before"; rows are appended to
``--csv`` and the whole table is written again as Markdown next to it.

    python benchmarks/sweep_sim_ranks.py --label after --ranks 64 128 256 512 1024
    python benchmarks/sweep_sim_ranks.py --label before --code OLD_CHECKOUT --ranks 64 128 256
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "scale" / "sweep_sim_ranks.csv"
COLUMNS = ("label", "commit", "ranks", "cpu_s", "wall_s", "max_rss_mib", "status", "time_us")


def run_one(code: Path, ranks: int, timeout_s: float) -> dict:
    """One sweep in a child process: its own CPU seconds and peak memory (``os.wait4``), wall
    seconds, exit status and the row's modelled time."""
    env = dict(os.environ, PYTHONPATH=str(code))
    cmd = [sys.executable, "-m", "kernels.sweep.cli", "all_reduce", "-b", "8", "-e", "8", "-g", str(ranks),
           "--backend", "sim"]
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen(cmd, env=env, cwd=code, stdout=out, stderr=subprocess.STDOUT, text=True)
        timer = threading.Timer(timeout_s, child.kill)
        timer.start()
        _, code_, usage = os.wait4(child.pid, 0)
        timer.cancel()
        child.returncode = os.waitstatus_to_exitcode(code_)
        out.seek(0)
        text = out.read()
    wall = time.perf_counter() - start
    status = str(child.returncode) if wall < timeout_s else f"killed after {timeout_s:g} s"
    rows = [line.split() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return {"ranks": ranks, "cpu_s": f"{usage.ru_utime + usage.ru_stime:.1f}", "wall_s": f"{wall:.1f}",
            "max_rss_mib": f"{usage.ru_maxrss / 1024:.0f}", "status": status,
            "time_us": rows[0][5] if len(rows) and len(rows[0]) > 5 else ""}


def _commit(code: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return (code / "COMMIT").read_text().strip() if (code / "COMMIT").exists() else "?"


def write_markdown(csv_path: Path) -> Path:
    rows = list(csv.DictReader(csv_path.open()))
    md = csv_path.with_suffix(".md")
    lines = ["# `sweep all_reduce -b 8 -e 8 -g G --backend sim`: CPU time by rank count", "",
             ("Made by `benchmarks/sweep_sim_ranks.py` (commands in its docstring) on "
              f"{platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} cores shared with other "
             "jobs: CPU time (user + system of the child) is the number to read; wall time was up to 8x the CPU time "
             "under the machine's load. `time_us` is the row's modelled time: equal before and after."), "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r[c] for c in COLUMNS) + " |" for r in rows]
    md.write_text("\n".join(lines) + "\n")
    return md


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label", required=True)
    p.add_argument("--code", type=Path, default=ROOT)
    p.add_argument("--ranks", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--csv", type=Path, default=OUT)
    args = p.parse_args(argv)
    new = not args.csv.exists()
    commit = _commit(args.code)
    for g in args.ranks:
        row = {"label": args.label, "commit": commit, **run_one(args.code.resolve(), g, args.timeout)}
        with args.csv.open("a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            if new:
                w.writeheader()
                new = False
            w.writerow(row)
        print(row, flush=True)
    print(f"wrote {write_markdown(args.csv)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
