"""kernels/native/interpreter.cu's float8 element ops, run on the CPU: the part of the .cu up to
``tc_premul`` is compiled with g++ (the two PTX half conversions replaced by ``_Float16`` casts,
``-DTOPOCOLL_CPU_TEST``) and every 256 x 256 pair of bit patterns is compared with the brute-force NCCL
reference (tests/_f8_reference.py).  The same build checks max / min of float16, bfloat16, float32 and
float64 against NCCL's fmaxf / __hmax rules (tests/_minmax_reference.py).  What this cannot see: the
PTX ``cvt`` instructions themselves and the vector loops around ``tc_bin``; ``test_native_gpu.py`` covers
those on a GPU.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from _f8_reference import decode, narrow, table
from _minmax_reference import check_minmax, special_pairs

CU = Path(__file__).resolve().parents[3] / "kernels" / "native" / "interpreter.cu"
DTYPES = {"float8_e4m3fn": 10, "float8_e5m2": 11}          # kernels/native/source.py DTYPE_CODES
OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3}            # interpreter.cu TC_OP

HARNESS = r"""
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#define __device__
#define __forceinline__ inline
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline long long __double_as_longlong(double d) { long long u; std::memcpy(&u, &d, 8); return u; }
static inline double __longlong_as_double(long long u) { double d; std::memcpy(&d, &u, 8); return d; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline float tc_half_to_float(unsigned short h) { _Float16 x; std::memcpy(&x, &h, 2); return (float)x; }
static inline unsigned short tc_float_to_half(float f) {
    _Float16 x = (_Float16)f; unsigned short h; std::memcpy(&h, &x, 2); return h;
}
%s
#ifdef MINMAX
int main() {        // pairs of T on stdin -> tc_bin of each pair on stdout
    T ab[2];
    while (std::fread(ab, sizeof(T), 2, stdin) == 2) {
        T r = tc_bin(ab[0], ab[1]);
        std::fwrite(&r, sizeof r, 1, stdout);
    }
    return 0;
}
#else
int main(int argc, char **argv) {
    double s = std::atof(argv[1]);
    static unsigned char out[65536 + 256];
    for (int a = 0; a < 256; ++a) {
        for (int b = 0; b < 256; ++b) out[a * 256 + b] = tc_bin((T)a, (T)b);
        out[65536 + a] = tc_premul((T)a, s);
    }
    std::fwrite(out, 1, sizeof out, stdout);
    return 0;
}
#endif
"""


def _element_ops_source() -> str:
    src = CU.read_text()
    end = src.index("// avg's final division")
    assert "tc_premul" in src[:end] and "tc_to_f8" in src[:end], "interpreter.cu's layout changed"
    return src[:end]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """(dtype, op) -> path of the compiled element-op harness."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("no g++ on this machine: interpreter.cu's float8 ops are checked on a GPU only")
    d = tmp_path_factory.mktemp("f8")
    (d / "harness.cpp").write_text(HARNESS % _element_ops_source())
    out = {"dir": d / "harness.cpp"}
    for name, code in DTYPES.items():
        for op, k in OPS.items():
            exe = d / f"h_{code}_{k}"
            subprocess.run([gxx, "-std=c++17", "-O1", "-ffp-contract=off", "-DTOPOCOLL_CPU_TEST", f"-DTC_DT={code}",
                            f"-DTC_OP={k}", "-o", str(exe), str(d / "harness.cpp")], check=True)
            out[(name, op)] = exe
    return out


@pytest.mark.parametrize("name", list(DTYPES))
@pytest.mark.parametrize("op", list(OPS))
def test_interpreter_float8_ops_match_the_brute_force_nccl_reference(compiled, name, op):
    s_code = narrow(name, float(np.float32(1.0 / 3)))        # NCCL's 1/n for n = 3, narrowed from float32
    got = np.frombuffer(subprocess.run([str(compiled[(name, op)]), repr(decode(name, s_code))],
                                       check=True, capture_output=True).stdout, np.uint8)
    want = table(name, op).reshape(-1)
    bad = np.flatnonzero(got[:65536] != want)
    assert bad.size == 0, (f"{name} {op}: {bad.size} pairs differ, first a=0x{bad[0] // 256:02x} "
                           f"b=0x{bad[0] % 256:02x}: got 0x{got[bad[0]]:02x}, want 0x{want[bad[0]]:02x}")
    premul = table(name, "prod")[:, s_code]
    assert np.array_equal(got[65536:], premul), f"{name}: tc_premul differs from fp8(half(x) * half(1/3))"


MINMAX_DTYPES = {"float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}   # kernels/native/source.py DTYPE_CODES


@pytest.mark.parametrize("name", list(MINMAX_DTYPES))
@pytest.mark.parametrize("op", ["max", "min"])
def test_interpreter_max_min_drop_nan_like_nccl(compiled, tmp_path, name, op):
    """The one rule, bits included (tests/_minmax_reference.py): NaN against a number gives the number,
    +0 above -0 for every type, both NaN the one NaN of all payload bits.  Every pair of special values
    (NaNs with payloads and signs among them) and 4096 pairs of random bit patterns."""
    import ml_dtypes
    dt = np.dtype(getattr(ml_dtypes, name, None) or name)
    exe = tmp_path / "h"
    subprocess.run([shutil.which("g++"), "-std=c++17", "-O1", "-ffp-contract=off", "-DTOPOCOLL_CPU_TEST", "-DMINMAX",
                    f"-DTC_DT={MINMAX_DTYPES[name]}", f"-DTC_OP={OPS[op]}", "-o", str(exe), str(compiled["dir"])],
                   check=True)
    a, b = special_pairs(dt)
    bits = np.random.default_rng(7).integers(0, 256, (2, 4096 * dt.itemsize), dtype=np.uint8)
    a, b = np.concatenate([a, bits[0].view(dt)]), np.concatenate([b, bits[1].view(dt)])
    pairs = np.stack([a, b], axis=1).tobytes()
    got = np.frombuffer(subprocess.run([str(exe)], input=pairs, check=True, capture_output=True).stdout, dt)
    assert got.size == a.size
    assert check_minmax(got, a, b, op, f"interpreter.cu {name}") > a.size * 0.9
