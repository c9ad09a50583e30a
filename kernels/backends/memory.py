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
from pathlib import Path

from topo_probe.errors import InvalidArgument

#: scratch below this many bytes is not checked (the check reads /proc or asks the GPU)
CHECK_FROM_BYTES = 16 << 20


def available_host_bytes() -> int | None:
    """What this process may still allocate on the host: the least of the machine's
    ``MemAvailable`` (``/proc/meminfo``; else free physical pages), the room under this process's
    address-space limit (``ulimit -v``: ``RLIMIT_AS`` less its ``VmSize``) and the room under its
    cgroup's memory limit (v2 ``memory.max`` less ``memory.current``, v1 ``memory.limit_in_bytes``
    less ``memory.usage_in_bytes``, on every ancestor); None if none is known."""
    known = [b for b in (_machine_available(), address_space_room(), cgroup_room()) if b is not None]
    return min(known) if known else None


def _machine_available() -> int | None:
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


def address_space_room() -> int | None:
    """Room under this process's address-space limit (``ulimit -v``): ``RLIMIT_AS`` less this
    process's ``VmSize``, None without a limit.  Every mapping counts, also pages never touched
    (which the machine's and a cgroup's memory do not)."""
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY:
        return None
    used = 0
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    used = int(line.split()[1]) * 1024
    except OSError:
        pass
    return max(0, soft - used)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None      # v2's "max": no limit


def cgroup_room(proc_cgroup: str | Path = "/proc/self/cgroup", root: str | Path = "/sys/fs/cgroup") -> int | None:
    """The least ``limit - usage`` over this process's memory cgroup and its ancestors (v2, else
    v1); None where no limit is set or nothing can be read.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> (d / "cg" / "job").mkdir(parents=True)
    >>> _ = (d / "self").write_text("0::/job\\n")
    >>> _ = (d / "cg" / "job" / "memory.max").write_text("4294967296\\n")
    >>> _ = (d / "cg" / "job" / "memory.current").write_text("1073741824\\n")
    >>> _ = (d / "cg" / "memory.max").write_text("max\\n")
    >>> cgroup_room(d / "self", d / "cg") == 3 << 30
    True
    """
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    root = Path(root)
    rooms = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if controllers == "":                                    # v2
            base, limit_name, usage_name = root, "memory.max", "memory.current"
        elif "memory" in controllers.split(","):                 # v1
            base, limit_name, usage_name = root / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        rel_parts = [p for p in rel.split("/") if p]
        for k in range(len(rel_parts), -1, -1):                  # the cgroup, then each ancestor
            folder = base.joinpath(*rel_parts[:k])
            limit, usage = _read_int(folder / limit_name), _read_int(folder / usage_name)
            if limit is not None and usage is not None and limit < (1 << 62):
                rooms.append(max(0, limit - usage))
    return min(rooms) if rooms else None


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


__all__ = ["address_space_room", "admit", "available_host_bytes", "cgroup_room", "available_gpu_bytes", "gib",
           "CHECK_FROM_BYTES"]
