"""Host n-way reduce: the fused Numba kernel against the chained NumPy twins, side by side.

For n sources of ``size`` bytes each, ``dst = ((s0 + s1) + s2) ...`` three ways in one run,
alternating repeat by repeat:

* ``numpy chained``: :func:`kernels.backends.kernel_twins.reduce_copy_host` n-1 times (what the
  host backend and the staged GPU path ran before the fused kernel);
* ``fused, 1 thread``: :func:`kernels.backends.host_reduce.reduce_nway` with ``parallel=False``
  (how the host backend calls it from its own thread pool);
* ``fused, all threads``: ``parallel=True`` (the staged GPU path's host reduce).

Throughput is the fused kernel's traffic, ``(n + 1) * size`` bytes (n reads, one write), over
the best of ``--repeats`` times, for every variant (the chained twins really move
``3 * (n - 1) * size``).  Results match bit for bit (checked once per case).

    python benchmarks/bench_host_reduce.py --out results/host_reduce
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels.backends.host_reduce import reduce_nway  # noqa: E402
from kernels.backends.kernel_twins import reduce_copy_host  # noqa: E402
from shown_paths import script_command  # noqa: E402

VARIANTS = ("numpy chained", "fused, 1 thread", "fused, all threads")


def _dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _chained(dst, srcs) -> None:
    reduce_copy_host(dst, srcs[0], srcs[1], "sum")
    for s in srcs[2:]:
        reduce_copy_host(dst, dst, s, "sum")


def measure(dtype: str, n: int, size: int, repeats: int) -> dict[str, float]:
    """Best time (s) of each variant for ``n`` sources of ``size`` bytes."""
    dt = _dtype(dtype)
    count = size // dt.itemsize
    rng = np.random.default_rng(n)
    srcs = [rng.uniform(-1, 1, count).astype(np.float32).astype(dt) for _ in range(n)]
    outs = {v: np.empty(count, dt) for v in VARIANTS}
    runs = {"numpy chained": lambda d: _chained(d, srcs),
            "fused, 1 thread": lambda d: reduce_nway(d, srcs, "sum", parallel=False),
            "fused, all threads": lambda d: reduce_nway(d, srcs, "sum", parallel=True)}
    for v in VARIANTS:                          # warm up (first use compiles or loads the kernels)
        runs[v](outs[v])
    want = outs["numpy chained"].view(np.uint8)
    for v in VARIANTS[1:]:
        if not np.array_equal(outs[v].view(np.uint8), want):
            raise SystemExit(f"{v} differs from the NumPy twins for {dtype} n={n} size={size}")
    best = {v: float("inf") for v in VARIANTS}
    for _ in range(repeats):
        for v in VARIANTS:
            t = time.perf_counter()
            runs[v](outs[v])
            best[v] = min(best[v], time.perf_counter() - t)
    return best


def _mib(x: str) -> int:
    return int(float(x) * (1 << 20))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--sources", nargs="+", type=int, default=[2, 4, 8])
    ap.add_argument("--sizes-mib", nargs="+", type=_mib, default=[_mib(x) for x in ("1", "4", "16", "64", "256")])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="folder for host_reduce.md / host_reduce.csv")
    args = ap.parse_args(argv)
    rows, load = [], [os.getloadavg()[0]]
    for dtype in args.dtypes:
        for n in args.sources:
            for size in args.sizes_mib:
                best = measure(dtype, n, size, args.repeats)
                moved = (n + 1) * size
                row = {"dtype": dtype, "sources": n, "size_mib": size / (1 << 20)}
                row.update({v: moved / best[v] / 1e9 for v in VARIANTS})
                rows.append(row)
                print(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                      flush=True)
    load.append(os.getloadavg()[0])
    if args.out is not None:
        write(args.out, rows, argv if argv is not None else sys.argv[1:], load)
    return 0


def write(out: Path, rows: list[dict], argv, load: list[float]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "host_reduce.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    lines = ["# Host n-way reduce: fused Numba kernel vs chained NumPy twins", "",
             "Command: `" + script_command(__file__, argv) + "`", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores (Numba's threads: "
             f"{os.cpu_count()}), Python {platform.python_version()}, NumPy {np.__version__}.  "
             f"With {os.cpu_count()} cores the parallel speed-up is bounded by {os.cpu_count()}.  The cores "
             f"were shared with other jobs (1-minute load average {load[0]:.1f} at the start, "
             f"{load[-1]:.1f} at the end), so single cells are noisy (differences under about 1.5x can "
             "be noise, and waking Numba's threads on a busy machine costs milliseconds: the "
             "all-threads column is far too low for small sizes); read the trends.", "",
             "GB/s = (sources + 1) x size / best time: the fused kernel's bytes read + written, "
             "the same unit for every column (the chained twins move 3 x (sources - 1) x size).  "
             "Every fused result equals the chained one bit for bit.  fused / numpy: the better "
             "fused column over the chained twins.", "",
             "| dtype | sources | size (MiB) | " + " | ".join(f"{v} (GB/s)" for v in VARIANTS) + " | fused / numpy |",
             "|---|---:|---:|" + "---:|" * (len(VARIANTS) + 1)]
    for r in rows:
        fused = max(r[v] for v in VARIANTS[1:])
        lines.append(f"| {r['dtype']} | {r['sources']} | {r['size_mib']:g} | "
                     + " | ".join(f"{r[v]:.2f}" for v in VARIANTS) + f" | {fused / r[VARIANTS[0]]:.2f}x |")
    (out / "host_reduce.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
