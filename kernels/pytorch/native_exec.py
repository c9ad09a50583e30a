"""The native executor for a ``topocoll`` group's CUDA tensors: one launch per process of its
rank's share of the device program, peers' buffers read through CUDA IPC
(:mod:`kernels.mpi.native` and :mod:`kernels.mpi.native_call`, the path MPI ranks take, over
:class:`~kernels.pytorch.native_comm.StoreComm`).

The tensors go to CuPy without a copy (DLPack; as bytes, so every dtype torch has passes, the
device program names the element type); the launch and the entry and exit synchronisations run
on torch's current stream of the call (the caller's stream, captured when the call was made:
:class:`~kernels.pytorch.work.CallQueue`).  Entry and exit barriers wait on the host, as the MPI
path's do: no kernel reads a peer's buffer before the peer reached the call, and no rank returns
(letting its caller overwrite a buffer) while a peer may still read it.

Whether a group runs natively is decided once, by every rank together, on its first CUDA call
(:meth:`NativeExecutor.ready`): each says whether it can (CuPy importable, the caching
allocator's memory shareable through CUDA IPC: not ``expandable_segments`` nor the
``cudaMallocAsync`` backend, ``TOPOCOLL_TORCH_NATIVE`` not ``never``; every rank on one host), and
the runner's own start-up then checks that every rank can map every peer's GPU memory.  If any
cannot, every rank stages through the host for good and :attr:`NativeExecutor.why_not` says why.
CUDA graphs are off: capturing on the group's worker thread while the caller's thread
allocates fails under CUDA's global capture mode.
"""

from __future__ import annotations

import contextlib
import os
import time

import numpy as np
import torch

from kernels.mpi.agreement import header_digest, schedule_digest
from kernels.mpi.native_call import IN_PLACE, NO_SAY, OUT_OF_PLACE, NativeCall, NativeRunner
from kernels.mpi.native_cuda import CudaShareBackend
from kernels.native.source import DTYPE_CODES
from kernels.pytorch.dtypes import numpy_dtype
from kernels.pytorch.errors import BadTensor, CollectiveMismatch
from kernels.pytorch.native_comm import StoreComm
from topo_probe.errors import BufferLayoutError, ProcessGroupMismatch

#: ``TOPOCOLL_TORCH_NATIVE``: ``auto`` (default) or ``never`` (stage CUDA tensors through the host)
ENV = "TOPOCOLL_TORCH_NATIVE"


def local_reason() -> str:
    """Why this process cannot run the native path ('' where it can)."""
    if os.environ.get(ENV, "auto") == "never":
        return f"{ENV}=never"
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        conf = os.environ.get(name, "").replace(" ", "").lower()
        for setting in ("expandable_segments:true", "backend:cudamallocasync"):
            if setting in conf:
                return f"{name} sets {setting} (such memory cannot be shared through CUDA IPC)"
    try:
        import cupy  # noqa: F401
    except ImportError:
        return "CuPy is not installed (pip install cupy-cuda12x or cupy-cuda13x)"
    return ""


def as_array(t: torch.Tensor):
    """``t``'s bytes as a CuPy array (CUDA, through DLPack) or a NumPy array (CPU), no copy."""
    flat = t.reshape(-1).view(torch.uint8)
    if t.is_cuda:
        import cupy as cp
        return cp.from_dlpack(flat)
    return flat.numpy()


class PhaseClock:
    """Seconds the native calls of a group spent per phase (``time.perf_counter``), for the
    benchmark's breakdown of a call: ``total`` (:meth:`NativeExecutor.run`), ``sockets`` (the
    entry and exit all-gathers), ``export`` (CUDA IPC handles of the user's buffers),
    ``input_sync`` (the stream synchronised before the entry barrier), ``launch``, ``device``
    (from the launch to the stream's completion: the kernel, its waits for the peers' kernels
    included).  About 0.2 µs per phase."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls = 0

    def add(self, phase: str, since: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - since

    def reset(self) -> None:
        self.seconds, self.calls = {}, 0

    def per_call_us(self) -> dict:
        """µs per call of each phase, and ``other`` (the rest of ``total``: the runner's host work)."""
        per = {k: v / max(1, self.calls) * 1e6 for k, v in self.seconds.items()}
        per["other"] = per.get("total", 0.0) - sum(v for k, v in per.items() if k != "total")
        return per


class TorchCudaShareBackend(CudaShareBackend):
    """:class:`kernels.mpi.native_cuda.CudaShareBackend` for torch's tensors: scratch in bytes
    (CuPy may lack the element type, e.g. bfloat16), launches on torch's current stream; each
    phase timed on ``clock`` (a :class:`PhaseClock`)."""

    def __init__(self, clock: PhaseClock | None = None, **kw) -> None:
        super().__init__(**kw)
        self.clock = clock or PhaseClock()
        self._launched = False

    def export(self, arr, what: str) -> dict:
        t0 = time.perf_counter()
        try:
            return super().export(arr, what)
        finally:
            self.clock.add("export", t0)

    def launch(self, share, b: dict, *, graph: bool) -> None:
        t0 = time.perf_counter()
        super().launch(share, b, graph=graph)
        self._launched = True
        self.clock.add("launch", t0)

    def synchronize(self) -> None:
        t0 = time.perf_counter()
        super().synchronize()
        self.clock.add("device" if self._launched else "input_sync", t0)
        self._launched = False

    def empty(self, n: int, dtype):
        return self.cp.empty(n * np.dtype(dtype).itemsize, self.cp.uint8)

    def scope(self, t: torch.Tensor) -> contextlib.ExitStack:
        """CuPy's device and current stream set to ``t``'s device and torch's current stream."""
        ctx = contextlib.ExitStack()
        ctx.enter_context(self.cp.cuda.Device(t.device.index))
        stream = torch.cuda.current_stream(t.device)
        ctx.enter_context(self.cp.cuda.ExternalStream(stream.cuda_stream, t.device.index))
        return ctx


class ExportOncePerCall:
    """A share backend whose :meth:`export` of the same buffer (address and bytes) twice between
    two synchronisations, i.e. within one call, hands back the first answer: an in-place call
    names its one tensor as both send and receive buffer, and an export is a driver call
    (``cuMemGetAddressRange``, ``cudaIpcGetMemHandle``) per buffer.  Everything else is the
    wrapped backend's."""

    def __init__(self, backend) -> None:
        self._backend, self._exported = backend, {}

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def export(self, arr, what: str) -> dict:
        key = (self._backend.address(arr), int(arr.nbytes))
        hit = self._exported.get(key)
        if hit is None:
            hit = self._exported[key] = self._backend.export(arr, what)
        return hit

    def synchronize(self) -> None:
        self._exported.clear()
        self._backend.synchronize()


class _Agreed:
    """The call was agreed before (:func:`kernels.pytorch.agreement.agree`)."""

    def wait(self):
        return None


class NativeExecutor:
    """The native path of one process group (module docstring).  ``group``: its point-to-point
    transport; ``backend``: ``"auto"`` (:class:`TorchCudaShareBackend` on CUDA tensors) or a
    share backend object (tests: NumPy in shared memory, CPU tensors)."""

    def __init__(self, group, rank: int, size: int, backend="auto") -> None:
        self.group, self.rank, self.size, self.backend = group, rank, size, backend
        self.runner: NativeRunner | None = None
        self.why_not = ""                 # why the group stages through the host ('' while it may run natively)
        self._digests: dict = {}
        self.clock = PhaseClock()

    def takes(self, t: torch.Tensor) -> bool:
        """Whether calls on ``t`` go native: CUDA tensors (a test backend: any tensor; its
        memory must be the backend's) of an element type the kernel has (not int16 or bool:
        those stage through the host)."""
        return (t.is_cuda or self.backend != "auto") and numpy_dtype(t.dtype).name in DTYPE_CODES

    @property
    def launches(self) -> int:
        """Calls this process ran natively (one launch each)."""
        return self.runner.launches if self.runner is not None else 0

    def ready(self) -> bool:
        """Collective, on the first call only: whether every rank may run natively."""
        if self.runner is not None or self.why_not:
            return not self.why_not
        comm = StoreComm(self.group, self.rank, self.size, clock=self.clock)
        from kernels.mpi.waiter import exchange_json
        mine = local_reason() if self.backend == "auto" else ""
        reasons = exchange_json(comm._ctrl, comm.waiter, mine, self.size, "native: agreeing on the native path",
                                limit=1024)
        bad = [f"rank {r}: {why}" for r, why in enumerate(reasons) if why]
        if len(set(comm.hosts)) > 1:          # CUDA IPC maps memory of this node only
            bad.append(f"the ranks are on {len(set(comm.hosts))} hosts")
        if bad:
            self.why_not = "; ".join(bad)
            return False
        backend = TorchCudaShareBackend(self.clock) if self.backend == "auto" else self.backend
        self.runner = NativeRunner(comm, ExportOncePerCall(backend), graphs=False)
        return True

    def run(self, schedule, send, recv, count: int, op: str, protocol: str | None = None) -> bool:
        """Run ``schedule`` natively on flat contiguous ``send`` / ``recv`` (either None where
        this rank has none; the same tensor for in place) under ``protocol`` (the plan entry's,
        :attr:`kernels.comm.route.Route.protocol`; None: Simple); False where every rank must take
        the host path instead (not possible here, or the ranks disagree on in place)."""
        if not self.ready():
            return False
        t0 = time.perf_counter()
        try:
            return self._run(schedule, send, recv, count, op, protocol or "simple")
        finally:
            self.clock.calls += 1
            self.clock.add("total", t0)

    def _run(self, schedule, send, recv, count: int, op: str, protocol: str) -> bool:
        from kernels.backends.executor import program_for
        from kernels.native.layer import resolve_protocol
        ref = send if send is not None else recv
        dtype = numpy_dtype(ref.dtype)
        inplace = send is not None and send is recv
        prog = program_for(schedule, count, dtype, inplace=inplace, op=op)
        code = NO_SAY if send is None or recv is None else IN_PLACE if inplace else OUT_OF_PLACE
        protocol = resolve_protocol(prog, protocol)
        digest = self._digest(schedule, count, dtype, op, protocol)
        scope = getattr(self.runner.backend, "scope", None)
        try:
            with scope(ref) if scope is not None else contextlib.nullcontext():   # DLPack on torch's stream too
                user = {"send": None if send is None else as_array(send),
                        "recv": None if recv is None else as_array(recv)}
                call = NativeCall(self.runner, schedule, prog, count, dtype, op, code, user, digest, wire=False,
                                  protocol=protocol)
                wire, _ = call.run(_Agreed())
        except BufferLayoutError as exc:     # the same line on every rank, as a RuntimeError too
            raise BadTensor(f"native path: {exc}") from None
        except ProcessGroupMismatch as exc:
            raise CollectiveMismatch(f"native path: {exc}") from None
        if self.runner.enabled is False:
            self.why_not = "a rank cannot map its peers' GPU memory (CUDA IPC)"
        return wire is None

    def _digest(self, schedule, count: int, dtype, op: str, protocol: str = "simple") -> int:
        """The call's digest (it names schedule, count, dtype, op and protocol, equal on every
        rank; the runner keeps one share per digest)."""
        hit = self._digests.get(id(schedule))
        if hit is None or hit[0] is not schedule:
            if len(self._digests) > 64:
                self._digests.clear()
            hit = self._digests[id(schedule)] = (schedule, schedule_digest(schedule))
        spec = schedule.spec
        return header_digest({"collective": spec.name, "root": spec.root, "count": count, "dtype": dtype.name,
                              "op": op, "schedule": f"{schedule.name or 'schedule'}:{hit[1]}:{protocol}"})

    def close(self) -> None:
        if self.runner is not None:
            self.runner.drop()


__all__ = ["NativeExecutor", "ExportOncePerCall", "PhaseClock", "TorchCudaShareBackend", "as_array", "local_reason",
           "ENV"]
