"""The two sweeps the robustness issue saw OOM-killed, run again: a 4-rank host all_reduce of
4-8 GiB (must end in one line, exit 2, within seconds) and a 64-rank gather along a relay chain
at 512 MiB (its schedule keeps every forwarded block in scratch; it must either be refused in one
line or run within the machine's memory).  Each runs in a child process; its wall time, exit
status, last line and peak RSS (``getrusage`` of the children) go to
``results/robustness/memory_admission.md``.

    python benchmarks/memory_admission.py --out results/robustness/memory_admission.md
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels.backends.memory import available_host_bytes, gib  # noqa: E402
from synth.ir.schedule import Schedule, Step, Transfer, atomic_write_text  # noqa: E402


def relay_gather(n: int) -> Schedule:
    """Gather to rank 0 where every block hops rank by rank toward the root (n - 1 steps)."""
    holds, steps = {r: {r} for r in range(n)}, []
    for _ in range(n - 1):
        new, tr = {r: set(h) for r, h in holds.items()}, []
        for r in range(1, n):
            for k in sorted(holds[r] - holds[r - 1]):
                tr.append(Transfer(k, r, r - 1))
                new[r - 1].add(k)
        holds = new
        if tr:
            steps.append(Step(1, tuple(tr)))
    return Schedule("gather", n, 1, tuple(steps), root=0, name=f"relay{n}")


def run(args: list[str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "kernels.sweep.cli", *args], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    wrong = [ln for ln in lines if ln.startswith("# Out of bounds")]
    return {"cmd": "sweep " + " ".join(args), "rc": p.returncode, "wall_s": wall,
            "peak_gb": peak * 1024 / 1e9 if peak > before else None,
            "last": (wrong[0] if wrong else lines[-1]) if lines else ""}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/robustness/memory_admission.md")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        relay = Path(tmp) / "relay64.json"
        relay.write_text(relay_gather(64).to_json())
        runs = [run(["all_reduce", "--backend", "host", "-b", "4G", "-e", "8G", "-f", "2", "-g", "4", "-n", "1",
                     "-w", "0"]),
                run(["gather", "--backend", "host", "--topology", "full:64", "-g", "64", "--algo", str(relay),
                     "-b", "512M", "-e", "512M", "-n", "1", "-w", "0"])]
    runs[1]["cmd"] = runs[1]["cmd"].replace(str(relay), "relay64.json")
    lines = ["# Memory admission: the sweeps that were OOM-killed", "",
             f"Made by `python benchmarks/memory_admission.py` on a machine with {gib(available_host_bytes() or 0)} "
             f"available; `relay64.json` is the script's 64-rank relay-chain gather.", "",
             "| command | exit | wall s | peak RSS GB | last line |", "|---|---|---|---|---|"]
    for r in runs:
        peak = f"{r['peak_gb']:.1f}" if r["peak_gb"] else "< earlier run's"
        lines.append(f"| `{r['cmd']}` | {r['rc']} | {r['wall_s']:.2f} | {peak} | {r['last']} |")
    atomic_write_text(Path(args.out), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
