"""The memcpy route of the native executor: a program that only copies (no reduce, no dependency
between ops: a direct gather, scatter, all-gather, all-to-all or broadcast) with every rank on
one GPU runs as one device-to-device copy per transfer instead of the interpreter, where the
driver's copy is faster (:class:`kernels.native.launcher.NativeContext` decides and captures
the copies into its CUDA graph)."""

from __future__ import annotations

from typing import Sequence

from kernels.program.ops import Program

#: a copy-only program on one GPU runs as memcpys when its smallest op moves at least this
#: many bytes (below, one interpreter launch beats several copy launches)
COPY_ROUTE_MIN_BYTES = 8 << 20
#: cudaMemcpyDeviceToDevice
D2D = 3


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


def issue_copies(cp, copies: list, stream) -> None:
    """``(dst address, src address, bytes)`` per copy, as device-to-device copies on ``stream``."""
    memcpy = cp.cuda.runtime.memcpyAsync
    for dst, src, nbytes in copies:
        memcpy(dst, src, nbytes, D2D, stream.ptr)


__all__ = ["COPY_ROUTE_MIN_BYTES", "copy_route", "issue_copies"]
