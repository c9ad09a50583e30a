"""What the CuPy executor costs on the GPU(s) of this machine, next to the card's ceilings and NCCL.

Run on a machine with a CUDA GPU (CuPy with NCCL). Three measurements, each the median of
``--iters`` CUDA-event timings after ``--warmup`` runs, all in one process so the ratios are
side by side:

* the copy ceiling: ``cupy`` device-to-device copy of 1 GiB (GB/s = bytes copied / time);
* NCCL all_reduce through :class:`kernels.comm.nccl_runtime.NcclRuntime`, one rank per GPU (on a
  one-GPU machine that is one rank: NCCL's per-call floor, no data moves);
* our executor's all_reduce with ``n`` ranks on the GPUs (rank r on GPU r mod count), for the
  ring and direct schedules, with the number of ops of each lowered program: the slope of the
  8 B time over the op count is the executor's host-side cost per op (µs).

Every result of our executor is checked against NumPy before it is timed.

    python benchmarks/bench_cupy_gpu.py --out results/gpu
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels.backends.executor import program_for, run_schedule  # noqa: E402
from kernels.comm.nccl_runtime import NcclRuntime  # noqa: E402
from synth.sweep.driver import make_selector, schedule_at  # noqa: E402
from topo_probe.machines.generators import fully_connected  # noqa: E402
from shown_paths import script_command  # noqa: E402

SIZES = [8, 1 << 10, 1 << 16, 1 << 20, 1 << 24, 1 << 28]


def _median_us(cp, fn, warmup: int, iters: int, devices: list[int]) -> float:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(iters):
        starts, ends = [], []
        for d in devices:
            with cp.cuda.Device(d):
                starts.append(cp.cuda.Event())
                starts[-1].record()
        fn()
        for d in devices:
            with cp.cuda.Device(d):
                ends.append(cp.cuda.Event())
                ends[-1].record()
        for d, e in zip(devices, ends):
            with cp.cuda.Device(d):
                e.synchronize()
        out.append(max(cp.cuda.get_elapsed_time(a, b) for a, b in zip(starts, ends)) * 1e3)
    return statistics.median(out)


def copy_ceiling(cp, warmup, iters) -> float:
    a = cp.random.random(1 << 27, dtype=cp.float64)          # 1 GiB
    b = cp.empty_like(a)
    t = _median_us(cp, lambda: b.__setitem__(slice(None), a), warmup, iters, [0])
    return a.nbytes / t / 1e3


def host_costs(cp, calls: int = 2000) -> dict[str, float]:
    """Host-side µs per call of what one executor op is made of (wall clock over ``calls``
    calls, the device synchronised after): where the executor's per-op cost goes."""
    import time
    a, b, d = (cp.ones(256, cp.float32) for _ in range(3))
    s = cp.cuda.Stream(non_blocking=True)
    ev = cp.cuda.Event(disable_timing=True)
    rt = cp.cuda.runtime
    ev.record(s)

    def in_ctx():
        with cp.cuda.Device(0), s:
            cp.add(a, b, out=d)

    cases = {
        "cupy.add (ufunc launch)": lambda: cp.add(a, b, out=d),
        "cupy.add inside Device+stream contexts": in_ctx,
        "memcpyAsync 1 KiB": lambda: rt.memcpyAsync(d.data.ptr, a.data.ptr, 1024, rt.memcpyDeviceToDevice, s.ptr),
        "event create (made per op before)": lambda: cp.cuda.Event(disable_timing=True),
        "eventRecord": lambda: rt.eventRecord(ev.ptr, s.ptr),
        "streamWaitEvent": lambda: rt.streamWaitEvent(s.ptr, ev.ptr),
        "array slice (view)": lambda: a[16:128],
    }
    out = {}
    for name, fn in cases.items():
        for _ in range(50):
            fn()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        cp.cuda.Device(0).synchronize()
        out[name] = (time.perf_counter() - t0) / calls * 1e6
    return out


def nccl_allreduce(cp, ndev, sizes, warmup, iters) -> dict[int, float]:
    rt = NcclRuntime(list(range(ndev)))
    out = {}
    for size in sizes:
        count = max(size // 4, 1)
        xs, ys = [], []
        for d in range(ndev):
            with cp.cuda.Device(d):
                xs.append(cp.random.random(count, dtype=cp.float32))
                ys.append(cp.empty_like(xs[-1]))
        out[size] = _median_us(cp, lambda: rt.run("allreduce", xs, ys, count), warmup, iters, list(range(ndev)))
    return out


def ours_allreduce(cp, ndev, n, algo, sizes, warmup, iters) -> tuple[dict[int, float], int]:
    selector = make_selector("allreduce", fully_connected(n), algo, plan=False)
    devices = [r % ndev for r in range(n)]
    out, ops = {}, 0
    rng = np.random.default_rng(1)
    for size in sizes:
        count = max(size // 4, 1)
        sched = schedule_at(selector, "allreduce", -1, count * 4)[0]
        host = [rng.integers(-8, 9, count).astype(np.float32) for _ in range(n)]
        xs, ys = [], []
        for r, d in enumerate(devices):
            with cp.cuda.Device(d):
                xs.append(cp.asarray(host[r]))
                ys.append(cp.full(count, np.nan, cp.float32))
        run_schedule(sched, xs, ys, backend="cupy")
        want = np.sum(host, axis=0, dtype=np.float64)
        for y in ys:
            if not np.array_equal(y.get().astype(np.float64), want):
                raise SystemExit(f"wrong all_reduce result: {algo}, {n} ranks, {size} B")
        if size == sizes[0]:
            ops = sum(1 for _ in program_for(sched, count, np.float32).ops())
        out[size] = _median_us(cp, lambda: run_schedule(sched, xs, ys, backend="cupy"), warmup, iters,
                               sorted(set(devices)))
    return out, ops


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for cupy_gpu.md and cupy_gpu.csv")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--ranks", default="2,4,8", help="rank counts of our executor")
    args = ap.parse_args(argv)
    import cupy as cp

    ndev = cp.cuda.runtime.getDeviceCount()
    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    from cupy.cuda import nccl
    ceiling = copy_ceiling(cp, args.warmup, args.iters)
    costs = host_costs(cp)
    ref = nccl_allreduce(cp, ndev, SIZES, args.warmup, args.iters)
    rows = [("nccl", ndev, 0, s, ref[s]) for s in SIZES]
    per_op = []
    for n in [int(x) for x in args.ranks.split(",")]:
        for algo in ("ring", "direct"):
            times, ops = ours_allreduce(cp, ndev, n, algo, SIZES, args.warmup, args.iters)
            rows += [(algo, n, ops, s, times[s]) for s in SIZES]
            per_op.append((ops, times[SIZES[0]]))
    slope, icpt = np.polyfit([o for o, _ in per_op], [t for _, t in per_op], 1)
    cmd = script_command(__file__, sys.argv[1:] if argv is None else argv)     # --out /tmp/gpu: --out <tmp>/gpu
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["series,ranks,gpus,ops,size_bytes,time_us,busbw_gbps"]
    for algo, n, ops, s, t in rows:
        bus = s / t / 1e3 * (2 * (n - 1) / n) if n > 1 else 0.0
        lines.append(f"{algo},{n},{ndev},{ops},{s},{t:.2f},{bus:.3f}")
    (out / "cupy_gpu.csv").write_text("# " + cmd + "\n" + "\n".join(lines) + "\n")
    md = [f"# CuPy executor on {ndev} x {name}", "", f"Command: `{cmd}`", "",
          f"CuPy {cp.__version__}, NCCL {nccl.get_version()}, median of {args.iters} CUDA-event timings.", "",
          f"- Device-to-device copy of 1 GiB: **{ceiling:.0f} GB/s** (bytes copied / time).",
          f"- NCCL all_reduce, {ndev} rank(s): " + ", ".join(f"{s} B {ref[s]:.1f} us" for s in SIZES) + ".",
          f"- Our executor, host-side cost per op (slope of the 8 B time over ops, {len(per_op)} programs): "
          f"**{slope:.1f} us/op** ({icpt:+.0f} us per call).", "",
          "Host-side cost per call of an executor op's parts (µs):", "",
          *[f"- {k}: {v:.1f}" for k, v in costs.items()], "",
          "| schedule | ranks | ops | " + " | ".join(f"{s} B (us)" for s in SIZES) + " |",
          "|---|---|---|" + "---|" * len(SIZES)]
    for algo, n in dict.fromkeys((r[0], r[1]) for r in rows):
        sel = [r for r in rows if r[0] == algo and r[1] == n]
        md.append(f"| {algo} | {n} | {sel[0][2]} | " + " | ".join(f"{r[4]:.1f}" for r in sel) + " |")
    (out / "cupy_gpu.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
