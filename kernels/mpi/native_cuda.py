"""The GPU backend of :class:`kernels.mpi.native.Share`: CuPy memory and CUDA IPC; the launch is
the single-process executor's (:class:`kernels.native.launcher.Launch`: the interpreter kernel,
here built with system-scope flags, :func:`kernels.native.source.system_scope`, the ranks being
in different processes; one launch per call on the current stream, a CUDA graph of that launch
from the second call with the same buffers on).

Handles are those of :class:`kernels.mpi.ipc.CudaIpc` (``cudaIpcGetMemHandle`` of the
allocation base found by ``cuMemGetAddressRange``, and the buffer's offset from it); a peer's
handle is opened once (``cudaIpcOpenMemHandle``) and closed (``cudaIpcCloseMemHandle``) when
no binding uses it.  A wait past ``timeout_s`` stops this process's blocks and leaves the
status words (:class:`kernels.native.launcher.StatusWords`) that :meth:`status` reads.
CuPy is imported when the backend is made, never at module import.
"""

from __future__ import annotations

import numpy as np

from kernels.native.launcher import DEFAULT_TIMEOUT_S, Launch, StatusWords
from kernels.native.source import system_scope


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
    def prepare(self, share) -> Launch:
        """The launch of ``share``'s blocks on this GPU (:class:`kernels.native.launcher.Launch`,
        the single-process executor's): its arrays, the kernel and the status words."""
        cp, dp = self.cp, share.dp
        dev = cp.cuda.Device().id                   # every rank its own process: system scope
        return Launch(cp, dp, dev, share.first, share.blocks, share.flag_addrs,
                      scope_sys=system_scope([dev] * dp.ranks, range(dp.ranks)), status=StatusWords(cp),
                      timeout_ns=self.timeout_ns, what=f"native share of rank {share.rank}: GPU {dev}")

    @staticmethod
    def launch(share, b: dict, *, graph: bool) -> None:
        """One launch of ``share``'s blocks over binding ``b`` (its graph kept in ``b["graph"]``)."""
        share.state.run(b["records_dev"], b, "graph", capture=graph)

    def synchronize(self) -> None:
        self.cp.cuda.get_current_stream().synchronize()

    @staticmethod
    def status(share) -> list[int]:
        """``[error, block, record, awaited block, its index]`` of this process's last launch."""
        return [int(x) for x in share.state.status.words[:5]]


__all__ = ["CudaShareBackend"]
