"""Host backend: runs a lowered schedule on NumPy buffers (one set per rank) with threads.

Two execution orders, both giving bit-identical results (every element sees the same ops in
the same order):

* **slice-major** (large messages): every op of a :class:`~kernels.program.lowering.Program` maps one
  chunk cell onto another cell of the same length and only ever combines elements at the same
  offset inside their cells (see :mod:`kernels.program.lowering`), so the program is a set of
  independent *columns*: the element offsets ``[lo, lo + slice)`` of every cell.  Each worker
  thread runs whole columns, all steps in order, with no barrier between threads; a column's
  intermediate values are still in cache when the next step reads them (cross-step pipelining,
  as NCCL slices a step's chunks).  Used when the largest cell has at least two slices of
  ``slice_bytes``.
* **step-major** (otherwise):

Each step of the :class:`~kernels.program.lowering.Program` is one parallel phase: the step's ops
are grouped into independent *chains* (ops linked by an in-step dependency, i.e. several
transfers into the same chunk of the same rank, stay in one chain and run in order), every
chain is cut into tiles of ``tile_bytes``, and a thread pool runs the tiles; NumPy's
ufuncs and ``copyto`` release the GIL, so transfers overlap.  A barrier ends each step, which
orders every cross-step dependency; within a step the lowering guarantees that no op writes
what another op reads, so every transfer reads the state at the start of the step.  Steps
smaller than ``inline_bytes`` run in the calling thread (no pool overhead).  No per-element
Python loops: the arithmetic is the NumPy twins (:mod:`kernels.backends.kernel_twins`).

**Reduce chains** (a rank reducing several sources into one chunk in one step: ops
``d <- a op s1``, ``d <- d op s2``, ...) run as one n-way reduce
(:func:`kernels.backends.host_reduce.reduce_chain`, bit-identical, reads each source once and
writes ``d`` once) when the piece is at least ``fuse_bytes`` and the dtype allows
(:data:`FUSED_DTYPES`); smaller pieces keep the NumPy twins, op by op.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from kernels.backends import host_reduce
from kernels.backends.device import BINARY_OP, DeviceLayer, RankBuffers
from kernels.backends.host_reduce import FusedReduce, fuse_reduce_chains, merge_copy_heads
from kernels.backends.kernel_twins import PreMulSum, plain_ufunc, postdiv_host, reduce_copy_host
from kernels.program.lowering import Op, Program, Region
from topo_probe.errors import BufferLayoutError

#: dtypes whose reduce chains the host backend fuses (benchmarks/bench_host_reduce.py:
#: results/host_reduce/host_reduce.md)
FUSED_DTYPES = frozenset({"float16", "bfloat16"})


class HostLayer(DeviceLayer):
    """NumPy device layer (see module docstring).

    Parameters
    ----------
    threads : int, optional
        Worker threads (default: the number of CPUs).
    tile_bytes : int
        Largest piece of one op handed to a thread in step-major order (bytes).
    slice_bytes : int
        Column width in slice-major order (bytes per cell); 0 disables slice-major order.
    inline_bytes : int
        Steps moving fewer bytes than this run without the pool.
    fuse_bytes : int
        Reduce chains of :data:`FUSED_DTYPES` run as one n-way reduce on pieces of at least
        this many bytes (0: never).
    """

    name = "host"

    def __init__(self, threads: int | None = None, tile_bytes: int = 4 << 20, inline_bytes: int = 1 << 20,
                 slice_bytes: int = 1 << 20, fuse_bytes: int = 64 << 10):
        self.fuse_bytes = int(fuse_bytes)
        self.threads = threads or os.cpu_count() or 1
        self.tile_bytes = int(tile_bytes)
        self.slice_bytes = int(slice_bytes)
        self._orders: dict[int, tuple[Program, list[Op]]] = {}
        self.inline_bytes = int(inline_bytes)
        self._pool: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------ primitives
    def check_array(self, arr: Any, what: str) -> None:
        if not isinstance(arr, np.ndarray):
            raise BufferLayoutError(f"{what} must be a numpy.ndarray for the host backend, "
                                    f"got {type(arr).__name__}")

    def allocate(self, rank: int, nelems: int, dtype: Any) -> np.ndarray:
        return np.empty(nelems, dtype)

    def copy(self, dst, src, stream: int) -> None:
        np.copyto(dst, src)

    def reduce_copy(self, dst, a, b, op: str, stream: int) -> None:
        reduce_copy_host(dst, a, b, op)

    def scale(self, dst, divisor: int, stream: int) -> None:
        postdiv_host(dst, divisor)

    def record_event(self, stream: int) -> None:
        return None     # host ops complete before they return

    def wait_event(self, stream: int, event: Any) -> None:
        return None

    def synchronize(self) -> None:
        return None

    # ------------------------------------------------------------------ execution
    def _pool_get(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="topocoll-host")
        return self._pool

    @staticmethod
    def chains(step: tuple[Op, ...]) -> list[list[Op]]:
        """Split a step's ops into chains linked by in-step dependencies (in op order)."""
        parent = {o.id: o.id for o in step}

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for o in step:
            for d in o.deps:
                if d in parent:
                    parent[find(o.id)] = find(d)
        groups: dict[int, list[Op]] = {}
        for o in step:
            groups.setdefault(find(o.id), []).append(o)
        return list(groups.values())

    def _run_chain(self, chain: list[Op], bufs: RankBuffers, op: str, lo: int, hi: int, n: int) -> None:
        binop = BINARY_OP[op]
        for o in chain:
            self._run_op(o, bufs, binop, lo, hi, n)

    def _fused(self, program: Program, ops: list) -> list:
        """``ops`` with a copy that starts a rank-order sum merged into its first reduce
        (:func:`merge_copy_heads`), and reduce chains fused (:func:`fuse_reduce_chains`) where the
        dtype allows."""
        ops = merge_copy_heads(ops)
        if self.fuse_bytes <= 0 or program.dtype.name not in FUSED_DTYPES:
            return ops
        return fuse_reduce_chains(ops, -(-self.fuse_bytes // program.dtype.itemsize))

    def execute(self, program: Program, buffers: RankBuffers) -> None:
        item = program.dtype.itemsize
        longest = max((o.dst.size for o in program.ops()), default=0)
        if self.slice_bytes > 0 and longest * item >= 2 * self.slice_bytes:
            self._execute_slices(program, buffers, max(1, self.slice_bytes // item), longest)
        else:
            self._execute_steps(program, buffers)

    @staticmethod
    def column_order(program: Program) -> list[Op]:
        """The program's ops in a dependency order that follows chains.

        A topological order of the ops' ``deps`` (read-after-write, write-after-read and
        write-after-write on every slot, :mod:`kernels.program.lowering`) that runs an op's dependents
        as soon as they are ready (last-in first-out), so a value is read again while it is
        still in cache: ring allreduce runs chunk by chunk instead of step by step.
        """
        ops = list(program.ops())
        dependents: dict[int, list[int]] = {o.id: [] for o in ops}
        missing = {}
        for o in ops:
            deps = [d for d in o.deps if d in dependents]
            missing[o.id] = len(deps)
            for d in deps:
                dependents[d].append(o.id)
        by_id = {o.id: o for o in ops}
        ready = sorted((o.id for o in ops if missing[o.id] == 0), reverse=True)
        order = []
        while ready:
            oid = ready.pop()
            order.append(by_id[oid])
            for d in sorted(dependents[oid], reverse=True):
                missing[d] -= 1
                if missing[d] == 0:
                    ready.append(d)
        if len(order) != len(ops):      # the lowering never emits a cycle; keep its own order then
            return ops
        return order

    def _order(self, program: Program) -> list[Op]:
        key = id(program)
        hit = self._orders.get(key)
        if hit is None or hit[0] is not program:
            if len(self._orders) > 64:
                self._orders.clear()
            hit = self._orders[key] = (program, self._fused(program, self.column_order(program)))
        return hit[1]

    def _execute_slices(self, program: Program, buffers: RankBuffers, width: int, longest: int) -> None:
        """Slice-major order: whole columns ``[lo, lo + width)`` of every cell per task."""
        order = self._order(program)
        n, binop = program.ranks, BINARY_OP[program.op]
        columns = range(0, longest, width)

        def column(lo: int) -> None:
            hi = lo + width
            for o in order:
                self._run_op(o, buffers, binop, lo, min(hi, o.dst.size), n)

        workers = min(self.threads, len(columns))
        if workers <= 1:
            for lo in columns:
                column(lo)
            return
        pool = self._pool_get()
        for f in [pool.submit(column, lo) for lo in columns]:
            f.result()

    @staticmethod
    def _run_op(o: Op, bufs: RankBuffers, binop, lo: int, hi: int, n: int) -> None:
        """Elements ``[lo, hi)`` (offsets inside the op's cells) of one op; nothing if empty."""
        if hi <= lo:
            return
        if isinstance(o, FusedReduce):
            HostLayer._run_fused(o, bufs, binop, lo, hi, n)
            return
        d = o.dst
        dst = bufs.bufs[d.rank][d.buf][d.start + lo:d.start + hi]
        if o.kind == "copy":
            s = o.src
            np.copyto(dst, bufs.bufs[s.rank][s.buf][s.start + lo:s.start + hi])
        elif o.kind == "reduce":
            s, a = o.src, o.acc
            reduce_copy_host(dst, bufs.bufs[a.rank][a.buf][a.start + lo:a.start + hi],
                             bufs.bufs[s.rank][s.buf][s.start + lo:s.start + hi],
                             PreMulSum(n, *o.premul) if o.premul != (False, False) else binop)
        else:
            postdiv_host(dst, n)

    @staticmethod
    def _run_fused(f: FusedReduce, bufs: RankBuffers, binop, lo: int, hi: int, n: int) -> None:
        """Elements ``[lo, hi)`` of a reduce chain: one n-way reduce, or op by op when short."""
        if hi - lo < f.min_elems:
            for o in f.ops:
                HostLayer._run_op(o, bufs, binop, lo, hi, n)
            return

        def view(r: Region) -> np.ndarray:
            return bufs.bufs[r.rank][r.buf][r.start + lo:r.start + hi]
        binops = [PreMulSum(n, *o.premul) if o.premul != (False, False) else binop for o in f.ops]
        host_reduce.reduce_chain(view(f.dst), [view(f.ops[0].acc)] + [view(o.src) for o in f.ops], binops,
                                 parallel=False)

    def _execute_steps(self, program: Program, buffers: RankBuffers) -> None:
        """Step-major order: each step's chains, tiled, on the pool; a barrier after each step."""
        item = program.dtype.itemsize
        tile = max(1, self.tile_bytes // item)
        n = program.ranks
        for step in program.steps:
            if not step:
                continue
            chains = [self._fused(program, ch) for ch in self.chains(step)]
            work = []
            for ch in chains:
                size = ch[0].dst.size
                if any(o.dst.size != size for o in ch):
                    work.append((ch, 0, None))
                    continue
                for lo in range(0, size, tile):
                    work.append((ch, lo, min(size, lo + tile)))
            total = sum(o.traffic_bytes(item) for o in step)
            if total < self.inline_bytes or self.threads == 1 or len(work) == 1:
                for ch, lo, hi in work:
                    self._run(ch, buffers, program.op, lo, hi, n)
                continue
            pool = self._pool_get()
            futures = [pool.submit(self._run, ch, buffers, program.op, lo, hi, n) for ch, lo, hi in work]
            for f in futures:
                f.result()

    def _run(self, chain, bufs, op, lo, hi, n):
        if hi is None:
            for o in chain:
                self._run_chain([o], bufs, op, 0, o.dst.size, n)
        else:
            self._run_chain(chain, bufs, op, lo, hi, n)

    def bound(self, program: Program, buffers: RankBuffers):
        """A no-argument function running ``program`` on ``buffers`` as :meth:`execute` would,
        with every op's views and ufunc resolved once (a repeated call on the same arrays runs
        the NumPy calls alone); None where :meth:`execute` would not run it inline, step by
        step in this thread (slice-major order, the pool, fused reduce chains)."""
        item, n = program.dtype.itemsize, program.ranks
        longest = max((o.dst.size for o in program.ops()), default=0)
        if (self.slice_bytes > 0 and longest * item >= 2 * self.slice_bytes) or (
                self.fuse_bytes > 0 and program.dtype.name in FUSED_DTYPES and longest * item >= self.fuse_bytes):
            return None
        if any(sum(o.traffic_bytes(item) for o in step) >= self.inline_bytes for step in program.steps):
            return None
        calls = [_bound_op(o, buffers.bufs, BINARY_OP[program.op], n) for o in program.ops() if o.dst.size]

        def run() -> None:
            for fn, args, kwargs in calls:
                fn(*args, **kwargs)
        return run

    def close(self) -> None:
        """Shut the thread pool down (a later call starts a new one)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _bound_op(o: Op, bufs: list, binop, n: int) -> tuple:
    """``(function, args, kwargs)`` running op ``o`` whole on ``bufs``, as :meth:`HostLayer._run_op`
    does: a NumPy call where the op is a plain copy or reduce (:func:`plain_ufunc`; never float8),
    else the twin itself."""
    def view(r: Region) -> np.ndarray:
        return bufs[r.rank][r.buf][r.start:r.stop]
    if o.kind == "copy":
        return np.copyto, (view(o.dst), view(o.src)), {}
    if o.kind == "reduce":
        op = PreMulSum(n, *o.premul) if o.premul != (False, False) else binop
        ufunc = plain_ufunc(np, view(o.dst).dtype, op)
        if ufunc is not None:
            return ufunc, (view(o.acc), view(o.src)), {"out": view(o.dst)}
        return reduce_copy_host, (view(o.dst), view(o.acc), view(o.src), op), {}
    return postdiv_host, (view(o.dst), n), {}
