"""Point-to-point transfers of :class:`kernels.comm.communicator.Communicator` (one process holds
every rank).

:func:`send_recv` copies one rank's array into another's (NumPy or CuPy, same dtype, device
kinds must agree).  :func:`post` pairs ``send`` / ``recv`` posts like NCCL: FIFO per (source,
destination) pair; a post waits in its queue until the matching one arrives, then the copy
happens.  :func:`pending` lists what is still unmatched.  Ranks must be integers of the communicator (not
bools, floats or strings), and each array is checked when it is posted (NCCL type, its rank's
GPU where the devices are known, a receive buffer writable and C-contiguous): a bad post raises
at once and is not queued, and a pair that cannot be copied (counts or dtypes differ) raises
with nothing written and leaves the earlier post queued; a queued post that became invalid after it
was posted (a receive buffer made read-only), or that cannot be checked again (a layer raising
anything else), is dropped when matched, with the post that met it (not queued), in one error naming
it (rank, peer, count): the pair's queue never jams and its later posts keep their order.

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

from kernels.backends.binding import check_buffer
from kernels.comm.validation import _device, _flat, _is_cupy, check_root
from topo_probe.errors import BufferLayoutError, InvalidArgument


def check_p2p_array(what: str, rank: int, array, *, receiving: bool, devices: list[int] | None = None):
    """``array`` as rank ``rank``'s send (or receive) buffer: not None, an NCCL-typed NumPy or CuPy
    array (on ``devices[rank]`` where given); a receive buffer also C-contiguous and writable.
    Returns its flat view (receive) or the array (send); BufferLayoutError naming ``what`` and the rank."""
    if array is None:
        raise BufferLayoutError(f"{what}: rank {rank}'s array is None")
    check_buffer(array, f"{what}: rank {rank}", device=None if devices is None else devices[rank])
    if not receiving:
        return array
    if not getattr(array.flags, "writeable", True):
        raise BufferLayoutError(f"{what}: rank {rank}'s array is read-only")
    return _flat(array, f"{what}: rank {rank}'s array")


def send_recv(src_rank: int, dst_rank: int, src_array, dst_array, *, size: int,
              devices: list[int] | None = None, what: str = "send_recv") -> None:
    """Copy ``src_array`` (held by ``src_rank``) into ``dst_array`` (held by ``dst_rank``) of a
    ``size``-rank communicator: NumPy or CuPy arrays of an NCCL type (on their ranks' GPUs,
    ``devices``, where given), the same dtype and the same number of elements, the destination
    writable and C-contiguous (BufferLayoutError otherwise, naming ``what``, the method called,
    and the ranks; nothing written)."""
    src_rank = check_root(what, src_rank, size, "src_rank")
    dst_rank = check_root(what, dst_rank, size, "dst_rank")
    check_p2p_array(what, src_rank, src_array, receiving=False, devices=devices)
    dst = check_p2p_array(what, dst_rank, dst_array, receiving=True, devices=devices)
    if src_array.dtype != dst_array.dtype:
        raise InvalidArgument(f"{what}: rank {dst_rank}: dtype {dst_array.dtype} differs from rank "
                              f"{src_rank}'s {src_array.dtype}")
    if dst.size != src_array.size:
        raise BufferLayoutError(f"{what}: rank {dst_rank} receives {dst.size} elements but rank {src_rank} "
                                f"sends {src_array.size}; send and recv must name the same count (as NCCL's)")
    src = src_array.reshape(-1)
    if _is_cupy(dst) or _is_cupy(src):
        if not (_is_cupy(dst) and _is_cupy(src)):
            raise InvalidArgument(f"{what}: rank {dst_rank}: device {_device(dst)} and rank {src_rank}'s "
                                  f"{_device(src)} differ in kind")
        src = src if src.flags.c_contiguous else src.copy()
        dst.data.copy_from_device(src.data, src.nbytes)
    else:
        dst[...] = src


def post(mine: dict, theirs: dict, pair: tuple[int, int], array, *, sending: bool, size: int,
         deliver: Callable | None = None, devices: list[int] | None = None) -> None:
    """Post ``array`` for ``pair`` = (source rank, destination rank), checked first
    (:func:`check_p2p_array`, the posting rank's): when ``theirs`` (the other direction's queues)
    holds a post for the pair, the oldest is matched and ``deliver(src_rank, dst_rank, src_array,
    dst_array)`` copies (default :func:`send_recv`, its errors naming ``send`` or ``recv``: the method
    called; where it raises, the matched post goes back to the head of its queue, or, no longer valid
    itself, is dropped with this post: :func:`_requeue_or_drop`; an interrupt puts it back unchecked);
    else the post is queued in ``mine``."""
    what = "send" if sending else "recv"
    pair = tuple(check_root(what, r, size, "") for r in pair)
    check_p2p_array(what, pair[0] if sending else pair[1], array, receiving=not sending, devices=devices)
    deliver = deliver or (lambda s, d, a, b: send_recv(s, d, a, b, size=size, devices=devices, what=what))
    if theirs.get(pair):
        other = theirs[pair].popleft()
        src, dst = (array, other) if sending else (other, array)
        try:
            deliver(pair[0], pair[1], src, dst)
        except Exception:
            _requeue_or_drop(theirs[pair], other, what, pair, devices)
            raise
        except BaseException:     # an interrupt (Ctrl-C): the matched post goes back as it was, never lost
            theirs[pair].appendleft(other)
            raise
    else:
        mine.setdefault(pair, deque()).append(array)


def _requeue_or_drop(queue: deque, other, what: str, pair: tuple[int, int], devices) -> None:
    """After a failed match: the queued post goes back to the head of its queue where it is still a
    valid post on its own (the new post was the bad one: counts or dtypes differ); a queued post that
    became invalid after it was posted (its receive buffer made read-only), or that cannot be checked
    again at all (a layer or device raising something else), is dropped, and the error names it (its
    rank, peer and count) and says so, so that it never blocks the posts behind it (there is no cancel
    call, as in NCCL).  The new post is not queued either: the failed pair leaves as one, so the pair's
    later sends and recvs still meet in their posting order (the k-th remaining send the k-th remaining recv)."""
    theirs = "recv" if what == "send" else "send"
    rank, peer = (pair[1], pair[0]) if theirs == "recv" else pair
    try:
        check_p2p_array(theirs, rank, other, receiving=theirs == "recv", devices=devices)
    except Exception as err:      # noqa: BLE001 - any failure: the queued post cannot be trusted, name it
        invalid = isinstance(err, BufferLayoutError)
        state, why = ("is no longer valid", err) if invalid else ("could not be checked again",
                                                                  f"{type(err).__name__}: {err}")
        raise BufferLayoutError(f"{what}: the queued {theirs} {pair[0]}->{pair[1]} it matched (rank {rank}, peer "
                                f"{peer}, {_count(other)} elements) {state} ({why}); nothing was written, that "
                                f"{theirs} is dropped and this {what} is not queued: post both again"
                                ) from (None if invalid else err)
    queue.appendleft(other)


def _count(array) -> str:
    """``array``'s element count for an error line ('?' where even that cannot be read)."""
    try:
        return str(int(array.size))
    except Exception:             # noqa: BLE001 - the line must still come out
        return "?"


def pending(sends: dict, recvs: dict) -> list[tuple[str, int, int]]:
    """Unmatched posts: ``("send" | "recv", src, dst)`` each (sends first)."""
    return ([("send", s, d) for (s, d), q in sends.items() for _ in q]
            + [("recv", s, d) for (s, d), q in recvs.items() for _ in q])
