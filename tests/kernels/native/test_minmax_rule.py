"""Floating max / min give the same bits on every CPU-runnable executor, and those bits are the one
documented rule (docs/guarantees.md, *max and min*): NaN dropped as NCCL's ``fmaxf`` / ``__hmax``, +0 above
-0, a NaN of all operands the positive NaN with every payload bit set.  Each path is compared with the
plain-Python reference of tests/_minmax_reference.py folded over the ranks (the rule picks the same
operand in any order, so one fold serves every schedule), bit for bit, on arrays drawn full of NaNs
(quiet, with payloads, negative, signalling), signed zeros and infinities.
"""

from __future__ import annotations

import contextlib
import types

import ml_dtypes
import numpy as np
import torch
from _fake_cupy import DevArray, FakeCupy
from _minmax_reference import minmax_bits
from _schedules import alloc_buffers, direct, persistent_run, ring
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernels.native.launcher as launcher
from kernels.backends.cupy_runtime import CupyRuntime
from kernels.backends.device import RankBuffers
from kernels.backends.executor import program_for, run_schedule
from kernels.backends.host import HostLayer
from kernels.backends.host_reduce import reduce_nway
from kernels.backends.kernel_twins import reduce_copy_with
from kernels.backends.reference import run_reference
from kernels.pytorch.schedule_share import combine

DTYPES = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16),
          "float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}
_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}
_MANT = {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52}


def _specials(name: str) -> list[int]:
    """Bit patterns of +-0, +-inf, +-1, quiet NaNs of both signs with payloads, a signalling NaN."""
    dt, m = DTYPES[name], _MANT[name]
    top, exp = 1 << (dt.itemsize * 8 - 1), ((1 << (dt.itemsize * 8 - 1)) - 1) ^ ((1 << m) - 1)
    one = int(np.array([1.0], dt).view(_UINT[dt.itemsize])[0])
    quiet = exp | (1 << (m - 1))
    return [0, top, exp, top | exp, one, top | one, quiet, top | quiet, quiet | 1, top | quiet | 5, exp | 1, exp | 3]


@st.composite
def rank_inputs(draw):
    """(dtype name, op, ranks, per-rank arrays) with every element a special value or random bits."""
    name = draw(st.sampled_from(list(DTYPES)))
    dt, u = DTYPES[name], _UINT[DTYPES[name].itemsize]
    n, count = draw(st.integers(2, 4)), draw(st.integers(1, 24))
    elem = st.one_of(st.sampled_from(_specials(name)), st.integers(0, 2 ** (8 * dt.itemsize) - 1))
    xs = [np.array(draw(st.lists(elem, min_size=count, max_size=count)), u).view(dt) for _ in range(n)]
    return name, draw(st.sampled_from(["max", "min"])), n, xs


def _want(xs, op):
    acc = xs[0]
    for x in xs[1:]:
        acc = minmax_bits(acc, x, op).view(acc.dtype)
    return acc.view(_UINT[acc.dtype.itemsize])


def _bits(a):
    return np.ascontiguousarray(a).view(_UINT[a.dtype.itemsize])


def _bound(sched, sends, recvs, op):
    """``HostLayer().bound``: the host backend's path for a repeated small call."""
    n, count = sched.ranks, recvs[0].size
    prog = program_for(sched, count, sends[0].dtype, op=op)
    user = [{"send": s, "recv": r} for s, r in zip(sends, recvs)]
    bufs = RankBuffers([{k: user[r][w] for k, w in prog.bindings[r].items()} for r in range(n)])
    for d, sizes in zip(bufs.bufs, prog.sizes):
        if "scratch" in sizes:
            d["scratch"] = np.zeros(sizes["scratch"], sends[0].dtype)
    HostLayer(threads=1).bound(prog, bufs)()


@contextlib.contextmanager
def _fake_launcher(seed: int):
    cp = FakeCupy(seed=seed)
    launcher._cupy, saved = (lambda: cp), launcher._cupy
    launcher._KERNELS.clear()
    try:
        yield
    finally:
        launcher._cupy = saved
        launcher._KERNELS.clear()


def _native_fake_cupy(sched, sends, recvs, op):
    """The native launcher with CuPy replaced by tests/kernels/native/_fake_cupy.py (its kernel reduces
    record by record through the twins, as interpreter.cu's tc_bin does on a GPU)."""
    n, count = sched.ranks, recvs[0].size
    prog = program_for(sched, count, sends[0].dtype, op=op)
    user = [{"send": s.reshape(-1).view(DevArray), "recv": r.reshape(-1).view(DevArray)} for s, r in zip(sends, recvs)]
    bufs = [{k: user[r][w] for k, w in prog.bindings[r].items()} for r in range(n)]
    with _fake_launcher(n):
        launcher.NativeContext(prog, [0] * n, channels=2).run(bufs)


def _cupy_op_by_op(x, y, op):
    """``CupyRuntime.reduce`` (the op-by-op CuPy path) with NumPy standing in for CuPy."""
    rt = CupyRuntime.__new__(CupyRuntime)
    rt.cp = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("_")})
    rt.cp.cuda = types.SimpleNamespace(Device=lambda i: contextlib.nullcontext())
    dev = types.SimpleNamespace(id=0)
    dst = np.empty_like(x)
    views = [v.view(type("D", (np.ndarray,), {"device": dev})) for v in (dst, x, y)]
    rt.reduce(*views, op, contextlib.nullcontext())
    return dst


def _torch_fold(xs, op):
    """The torch backend's element op (kernels.pytorch.schedule_share.combine), folded over the ranks."""
    tdt = getattr(torch, xs[0].dtype.name)
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[xs[0].dtype.itemsize]
    ts = [torch.from_numpy(x.view({2: np.int16, 4: np.int32, 8: np.int64}[x.dtype.itemsize]).copy()).view(tdt)
          for x in xs]
    acc = ts[0].clone()
    for t in ts[1:]:
        combine(acc, acc, t, op)
    return acc.view(ints).numpy().view(_UINT[xs[0].dtype.itemsize])


EXECUTORS = {"host": lambda s, sb, rb, op: run_schedule(s, sb, rb, op=op, backend=HostLayer(threads=1)),
             "host-fused": lambda s, sb, rb, op: run_schedule(s, sb, rb, op=op,
                                                               backend=HostLayer(threads=2, fuse_bytes=2)),
             "host-bound": _bound, "mpi-persistent": persistent_run,
             "reference": lambda s, sb, rb, op: run_reference(s, [x.copy() for x in sb], rb, op=op),
             "native-fake-cupy": _native_fake_cupy}


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(rank_inputs(), st.sampled_from(["direct", "ring"]))
def test_every_cpu_executor_gives_the_rules_bits(case, shape):
    """An all-reduce max / min on every executor that runs here, and the element ops of the twins, the
    Numba n-way reduce, the op-by-op CuPy path and the torch backend, against the rule's bits."""
    name, op, n, xs = case
    want = _want(xs, op)
    acc = xs[0].copy()
    for x in xs[1:]:
        reduce_copy_with(np, acc, acc, x, op)
    assert np.array_equal(_bits(acc), want), f"twins {name} {op}"
    d = np.empty_like(xs[0])
    reduce_nway(d, [x.copy() for x in xs], op, parallel=False)
    assert np.array_equal(_bits(d), want), f"numba n-way {name} {op}"
    acc = xs[0]
    for x in xs[1:]:
        acc = _cupy_op_by_op(acc, x, op)
    assert np.array_equal(_bits(acc), want), f"cupy op-by-op {name} {op}"
    assert np.array_equal(_torch_fold(xs, op), want), f"torch combine {name} {op}"
    sched = direct("allreduce", n) if shape == "direct" else ring("allreduce", n)
    count = xs[0].size
    for what, run in EXECUTORS.items():
        sb, rb = alloc_buffers("allreduce", n, count, xs, DTYPES[name], None, False)
        run(sched, sb, rb, op)
        for r in range(n):
            assert np.array_equal(_bits(rb[r]), want), f"{what} {shape} {name} {op} rank {r}"
