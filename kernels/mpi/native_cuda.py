"""The GPU backend of :class:`kernels.mpi.native.Share`: CuPy memory, CUDA IPC, the interpreter
kernel built with system-scope flags (:func:`kernels.native.source.system_scope`: the ranks are
in different processes), one launch per call on the current stream, a CUDA graph of that
launch from the second call with the same buffers on.

Handles are those of :class:`kernels.mpi.ipc.CudaIpc` (``cudaIpcGetMemHandle`` of the
allocation base found by ``cuMemGetAddressRange``, and the buffer's offset from it); a peer's
handle is opened once (``cudaIpcOpenMemHandle``) and closed (``cudaIpcCloseMemHandle``) when
no binding uses it.  A wait past ``timeout_s`` stops this process's blocks and leaves the
status words (:class:`kernels.native.launcher.StatusWords`) that :meth:`status` reads.
CuPy is imported when the backend is made, never at module import.
"""

from __future__ import annotations

import numpy as np

from kernels.backends.kernel_twins import avg_scalar
from kernels.native.launcher import DEFAULT_TIMEOUT_S, THREADS, StatusWords, kernel_args, kernel_for
from kernels.native.source import system_scope
from kernels.program.ops import is_float


class CudaShareBackend:
    """Memory, handles and launches of one process's shares on its current GPU; ``ipc`` (a
    :class:`~kernels.mpi.ipc.CudaIpc`), ``open_handle`` and ``close_handle`` replace the CUDA
    calls in tests."""

    name = "cuda"

    def __init__(self, *, timeout_s: float = DEFAULT_TIMEOUT_S, ipc=None, open_handle=None, close_handle=None) -> None:
        from kernels.mpi.ipc import CudaIpc
        self.ipc = ipc if ipc is not None else CudaIpc()
        self.cp = self.ipc.cp
        rt = self.cp.cuda.runtime
        self._open = open_handle or (lambda h: rt.ipcOpenMemHandle(h))
        self._close = close_handle or (lambda base: rt.ipcCloseMemHandle(base))
        self.timeout_ns = int(timeout_s * 1e9)

    # ------------------------------------------------------------------ agreement at start
    def identity(self) -> dict:
        return self.ipc.identity()

    def can_map(self, peers: list) -> bool:
        return self.ipc.can_map(peers)

    def capacity(self) -> int:
        """Blocks one launch may hold resident (the kernel's launch bounds promise 2 per SM)."""
        dev = self.cp.cuda.Device().id
        return 2 * int(self.cp.cuda.runtime.getDeviceProperties(dev)["multiProcessorCount"])

    # ------------------------------------------------------------------ memory and handles
    def empty(self, n: int, dtype):
        return self.cp.empty(n, dtype)

    def flags(self, n: int):
        return self.cp.zeros(n, self.cp.uint64)

    @staticmethod
    def address(arr) -> int:
        return int(arr.data.ptr)

    def export(self, arr, what: str) -> dict:
        return self.ipc.export(arr, what)

    def open(self, handle: str) -> int:
        return int(self._open(bytes.fromhex(handle)))

    def close(self, base: int) -> None:
        try:
            self._close(base)
        except Exception:  # noqa: BLE001 - closing after the peer's context is gone is harmless
            pass

    def upload(self, host: np.ndarray):
        arr = self.cp.asarray(np.ascontiguousarray(host))
        return arr, int(arr.data.ptr)

    # ------------------------------------------------------------------ launches
    def prepare(self, share) -> dict:
        """The program's arrays on this GPU, the kernel and the status words of ``share``."""
        cp, dp = self.cp, share.dp
        dev = cp.cuda.Device().id                   # every rank its own process: system scope
        _, kernel, cap = kernel_for(dev, dp.dtype, dp.op, scope_sys=system_scope([dev] * dp.ranks, range(dp.ranks)))
        if share.blocks > cap:
            from topo_probe.errors import DeviceUnavailable
            raise DeviceUnavailable(f"native share of rank {share.rank}: {share.blocks} blocks, the GPU holds {cap}")
        waits = dp.waits[:, 0].copy() if len(dp.waits) else np.zeros(1, np.int32)
        arrays = {"block_start": cp.asarray(dp.block_start), "wait_start": cp.asarray(dp.wait_start),
                  "wait_block": cp.asarray(waits), "waits": cp.asarray(share.waits),
                  "flag_ptrs": cp.asarray(share.flag_addrs), "epochs": cp.zeros(dp.num_blocks, cp.uint64)}
        avg = float(avg_scalar(dp.dtype, dp.ranks)) if dp.op == "avg" and is_float(dp.dtype) else 0.0
        return {"kernel": kernel, "arrays": arrays, "avg": avg, "status": StatusWords(cp)}

    def launch(self, share, b: dict, *, graph: bool) -> None:
        cp, st = self.cp, share.state
        stream = cp.cuda.get_current_stream()
        g = b.get("graph")
        if g is not None:
            g.launch(stream)
            return
        args = kernel_args(b["records_dev"], st["arrays"], share.first, share.dp.stride, share.dp.ranks, st["avg"],
                           st["status"].dev_ptr, self.timeout_ns)
        if not graph:
            st["kernel"]((share.blocks,), (THREADS,), args, stream=stream)
            return
        side = cp.cuda.Stream(non_blocking=True)
        with side:
            side.begin_capture()
            st["kernel"]((share.blocks,), (THREADS,), args, stream=side)
            g = b["graph"] = side.end_capture()
        g.launch(stream)

    def synchronize(self) -> None:
        self.cp.cuda.get_current_stream().synchronize()

    @staticmethod
    def status(share) -> list[int]:
        """``[error, block, record, awaited block, its index]`` of this process's last launch."""
        return [int(x) for x in share.state["status"].words[:5]]


__all__ = ["CudaShareBackend"]
