"""Host backend: runs a lowered schedule on NumPy buffers (one set per rank) with threads.

Each step of the :class:`~kernels.lowering.Program` is one parallel phase: the step's ops
are grouped into independent *chains* (ops linked by an in-step dependency, i.e. several
transfers into the same chunk of the same rank, stay in one chain and run in order), every
chain is cut into tiles of ``tile_bytes``, and a thread pool runs the tiles; NumPy's
ufuncs and ``copyto`` release the GIL, so transfers overlap.  A barrier ends each step, which
orders every cross-step dependency; within a step the lowering guarantees that no op writes
what another op reads, so every transfer reads the state at the start of the step.  Steps
smaller than ``inline_bytes`` run in the calling thread (no pool overhead).  No per-element
Python loops: the arithmetic is the NumPy twins of the CUDA kernels
(:mod:`kernels.numba_kernels`).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from kernels.device import BINARY_OP, DeviceLayer, RankBuffers
from kernels.lowering import Op, Program
from kernels.numba_kernels import postdiv_host, reduce_copy_host
from topo_probe.errors import BufferLayoutError


class HostLayer(DeviceLayer):
    """NumPy device layer (see module docstring).

    Parameters
    ----------
    threads : int, optional
        Worker threads (default: the number of CPUs).
    tile_bytes : int
        Largest piece of one op handed to a thread (bytes).
    inline_bytes : int
        Steps moving fewer bytes than this run without the pool.
    """

    name = "host"

    def __init__(self, threads: int | None = None, tile_bytes: int = 4 << 20, inline_bytes: int = 1 << 20):
        self.threads = threads or os.cpu_count() or 1
        self.tile_bytes = int(tile_bytes)
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
            d = o.dst
            dst = bufs.bufs[d.rank][d.buf][d.start + lo:d.start + hi]
            if o.kind == "copy":
                s = o.src
                np.copyto(dst, bufs.bufs[s.rank][s.buf][s.start + lo:s.start + hi])
            elif o.kind == "reduce":
                s, a = o.src, o.acc
                reduce_copy_host(dst, bufs.bufs[a.rank][a.buf][a.start + lo:a.start + hi],
                                 bufs.bufs[s.rank][s.buf][s.start + lo:s.start + hi], binop)
            else:
                postdiv_host(dst, n)

    def execute(self, program: Program, buffers: RankBuffers) -> None:
        item = program.dtype.itemsize
        tile = max(1, self.tile_bytes // item)
        n = program.ranks
        for step in program.steps:
            if not step:
                continue
            chains = self.chains(step)
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

    def close(self) -> None:
        """Shut the thread pool down (a later call starts a new one)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
