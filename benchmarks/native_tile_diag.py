"""Whether dealing large ops to the channels in tiles closes the native executor's gap to plain
CuPy on copy-bound calls: for the collectives that trailed CuPy (64 and 256 MiB, 2-8 ranks on one
GPU), the native call (graph replay) with contiguous pieces per channel and with tiles of 16, 32
and 64 KiB, beside the CuPy code a user would write.  Prints one line per case; the times are
microseconds per call (best of 3 over 5 calls, bench_native_gpu's timer).

    python benchmarks/native_tile_diag.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy as cp  # noqa: E402
from bench_native_gpu import METHOD, buffers, call_args, plain_cupy, wall_us  # noqa: E402

from kernels import Communicator  # noqa: E402
from kernels.native.layer import NativeLayer  # noqa: E402

CASES = [("broadcast", 2), ("broadcast", 4), ("broadcast", 8), ("gather", 2), ("gather", 4), ("scatter", 2),
         ("scatter", 4), ("allgather", 2), ("allgather", 4), ("alltoall", 2), ("alltoall", 4), ("allreduce", 8)]
#: tile sizes tried (None: one contiguous piece per channel, the layout before tiles)
TILES = [None, 16 << 10, 32 << 10, 64 << 10]
PER_RANK = ("allgather", "gather", "alltoall", "scatter", "reducescatter")


def main() -> None:
    print("case | plain | " + " | ".join("contiguous" if t is None else f"tiles {t >> 10} KiB" for t in TILES),
          flush=True)
    for nbytes in (1 << 26, 1 << 28):
        for coll, n in CASES:
            per = nbytes // 4 // (n if coll in PER_RANK else 1)
            ins, outs = buffers(cp, coll, n, per)
            pos, kw = call_args(coll, ins, outs)
            f, _ = plain_cupy(cp, coll, n, ins, outs)
            line = [f"{coll} n={n} {nbytes >> 20} MiB", f"{wall_us(cp, f, 5):.1f}"]
            for tile in TILES:
                comm = Communicator(n, plan=False, backend=NativeLayer(tile_bytes=tile))
                m = getattr(comm, METHOD[coll])
                line.append(f"{wall_us(cp, lambda: m(*pos, **kw), 5):.1f}")
                del comm
            print(" | ".join(line), flush=True)
            del ins, outs
            cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
