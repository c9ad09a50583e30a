"""Host n-way reduction kernels: ``dst = ((src0 op src1) op src2) ...`` fused in one pass.

Numba ``@njit`` kernels (:mod:`kernels.backends._host_reduce_jit`, compiled on first use and
cached on disk, so importing this module does not import Numba).  The sources are read once
and ``dst`` written once, block by block (8192 elements): each block is reduced in a small
accumulator that stays in cache, so an n-way reduce moves ``(n + 1) * size`` bytes instead of
the ``3 * (n - 1) * size`` of a chain of binary reduce-copies.  Two drivers share the block
code: :func:`reduce_nway` with ``parallel=True`` spreads the blocks over Numba's threads,
``parallel=False`` runs them in the calling thread without the GIL (the host backend, which
has its own thread pool), ``"auto"`` (the staged GPU path's host reduce) picks by size.
Numba's default thread layer must not be entered from two threads at once, so parallel calls
are serialised by a lock.

Results are bit-identical to the chained NumPy twins (:func:`kernels.backends.kernel_twins.reduce_copy_host`),
NaN payloads and signs aside (IEEE leaves them open; NaN stays NaN):

* every binary op is rounded in the element type, in source order; float16 and bfloat16 are
  computed in float32 and rounded to nearest even after *each* op (NumPy's float16 and
  ml_dtypes' bfloat16 do the same); no fused multiply-add (``fastmath`` is off);
* integers wrap like C / NCCL;
* floating ``avg`` is NCCL's PreMulSum: a source still one rank's raw contribution is first
  multiplied by ``1/n`` (:func:`~kernels.backends.kernel_twins.avg_scalar`) in the type,
  the product rounded, then summed; integer avg sums here and divides later (SumPostDiv);
* floating max / min follow :func:`kernels.backends.kernel_twins.float_minmax` bit for bit: a NaN
  operand dropped as NCCL does (v2.28.9-1 src/device/reduce_kernel.h:397-436), +0 above -0, a NaN
  of both operands the one NaN of ``kernel_twins.NAN_BITS`` (written after the kernel).

:func:`fuse_reduce_chains` finds the reduce chains of a lowered program (a rank reducing
several sources into one chunk in one step) that the host backend and the staged GPU path
run through these kernels.

Types: int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32, float64.  The
float8 types are not supported here (:func:`supports` says so; callers keep the NumPy twins, which
reduce float8 as NCCL does: in half, saturating; see :func:`kernels.backends.kernel_twins.f8_binop`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from kernels.backends.kernel_twins import FLOAT_TYPES, NAN_BITS, PreMulSum, avg_scalar
from kernels.program.ops import Op, Region
from kernels.program.reduce_op import check_reduce_op
from topo_probe.errors import InvalidArgument

OPCODES = {"sum": 0, "avg": 0, "prod": 1, "max": 2, "min": 3}
NATIVE = frozenset({"int8", "uint8", "int32", "uint32", "int64", "uint64", "float32", "float64"})
HALF = frozenset({"float16", "bfloat16"})
_PARALLEL_LOCK = threading.Lock()
#: ``parallel="auto"`` uses Numba's threads from this much traffic (bytes read + written) on:
#: waking the threads costs tens of microseconds, and much more on a busy machine
PARALLEL_MIN_BYTES = 32 << 20


def supports(dtype) -> bool:
    """Whether the fused kernels handle ``dtype`` (everything but the float8 types)."""
    return np.dtype(dtype).name in NATIVE | HALF


def chain_args(binops, dtype) -> tuple[str, tuple[bool, ...], object]:
    """(op name, per-source scale flags, scalar) of a chain of binary reduce ops.

    ``binops[k]`` combines the running value with source ``k + 1`` (an op name or a
    :class:`PreMulSum`); only the first op may scale its accumulator operand.

    >>> chain_args([PreMulSum(4, True, True), PreMulSum(4, False, True)], np.float32)
    ('sum', (True, True, True), np.float32(0.25))
    >>> chain_args(["max", "max"], np.int32)
    ('max', (False, False, False), np.int32(0))
    """
    names, flags, n = [], [], None
    for k, b in enumerate(binops):
        if isinstance(b, PreMulSum):
            if k > 0 and b.scale_a:
                raise InvalidArgument("host n-way reduce: only the first op of a chain may scale its accumulator")
            names.append("sum")
            flags.extend([b.scale_a, b.scale_b] if k == 0 else [b.scale_b])
            n = b.n
        else:
            names.append(b)
            flags.extend([False, False] if k == 0 else [False])
    if len(set(names)) != 1 or names[0] not in OPCODES:
        raise InvalidArgument(f"host n-way reduce: a chain needs one op out of sum, prod, max, min; got {names}")
    dt = np.dtype(dtype)
    s = avg_scalar(dt, n) if n is not None else dt.type(0)
    return names[0], tuple(flags), s


@lru_cache(maxsize=None)
def _decode_table(name: str) -> np.ndarray:
    """float32 value of every 16-bit pattern of float16 / bfloat16 (exact)."""
    bits = np.arange(1 << 16, dtype=np.uint32)
    if name == "bfloat16":
        return (bits << 16).view(np.float32)
    return bits.astype(np.uint16).view(np.float16).astype(np.float32)


@lru_cache(maxsize=1)
def _kernels():
    """The compiled drivers (Numba imported here, on first use)."""
    from kernels.backends import _host_reduce_jit as J
    return J


def reduce_nway(dst: np.ndarray, srcs, op="sum", scale=None, s=None, *, parallel="auto") -> None:
    """``dst[:] = ((srcs[0] op srcs[1]) op srcs[2]) ...`` in one pass (see module docstring).

    ``op`` is sum/prod/max/min (avg: sum); ``scale[k]`` says whether source ``k`` is
    multiplied by ``s`` (PreMulSum's 1/n, see :func:`chain_args`) before it is combined.
    ``dst`` may be one of the sources (the same elements).  Every array: 1-D, contiguous,
    one dtype and one length.  ``parallel``: True spreads blocks over Numba's threads, False
    runs in the calling thread, ``"auto"`` is True from :data:`PARALLEL_MIN_BYTES` of traffic on.
    More than 16 sources run as rounds of up to 16 (the running value is the next round's first).
    """
    srcs = list(srcs)
    dt = np.dtype(dst.dtype)
    flags = _check(dst, srcs, op, scale, dt)
    if dst.size == 0:
        return
    if parallel == "auto":
        parallel = (len(srcs) + 1) * dst.nbytes >= PARALLEL_MIN_BYTES
    J = _kernels()
    half = dt.name in HALF
    sv = np.float32(0.0 if s is None else float(s)) if half else dt.type(0 if s is None else s)
    start = 0
    while start < len(srcs):
        take = J.MAX_SOURCES if start == 0 else J.MAX_SOURCES - 1
        part, fl = srcs[start:start + take], flags[start:start + take]
        if start:
            part, fl = [dst] + part, np.concatenate([np.zeros(1, np.bool_), fl])
        start += take
        fl = np.concatenate([fl, np.zeros(J.MAX_SOURCES - fl.size, np.bool_)])
        if half:
            args = (dst.view(np.uint16), J.as_tuple([a.view(np.uint16) for a in part]), len(part), OPCODES[op],
                    fl, sv, _decode_table(dt.name), dt.name == "bfloat16", True)
            run = J.half_parallel if parallel else J.half_serial
        else:
            args = (dst, J.as_tuple(part), len(part), OPCODES[op], fl, sv)
            run = J.native_parallel if parallel else J.native_serial
        if parallel:
            with _PARALLEL_LOCK:
                run(*args)
        else:
            run(*args)
    if op in ("max", "min") and dt.name in FLOAT_TYPES:      # a NaN of both operands: the one NaN
        dst.view(f"u{dt.itemsize}")[np.isnan(dst)] = NAN_BITS[dt.itemsize]


def _check(dst, srcs, op, scale, dt) -> np.ndarray:
    """The scale flags as an array, after checking the arguments (one-line errors)."""
    if not srcs:
        raise InvalidArgument("host n-way reduce: needs at least one source")
    if not supports(dt):
        raise InvalidArgument(f"host n-way reduce: dtype {dt.name} is not supported "
                              f"(supported: {', '.join(sorted(NATIVE | HALF))})")
    for a in [dst, *srcs]:
        if a.dtype != dt or a.ndim != 1 or a.size != dst.size or not a.flags.c_contiguous:
            raise InvalidArgument(f"host n-way reduce: arrays must be 1-D contiguous {dt.name} of {dst.size} "
                                  f"elements; got {a.dtype} shape {a.shape}")
    if not dst.flags.writeable:
        raise InvalidArgument("host n-way reduce: the destination is read-only")
    check_reduce_op(op, "host n-way reduce")
    flags = np.zeros(len(srcs), np.bool_) if scale is None else np.asarray(scale, np.bool_).reshape(-1)
    if flags.shape != (len(srcs),):
        raise InvalidArgument(f"host n-way reduce: {len(srcs)} sources but {flags.size} scale flags")
    if flags.any() and dt.name not in ("float16", "bfloat16", "float32", "float64"):
        raise InvalidArgument(f"host n-way reduce: only floating types are pre-scaled (avg), got {dt.name}")
    return flags


_WARM: set = set()


def warm(dtype) -> None:
    """Compile (or load from Numba's cache) both drivers for ``dtype`` now: the staged GPU path
    calls this before issuing, so a host reduce never compiles inside a CUDA host function."""
    dt = np.dtype(dtype)
    if dt in _WARM or not supports(dt):
        return
    x = np.zeros(1, dt)
    reduce_nway(x, [x, x], parallel=False)
    reduce_nway(x, [x, x], parallel=True)
    _WARM.add(dt)


def reduce_chain(dst: np.ndarray, srcs, binops, *, parallel="auto") -> None:
    """A reduce chain in one pass: ``binops[k]`` (op name or :class:`PreMulSum`) combines the
    running value with ``srcs[k + 1]``; the same result as applying the twins in order."""
    op, flags, s = chain_args(binops, dst.dtype)
    reduce_nway(dst, srcs, op, flags, s, parallel=parallel)


# ====================================================================== reduce chains of a program
@dataclass(frozen=True)
class FusedReduce:
    """A reduce chain run as one n-way reduce: ``ops[0]`` is ``d <- a op s1``, every later op
    ``d <- d op s_k`` (see :func:`fuse_reduce_chains`)."""

    ops: tuple[Op, ...]
    #: pieces shorter than this run op by op with the NumPy twins
    min_elems: int = 0

    @property
    def dst(self) -> Region:
        return self.ops[0].dst


def _overlap(a: Region, b: Region) -> bool:
    return a.rank == b.rank and a.buf == b.buf and a.start < b.stop and b.start < a.stop


def _extends(run: list[Op], o: Op) -> bool:
    d = run[0].dst
    return (o.kind == "reduce" and o.dst == d and o.acc == d and not o.premul[0]
            and not any(_overlap(x, d) for x in [o.src] + [p.src for p in run]))


def copy_head_merges(copy: tuple, reduce: tuple, overlap) -> bool:
    """Whether ``copy`` (dst, src), followed at once by ``reduce`` (dst, acc, src), may run as one
    reduce ``dst <- copy's src op reduce's src``: the reduce accumulates in place into the copy's
    destination, and neither source overlaps that destination (else the copy's write changes what
    the reduce reads, or the one pass reads what it writes).  ``overlap(a, b)`` says whether two
    regions share an element: the rule :func:`merge_copy_heads` and
    :func:`kernels.pytorch.fused._merge_copy_heads` share over their own region shapes."""
    (copy_dst, copy_src), (dst, acc, src) = copy, reduce
    return acc == dst == copy_dst and not overlap(copy_src, copy_dst) and not overlap(src, dst)


def merge_copy_heads(ops) -> list:
    """``ops`` with each copy followed at once by a reduce into the copy's destination (``d <- s``
    then ``d <- d op t``: how the lowering starts a rank-order sum with two peers,
    :mod:`synth.ir.sum_order`) as that one reduce reading ``s`` as its accumulator
    (:func:`copy_head_merges`): the same values and roundings in one pass instead of two.  The
    merged op keeps the reduce's ``deps``: the host executor orders and chains ops by their deps
    before it merges (``HostLayer._order``, ``_execute_steps``), never after."""
    out: list = []
    for o in ops:
        prev = out[-1] if out else None
        if (isinstance(prev, Op) and prev.kind == "copy" and isinstance(o, Op) and o.kind == "reduce"
                and copy_head_merges((prev.dst, prev.src), (o.dst, o.acc, o.src), _overlap)):
            out[-1] = replace(o, acc=prev.src)
            continue
        out.append(o)
    return out


def fuse_reduce_chains(ops, min_elems: int = 0) -> list:
    """``ops`` with each run of consecutive reduce ops into one region (the first may read its
    accumulator elsewhere, no source overlaps the destination) as one :class:`FusedReduce`."""
    out, i = [], 0
    while i < len(ops):
        j = i + 1
        first = ops[i]
        if first.kind == "reduce" and (first.acc == first.dst or not _overlap(first.acc, first.dst)):
            while j < len(ops) and _extends(ops[i:j], ops[j]):
                j += 1
        out.append(first if j == i + 1 else FusedReduce(tuple(ops[i:j]), min_elems))
        i = j
    return out


__all__ = ["reduce_nway", "reduce_chain", "warm", "fuse_reduce_chains", "merge_copy_heads", "copy_head_merges", "FusedReduce", "chain_args",
           "supports", "PARALLEL_MIN_BYTES"]
