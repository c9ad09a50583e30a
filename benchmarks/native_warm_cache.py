"""Compile the interpreter kernel's specialisations in parallel before a GPU pass, so tests and
benchmarks load them from CuPy's on-disk kernel cache instead of each waiting for NVRTC (the 8-bit
float builds take seconds each).

    python benchmarks/native_warm_cache.py [--procs 16]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.native.source import DTYPE_CODES, OP_CODES  # noqa: E402


def build(spec: tuple[str, str, bool]) -> tuple[str, float]:
    import cupy as cp

    from kernels.native.source import KERNEL_NAME, compile_options, kernel_source
    dtype, op, scope = spec
    t = time.perf_counter()
    cp.RawModule(code=kernel_source(), options=compile_options(dtype, op, scope_sys=scope)).get_function(KERNEL_NAME)
    return f"{dtype}/{op}/{'sys' if scope else 'gpu'}", time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=16)
    args = ap.parse_args(argv)
    ops = [op for op in OP_CODES if op != "avg"]          # avg compiles as sum
    specs = [(d, o, False) for d in DTYPE_CODES for o in ops] + [(d, "sum", True) for d in ("float32", "float16")]
    specs.sort(key=lambda s: "float8" not in s[0])          # the slow 8-bit builds first
    t = time.perf_counter()
    with mp.get_context("spawn").Pool(args.procs) as pool:
        done = pool.map(build, specs, chunksize=1)
    slowest = max(done, key=lambda x: x[1])
    print(f"{len(done)} specialisations in {time.perf_counter() - t:.1f} s (slowest {slowest[0]} {slowest[1]:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
