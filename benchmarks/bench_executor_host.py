"""Host time of the CuPy executor's own Python, no GPU needed: the layer runs against a runtime
whose CUDA calls do nothing, so what is timed is planning, bookkeeping and lookups.

Three variants side by side in one run, alternating call by call:

* ``replan``: the plan and the schedule's hash computed on every call (how the layer ran when
  ``results/gpu`` measured 35-81 µs per op on an H200);
* ``plan kept``: the plan kept per program and GPU layout, the hash recomputed;
* ``both kept``: what runs now.

    python benchmarks/bench_executor_host.py --out results/gpu
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))        # the tests' fake CUDA runtime

from _fake_device import FakeRuntime  # noqa: E402
from kernels.backends.cupy_executor import CupyLayer  # noqa: E402
from kernels.backends.executor import program_for, run_schedule  # noqa: E402
from synth.sweep.driver import make_selector, schedule_at  # noqa: E402
from topo_probe.machines.generators import fully_connected  # noqa: E402
from shown_paths import script_command  # noqa: E402

CASES = [(2, "ring", 8), (4, "ring", 8), (4, "direct", 1024), (8, "direct", 1024), (8, "ring", 1024)]
VARIANTS = ("replan", "plan kept", "both kept")


class NullRuntime(FakeRuntime):
    """:class:`FakeRuntime` whose data movement and ordering calls do nothing."""

    def record(self, event, stream): pass
    def wait(self, stream, event): pass
    def copy(self, dst, src, stream): pass
    def copy_peer(self, dst, src, stream): pass
    def reduce(self, dst, a, b, op, stream): pass
    def postdiv(self, x, n, stream): pass
    def d2h(self, host, src, stream): pass
    def h2d(self, dst, host, stream): pass


def measure(n: int, algo: str, size: int, rounds: int) -> tuple[int, dict[str, float]]:
    sched = schedule_at(make_selector("allreduce", fully_connected(n), algo, plan=False), "allreduce", -1, size)[0]
    rt = NullRuntime(1)
    layer = CupyLayer(runtime=rt)
    count = max(size // 4, 1)
    xs = [rt.to_device(0, np.ones(count, np.float32)) for _ in range(n)]
    ys = [rt.to_device(0, np.zeros(count, np.float32)) for _ in range(n)]
    ops = program_for(sched, count, np.float32).num_ops
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(3):
        run_schedule(sched, xs, ys, backend=layer)
    for _ in range(rounds):
        for v in VARIANTS:
            if v == "replan":
                layer._plans.clear()
            if v != "both kept":
                sched.__dict__.pop("_hash", None)
            t = time.perf_counter()
            run_schedule(sched, xs, ys, backend=layer)
            times[v].append((time.perf_counter() - t) * 1e6)
    return ops, {v: statistics.median(ts) for v, ts in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args(argv)
    cmd = script_command(__file__, sys.argv[1:] if argv is None else argv)
    md = ["# CuPy executor: host time of its own Python (no GPU, CUDA calls that do nothing)", "",
          f"Command: `{cmd}`. Median of {args.rounds} calls per variant, variants alternating call by "
          f"call; all_reduce, float32, ranks on one (null) GPU. µs per call (µs per op).", "",
          "| ranks | schedule | size | ops | " + " | ".join(VARIANTS) + " | replan / both kept |",
          "|---|---|---|---|" + "---|" * (len(VARIANTS) + 1)]
    for n, algo, size in CASES:
        ops, t = measure(n, algo, size, args.rounds)
        cells = " | ".join(f"{t[v]:.0f} ({t[v] / ops:.1f})" for v in VARIANTS)
        md.append(f"| {n} | {algo} | {size} B | {ops} | {cells} | {t['replan'] / t['both kept']:.2f} |")
        print(md[-1], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "executor_host_cpu.md").write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
