"""Runs device programs on GPUs through CuPy: one interpreter launch per GPU per call, CUDA
graphs for repeated calls, peers reached through their pointers.

A :class:`NativeContext` belongs to one device program and one placement of ranks on GPUs:
it holds the program's arrays on every GPU, the flags and epoch counters (never reset), the
kernel of the program's type and op, and the scratch buffers.  A call binds the user's
buffers to the program's slots (a table of base pointers in device memory, one per set of
buffers seen), launches, and on the second call with the same buffers captures that launch
into a CUDA graph; every later call with those buffers is one ``cudaGraphLaunch`` per GPU on
the caller's current stream.

Programs that only copy with every rank on one GPU and every op at least
:data:`COPY_ROUTE_MIN_BYTES` run as one device-to-device memcpy per op instead of the
interpreter (:mod:`kernels.native.copy_route`, captured into the same CUDA graph): there the
driver's copy reaches about 2.98 TB/s on an H100 against the interpreter's 2.5-2.8
(``results/gpu/native_notes.md``).  ``NativeContext.route`` says which one a context runs.

The parts both launchers share (this one, all ranks in one process, and the MPI share path,
one process per rank: :mod:`kernels.mpi.native_cuda`) live here: :func:`layout` (the device
program, checked against the kernel's limits, with one :data:`FUSE` default),
:func:`channels_for`, :class:`Launch` (one GPU's launch of its consecutive blocks: the kernel,
its arrays, residency check, direct launch or CUDA graph) and :func:`waited_for` (what a
timed-out wait waited for).  The MPI path only adds how peers' buffers are found: CUDA IPC
handles instead of one process's pointers.

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
from kernels.native.copy_route import COPY_ROUTE_MIN_BYTES, copy_route, issue_copies
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


def kernel_args(table, arrays: dict, first: int, stride: int, ranks: int, avg: float, status_ptr: int,
                timeout_ns) -> tuple:
    """The interpreter kernel's arguments (its ABI, in one place): resolved records ``table``;
    ``arrays`` holds ``block_start, wait_start, waits, wait_block, flag_ptrs, epochs``."""
    a = arrays
    return (table, a["block_start"], a["wait_start"], a["waits"], a["wait_block"], a["flag_ptrs"], a["epochs"],
            np.int32(first), np.uint64(stride), np.int32(ranks), np.float64(avg), np.uint64(status_ptr + 20),
            np.uint64(status_ptr), np.uint64(timeout_ns))


#: pinned status words of a launch (the abort word at byte 20)
StatusWords = _Status
#: whether both launchers join chains of reduces, and records that continue each other, into one
#: record (:func:`~kernels.native.device_program.build_device_program`); the one default
FUSE = True


def layout(program: Program, channels: int, device_of: Sequence[int], *, fuse: bool = FUSE,
           tile_bytes: int | None = TILE_BYTES, protocol: str = "simple") -> DeviceProgram:
    """The device program both launchers run: ``program`` in ``channels`` channels, the blocks of
    each GPU (or process) of ``device_of`` numbered consecutively, checked against the limits the
    kernel sizes its shared memory by."""
    dp = build_device_program(program, channels, device_of=list(device_of), fuse=fuse, tile_bytes=tile_bytes,
                              protocol=protocol)
    check_limits(dp.records, dp.block_start)
    return dp


def channels_for(program: Program, max_blocks: int, protocol: str = "simple") -> int:
    """:func:`~kernels.native.device_program.choose_channels` within ``max_blocks``, with LL's
    smaller pieces (:data:`LL_PIECE_BYTES`) under the LL protocol."""
    piece = {"min_piece_bytes": LL_PIECE_BYTES} if protocol == "ll" else {}
    return choose_channels(program, max_blocks, **piece)


def capture_graph(cp, record):
    """A CUDA graph of what ``record(stream)`` issues on a side stream."""
    side = cp.cuda.Stream(non_blocking=True)
    with side:
        side.begin_capture()
        record(side)
        return side.end_capture()


class Launch:
    """One GPU's launch of the consecutive blocks ``first .. first + blocks - 1`` of device
    program ``dp``: the kernel of its type, op and flag scope (refused in one line, naming
    ``what``, when the GPU cannot hold every block at once: they wait on each other), and the
    arrays it reads besides the records (:attr:`arrays`, by argument name, read at every launch:
    ``flag_ptrs`` the address of every block's flag as this process sees it, the waits resolved
    on them, and the epochs, which only grow).  ``status`` are the pinned words a timed-out wait
    fills."""

    def __init__(self, cp, dp: DeviceProgram, dev: int, first: int, blocks: int, flag_ptrs: np.ndarray, *,
                 scope_sys: bool, status, timeout_ns: int, what: str) -> None:
        kernel, cap = _kernel(cp, dev, dp.dtype, dp.op, scope_sys)
        if blocks > cap:
            raise DeviceUnavailable(f"{what} would need {blocks} resident blocks, it holds {cap}")
        self.cp, self.dp, self.dev, self.first, self.blocks = cp, dp, dev, first, blocks
        self.kernel, self.status, self.timeout_ns = kernel, status, int(timeout_ns)
        with cp.cuda.Device(dev):
            self.arrays = {"block_start": cp.asarray(dp.block_start), "wait_start": cp.asarray(dp.wait_start),
                           "wait_block": cp.asarray(dp.waits[:, 0].copy() if len(dp.waits) else np.zeros(1, np.int32)),
                           "waits": cp.asarray(resolve_waits(dp, flag_ptrs)), "flag_ptrs": cp.asarray(flag_ptrs),
                           "epochs": cp.zeros(dp.num_blocks, cp.uint64)}
        self.avg = float(avg_scalar(dp.dtype, dp.ranks)) if dp.op == "avg" and is_float(dp.dtype) else 0.0

    def args(self, table) -> tuple:
        return kernel_args(table, self.arrays, self.first, self.dp.stride, self.dp.ranks, self.avg,
                           self.status.dev_ptr, self.timeout_ns)

    def run(self, table, graphs: dict, key, *, capture: bool) -> None:
        """This launch on the current stream over resolved records ``table``: the graph kept in
        ``graphs[key]``, else (``capture``) a graph captured now and kept there, else directly."""
        stream = self.cp.cuda.get_current_stream()
        g = graphs.get(key)
        if g is None and capture:
            args = self.args(table)
            g = graphs[key] = capture_graph(self.cp, lambda side: self.kernel((self.blocks,), (THREADS,), args,
                                                                              stream=side))
        if g is not None:
            g.launch(stream)
        else:
            self.kernel((self.blocks,), (THREADS,), self.args(table), stream=stream)

    def reset(self) -> None:
        """Epochs back to 0 (after a timed-out call, with the flags)."""
        self.arrays["epochs"].fill(0)


def ll_line_words(dp: DeviceProgram, rank: int) -> int:
    """uint64 words of rank ``rank``'s LL region (slot ``(rank, "@ll")``; 0: none)."""
    return (dp.ll_bytes[rank] if rank < len(dp.ll_bytes) else 0) // 8


def waited_for(dp: DeviceProgram, awaited: int, index: int) -> str:
    """What a timed-out wait waited for, from the status words' awaited block and index."""
    if awaited == LL_WAIT:
        return f"an LL line (unit {index}) of its input"
    return f"rank {int(dp.block_rank[awaited])}'s record {index}"


class NativeContext:
    """One device program placed on GPUs (see module docstring)."""

    def __init__(self, program: Program, device_of: Sequence[int], *, channels: int | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, fuse: bool = FUSE, tile_bytes: int | None = TILE_BYTES,
                 protocol: str = "simple"):
        cp = self.cp = _cupy()
        self.program = program
        self.device_of = [int(d) for d in device_of]
        self.devices = sorted(set(self.device_of))
        self.scope_sys = system_scope(self.device_of)
        cap = min(_kernel(cp, d, program.dtype, program.op, self.scope_sys)[1] for d in self.devices)
        writers = {o.rank for o in program.ops()}        # only ranks that write get blocks
        per_dev = max(sum(1 for r in writers if self.device_of[r] == d) for d in self.devices)
        ch = max(1, min(channels or channels_for(program, cap, protocol), cap // max(1, per_dev)))
        self.dp: DeviceProgram = layout(program, ch, self.device_of, fuse=fuse, tile_bytes=tile_bytes,
                                        protocol=protocol)
        self.copies = None if protocol == "ll" else copy_route(program, self.device_of, COPY_ROUTE_MIN_BYTES)
        #: "memcpy" (copy-only program on one GPU, see module docstring) or "interpreter"
        self.route = "interpreter" if self.copies is None else "memcpy"
        self.timeout_ns = np.uint64(int(timeout_s * 1e9))
        self.status = _Status(cp)
        self._flags, flag_ptrs = {}, np.zeros(self.dp.num_blocks, np.uint64)
        for d in self.devices:
            first, nb = self.dp.device_blocks(self.device_of, d)
            with cp.cuda.Device(d):
                self._flags[d] = cp.zeros(max(1, nb) * FLAG_WORDS, cp.uint64)     # one 128-byte line per flag
            flag_ptrs[first:first + nb] = self._flags[d].data.ptr + 8 * FLAG_WORDS * np.arange(nb, dtype=np.uint64)
        #: one :class:`Launch` per GPU
        self.launches = {d: Launch(cp, self.dp, d, *self.dp.device_blocks(self.device_of, d), flag_ptrs,
                                   scope_sys=self.scope_sys, status=self.status, timeout_ns=int(self.timeout_ns),
                                   what=f"native executor: GPU {d}") for d in self.devices}
        self._admit_scratch()
        self.scratch = [self._scratch(r) for r in range(program.ranks)]
        self.ll_lines = [self._ll_lines(r) for r in range(program.ranks)]
        self._bindings: OrderedDict[tuple, dict] = OrderedDict()
        self._enable_peers()

    @property
    def _per_dev(self) -> dict:
        """The arrays each GPU's launch reads (:attr:`Launch.arrays`), by GPU."""
        return {d: ln.arrays for d, ln in self.launches.items()}

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
        n = ll_line_words(self.dp, rank)
        if not n:
            return None
        with self.cp.cuda.Device(self.device_of[rank]):
            return self.cp.zeros(n, self.cp.uint64)

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
        for d, ln in self.launches.items():
            if not ln.blocks:
                continue
            g = b["graphs"].get(d)
            if g is not None and len(self.devices) == 1 and cp.cuda.runtime.getDevice() == d:
                g.launch(cp.cuda.get_current_stream())
                continue
            with cp.cuda.Device(d):
                if g is not None:            # a replay: no call more per GPU on the repeated path
                    g.launch(cp.cuda.get_current_stream())
                else:
                    ln.run(b["tables"][d], b["graphs"], d, capture=graphs and b["calls"] >= 2)

    def _launch_copies(self, b: dict, graphs: bool) -> None:
        """The memcpy route: one device-to-device copy per op on the current stream (a graph of
        them from the second call with these buffers on)."""
        cp = self.cp
        (d,) = self.devices
        with cp.cuda.Device(d):
            stream = cp.cuda.get_current_stream()
            g = b["graphs"].get(d)
            if g is None and graphs and b["calls"] >= 2:
                g = b["graphs"][d] = capture_graph(cp, lambda side: issue_copies(cp, b["copies"], side))
            if g is not None:
                g.launch(stream)
            else:
                issue_copies(cp, b["copies"], stream)

    def check(self) -> None:
        """Raise ExecutionTimeout if an earlier call's wait timed out (and reset the flags)."""
        w = self.status.words
        if not w[0]:
            return
        blk, rec, wb, wj = (int(x) for x in w[1:5])
        dp = self.dp
        self.cp.cuda.runtime.deviceSynchronize()
        for d, ln in self.launches.items():
            self._flags[d].fill(0)
            ln.reset()
        for lines in self.ll_lines:
            if lines is not None:
                lines.fill(0)
        for b in self._bindings.values():
            b["graphs"].clear()
        w[:] = 0
        what = waited_for(dp, wb, wj)
        raise ExecutionTimeout(
            f"native executor: rank {int(dp.block_rank[blk])} (channel {int(dp.block_channel[blk])}) waited over "
            f"{int(self.timeout_ns) / 1e9:g} s at record {rec - int(dp.block_start[blk])} for {what}; "
            f"the call was abandoned")


__all__ = ["NativeContext", "Launch", "DEFAULT_TIMEOUT_S", "COPY_ROUTE_MIN_BYTES", "FUSE", "copy_route", "layout",
           "channels_for", "capture_graph", "kernel_args", "ll_line_words", "waited_for", "StatusWords"]
