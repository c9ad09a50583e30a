"""NCCL itself, through CuPy's bindings (``cupy.cuda.nccl``), for the size ranges where the plan
says NCCL is faster.

One process holds every rank (the single-process Communicator): the communicators are made
once with ``NcclCommunicator.initAll(devices)`` and each call is a ``groupStart`` / one call per
rank / ``groupEnd``, on each rank's current stream.  CuPy is imported only here and only when
NCCL is asked for; :func:`nccl_available` says whether it can run (CuPy built with NCCL and at
least one GPU), so the Communicator runs the plan's fallback schedule where it cannot
(:mod:`kernels.comm.route`).

Collectives NCCL has as single calls: allreduce, allgather, reducescatter, broadcast, reduce
(gather, scatter and alltoall are point-to-point in NCCL and run as our schedules instead).
"""

from __future__ import annotations

import numpy as np

from synth.plan.user_warning import warn_user
from topo_probe.errors import DeviceUnavailable, InvalidArgument

#: why NCCL cannot run where CuPy with NCCL or a GPU is missing
NO_NCCL = "no NCCL here (it needs CuPy built with NCCL and a GPU)"
#: the collectives NCCL runs as one call
NCCL_CALLS = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")
_OPS = {"sum": "NCCL_SUM", "prod": "NCCL_PROD", "max": "NCCL_MAX", "min": "NCCL_MIN", "avg": "NCCL_AVG"}
#: NCCL datatype of each NumPy dtype name (cupy.cuda.nccl constants, NCCL 2.28 ncclDataType_t)
NCCL_TYPES = {"int8": "NCCL_INT8", "uint8": "NCCL_UINT8", "int32": "NCCL_INT32", "uint32": "NCCL_UINT32",
              "int64": "NCCL_INT64", "uint64": "NCCL_UINT64", "float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32",
              "float64": "NCCL_FLOAT64", "bfloat16": "NCCL_BFLOAT16"}


def _nccl_module():
    try:
        from cupy.cuda import nccl
    except Exception as exc:                 # no CuPy, or CuPy built without NCCL
        raise DeviceUnavailable(f"NCCL through CuPy is not available ({type(exc).__name__}: {exc})") from None
    if not getattr(nccl, "available", True):
        raise DeviceUnavailable("CuPy was built without NCCL")
    return nccl


def nccl_available() -> bool:
    """Whether NCCL can run here (CuPy with NCCL and a GPU); never raises."""
    try:
        _nccl_module()
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def nccl_runtime_or_reason(devices: list[int], nccl=None, device_count: int | None = None
                           ) -> tuple["NcclRuntime | None", str]:
    """``(NcclRuntime over devices, '')``, or ``(None, why)`` where NCCL cannot run them: no
    CuPy/NCCL/GPU, a device index past the GPUs there, two ranks on one GPU (NCCL refuses that:
    "Duplicate GPU detected"), or NCCL's own initialisation failing."""
    if nccl is None:
        if not nccl_available():
            return None, NO_NCCL
        import cupy
        device_count = cupy.cuda.runtime.getDeviceCount()
    if len(set(devices)) != len(devices):
        return None, f"ranks share a GPU (devices {list(devices)}); NCCL needs one GPU per rank"
    if device_count is not None and any(d < 0 or d >= device_count for d in devices):
        return None, f"devices {list(devices)} are not all among the {device_count} GPUs here"
    try:
        return NcclRuntime(list(devices), nccl=nccl), ""
    except Exception as exc:             # NcclError, CUDA errors: NCCL cannot run here
        return None, f"NCCL did not start ({type(exc).__name__}: {exc})"


def nccl_runtime_or_none(devices: list[int], nccl=None, device_count: int | None = None) -> "NcclRuntime | None":
    """:func:`nccl_runtime_or_reason`'s runtime, or None with one warning saying why (where CuPy
    with NCCL and a GPU is there at all)."""

    runtime, why = nccl_runtime_or_reason(devices, nccl, device_count)
    if runtime is None and (nccl is not None or nccl_available()):
        warn_user(f"NCCL cannot run this communicator: {why}; the plan's nccl ranges run the plan's fallback "
                  f"schedule instead", RuntimeWarning)
    return runtime


class NcclRuntime:
    """NCCL communicators over ``devices`` (one rank per device, this process) and the calls.

    ``nccl`` is the ``cupy.cuda.nccl`` module (tests pass a fake with the same names).
    """

    def __init__(self, devices: list[int], nccl=None) -> None:
        self.nccl = nccl if nccl is not None else _nccl_module()
        self.devices = list(devices)
        self.comms = self.nccl.NcclCommunicator.initAll(self.devices)

    def _dtype(self, arr) -> int:
        name = "bfloat16" if str(arr.dtype) == "bfloat16" else np.dtype(arr.dtype).name
        if name not in NCCL_TYPES:
            raise InvalidArgument(f"NCCL has no datatype for {arr.dtype}")
        return getattr(self.nccl, NCCL_TYPES[name])

    def run(self, collective: str, sends: list, recvs: list, count: int, *, op: str = "sum", root: int = 0,
            streams: list | None = None) -> list:
        """One NCCL call per rank inside a group; ``count`` is NCCL's count (elements per rank
        buffer for allreduce/broadcast/reduce, per block for allgather/reducescatter)."""
        if collective not in NCCL_CALLS:
            raise InvalidArgument(f"NCCL has no single call for {collective}")
        nccl = self.nccl
        ref = next(a for a in list(sends) + list(recvs) if a is not None)
        dtype, red = self._dtype(ref), getattr(nccl, _OPS[op])
        nccl.groupStart()
        try:
            for r, comm in enumerate(self.comms):
                s, d = sends[r], recvs[r]
                sp = s.data.ptr if s is not None else (d.data.ptr if d is not None else 0)
                dp = d.data.ptr if d is not None else sp
                st = streams[r].ptr if streams is not None else 0
                if collective == "allreduce":
                    comm.allReduce(sp, dp, count, dtype, red, st)
                elif collective == "allgather":
                    comm.allGather(sp, dp, count, dtype, st)
                elif collective == "reducescatter":
                    comm.reduceScatter(sp, dp, count, dtype, red, st)
                elif collective == "broadcast":
                    comm.broadcast(sp, dp, count, dtype, root, st)
                else:
                    comm.reduce(sp, dp, count, dtype, red, root, st)
        finally:
            nccl.groupEnd()
        return recvs


__all__ = ["NcclRuntime", "nccl_available", "nccl_runtime_or_none", "nccl_runtime_or_reason", "NO_NCCL", "NCCL_CALLS", "NCCL_TYPES"]
