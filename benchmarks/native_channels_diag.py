"""How the native executor's large copies depend on its block count, beside plain CuPy: for a few
copy-bound collectives at 256 MiB on one GPU, the native call (graph replay) with the channels
forced so that the launch has about 66, 132 and 264 blocks (one H100 holds 264), and the CuPy
code a user would write.  Prints one line per case.

    python benchmarks/native_channels_diag.py [--variants]

``--variants``: the copy loop's compile-time variants instead (vectors in flight per thread,
streaming cache hints), each in a fresh process, on four copy-bound cases.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy as cp  # noqa: E402
from bench_native_gpu import METHOD, buffers, call_args, plain_cupy, wall_us  # noqa: E402

from kernels import Communicator  # noqa: E402
from kernels.native.layer import NativeLayer  # noqa: E402

CASES = [("allgather", 2), ("broadcast", 2), ("scatter", 2), ("broadcast", 4), ("gather", 4), ("alltoall", 4),
         ("allreduce", 8), ("broadcast", 8)]
WRITERS = {"gather": lambda n: 1, "broadcast": lambda n: n - 1}


#: copy-loop variants (-D options through kernels.native.source.TUNING_ENV) tried by --variants
VARIANTS = ["", "-DTC_COPY_UNROLL=2", "-DTC_COPY_UNROLL=8", "-DTC_CS=1", "-DTC_COPY_UNROLL=8 -DTC_CS=1"]
VARIANT_CASES = [("broadcast", 2), ("allgather", 2), ("gather", 4), ("alltoall", 4)]


def variants() -> None:
    """Each copy-loop variant in a fresh process: default channels, the cases above."""
    import os
    import subprocess
    from kernels.native.source import TUNING_ENV
    for v in VARIANTS:
        env = dict(os.environ, **{TUNING_ENV: v})
        code = (f"import sys; sys.argv=['x']; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                f"import native_channels_diag as d; d.quick({VARIANT_CASES!r})")
        out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env, capture_output=True, text=True)
        print(f"[{v or 'default'}] " + (out.stdout.strip() or out.stderr.strip()[-300:]), flush=True)


def quick(cases) -> None:
    nbytes, line = 1 << 28, []
    for coll, n in cases:
        per = nbytes // 4 // (n if coll in ("allgather", "gather", "alltoall", "scatter") else 1)
        ins, outs = buffers(cp, coll, n, per)
        pos, kw = call_args(coll, ins, outs)
        f, _ = plain_cupy(cp, coll, n, ins, outs)
        m = getattr(Communicator(n, plan=False), METHOD[coll])
        line.append(f"{coll} n={n} plain={wall_us(cp, f, 5):.1f} native={wall_us(cp, lambda: m(*pos, **kw), 5):.1f}")
        del ins, outs
        cp.get_default_memory_pool().free_all_blocks()
    print(" | ".join(line))


def main() -> None:
    if "--variants" in sys.argv:
        return variants()
    nbytes = 1 << 28
    for coll, n in CASES:
        per = nbytes // 4 // (n if coll in ("allgather", "gather", "alltoall", "scatter") else 1)
        ins, outs = buffers(cp, coll, n, per)
        pos, kw = call_args(coll, ins, outs)
        f, _ = plain_cupy(cp, coll, n, ins, outs)
        line = [f"{coll:10s} n={n} plain={wall_us(cp, f, 5):.1f}"]
        writers = WRITERS.get(coll, lambda n: n)(n)
        for blocks in (66, 132, 264):
            ch = max(1, blocks // writers)
            comm = Communicator(n, plan=False, backend=NativeLayer(channels=ch))
            m = getattr(comm, METHOD[coll])
            line.append(f"blocks~{ch * writers}:{wall_us(cp, lambda: m(*pos, **kw), 5):.1f}")
            del comm
        comm = Communicator(n, plan=False)
        m = getattr(comm, METHOD[coll])
        line.append(f"default:{wall_us(cp, lambda: m(*pos, **kw), 5):.1f}")
        print("  ".join(line), flush=True)
        del ins, outs, comm
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
