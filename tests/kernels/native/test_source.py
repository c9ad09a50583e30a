"""kernels.native.source: the interpreter kernel compiles with NVRTC on this machine (no GPU)
for sm_80 and sm_90, for every NCCL dtype and op, and its PTX holds what the design promises:
acquire loads and release stores at GPU scope (system scope across GPUs), a bounded wait
(%globaltimer), and no fused multiply-add anywhere (reductions are separate IEEE ops)."""

import re

import pytest

from kernels.native.source import DTYPE_CODES, OP_CODES, compile_options, compile_ptx
from topo_probe.errors import InvalidArgument

pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC (cuda-bindings, nvidia-cuda-nvrtc) not installed")
_FMA = re.compile(r"\bfma\.")


def _ptx(dtype, op, scope_sys, arch):
    """The PTX of one specialisation, compiled once per distinct NVRTC option set and arch (ops
    with the same TC_OP code, e.g. avg and sum, are one source): tests that read the same
    build share it, every distinct dtype/op/scope/arch build is still compiled."""
    key = (compile_options(dtype, op, scope_sys=scope_sys), arch)
    if key not in _COMPILED:
        _COMPILED[key] = compile_ptx(dtype, op, scope_sys=scope_sys, arch=arch)
    return _COMPILED[key]


#: (NVRTC options, arch) -> PTX, filled by _ptx
_COMPILED: dict[tuple[tuple[str, ...], str], str] = {}


@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
@pytest.mark.parametrize("scope_sys", [False, True])
def test_flags_are_acquire_release_at_the_right_scope(arch, scope_sys):
    ptx = _ptx("float32", "sum", scope_sys, arch)
    scope = "sys" if scope_sys else "gpu"
    assert re.search(rf"ld\.acquire\.{scope}\.global\.(u64|b64)", ptx), "no acquire load of a flag"
    assert re.search(rf"st\.release\.{scope}\.global\.(u64|b64)", ptx), "no release store of a flag"
    other = "gpu" if scope_sys else "sys"
    assert not re.search(rf"(ld\.acquire|st\.release)\.{other}", ptx)
    assert "%globaltimer" in ptx, "waits are not bounded by the timer"
    assert ".entry topocoll_interpreter" in ptx


_SYS_FENCE = re.compile(r"\b(membar\.sys|fence\.sc\.sys)\b")


@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
@pytest.mark.parametrize("dtype,op", [("float32", "sum"), ("bfloat16", "avg")])
def test_system_scope_variant_fences_writes_before_publishing(arch, dtype, op):
    """One process per GPU: the system-scope build fences every thread's writes system-wide before
    a flag is published (one more system fence than the GPU build, whose only one is the timeout
    report), keeps .sys acquire/release, and still has no fma in its reductions."""
    sys_ptx, gpu_ptx = _ptx(dtype, op, True, arch), _ptx(dtype, op, False, arch)
    assert len(_SYS_FENCE.findall(sys_ptx)) > len(_SYS_FENCE.findall(gpu_ptx)) >= 1
    assert re.search(r"ld\.acquire\.sys\.global", sys_ptx) and re.search(r"st\.release\.sys\.global", sys_ptx)
    assert re.search(r"ld\.acquire\.gpu\.global", gpu_ptx) and re.search(r"st\.release\.gpu\.global", gpu_ptx)
    assert not _FMA.search(sys_ptx) and not _FMA.search(gpu_ptx)


def test_scope_follows_devices_and_processes():
    from kernels.native.source import system_scope
    assert not system_scope([3, 3, 3])
    assert system_scope([0, 1, 0])
    assert system_scope([0, 0], process_of=[0, 1])       # two processes sharing one card
    assert not system_scope([0, 0], process_of=[5, 5])


_RECORD_LOOPS = re.compile(r"^\.func\s+(?:\(.*?\)\s*)?(\w*tc_run_(?:record|chain)\w*)\(", re.M)


@pytest.mark.parametrize("dtype", sorted(DTYPE_CODES))
def test_every_dtype_compiles_without_fma(dtype):
    """No fma; 8-bit float builds call their two record loops (a .func each: inlined into the kernel, NVVM took
    twice as long on them), every other type inlines them (no such .func)."""
    for op in ("sum", "max"):
        ptx = _ptx(dtype, op, False, "compute_90")
        assert not _FMA.search(ptx), f"{dtype} {op}: fused multiply-add in the PTX"
        loops = len(set(_RECORD_LOOPS.findall(ptx)))
        assert loops == (2 if dtype.startswith("float8") else 0), (dtype, op, loops)


@pytest.mark.parametrize("op", sorted(OP_CODES))
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32"])
def test_every_op_compiles_without_fma(dtype, op):
    ptx = _ptx(dtype, op, False, "compute_80")
    assert not _FMA.search(ptx)
    if dtype == "float32" and op in ("sum", "avg"):
        assert "add.rn.f32" in ptx and "mul.rn.f32" in ptx     # avg's premultiply, then the sum


def test_the_fma_check_would_see_one():
    """The no-fma check is not vacuous: the same source compiled with contraction allowed and
    a plain a*s+b in the reduction gives fma."""
    from cuda.bindings import nvrtc
    src = b'extern "C" __global__ void k(float* x, float s) { x[0] = x[0] * s + x[1]; }'
    err, prog = nvrtc.nvrtcCreateProgram(src, b"k.cu", 0, [], [])
    nvrtc.nvrtcCompileProgram(prog, 1, [b"--gpu-architecture=compute_80"])
    _, size = nvrtc.nvrtcGetPTXSize(prog)
    ptx = b" " * size
    nvrtc.nvrtcGetPTX(prog, ptx)
    assert _FMA.search(ptx.decode())


def test_bad_dtype_and_op_are_named():
    with pytest.raises(InvalidArgument, match="dtype complex64 is not an NCCL type"):
        compile_options("complex64", "sum", scope_sys=False)
    with pytest.raises(InvalidArgument, match="op must be one of .* got 'xor'"):
        compile_options("float32", "xor", scope_sys=False)


@pytest.mark.parametrize("scope_sys", [False, True])
def test_ll_lines_are_single_16_byte_volatile_accesses(scope_sys):
    """An LL line is stored with one 16-byte volatile store and read with one 16-byte volatile load
    (NCCL's LL: each 8-byte half holds 4 data bytes and their flag), in every build."""
    ptx = _ptx("float32", "sum", scope_sys, "compute_90")
    assert re.search(r"st\.volatile\.global\.v4\.u32", ptx), "no 16-byte volatile LL store"
    assert re.search(r"ld\.volatile\.global\.v4\.u32", ptx), "no 16-byte volatile LL load"
    assert not re.search(r"\.local\b", ptx), "the LL unit's operands spill to local memory"


def test_the_record_format_has_one_source():
    """interpreter.cu defines none of the record format's names (they come from
    kernels/native/record_format.py as -D options), every TC_ name it uses is defined by the build
    options, and without them it refuses to compile."""
    from kernels.native.record_format import defined_names
    from kernels.native.source import TUNING_KEYS, kernel_source
    src = kernel_source()
    for name in defined_names():
        assert not re.search(rf"#\s*define\s+{name}\b", src), f"interpreter.cu defines {name} itself"
    local = set(re.findall(r"#\s*define\s+(TC_\w+)", src))
    options = {re.match(r"-D(TC_\w+)=", o).group(1) for o in compile_options("float32", "sum", scope_sys=False)
               if o.startswith("-DTC_")} | {k[2:] for k in TUNING_KEYS}
    used = set(re.findall(r"\b(TC_[A-Z0-9_]+)\b", src))
    assert used <= local | options, f"TC_ names with no definition: {sorted(used - local - options)}"
    assert defined_names() <= used, f"format names the kernel never reads: {sorted(defined_names() - used)}"
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(src.encode(), b"interpreter.cu", 0, [], [])
    bare = [o.encode() for o in compile_options("float32", "sum", scope_sys=False) if not o.startswith(
        tuple(f"-D{n}=" for n in defined_names()))]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(bare), bare)
    assert err != nvrtc.nvrtcResult.NVRTC_SUCCESS, "interpreter.cu compiled without the record format's options"
