"""What memory this machine has for a collective's buffers, and the one-line refusal when a call
or a sweep would not fit (instead of the kernel's OOM killer).

:func:`admit` raises :class:`~topo_probe.errors.InvalidArgument` naming what is needed and what
is available; the callers (:func:`kernels.backends.executor.prepare_call` for the schedule's
scratch on the host, :class:`kernels.native.launcher.NativeContext` on each GPU,
:mod:`kernels.sweep.memory` for a whole sweep) decide what to count.

>>> admit(1 << 20, 1 << 30, "allreduce: the schedule's scratch", "host memory")
>>> admit(3 << 30, 1 << 30, "allreduce: the schedule's scratch", "host memory")
Traceback (most recent call last):
...
topo_probe.errors.InvalidArgument: allreduce: the schedule's scratch needs 3.0 GiB of host memory; 1.0 GiB available
"""

from __future__ import annotations

import os

from topo_probe.errors import InvalidArgument

#: scratch below this many bytes is not checked (the check reads /proc or asks the GPU)
CHECK_FROM_BYTES = 16 << 20


def available_host_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` (Linux), else free physical pages; None if unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def available_gpu_bytes(device: int | None = None) -> int | None:
    """Free memory of GPU ``device`` (None: summed over the visible GPUs), through CuPy; None
    without CuPy or GPUs."""
    try:
        import cupy
        total = 0
        devices = range(cupy.cuda.runtime.getDeviceCount()) if device is None else [device]
        for d in devices:
            with cupy.cuda.Device(d):
                total += cupy.cuda.runtime.memGetInfo()[0]
        return total or None
    except Exception:  # noqa: BLE001 - no CuPy, driver or GPU: the backend itself will say so
        return None


def admit(need: int, available: int | None, what: str, where: str) -> None:
    """Raise InvalidArgument (one line) when ``need`` bytes exceed ``available`` (None: unknown,
    admitted)."""
    if available is not None and need > available:
        raise InvalidArgument(f"{what} needs {gib(need)} of {where}; {gib(available)} available")


def gib(n: int) -> str:
    """Bytes as GiB (MiB below 1 GiB), one decimal."""
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


__all__ = ["admit", "available_host_bytes", "available_gpu_bytes", "gib", "CHECK_FROM_BYTES"]
