"""kernels.backends.numba_kernels: host twins against independent references, and every CUDA kernel
against its twin, bit for bit.

The kernel tests (``test_sim_*``) need Numba's CUDA target.  Without a GPU they run in a
subprocess with ``NUMBA_ENABLE_CUDASIM=1`` set before Numba is imported
(:func:`test_kernels_in_cuda_simulator`), so this process's Numba is never switched to the
simulator; on a GPU machine :func:`test_kernels_on_real_gpu` runs the same tests for real.
"""

import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from _paths import ROOT
from kernels.backends import kernel_twins as T
from kernels.backends import numba_kernels as K

CHILD = os.environ.get("TOPOCOLL_NUMBA_CHILD") == "1"
child_only = pytest.mark.skipif(not CHILD, reason="runs in the CUDA subprocess (test_kernels_in_cuda_simulator)")


# ============================================================================ host twins
def test_postdiv_twin_truncates_toward_zero_like_c():
    x = np.array([7, -7, 5, -5, 0, -1, 1, 2**40 + 3, -(2**40) - 3], np.int64)
    got = x.copy()
    T.postdiv_host(got, 3)
    assert got.tolist() == [int(math.trunc(v / 3)) if abs(v) < 2**40 else (v // 3 if v > 0 else -((-v) // 3))
                            for v in x.tolist()]
    u = np.array([255, 7, 2], np.uint8)
    T.postdiv_host(u, 2)
    assert u.tolist() == [127, 3, 1]
    f = np.array([1.0, -3.0], np.float16)
    T.postdiv_host(f, 3)
    assert f.tolist() == [float(np.float16(1 / 3)), -1.0]


def test_f16_twin_matches_struct_half_packing():
    x = np.random.default_rng(0).normal(0, 1000, 500).astype(np.float32)
    ref = np.array([struct.unpack("<H", struct.pack("<e", float(v)))[0] if abs(v) < 65520 else 0x7C00 | (
        0x8000 if v < 0 else 0) for v in x], np.uint16)
    assert np.array_equal(T.f32_to_f16_host(x).view(np.uint16), ref)


def test_bf16_twin_rounds_to_nearest_even():
    x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -2.5, 3.0e38, 1e-40], np.float32)
    bits = T.f32_to_bf16_host(x)
    assert bits[:5].tolist() == [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC020]
    assert bits[5] == 0x7F62 and T.bf16_to_f32_host(bits[4:5]).tolist() == [-2.5]
    back = T.bf16_to_f32_host(bits)
    assert np.all(np.abs(back - x) <= np.abs(x) * 2**-8 + 1e-40)


def test_e4m3_twin_codes_scales_and_error_bound():
    x = np.array([448.0, -448.0, 2**-9, 2**-10, 3 * 2**-10, 0.0, -0.0, 1.0, 240.0, 250.0], np.float32)
    q, s = T.quantize_e4m3_host(x, chunk=len(x))
    assert s.tolist() == [1.0]
    assert q.tolist() == [0x7E, 0xFE, 0x01, 0x00, 0x02, 0x00, 0x80, 0x38, 0x77, 0x78]
    rng = np.random.default_rng(1)
    y = (rng.normal(0, 1, 1000) * np.repeat(10.0 ** rng.integers(-3, 4, 10), 100)).astype(np.float32)
    q, s = T.quantize_e4m3_host(y, chunk=100)
    assert np.allclose(s, np.abs(y).reshape(10, 100).max(1) / 448, rtol=1e-7)
    deq = T.dequantize_e4m3_host(q, s, chunk=100)
    full = np.repeat(s, 100)
    # 3 mantissa bits: relative error <= 2^-4 in the normal range, absolute 2^-10 * scale below
    assert np.all(np.abs(deq - y) <= np.maximum(np.abs(y) * 2**-4, full * 2**-10) * (1 + 1e-6))
    assert T.quantize_e4m3_host(np.zeros(5, np.float32), 2)[1].tolist() == [1.0, 1.0, 1.0]


def test_reduce_twin_wraps_integers_like_c():
    d = np.empty(2, np.uint8)
    T.reduce_copy_host(d, np.array([200, 3], np.uint8), np.array([100, 5], np.uint8), "sum")
    assert d.tolist() == [44, 8]
    T.reduce_copy_host(d, np.array([200, 3], np.uint8), np.array([2, 5], np.uint8), "prod")
    assert d.tolist() == [144, 15]


# ============================================================================ CUDA kernels
def _data(dtype, n, rng):
    import ml_dtypes
    if dtype == "bfloat16":
        return rng.uniform(-4, 4, n).astype(ml_dtypes.bfloat16)
    if dtype.startswith("float"):
        return rng.uniform(-4, 4, n).astype(dtype)
    if dtype.startswith("u"):
        return rng.integers(0, 15, n).astype(dtype)
    return rng.integers(-11, 11, n).astype(dtype)


def _bits(a):
    return a.view(np.uint8)


def _reduce_on_device(dtype: str, a, b, op):
    """``reduce_copy_cuda`` of host arrays ``a``, ``b`` (bfloat16 as uint16 views), its result."""
    if dtype == "bfloat16":
        got = np.zeros(a.size, np.uint16)
        K.reduce_copy_cuda(got, a.view(np.uint16), b.view(np.uint16), op, dtype="bfloat16")
    else:
        got = np.zeros_like(a)
        K.reduce_copy_cuda(got, a, b, op)
    return got


@child_only
@pytest.mark.parametrize("dtype", K.KERNEL_DTYPES)
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "avg"])
def test_sim_reduce_copy_matches_twin(dtype, op):
    rng = np.random.default_rng(hash((dtype, op)) % 2**32)
    a, b = _data(dtype, 45, rng), _data(dtype, 45, rng)
    want = np.empty_like(a)
    T.reduce_copy_host(want, a, b, op)
    assert np.array_equal(_bits(_reduce_on_device(dtype, a, b, op)), _bits(want))
    from numba import cuda  # dst may alias the first operand (device arrays)
    raw = (lambda v: v.view(np.uint16)) if dtype == "bfloat16" else (lambda v: v)
    alias, db = cuda.to_device(raw(a)), cuda.to_device(raw(b))
    K.reduce_copy_cuda(alias, alias, db, op, dtype=dtype)
    assert np.array_equal(_bits(alias.copy_to_host()), _bits(raw(want)))


@child_only
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("scale", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("n", [3, 4])
def test_sim_premul_sum_matches_twin(dtype, scale, n):
    """Floating avg's reduce (NCCL's PreMulSum) bit for bit with the NumPy twin, 60000s included."""
    rng = np.random.default_rng(hash((dtype, scale, n)) % 2**32)
    a, b = _data(dtype, 45, rng), _data(dtype, 45, rng)
    if dtype == "float16":
        a[:5], b[:5] = 60000, 60000
    op = T.PreMulSum(n, *scale)
    want = np.empty_like(a)
    T.reduce_copy_host(want, a, b, op)
    assert np.array_equal(_bits(_reduce_on_device(dtype, a, b, op)), _bits(want))
    assert scale != (True, True) or np.isfinite(want.astype(np.float64)).all()  # two 60000 inputs of n: fine


@child_only
@pytest.mark.parametrize("dtype", K.KERNEL_DTYPES)
def test_sim_postdiv_matches_twin(dtype):
    x = _data(dtype, 40, np.random.default_rng(7)) * (3 if dtype not in ("uint8",) else 1)
    want = x.copy()
    T.postdiv_host(want, 3)
    got = x.copy()
    K.postdiv_cuda(got.view(np.uint16) if dtype == "bfloat16" else got, 3, dtype=dtype)
    assert np.array_equal(_bits(got), _bits(want))


EDGES = np.array([0.0, -0.0, 1e-30, -1e-40, 3.4e38, -3.4e38, 65504, 65520, 1e-8, 1 + 2**-8, 1 + 3 * 2**-8],
                 np.float32)


@child_only
def test_sim_casts_match_twins():
    k = K.cuda_kernels()
    x = np.concatenate([np.random.default_rng(3).normal(0, 30, 150).astype(np.float32), EDGES])
    blocks, threads = K.launch_config(x.size)
    out16 = np.zeros(x.size, np.float16)
    k["cast_f32_f16"][blocks, threads](out16, x)
    assert np.array_equal(out16.view(np.uint16), T.f32_to_f16_host(x).view(np.uint16))
    bf = np.zeros(x.size, np.uint16)
    k["cast_f32_bf16"][blocks, threads](bf, x.view(np.uint32))
    assert np.array_equal(bf, T.f32_to_bf16_host(x))
    back = np.zeros(x.size, np.float32)
    k["cast_bf16_f32"][blocks, threads](back, bf)
    assert np.array_equal(back.view(np.uint32), T.bf16_to_f32_host(bf).view(np.uint32))


def _host(a):
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


@child_only
@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_sim_e4m3_quantize_dequantize_match_twins(chunk):
    x = np.concatenate([np.random.default_rng(chunk).normal(0, 5, 180).astype(np.float32), EDGES])
    q, s = K.quantize_e4m3_cuda(x, chunk)
    qh, sh = T.quantize_e4m3_host(x, chunk)
    assert np.array_equal(_host(s), sh) and np.array_equal(_host(q), qh)
    d = _host(K.dequantize_e4m3_cuda(qh, sh, chunk))
    assert np.array_equal(d.view(np.uint32), T.dequantize_e4m3_host(qh, sh, chunk).view(np.uint32))


@child_only
def test_sim_e4m3_every_code_decodes_like_ml_dtypes():
    codes = np.arange(256, dtype=np.uint8)
    d = _host(K.dequantize_e4m3_cuda(codes, np.ones(1, np.float32), 256))
    ref = T.dequantize_e4m3_host(codes, np.ones(1, np.float32), 256)
    assert np.array_equal(np.isnan(d), np.isnan(ref)) and np.array_equal(d[~np.isnan(d)], ref[~np.isnan(ref)])


PTX_SIGNATURES = {
    "reduce_native": ["float32", "float64", "int8", "uint8", "int32", "int64"], "reduce_f16": ["float16"],
    "reduce_bf16": ["uint16"], "postdiv_int": ["int8", "uint8", "int32", "int64"],
    "postdiv_float": ["float32", "float64"], "postdiv_f16": ["float16"], "postdiv_bf16": ["uint16"],
}


@pytest.mark.skipif(CHILD, reason="runs in the parent process")
def test_kernels_compile_to_ptx_when_nvvm_is_installed(monkeypatch):
    """Real compilation (no GPU needed) catches what the simulator cannot: unsupported
    functions or types in the CUDA target.  Needs NVVM (CUDA toolkit or nvidia-cuda-nvcc)."""
    import types

    import numba.cuda.dispatcher as disp
    from numba import cuda
    from numba import types as T
    from numba.cuda.cudadrv.error import NvvmError, NvvmSupportError
    try:
        cuda.compile_ptx(lambda x: None, (T.int64,), device=True, cc=(8, 0))
    except (NvvmSupportError, NvvmError, OSError) as exc:
        pytest.skip(f"NVVM not available ({type(exc).__name__}); kernels are checked in the simulator")
    # this numba compiles device functions for "the current device"; give it one without a driver
    monkeypatch.setattr(disp, "get_current_device", lambda: types.SimpleNamespace(compute_capability=(8, 0)))
    k = K.cuda_kernels()
    A = lambda name: T.Array(getattr(T, name), 1, "C")  # noqa: E731
    sigs = [(name, (A(d), A(d), A(d), T.int64) if name.startswith("reduce") else (A(d), T.int64))
            for name, dts in PTX_SIGNATURES.items() for d in dts]
    sigs += [(f"reduce_premul_{kind}", (A(d), A(d), A(d), s, T.boolean, T.boolean))
             for kind, d, s in (("f32", "float32", T.float32), ("f64", "float64", T.float64),
                                ("f16", "float16", T.float32), ("bf16", "uint16", T.float32))]
    sigs += [("cast_f32_f16", (A("float16"), A("float32"))), ("cast_f32_bf16", (A("uint16"), A("uint32"))),
             ("cast_bf16_f32", (A("float32"), A("uint16"))), ("e4m3_scales", (A("float32"), T.int64, A("float32"))),
             ("e4m3_quantize", (A("uint8"), A("float32"), A("float32"), T.int64)),
             ("e4m3_dequantize", (A("float32"), A("uint8"), A("float32"), T.int64))]
    for name, sig in sigs:
        ptx, _ = cuda.compile_ptx(k[name].py_func, sig, cc=(8, 0))
        assert ".entry" in ptx, name
        # the twins round every product: no fused multiply-add in the arithmetic kernels (on an
        # H200, avg's a * (1/3) + b became one fma and missed the twin by one ulp)
        if name.startswith(("reduce", "postdiv")):
            assert "fma." not in ptx, name


# ============================================================================ drivers
def _run_child(simulator: bool) -> subprocess.CompletedProcess:
    env = dict(os.environ, TOPOCOLL_NUMBA_CHILD="1", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get(
        "PYTHONPATH", ""))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    cmd = [sys.executable, "-m", "pytest", str(Path(__file__)), "-q", "-p", "no:cacheprovider", "-k", "sim_",
           "-o", "addopts=", "-W", "ignore::RuntimeWarning"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _failure_report(res: subprocess.CompletedProcess) -> str:
    """The child's first failure in full (where the cause is) and its summary (which failed)."""
    out = res.stdout
    first = out.find("\n____")
    head = out[first:first + 6000] if first >= 0 else ""
    return head + "\n[...]\n" + out[-3000:] + res.stderr[-2000:]


@pytest.mark.skipif(CHILD, reason="this is the driver, not a kernel test")
def test_kernels_in_cuda_simulator():
    res = _run_child(simulator=True)
    assert res.returncode == 0, _failure_report(res)
    assert "78 passed" in res.stdout, res.stdout[-2000:]


@pytest.mark.gpu
@pytest.mark.skipif(CHILD, reason="this is the driver, not a kernel test")
def test_kernels_on_real_gpu():
    if not (Path("/dev/nvidiactl").exists() or Path("/dev/dxg").exists()):
        pytest.skip("no NVIDIA GPU device node: the kernels are checked in the simulator instead")
    res = _run_child(simulator=False)
    assert res.returncode == 0, _failure_report(res)
