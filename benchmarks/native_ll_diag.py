"""Where the LL protocol's time goes on one GPU: LL graph replays of a few 8-rank calls with the channels
forced to 1-32, beside Simple at its own channel count, and the kernel's registers and local memory (spills)
for this build (set ``TOPOCOLL_NATIVE_DEFINES=-DTC_LL_INLINE=1`` to inline the LL unit).

    python benchmarks/native_ll_diag.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from bench_native_gpu import METHOD, buffers, call_args, check_once, per_rank_count, wall_us  # noqa: E402

from kernels import Communicator  # noqa: E402

CASES = [("allreduce", 1 << 10), ("allreduce", 1 << 14), ("allreduce", 1 << 16), ("allreduce", 1 << 18),
         ("reducescatter", 1 << 16), ("allgather", 1 << 16)]


def main() -> int:
    import cupy as cp

    from kernels.native.launcher import _KERNELS
    from kernels.native.layer import NativeLayer
    n = 8
    print("defines:", os.environ.get("TOPOCOLL_NATIVE_DEFINES", "(none)"))
    for coll, nbytes in CASES:
        per = per_rank_count(coll, n, nbytes)
        ins, outs = buffers(cp, coll, n, per)
        pos, kw = call_args(coll, ins, outs)
        cells = []
        for proto, ch in [("simple", None), ("ll", None), ("ll", 1), ("ll", 2), ("ll", 4), ("ll", 8), ("ll", 16)]:
            comm = Communicator(n, plan=False, backend=NativeLayer(protocol=proto, channels=ch))
            method = getattr(comm, METHOD[coll])
            bad = check_once(cp, method, pos, kw, coll, n, ins, outs)
            t = float("nan") if bad else wall_us(cp, lambda: method(*pos, **kw), 200)
            cells.append(f"{proto}{'' if ch is None else ch}={t:.1f}{'!' if bad else ''}")
        print(f"{coll:13s} {nbytes:>7d} B  " + "  ".join(cells), flush=True)
    for key, (kernel, held) in _KERNELS.items():
        a = kernel.attributes
        print("kernel", key, "regs", a.get("num_regs"), "local bytes", a.get("local_size_bytes"),
              "shared bytes", a.get("shared_size_bytes"), "resident blocks", held)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
