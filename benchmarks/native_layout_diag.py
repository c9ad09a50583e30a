"""Whether a copy's memory layout per thread block explains the native executor's gap to CuPy's
copy: 256 MiB copied by one kernel of 264 blocks x 512 threads with 16-byte vectors, each block
either owning one contiguous piece (as the native executor's records do) or striding with the
whole grid over the buffer (as a copy kernel does), beside CuPy's own device copy.

    python benchmarks/native_layout_diag.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy as cp  # noqa: E402
from bench_native_gpu import wall_us  # noqa: E402

SOURCE = r'''
extern "C" __global__ void __launch_bounds__(512, 2) piece(const uint4* src, uint4* dst, long long n) {
    long long per = (n + gridDim.x - 1) / gridDim.x, lo = per * blockIdx.x, hi = min(n, lo + per);
    long long i = lo + threadIdx.x;
    for (; i + 3 * 512 < hi; i += 4 * 512) {
        uint4 a = src[i], b = src[i + 512], c = src[i + 1024], d = src[i + 1536];
        dst[i] = a; dst[i + 512] = b; dst[i + 1024] = c; dst[i + 1536] = d;
    }
    for (; i < hi; i += 512) dst[i] = src[i];
}
extern "C" __global__ void __launch_bounds__(512, 2) strided(const uint4* src, uint4* dst, long long n) {
    long long step = (long long)gridDim.x * 512, i = (long long)blockIdx.x * 512 + threadIdx.x;
    for (; i + 3 * step < n; i += 4 * step) {
        uint4 a = src[i], b = src[i + step], c = src[i + 2 * step], d = src[i + 3 * step];
        dst[i] = a; dst[i + step] = b; dst[i + 2 * step] = c; dst[i + 3 * step] = d;
    }
    for (; i < n; i += step) dst[i] = src[i];
}
extern "C" __global__ void __launch_bounds__(512, 2) tiled(const uint4* src, uint4* dst, long long n, long long tile) {
    // tiles of `tile` vectors dealt to the blocks in turn: block b copies tiles b, b + grid, ...
    for (long long t = blockIdx.x; t * tile < n; t += gridDim.x) {
        long long lo = t * tile, hi = min(n, lo + tile);
        for (long long i = lo + threadIdx.x; i < hi; i += 512) dst[i] = src[i];
    }
}
'''


def us(fn, iters=20):
    """Best of 3 wall times per call over ``iters`` back-to-back calls (bench_native_gpu's timer)."""
    return wall_us(cp, fn, iters)


def main() -> None:
    mod = cp.RawModule(code=SOURCE)
    nbytes = 1 << 28
    src, dst = cp.ones(nbytes // 4, cp.float32), cp.zeros(nbytes // 4, cp.float32)
    n = cp.int64(nbytes // 16)
    rows = [("cupy copy", us(lambda: dst.__setitem__(Ellipsis, src)))]
    for blocks in (132, 264):
        piece, strided = mod.get_function("piece"), mod.get_function("strided")
        rows.append((f"piece per block, {blocks} blocks", us(lambda: piece((blocks,), (512,), (src, dst, n)))))
        rows.append((f"grid-strided, {blocks} blocks", us(lambda: strided((blocks,), (512,), (src, dst, n)))))
        for tile_kib in (16, 64, 256):
            tile = cp.int64(tile_kib * 1024 // 16)
            rows.append((f"{tile_kib} KiB tiles dealt in turn, {blocks} blocks",
                         us(lambda: mod.get_function("tiled")((blocks,), (512,), (src, dst, n, tile)))))
    assert bool((dst == 1).all())
    for name, t in rows:
        print(f"{name:40s} {t:8.1f} us  {2 * nbytes / t / 1e3:7.0f} GB/s moved", flush=True)


if __name__ == "__main__":
    main()
