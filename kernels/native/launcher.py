"""Runs device programs on GPUs through CuPy: one interpreter launch per GPU per call, CUDA
graphs for repeated calls, peers reached through their pointers.

A :class:`NativeContext` belongs to one device program and one placement of ranks on GPUs:
it holds the program's arrays on every GPU, the flags and epoch counters (never reset), the
kernel of the program's type and op, and the scratch buffers.  A call binds the user's
buffers to the program's slots (a table of base pointers in device memory, one per set of
buffers seen), launches, and on the second call with the same buffers captures that launch
into a CUDA graph; every later call with those buffers is one ``cudaGraphLaunch`` per GPU on
the caller's current stream.

Programs that only copy (no reduce, no dependency between ops: a direct gather, scatter,
all-gather, all-to-all or broadcast) with every rank on one GPU and every op at least
:data:`COPY_ROUTE_MIN_BYTES` run as one device-to-device memcpy per op instead of the
interpreter (captured into the same CUDA graph): there the driver's copy reaches about 2.98 TB/s on
an H100 against the interpreter's 2.5-2.8 (``results/gpu/native_notes.md``), and the ops need no
ordering.  ``NativeContext.route`` says which one a context runs.

Errors: a wait that outlasts ``timeout_s`` stops the kernel (the abort word) and leaves in
host-visible status words which block waited for which; the next call, or
:meth:`NativeContext.check`, raises :class:`~topo_probe.errors.ExecutionTimeout` naming the
rank, channel and record, and resets the flags.  CuPy is imported only when a context is made.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any, Sequence

import numpy as np

from kernels.native.device_program import (TILE_BYTES, DeviceProgram, build_device_program, choose_channels,
                                           resolve_records, resolve_sources, resolve_waits)
from kernels.native.ll import LL_BUF
from kernels.native.record_format import LL_WAIT, check_limits
from kernels.native.source import KERNEL_NAME, THREADS, compile_options, kernel_source, system_scope
from kernels.backends.kernel_twins import avg_scalar
from kernels.program.ops import SCRATCH, Program, is_float
from topo_probe.errors import DeviceUnavailable, ExecutionTimeout

#: seconds a block waits for a peer before the call is abandoned ($TOPOCOLL_NATIVE_TIMEOUT_S)
DEFAULT_TIMEOUT_S = float(os.environ.get("TOPOCOLL_NATIVE_TIMEOUT_S", "10"))
_STATUS_WORDS = 8          # [0] error, [1] block, [2] record, [3] awaited block, [4] its index, [5] abort
_BINDINGS_KEPT = 16
#: LL programs get channels so that each piece is about this many bytes (a pass of 512 threads
#: moves 4 KiB in one round of 8-byte units; ``$TOPOCOLL_LL_PIECE_BYTES`` for tuning runs)
LL_PIECE_BYTES = int(os.environ.get("TOPOCOLL_LL_PIECE_BYTES", 4 << 10))


def _cupy():
    try:
        import cupy
    except ImportError as exc:
        raise DeviceUnavailable(f"native executor: CuPy is not installed ({exc})") from None
    return cupy


class _Status:
    """Pinned, device-mapped host words the kernel writes when a wait times out."""

    def __init__(self, cp):
        rt = cp.cuda.runtime
        self.ptr = rt.hostAlloc(_STATUS_WORDS * 4, 2 | 1)      # cudaHostAllocMapped | Portable
        import ctypes
        buf = (ctypes.c_uint32 * _STATUS_WORDS).from_address(self.ptr)
        self.words = np.frombuffer(buf, np.uint32)
        self.words[:] = 0
        self.dev_ptr = self.ptr        # mapped pinned memory: one address on host and GPUs (UVA)
        self._free = rt.freeHost

    def __del__(self):
        try:
            self._free(self.ptr)
        except Exception:
            pass


_KERNELS: dict[tuple, tuple] = {}
#: u64 words between two blocks' flags: each flag on its own 128-byte line, so a block polling
#: one flag does not share a line with the flags other blocks publish
FLAG_WORDS = 16


def _kernel(cp, dev: int, dtype, op: str, scope_sys: bool) -> tuple[Any, int]:
    """(kernel, blocks the GPU holds at once) for one specialisation, compiled once per GPU.
    All blocks of a launch must be resident (they wait on each other)."""
    key = (dev, np.dtype(dtype).name, "sum" if op == "avg" else op, scope_sys)    # avg compiles as sum
    hit = _KERNELS.get(key)
    if hit is None:
        with cp.cuda.Device(dev):
            mod = cp.RawModule(code=kernel_source(), options=compile_options(dtype, op, scope_sys=scope_sys))
            kernel = mod.get_function(KERNEL_NAME)
            props = cp.cuda.runtime.getDeviceProperties(dev)
            try:
                per_sm = int(cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.ptr, THREADS, 0))
            except Exception:      # no occupancy query: the launch bounds promise 2 per SM
                per_sm = 2
            hit = _KERNELS[key] = (kernel, max(1, per_sm) * int(props["multiProcessorCount"]))
    return hit


def kernel_for(dev: int, dtype, op: str, *, scope_sys: bool) -> tuple[Any, Any, int]:
    """(cupy, kernel, blocks GPU ``dev`` holds at once) of one specialisation: the hook through
    which :mod:`kernels.mpi.native_cuda` launches one process's share of a device program."""
    cp = _cupy()
    return (cp, *_kernel(cp, dev, dtype, op, scope_sys))


def kernel_args(table, arrays: dict, first: int, stride: int, ranks: int, avg: float, status_ptr: int,
                timeout_ns) -> tuple:
    """The interpreter kernel's arguments (its ABI, in one place): resolved records ``table``;
    ``arrays`` holds ``block_start, wait_start, waits, wait_block, flag_ptrs, epochs``."""
    a = arrays
    return (table, a["block_start"], a["wait_start"], a["waits"], a["wait_block"], a["flag_ptrs"], a["epochs"],
            np.int32(first), np.uint64(stride), np.int32(ranks), np.float64(avg), np.uint64(status_ptr + 20),
            np.uint64(status_ptr), np.uint64(timeout_ns))


#: pinned status words of a launch (the abort word at byte 20), for other launchers
StatusWords = _Status


#: a copy-only program on one GPU runs as memcpys when its smallest op moves at least this
#: many bytes (below, one interpreter launch beats several copy launches)
COPY_ROUTE_MIN_BYTES = 8 << 20
#: cudaMemcpyDeviceToDevice
_D2D = 3


def copy_route(program: Program, device_of: Sequence[int], min_bytes: int = COPY_ROUTE_MIN_BYTES) -> list | None:
    """``(dst (rank, buffer), dst offset, src (rank, buffer), src offset, elements)`` per copy
    when ``program`` runs as plain copies (module docstring), else None; ops that continue each
    other in both buffers (a transfer's chunks) are one copy.

    >>> from kernels.program.lowering import lower
    >>> from synth.ir.schedule import Schedule, Step, Transfer
    >>> p = lower(Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),)), 1 << 21, "float32")
    >>> sorted(copy_route(p, [0, 0]))[0]
    ((0, 'output'), 0, (0, 'input'), 0, 2097152)
    >>> copy_route(p, [0, 1]) is None, copy_route(p, [0, 0], min_bytes=1 << 30) is None
    (True, True)
    """
    ops = list(program.ops())
    if (not ops or len({device_of[r] for r in range(program.ranks)}) != 1
            or any(o.kind != "copy" or o.deps or o.src is None for o in ops)):
        return None
    out: list[list] = []
    for o in sorted(ops, key=lambda o: (o.dst.rank, o.dst.buf, o.dst.start)):
        last = out[-1] if out else None
        if (last and last[0] == (o.dst.rank, o.dst.buf) and last[2] == (o.src.rank, o.src.buf)
                and last[1] + last[4] == o.dst.start and last[3] + last[4] == o.src.start):
            last[4] += o.dst.size
        else:
            out.append([(o.dst.rank, o.dst.buf), o.dst.start, (o.src.rank, o.src.buf), o.src.start, o.dst.size])
    if min(c[4] for c in out) * program.dtype.itemsize < min_bytes:
        return None
    return [tuple(c) for c in out]


class NativeContext:
    """One device program placed on GPUs (see module docstring)."""

    def __init__(self, program: Program, device_of: Sequence[int], *, channels: int | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, fuse: bool = True, tile_bytes: int | None = TILE_BYTES,
                 protocol: str = "simple"):
        cp = self.cp = _cupy()
        self.program = program
        self.device_of = [int(d) for d in device_of]
        self.devices = sorted(set(self.device_of))
        self.scope_sys = system_scope(self.device_of)
        kernels = {d: _kernel(cp, d, program.dtype, program.op, self.scope_sys) for d in self.devices}
        cap = min(k[1] for k in kernels.values())
        writers = {o.rank for o in program.ops()}        # only ranks that write get blocks
        per_dev = max(sum(1 for r in writers if self.device_of[r] == d) for d in self.devices)
        ch = channels or choose_channels(program, cap, **({"min_piece_bytes": LL_PIECE_BYTES}
                                                          if protocol == "ll" else {}))
        ch = max(1, min(ch, cap // max(1, per_dev)))
        self.dp: DeviceProgram = build_device_program(program, ch, device_of=self.device_of, fuse=fuse,
                                                      tile_bytes=tile_bytes, protocol=protocol)
        check_limits(self.dp.records, self.dp.block_start)
        self.copies = None if protocol == "ll" else copy_route(program, self.device_of, COPY_ROUTE_MIN_BYTES)
        #: "memcpy" (copy-only program on one GPU, see module docstring) or "interpreter"
        self.route = "interpreter" if self.copies is None else "memcpy"
        self.timeout_ns = np.uint64(int(timeout_s * 1e9))
        self.status = _Status(cp)
        self._per_dev = {}
        flag_ptrs = np.zeros(self.dp.num_blocks, np.uint64)
        for d in self.devices:
            first, nb = self.dp.device_blocks(self.device_of, d)
            if nb > kernels[d][1]:
                raise DeviceUnavailable(f"native executor: GPU {d} would need {nb} resident blocks, it holds "
                                        f"{kernels[d][1]}")
            with cp.cuda.Device(d):
                arrays = {name: cp.asarray(getattr(self.dp, name)) for name in ("block_start", "wait_start")}
                arrays["wait_block"] = cp.asarray(self.dp.waits[:, 0].copy() if len(self.dp.waits)
                                                  else np.zeros(1, np.int32))
                flags = cp.zeros(max(1, nb) * FLAG_WORDS, cp.uint64)     # one 128-byte line per flag
                epochs = cp.zeros(self.dp.num_blocks, cp.uint64)
            flag_ptrs[first:first + nb] = flags.data.ptr + 8 * FLAG_WORDS * np.arange(nb, dtype=np.uint64)
            self._per_dev[d] = {"first": first, "blocks": nb, "flags": flags, "epochs": epochs,
                                "kernel": kernels[d][0], **arrays}
        waits = resolve_waits(self.dp, flag_ptrs)
        for d in self.devices:
            with cp.cuda.Device(d):
                self._per_dev[d]["flag_ptrs"] = cp.asarray(flag_ptrs)
                self._per_dev[d]["waits"] = cp.asarray(waits)
        self.avg = float(avg_scalar(program.dtype, program.ranks)) if program.op == "avg" and is_float(
            program.dtype) else 0.0
        self._admit_scratch()
        self.scratch = [self._scratch(r) for r in range(program.ranks)]
        self.ll_lines = [self._ll_lines(r) for r in range(program.ranks)]
        self._bindings: OrderedDict[tuple, dict] = OrderedDict()
        self._enable_peers()

    # ------------------------------------------------------------------ setup
    def _admit_scratch(self) -> None:
        """One line instead of an allocation failure: each GPU's share of the scratch against
        its free memory."""
        from kernels.backends.memory import CHECK_FROM_BYTES, admit
        item = self.program.dtype.itemsize
        for d in self.devices:
            need = sum(self.program.sizes[r].get(SCRATCH, 0) for r in range(self.program.ranks)
                       if self.device_of[r] == d) * item
            if need >= CHECK_FROM_BYTES:
                with self.cp.cuda.Device(d):
                    free = int(self.cp.cuda.runtime.memGetInfo()[0])
                admit(need, free, f"{self.program.collective}: the schedule's scratch on GPU {d}", "GPU memory")

    def _scratch(self, rank: int):
        n = self.program.sizes[rank].get(SCRATCH, 0)
        if not n:
            return None
        with self.cp.cuda.Device(self.device_of[rank]):
            return self.cp.empty(n, self.program.dtype)

    def _ll_lines(self, rank: int):
        """Rank ``rank``'s LL lines (zeros: no flag of a call is 0), or None."""
        n = self.dp.ll_bytes[rank] if rank < len(self.dp.ll_bytes) else 0
        if not n:
            return None
        with self.cp.cuda.Device(self.device_of[rank]):
            return self.cp.zeros(n // 8, self.cp.uint64)

    def _enable_peers(self) -> None:
        rt = self.cp.cuda.runtime
        for d in self.devices:
            for p in self.devices:
                if d != p:
                    with self.cp.cuda.Device(d):
                        try:
                            rt.deviceEnablePeerAccess(p)
                        except Exception as exc:     # already enabled is fine
                            if "ALREADY" not in str(exc).upper():
                                raise DeviceUnavailable(f"native executor: GPU {d} cannot reach GPU {p} "
                                                        f"({exc}); use p2p='never'") from None

    # ------------------------------------------------------------------ calls
    def _binding(self, buffers: Sequence[dict]) -> dict:
        ptrs = []
        for (r, name) in self.dp.slots:
            arr = (self.scratch[r] if name == SCRATCH else self.ll_lines[r] if name == LL_BUF
                   else buffers[r][name])
            ptrs.append(arr.data.ptr)
        key = tuple(ptrs)
        b = self._bindings.get(key)
        if b is None:
            table = np.array(ptrs, np.uint64)
            b = {"calls": 0, "graphs": {}, "tables": {}, "sources": {}}
            if self.copies is not None:
                at = {slot: int(p) for slot, p in zip(self.dp.slots, ptrs)}
                item = self.program.dtype.itemsize
                b["copies"] = [(at[ds] + do * item, at[ss] + so * item, n * item) for ds, do, ss, so, n in self.copies]
            for d in self.devices:
                with self.cp.cuda.Device(d):
                    src = b["sources"][d] = self.cp.asarray(resolve_sources(self.dp, table))
                    b["tables"][d] = self.cp.asarray(resolve_records(self.dp, table, src.data.ptr).reshape(-1))
            self._bindings[key] = b
            if len(self._bindings) > _BINDINGS_KEPT:
                self._bindings.popitem(last=False)
        else:
            self._bindings.move_to_end(key)
        return b

    def _args(self, d: int, table) -> tuple:
        s = self._per_dev[d]
        return kernel_args(table, s, s["first"], self.dp.stride, self.program.ranks, self.avg, self.status.dev_ptr,
                           self.timeout_ns)

    def run(self, buffers: Sequence[dict], *, graphs: bool = True) -> None:
        """One call on ``buffers`` (rank -> physical buffer name -> CuPy array), on each GPU's
        current stream."""
        self.check()
        self._launch(self._binding(buffers), graphs)

    def bound(self, buffers: Sequence[dict], *, graphs: bool = True):
        """A function of no arguments that runs one call on ``buffers`` (bound once: what a
        repeated call with the same arrays costs is the graph launches)."""
        b = self._binding(buffers)

        def call() -> None:
            if self.status.words[0]:
                self.check()
            self._launch(b, graphs)
        return call

    def _launch(self, b: dict, graphs: bool) -> None:
        b["calls"] += 1
        cp = self.cp
        if self.copies is not None:
            return self._launch_copies(b, graphs)
        for d in self.devices:
            s = self._per_dev[d]
            if not s["blocks"]:
                continue
            g = b["graphs"].get(d)
            if g is not None and len(self.devices) == 1 and cp.cuda.runtime.getDevice() == d:
                g.launch(cp.cuda.get_current_stream())
                continue
            with cp.cuda.Device(d):
                stream = cp.cuda.get_current_stream()
                if g is not None:
                    g.launch(stream)
                    continue
                args = self._args(d, b["tables"][d])
                if graphs and b["calls"] >= 2:
                    g = b["graphs"][d] = self._capture(s["kernel"], s["blocks"], args)
                    g.launch(stream)
                else:
                    s["kernel"]((s["blocks"],), (THREADS,), args, stream=stream)

    def _launch_copies(self, b: dict, graphs: bool) -> None:
        """The memcpy route: one device-to-device copy per op on the current stream (a graph of
        them from the second call with these buffers on)."""
        cp = self.cp
        (d,) = self.devices
        with cp.cuda.Device(d):
            stream = cp.cuda.get_current_stream()
            g = b["graphs"].get(d)
            if g is None and graphs and b["calls"] >= 2:
                side = cp.cuda.Stream(non_blocking=True)
                with side:
                    side.begin_capture()
                    self._copies(b["copies"], side)
                    g = b["graphs"][d] = side.end_capture()
            if g is not None:
                g.launch(stream)
            else:
                self._copies(b["copies"], stream)

    def _copies(self, copies: list, stream) -> None:
        memcpy = self.cp.cuda.runtime.memcpyAsync
        for dst, src, nbytes in copies:
            memcpy(dst, src, nbytes, _D2D, stream.ptr)

    def _capture(self, kernel, blocks: int, args: tuple):
        cp = self.cp
        side = cp.cuda.Stream(non_blocking=True)
        with side:
            side.begin_capture()
            kernel((blocks,), (THREADS,), args, stream=side)
            return side.end_capture()

    def check(self) -> None:
        """Raise ExecutionTimeout if an earlier call's wait timed out (and reset the flags)."""
        w = self.status.words
        if not w[0]:
            return
        blk, rec, wb, wj = (int(x) for x in w[1:5])
        dp = self.dp
        self.cp.cuda.runtime.deviceSynchronize()
        for s in self._per_dev.values():
            s["flags"].fill(0)
            s["epochs"].fill(0)
        for lines in self.ll_lines:
            if lines is not None:
                lines.fill(0)
        for b in self._bindings.values():
            b["graphs"].clear()
        w[:] = 0
        what = (f"an LL line (unit {wj}) of its input" if wb == LL_WAIT else
                f"rank {int(dp.block_rank[wb])}'s record {wj}")
        raise ExecutionTimeout(
            f"native executor: rank {int(dp.block_rank[blk])} (channel {int(dp.block_channel[blk])}) waited over "
            f"{int(self.timeout_ns) / 1e9:g} s at record {rec - int(dp.block_start[blk])} for {what}; "
            f"the call was abandoned")


__all__ = ["NativeContext", "DEFAULT_TIMEOUT_S", "COPY_ROUTE_MIN_BYTES", "copy_route", "kernel_for", "kernel_args",
           "StatusWords"]
