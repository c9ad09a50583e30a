"""Buffers on the MPI wire: how one rank's arrays are handed to MPI.

:class:`HostWire`: NumPy arrays travel as their bytes.  :class:`DeviceWire`: CuPy arrays
travel as device pointers when the MPI library is CUDA-aware (:func:`query_cuda_aware`) and
are staged through pinned host buffers otherwise.  Temporaries (received partials, the
lowering's scratch, pinned staging) are carved from an :class:`Arena` kept across calls.
The arithmetic (``combine``, ``postdiv``) is the array-module-generic twin of the CUDA
kernels (:mod:`kernels.backends.kernel_twins`).  Used by :func:`kernels.mpi.transport.execute`.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

from kernels.backends.kernel_twins import postdiv_with, reduce_copy_with
from topo_probe.errors import DeviceUnavailable


def query_cuda_aware() -> bool:
    """Whether the loaded MPI library accepts CUDA device pointers.

    ``$TOPOCOLL_MPI_CUDA_AWARE`` = 0/1 overrides; else Open MPI's ``MPIX_Query_cuda_support``
    or MPICH's ``MPIX_GPU_query_support`` is called on the loaded ``libmpi``; False if neither
    answers.
    """
    env = os.environ.get("TOPOCOLL_MPI_CUDA_AWARE")
    if env is not None:
        return env.strip() not in ("", "0", "false", "no")
    try:
        with open("/proc/self/maps") as f:
            paths = {ln.split()[-1] for ln in f if "libmpi" in ln and "/" in ln}
    except OSError:
        return False
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if hasattr(lib, "MPIX_Query_cuda_support"):
            return bool(lib.MPIX_Query_cuda_support())
        if hasattr(lib, "MPIX_GPU_query_support"):
            flag = ctypes.c_int(0)
            if lib.MPIX_GPU_query_support(ctypes.c_int(0), ctypes.byref(flag)) == 0:  # MPIX_GPU_SUPPORT_CUDA
                return bool(flag.value)
    return False


class Arena:
    """Reusable scratch memory: :meth:`take` carves 64-byte aligned views out of one block that
    persists across calls (:meth:`reset` at the start of each collective), so large collectives
    do not pay for fresh pages every call.  A block too small is replaced by one twice as large
    (views already taken keep the old block alive).

    >>> a = Arena(lambda nbytes: np.zeros(nbytes, np.uint8))
    >>> first = a.take(1000, np.uint8); a.reset()
    >>> x, y = a.take(3, np.float64), a.take(2, np.int32)
    >>> int(y.ctypes.data - x.ctypes.data), bool(np.shares_memory(x, first))
    (64, True)
    """

    ALIGN = 64

    def __init__(self, alloc) -> None:
        self.alloc, self.block, self.offset = alloc, None, 0

    def reset(self) -> None:
        self.offset = 0

    def take(self, n: int, dtype):
        dt = np.dtype(dtype)
        nbytes = max(1, n * dt.itemsize)
        start = -(-self.offset // self.ALIGN) * self.ALIGN
        if self.block is None or start + nbytes > self.block.size:
            size = max(nbytes, 2 * (self.block.size if self.block is not None else 0))
            self.block, start = self.alloc(size), 0
        self.offset = start + nbytes
        return self.block[start:start + n * dt.itemsize].view(dt)


class HostWire:
    """NumPy buffers: sent and received as their bytes; temporaries come from an :class:`Arena`."""

    name = "host"
    xp = np
    #: whether a receive's ``finish`` completes a request of the sender (an ack): such receives
    #: must finish as soon as they arrive, never batched at the end of a call
    finish_completes_peers = False

    def __init__(self) -> None:
        self.arena = Arena(lambda nbytes: np.empty(nbytes, np.uint8))

    def begin(self) -> None:
        """Start of a collective: temporaries of the previous one may be reused."""
        self.arena.reset()

    def empty(self, n: int, dtype):
        """A temporary valid until the next :meth:`begin`."""
        return self.arena.take(n, dtype)

    def send_buffer(self, view, pooled: bool = True):
        """What MPI sends for ``view`` (``pooled=False``: staging outlives the collective)."""
        return view.view(np.uint8)

    def recv_buffer(self, n: int, dtype, into=None):
        """``(wire buffer, finish)``: MPI fills the wire buffer; ``finish()`` returns the data."""
        arr = self.empty(n, dtype) if into is None else into
        return arr.view(np.uint8), (lambda: arr)

    def post_send(self, comm, peer: int, tag: int, view, region=None):
        """Start sending ``view`` (this rank's copy of ``region``) to ``peer``: ``(request,
        finish or None)``; the send is done when the request completes."""
        return comm.Isend([self.send_buffer(view), _byte()], dest=peer, tag=tag), None

    def post_recv(self, comm, peer: int, tag: int, region, n: int, dtype, into=None):
        """Start receiving ``n`` elements of ``peer``'s ``region``: ``(request, finish)``;
        ``finish()`` (after the request completes) returns the data (``into`` if given)."""
        buf, fin = self.recv_buffer(n, dtype, into=into)
        return comm.Irecv([buf, _byte()], source=peer, tag=tag), fin

    def combine(self, dst, acc, src, op: str) -> None:
        reduce_copy_with(np, dst, acc, src, op)

    def copy(self, dst, src) -> None:
        np.copyto(dst, src)

    def postdiv(self, dst, n: int) -> None:
        postdiv_with(np, dst, n)

    def finish(self) -> None:
        """Called once the program is done (device layers synchronise here)."""


class DeviceWire(HostWire):
    """CuPy buffers (see module docstring); hooks make it testable without a GPU.

    Parameters
    ----------
    xp : module, optional
        ``cupy`` (default) or a stand-in with the same array functions.
    cuda_aware : bool, optional
        Hand device buffers to MPI; default :func:`query_cuda_aware`.
    pinned_empty, to_host, to_device, synchronize : callables, optional
        Pinned host allocation ``(n, dtype)``, device->host ``(host, dev)``, host->device
        ``(dev, host)`` and a stream synchronisation; CuPy's by default.
    """

    name = "cupy"

    def __init__(self, xp=None, cuda_aware: bool | None = None, *, pinned_empty=None, to_host=None,
                 to_device=None, synchronize=None) -> None:
        if xp is None:
            try:
                import cupy as xp
            except ImportError:
                raise DeviceUnavailable("mpi backend: CuPy arrays need cupy (pip install 'topocoll[cuda12]')") from None
        self.xp = xp
        self.cuda_aware = query_cuda_aware() if cuda_aware is None else bool(cuda_aware)
        self._pinned = pinned_empty or _cupy_pinned_empty
        self._to_host = to_host or (lambda host, dev: dev.get(out=host))
        self._to_device = to_device or (lambda dev, host: dev.set(host))
        self._sync = synchronize or (lambda: xp.cuda.get_current_stream().synchronize())
        self.arena = Arena(lambda nbytes: xp.empty(nbytes, xp.uint8))
        self.pinned = Arena(lambda nbytes: self._pinned(nbytes, np.uint8))
        self.staged = {"to_host": 0, "to_device": 0}

    def begin(self) -> None:
        self.arena.reset()
        self.pinned.reset()

    def send_buffer(self, view, pooled: bool = True):
        if self.cuda_aware:
            self._sync()
            return view.view(self.xp.uint8)
        host = self.pinned.take(view.size, view.dtype) if pooled else self._pinned(view.size, view.dtype)
        self._to_host(host, view)
        self._sync()
        self.staged["to_host"] += 1
        return host.view(np.uint8)

    def recv_buffer(self, n: int, dtype, into=None):
        dev = self.empty(n, dtype) if into is None else into
        if self.cuda_aware:
            self._sync()
            return dev.view(self.xp.uint8), (lambda: dev)
        host = self.pinned.take(n, dtype)

        def finish():
            self._to_device(dev, host)
            self.staged["to_device"] += 1
            return dev
        return host.view(np.uint8), finish

    def combine(self, dst, acc, src, op: str) -> None:
        reduce_copy_with(self.xp, dst, acc, src, op)

    def copy(self, dst, src) -> None:
        dst[...] = src

    def postdiv(self, dst, n: int) -> None:
        postdiv_with(self.xp, dst, n)

    def finish(self) -> None:
        self._sync()


_BYTE = []


def _byte():
    """``MPI.BYTE`` (looked up once: this runs for every message)."""
    if not _BYTE:
        from kernels.mpi.waiter import mpi
        _BYTE.append(mpi().BYTE)
    return _BYTE[0]


def _cupy_pinned_empty(n: int, dtype):
    import cupyx
    return cupyx.empty_pinned(n, dtype)
