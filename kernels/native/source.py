"""The interpreter kernel's CUDA source (``interpreter.cu``, shipped in the package) and how it is
specialised: one build per (element type, reduction op, flag scope).

``compile_options`` gives the ``-D`` flags; :func:`compile_ptx` compiles the source with NVRTC
alone (``cuda.bindings.nvrtc``, which needs no GPU and no driver) so tests can read the PTX
on a machine without a GPU; the launcher builds the same source through CuPy's
``RawModule`` (NVRTC too, cached on disk by CuPy).

>>> opts = compile_options("float16", "sum", scope_sys=False)
>>> [o for o in opts if o.startswith("-DTC_")][:4]
['-DTC_DT=6', '-DTC_OP=0', '-DTC_SCOPE_SYS=0', '-DTC_THREADS=512']
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import numpy as np

from kernels.native.record_format import cuda_defines
from kernels.program.reduce_op import check_reduce_op
from topo_probe.errors import DeviceUnavailable, InvalidArgument

KERNEL_NAME = "topocoll_interpreter"
THREADS = 512
#: numpy dtype name -> TC_DT code of interpreter.cu
DTYPE_CODES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5, "float16": 6,
               "float32": 7, "float64": 8, "bfloat16": 9, "float8_e4m3fn": 10, "float8_e5m2": 11}
#: reduction op -> TC_OP code (avg sums; the records say where contributions are scaled)
OP_CODES = {"sum": 0, "avg": 0, "prod": 1, "max": 2, "min": 3}


@lru_cache(maxsize=1)
def kernel_source() -> str:
    """The text of ``interpreter.cu``."""
    return resources.files("kernels.native").joinpath("interpreter.cu").read_text()


def dtype_name(dtype) -> str:
    """NumPy's name of ``dtype`` (ml_dtypes' bfloat16 / float8 names accepted as strings)."""
    if isinstance(dtype, str) and dtype in DTYPE_CODES:
        return dtype
    return np.dtype(dtype).name


def compile_options(dtype, op: str, *, scope_sys: bool) -> tuple[str, ...]:
    """NVRTC options for one specialisation (no ``--gpu-architecture``; callers add it)."""
    name = dtype_name(dtype)
    if name not in DTYPE_CODES:
        raise InvalidArgument(f"native executor: dtype {name} is not an NCCL type "
                              f"(one of {', '.join(DTYPE_CODES)})")
    check_reduce_op(op, "native executor")
    # -fmad=false: no multiply-add contraction anywhere (reductions use explicit _rn intrinsics too)
    return ("--std=c++17", "-fmad=false", f"-DTC_DT={DTYPE_CODES[name]}", f"-DTC_OP={OP_CODES[op]}",
            f"-DTC_SCOPE_SYS={int(bool(scope_sys))}", f"-DTC_THREADS={THREADS}") + cuda_defines() + tuning_defines()


#: environment variable with extra ``-DTC_...=value`` options of the copy loop, for tuning runs
#: (``benchmarks/native_channels_diag.py --variants``): ``TC_COPY_UNROLL`` (16-byte vectors each
#: thread has in flight, default 4) and ``TC_CS`` (1: streaming cache hints on copies)
TUNING_ENV = "TOPOCOLL_NATIVE_DEFINES"
#: the tuning options it may name (``TC_LL_INLINE``: 1 inlines the LL unit into the kernel)
TUNING_KEYS = ("-DTC_COPY_UNROLL", "-DTC_CS", "-DTC_LL_INLINE")


def tuning_defines() -> tuple[str, ...]:
    """The :data:`TUNING_KEYS` options named in :data:`TUNING_ENV` (others refused)."""
    import os
    opts = tuple(os.environ.get(TUNING_ENV, "").split())
    for o in opts:
        key, _, val = o.partition("=")
        if key not in TUNING_KEYS or not val.isdigit():
            raise InvalidArgument(f"{TUNING_ENV}: {o!r} is not -DTC_COPY_UNROLL=<n>, -DTC_CS=<0|1> or "
                                  f"-DTC_LL_INLINE=<0|1>")
    return opts


def system_scope(device_of, process_of=None) -> bool:
    """Whether a program's flags need system scope (``TC_SCOPE_SYS=1``): its ranks live on more
    than one GPU (``device_of``: rank -> GPU) or in more than one process (``process_of``: rank
    -> process, e.g. MPI ranks); GPU scope only for ranks of one process on one GPU.

    >>> system_scope([0, 0]), system_scope([0, 1]), system_scope([0, 0], process_of=[0, 1])
    (False, True, True)
    """
    return len(set(device_of)) > 1 or (process_of is not None and len(set(process_of)) > 1)


def compile_ptx(dtype, op: str, *, scope_sys: bool = False, arch: str = "compute_90") -> str:
    """PTX of one specialisation, compiled by NVRTC on this machine (no GPU needed).

    Raises DeviceUnavailable when ``cuda.bindings`` / NVRTC is not installed, InvalidArgument
    with NVRTC's log when the source does not compile."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise DeviceUnavailable(f"NVRTC is not installed (pip install cuda-bindings nvidia-cuda-nvrtc): {exc}") from None
    src = kernel_source().encode()
    err, prog = nvrtc.nvrtcCreateProgram(src, b"interpreter.cu", 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    opts = [o.encode() for o in compile_options(dtype, op, scope_sys=scope_sys)] + [f"--gpu-architecture={arch}".encode()]
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise InvalidArgument(f"interpreter.cu ({dtype_name(dtype)}, {op}) does not compile for {arch}: "
                                  f"{log.decode(errors='replace').strip()}")
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        _check(nvrtc, err, "nvrtcGetPTXSize")
        ptx = b" " * size
        (err,) = nvrtc.nvrtcGetPTX(prog, ptx)
        _check(nvrtc, err, "nvrtcGetPTX")
        return ptx.rstrip(b"\x00").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _check(nvrtc, err, what: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise DeviceUnavailable(f"NVRTC {what} failed: {err}")


__all__ = ["kernel_source", "dtype_name", "compile_options", "compile_ptx", "system_scope", "KERNEL_NAME", "THREADS",
           "DTYPE_CODES", "OP_CODES"]
