"""Point-to-point transfers of :class:`kernels.comm.communicator.Communicator` (one process holds
every rank).

:func:`send_recv` copies one rank's array into another's (NumPy or CuPy, same dtype, device
kinds must agree).  :func:`post` pairs ``send`` / ``recv`` posts like NCCL: FIFO per (source,
destination) pair; a post waits in its queue until the matching one arrives, then the copy
happens.  :func:`pending` lists what is still unmatched.

>>> import numpy as np
>>> sends, recvs, got = {}, {}, np.zeros(3)
>>> post(recvs, sends, (0, 1), got, sending=False, size=2, deliver=lambda s, d, a, b: send_recv(s, d, a, b, size=2))
>>> pending(sends, recvs)
[('recv', 0, 1)]
>>> post(sends, recvs, (0, 1), np.ones(3), sending=True, size=2, deliver=lambda s, d, a, b: send_recv(s, d, a, b, size=2))
>>> got.tolist(), pending(sends, recvs)
([1.0, 1.0, 1.0], [])
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from kernels.comm.validation import _device, _flat, _is_cupy, check_array
from topo_probe.errors import BufferLayoutError, InvalidArgument


def send_recv(src_rank: int, dst_rank: int, src_array, dst_array, *, size: int) -> None:
    """Copy ``src_array`` (held by ``src_rank``) into ``dst_array`` (held by ``dst_rank``) of a
    ``size``-rank communicator: NumPy or CuPy arrays of an NCCL type, the same dtype and the same
    number of elements (BufferLayoutError otherwise, naming the ranks)."""
    check_array(src_array, "send_recv", src_rank)
    check_array(dst_array, "send_recv", dst_rank)
    for what, r in (("src_rank", src_rank), ("dst_rank", dst_rank)):
        if not 0 <= int(r) < size:
            raise InvalidArgument(f"send_recv: {what} {r} is not a rank (0..{size - 1})")
    if src_array.dtype != dst_array.dtype:
        raise InvalidArgument(f"send_recv: rank {dst_rank}: dtype {dst_array.dtype} differs from rank "
                         f"{src_rank}'s {src_array.dtype}")
    dst = _flat(dst_array, f"send_recv: rank {dst_rank}'s array")
    if dst.size != src_array.size:
        raise BufferLayoutError(f"send_recv: rank {dst_rank} receives {dst.size} elements but rank {src_rank} "
                                f"sends {src_array.size}; send and recv must name the same count (as NCCL's)")
    src = src_array.reshape(-1)
    if _is_cupy(dst) or _is_cupy(src):
        if not (_is_cupy(dst) and _is_cupy(src)):
            raise InvalidArgument(f"send_recv: rank {dst_rank}: device {_device(dst)} and rank {src_rank}'s "
                             f"{_device(src)} differ in kind")
        src = src if src.flags.c_contiguous else src.copy()
        dst.data.copy_from_device(src.data, src.nbytes)
    else:
        dst[...] = src


def post(mine: dict, theirs: dict, pair: tuple[int, int], array, *, sending: bool, size: int,
         deliver: Callable) -> None:
    """Post ``array`` for ``pair`` = (source rank, destination rank): when ``theirs`` (the
    other direction's queues) holds a post for the pair, the oldest is matched and
    ``deliver(src_rank, dst_rank, src_array, dst_array)`` copies; else the post is queued in
    ``mine``."""
    for r in pair:
        if not 0 <= int(r) < size:
            raise InvalidArgument(f"{'send' if sending else 'recv'}: {r} is not a rank (0..{size - 1})")
    if theirs.get(pair):
        other = theirs[pair].popleft()
        src, dst = (array, other) if sending else (other, array)
        deliver(pair[0], pair[1], src, dst)
    else:
        mine.setdefault(pair, deque()).append(array)


def pending(sends: dict, recvs: dict) -> list[tuple[str, int, int]]:
    """Unmatched posts: ``("send" | "recv", src, dst)`` each (sends first)."""
    return ([("send", s, d) for (s, d), q in sends.items() for _ in q]
            + [("recv", s, d) for (s, d), q in recvs.items() for _ in q])
