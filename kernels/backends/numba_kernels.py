"""Numba CUDA kernels (reduce-copy, avg division, compression casts) and their NumPy twins.

Every kernel is a grid-stride loop and has a host twin written with NumPy / ml_dtypes
(:mod:`kernels.backends.kernel_twins`); the host backend uses the twins, and tests
check each kernel against its twin bit for bit (in Numba's CUDA simulator when there is no
GPU).  Numba is imported only when a kernel is first asked for (:func:`cuda_kernels`), so
importing this module never touches CUDA.

Kernels
-------
reduce-copy  ``dst = a (op) b`` for op sum/prod/max/min (avg reduces with sum) on float16,
             bfloat16 (as uint16 bit patterns, computed in float32, rounded to nearest even),
             float32, float64, int8, uint8, int32, int64.  Integers wrap like C / NCCL.
             Floating avg (NCCL's ``PreMulSum``): operands still raw are first multiplied by
             1/n in the type, each product and the sum rounded in it.
postdiv      integer avg's final division: truncation toward zero (NCCL's ``SumPostDiv``).
casts        float32 -> float16, float32 -> bfloat16 (uint16 bits, round to nearest even),
             bfloat16 -> float32, and float8 e4m3 (``float8_e4m3fn``) with one scale per
             ``chunk`` elements: ``scale = max|x| / 448`` (1.0 for an all-zero chunk),
             ``q = e4m3(clip(x / scale, -448, 448))``; dequantize ``x ~ float(q) * scale``.

Float16/bfloat16 results equal NumPy's (float32 then one rounding is exact for +, *, /).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from kernels.backends.kernel_twins import E4M3_MAX, PreMulSum, avg_scalar
from topo_probe.errors import InvalidArgument

OPCODES = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 0}
KERNEL_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32", "int64")
_FLOATS = KERNEL_DTYPES[:4]


# ====================================================================== CUDA kernels
def launch_config(n: int, threads: int = 256, max_blocks: int = 1024) -> tuple[int, int]:
    """(blocks, threads) for a grid-stride loop over ``n`` elements (small in the simulator)."""
    from numba import config
    if config.ENABLE_CUDASIM:
        threads, max_blocks = 8, 2
    return max(1, min(max_blocks, -(-n // threads))), threads


@lru_cache(maxsize=1)
def cuda_kernels() -> dict:
    """Compile (lazily) and return the CUDA kernels by name; imports numba.cuda.

    ``cuda``, ``float32`` and ``int64`` become module globals so that Numba's simulator can
    swap in its fake ``cuda`` module (it patches globals, not closures).
    """
    global cuda, float32, int64
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack    # numba-cuda overloads it on import; NumPy 2.5 removed it
    from numba import cuda, float32, int64
    dev = _device_functions()
    out = {}
    for build in (_reduce_kernels, _cast_kernels, _e4m3_kernels):
        out.update(build(dev))
    return out


def _device_functions() -> dict:
    """Device helpers: binary op, bfloat16 and e4m3 conversions (round to nearest even)."""

    @cuda.jit(device=True)
    def apply(op, x, y):
        if op == 0:
            return x + y
        if op == 1:
            return x * y
        if op == 2:
            return x if x >= y else y
        return x if x <= y else y

    @cuda.jit(device=True)
    def bf16_to_f32(b):
        e = (b >> 7) & 0xFF
        m = b & 0x7F
        if e == 255:
            v = float32(math.inf) if m == 0 else float32(math.nan)
        elif e == 0:
            v = float32(math.ldexp(float32(m), -133))
        else:
            v = float32(math.ldexp(float32(m | 0x80), int(e) - 134))
        return -v if (b >> 15) & 1 else v

    @cuda.jit(device=True)
    def f32_to_bf16(v):
        if v != v:
            return 0x7FC0
        s = 0x8000 if math.copysign(1.0, v) < 0 else 0
        a = abs(v)
        if a == math.inf:
            return s | 0x7F80
        if a == 0:
            return s
        m, e = math.frexp(a)
        if e - 1 >= -126:
            u = ((int64(e) - 1 + 127) << 23) | (int64(math.ldexp(m, 24)) - (1 << 23))
        else:
            u = int64(math.ldexp(a, 149))
        u = u + 0x7FFF + ((u >> 16) & 1)
        return s | (u >> 16)

    @cuda.jit(device=True)
    def rne(x):
        f = math.floor(x)
        r = x - f
        f = int64(f)
        if r > 0.5 or (r == 0.5 and f % 2 == 1):
            f += 1
        return f

    @cuda.jit(device=True)
    def f32_to_e4m3(v):
        if v != v:
            return 0x7F
        s = 0x80 if math.copysign(1.0, v) < 0 else 0
        a = abs(v)
        if a > E4M3_MAX:
            a = E4M3_MAX
        if a == 0:
            return s
        m, e = math.frexp(a)
        ex = int64(e) - 1
        if ex >= -6:
            q = rne(math.ldexp(m, 4))
            if q == 16:
                q = 8
                ex += 1
            return s | ((ex + 7) << 3) | (q - 8)
        return s | rne(math.ldexp(a, 9))

    @cuda.jit(device=True)
    def e4m3_to_f32(c):
        e = (c >> 3) & 0xF
        m = c & 7
        if e == 15 and m == 7:
            v = float32(math.nan)
        elif e == 0:
            v = float32(math.ldexp(float32(m), -9))
        else:
            v = float32(math.ldexp(float32(8 + m), int(e) - 10))
        return -v if c & 0x80 else v

    return {"apply": apply, "bf16_to_f32": bf16_to_f32, "f32_to_bf16": f32_to_bf16,
            "f32_to_e4m3": f32_to_e4m3, "e4m3_to_f32": e4m3_to_f32}


def _reduce_kernels(dev: dict) -> dict:
    """reduce-copy and avg's division, per element type family."""
    apply, bf16_to_f32, f32_to_bf16, f32_to_e4m3, e4m3_to_f32 = (
        dev[k] for k in ("apply", "bf16_to_f32", "f32_to_bf16", "f32_to_e4m3", "e4m3_to_f32"))

    @cuda.jit
    def reduce_native(dst, a, b, op):
        i = cuda.grid(1)
        while i < dst.size:
            dst[i] = apply(op, a[i], b[i])
            i += cuda.gridsize(1)

    @cuda.jit
    def reduce_f16(dst, a, b, op):
        i = cuda.grid(1)
        while i < dst.size:
            dst[i] = apply(op, float32(a[i]), float32(b[i]))
            i += cuda.gridsize(1)

    @cuda.jit
    def reduce_bf16(dst, a, b, op):
        i = cuda.grid(1)
        while i < dst.size:
            dst[i] = f32_to_bf16(apply(op, bf16_to_f32(a[i]), bf16_to_f32(b[i])))
            i += cuda.gridsize(1)

    def premul_with(mul):   # mul.rn: x * s + y would be one fma, a rounding short of the twin
        @cuda.jit
        def reduce_premul(dst, a, b, s, sa, sb):
            i = cuda.grid(1)
            while i < dst.size:
                x = mul(a[i], s) if sa else a[i]
                y = mul(b[i], s) if sb else b[i]
                dst[i] = x + y
                i += cuda.gridsize(1)
        return reduce_premul

    from numba import config
    from numba.cuda import libdevice     # the simulator's libdevice is stubs; its products round
    mul32, mul64 = ((cuda.jit(device=True)(lambda x, y: x * y),) * 2 if config.ENABLE_CUDASIM
                    else (libdevice.fmul_rn, libdevice.dmul_rn))
    reduce_premul_f32, reduce_premul_f64 = premul_with(mul32), premul_with(mul64)

    @cuda.jit
    def reduce_premul_f16(dst, a, b, s, sa, sb):
        i = cuda.grid(1)
        while i < dst.size:
            x = float32(a[i])
            y = float32(b[i])
            if sa:    # each product rounded to float16 by a store (dst may alias a: read first)
                dst[i] = x * s
                x = float32(dst[i])
            if sb:
                dst[i] = y * s
                y = float32(dst[i])
            dst[i] = x + y
            i += cuda.gridsize(1)

    @cuda.jit
    def reduce_premul_bf16(dst, a, b, s, sa, sb):
        i = cuda.grid(1)
        while i < dst.size:
            x = bf16_to_f32(a[i])
            y = bf16_to_f32(b[i])
            if sa:
                x = bf16_to_f32(f32_to_bf16(x * s))
            if sb:
                y = bf16_to_f32(f32_to_bf16(y * s))
            dst[i] = f32_to_bf16(x + y)
            i += cuda.gridsize(1)

    @cuda.jit
    def postdiv_int(x, n):
        i = cuda.grid(1)
        while i < x.size:
            v = int64(x[i])
            q = v // n
            if q < 0 and q * n != v:
                q += 1
            x[i] = q
            i += cuda.gridsize(1)

    @cuda.jit
    def postdiv_float(x, n):
        i = cuda.grid(1)
        while i < x.size:
            x[i] = x[i] / n
            i += cuda.gridsize(1)

    @cuda.jit
    def postdiv_f16(x, n):
        i = cuda.grid(1)
        while i < x.size:
            x[i] = float32(x[i]) / float32(n)
            i += cuda.gridsize(1)

    @cuda.jit
    def postdiv_bf16(x, n):
        i = cuda.grid(1)
        while i < x.size:
            x[i] = f32_to_bf16(bf16_to_f32(x[i]) / float32(n))
            i += cuda.gridsize(1)

    return {k: v for k, v in locals().items() if k.startswith(("reduce_", "postdiv_"))}


def _cast_kernels(dev: dict) -> dict:
    """float32 <-> float16 / bfloat16 casts."""
    apply, bf16_to_f32, f32_to_bf16, f32_to_e4m3, e4m3_to_f32 = (
        dev[k] for k in ("apply", "bf16_to_f32", "f32_to_bf16", "f32_to_e4m3", "e4m3_to_f32"))

    @cuda.jit
    def cast_f32_f16(out, x):
        i = cuda.grid(1)
        while i < x.size:
            out[i] = x[i]
            i += cuda.gridsize(1)

    @cuda.jit
    def cast_f32_bf16(out, xbits):
        i = cuda.grid(1)
        while i < xbits.size:
            u = int64(xbits[i])
            if (u & 0x7FFFFFFF) > 0x7F800000:
                out[i] = (u >> 16) | 0x40
            else:
                out[i] = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            i += cuda.gridsize(1)

    @cuda.jit
    def cast_bf16_f32(out, bits):
        i = cuda.grid(1)
        while i < bits.size:
            out[i] = bf16_to_f32(bits[i])
            i += cuda.gridsize(1)

    return {k: v for k, v in locals().items() if k.startswith("cast_")}


def _e4m3_kernels(dev: dict) -> dict:
    """float8 e4m3 per-chunk scales, quantize and dequantize."""
    apply, bf16_to_f32, f32_to_bf16, f32_to_e4m3, e4m3_to_f32 = (
        dev[k] for k in ("apply", "bf16_to_f32", "f32_to_bf16", "f32_to_e4m3", "e4m3_to_f32"))

    @cuda.jit
    def e4m3_scales(x, chunk, scales):
        buf = cuda.shared.array(32, float32)
        c = cuda.blockIdx.x
        t = cuda.threadIdx.x
        while c < scales.size:
            m = float32(0.0)
            j = c * chunk + t
            end = (c + 1) * chunk
            if end > x.size:
                end = x.size
            while j < end:
                v = abs(x[j])
                if v > m:
                    m = v
                j += cuda.blockDim.x
            if t < 32:
                buf[t] = m
            cuda.syncthreads()
            if t == 0:
                for k in range(1, 32 if cuda.blockDim.x > 32 else cuda.blockDim.x):
                    if buf[k] > m:
                        m = buf[k]
                scales[c] = m / float32(E4M3_MAX) if m > 0 else float32(1.0)
            cuda.syncthreads()
            c += cuda.gridDim.x

    @cuda.jit
    def e4m3_quantize(q, x, scales, chunk):
        i = cuda.grid(1)
        while i < x.size:
            q[i] = f32_to_e4m3(x[i] / scales[i // chunk])
            i += cuda.gridsize(1)

    @cuda.jit
    def e4m3_dequantize(out, q, scales, chunk):
        i = cuda.grid(1)
        while i < q.size:
            out[i] = e4m3_to_f32(q[i]) * scales[i // chunk]
            i += cuda.gridsize(1)

    return {k: v for k, v in locals().items() if k.startswith("e4m3_")}


def reduce_copy_cuda(dst, a, b, op, dtype: str | None = None, stream=0) -> None:
    """Launch reduce-copy on device arrays (bfloat16: pass uint16 views and ``dtype='bfloat16'``);
    ``op`` is an op name or a :class:`~kernels.backends.kernel_twins.PreMulSum` (floating avg)."""
    k = cuda_kernels()
    name = dtype or str(dst.dtype)
    if name not in KERNEL_DTYPES or (isinstance(op, PreMulSum) and name not in _FLOATS):
        raise InvalidArgument(f"reduce-copy kernel ({op}): dtype {name} is not one of "
                              f"{', '.join(_FLOATS if isinstance(op, PreMulSum) else KERNEL_DTYPES)}")
    kind = {"float16": "f16", "bfloat16": "bf16"}.get(name, "native")
    blocks, threads = launch_config(dst.size)
    if not dst.size:
        return
    if not isinstance(op, PreMulSum):
        k[f"reduce_{kind}"][blocks, threads, stream](dst, a, b, OPCODES[op])
        return
    import ml_dtypes
    s = avg_scalar(ml_dtypes.bfloat16 if name == "bfloat16" else name, op.n)
    s = np.float32(s) if kind != "native" else s     # 16-bit scalars are exact in float32
    kind = {"float32": "f32", "float64": "f64"}.get(name, kind)
    k[f"reduce_premul_{kind}"][blocks, threads, stream](dst, a, b, s, bool(op.scale_a), bool(op.scale_b))


def postdiv_cuda(x, n: int, dtype: str | None = None, stream=0) -> None:
    """Launch avg's final division on a device array (bfloat16 as uint16 with ``dtype``)."""
    k = cuda_kernels()
    name = dtype or str(x.dtype)
    kind = {"bfloat16": "bf16", "float16": "f16", "float32": "float", "float64": "float"}.get(name, "int")
    if name not in KERNEL_DTYPES:
        raise InvalidArgument(f"postdiv kernel: dtype {name} is not one of {', '.join(KERNEL_DTYPES)}")
    if x.size:
        blocks, threads = launch_config(x.size)
        k[f"postdiv_{kind}"][blocks, threads, stream](x, n)


def quantize_e4m3_cuda(x, chunk: int, stream=0):
    """Device float32 -> (uint8 e4m3fn codes, per-chunk scales), same results as the host twin."""
    from numba import cuda
    k = cuda_kernels()
    nchunks = -(-x.size // chunk) if x.size else 0
    scales = cuda.device_array(nchunks, np.float32, stream=stream)
    q = cuda.device_array(x.size, np.uint8, stream=stream)
    if x.size:
        blocks = min(nchunks, launch_config(x.size)[0] * 4)
        k["e4m3_scales"][blocks, 32, stream](x, chunk, scales)
        blocks, threads = launch_config(x.size)
        k["e4m3_quantize"][blocks, threads, stream](q, x, scales, chunk)
    return q, scales


def dequantize_e4m3_cuda(q, scales, chunk: int, stream=0):
    """Device (uint8 e4m3fn codes, scales) -> float32 device array."""
    from numba import cuda
    k = cuda_kernels()
    out = cuda.device_array(q.size, np.float32, stream=stream)
    if q.size:
        blocks, threads = launch_config(q.size)
        k["e4m3_dequantize"][blocks, threads, stream](out, q, scales, chunk)
    return out
