"""The MPI-like communicator :class:`kernels.mpi.native_call.NativeRunner` speaks to, made of a
``topocoll`` group's own point-to-point transport (a :class:`~kernels.pytorch.sockets.SocketMesh`
set up through torch's store, or a gloo group): the native path of MPI ranks, unchanged, runs
for a torch process group.

What the runner uses of an MPI communicator, and what stands for it here:

* ``rank``, ``size``, ``ipc`` (``"auto"``) and ``hosts`` (every rank's host name, exchanged once);
* ``_ctrl.Isend`` / ``_ctrl.Irecv`` of byte buffers (:func:`kernels.mpi.waiter.exchange_json`):
  a send goes out at once (the transport queues it), a receive is kept and read when waited for,
  so every rank's sends are posted before any rank blocks on a receive;
* ``_data.Iallgather`` of int64 words (the entry and exit barriers): sends to every peer, then
  one receive from each, done before it returns;
* ``waiter.all(requests, what, peers)``: the kept receives in order, then the sends; a peer that
  is gone or silent past the group's timeout ends the wait with the transport's
  :class:`~kernels.pytorch.errors.PeerGone` (a ``RuntimeError``), naming ``what``.

Messages between a pair arrive in the order sent and carry their tag and size, checked on
arrival; every rank makes the same exchanges in the same order (the calls are agreed first), so
they interleave safely with the group's other traffic on the same transport.
"""

from __future__ import annotations

import socket
import time
import types

import numpy as np
import torch

from kernels.pytorch.errors import PeerGone

#: tags of the runner's messages on the group's transport (the schedules' transfers use theirs)
TAG_ALLGATHER = 7
_MPI = types.SimpleNamespace(BYTE="byte", INT64_T="int64")


class _Sent:
    def __init__(self, work) -> None:
        self.work = work

    def wait(self) -> None:
        self.work.wait()


class _Kept:
    """A receive read when it is waited for."""

    def __init__(self, group, buf: np.ndarray, peer: int, tag: int) -> None:
        self.group, self.buf, self.peer, self.tag = group, buf, peer, tag

    def wait(self) -> None:
        self.group.recv([torch.from_numpy(self.buf)], self.peer, self.tag).wait()


class _Done:
    def wait(self) -> None:
        pass


class _Ctrl:
    """``Isend`` / ``Irecv`` of ``[numpy buffer, type]`` over ``group`` (module docstring)."""

    def __init__(self, group) -> None:
        self.group = group

    def Isend(self, msg, dest: int, tag: int):  # mpi4py's name
        buf = np.ascontiguousarray(msg[0])
        return _Sent(self.group.send([torch.from_numpy(buf.view(np.uint8).copy())], dest, tag))

    def Irecv(self, msg, source: int, tag: int):  # mpi4py's name
        return _Kept(self.group, msg[0].view(np.uint8), source, tag)


class _Data:
    """``Iallgather`` of int64 words over ``group``: done before it returns."""

    def __init__(self, group, rank: int, size: int, clock=None) -> None:
        self.group, self.rank, self.size, self.clock = group, rank, size, clock

    def Iallgather(self, send, recv):  # mpi4py's name
        t0 = time.perf_counter()
        try:
            return self._allgather(send, recv)
        finally:
            if self.clock is not None:
                self.clock.add("sockets", t0)

    def _allgather(self, send, recv):
        mine, out = np.ascontiguousarray(send[0], np.int64), recv[0]
        out[self.rank] = mine
        peers = [p for p in range(self.size) if p != self.rank]
        sends = [self.group.send([torch.from_numpy(mine.copy())], p, TAG_ALLGATHER) for p in peers]
        for p in peers:
            row = np.zeros_like(mine)
            self.group.recv([torch.from_numpy(row)], p, TAG_ALLGATHER).wait()
            out[p] = row
        for s in sends:
            s.wait()
        return _Done()


class _Waiter:
    """``all(requests, what, peers)`` (module docstring)."""

    MPI = _MPI

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def all(self, reqs: list, what: str, peers) -> None:
        for i, req in enumerate(reqs):
            try:
                req.wait()
            except PeerGone as exc:
                raise PeerGone(f"{what}: {exc}") from None
            except RuntimeError as exc:      # gloo's own timeout / closed connection
                raise PeerGone(f"rank {self.rank}: {what}: rank {peers(i)}: {exc}") from None


class StoreComm:
    """What :class:`~kernels.mpi.native_call.NativeRunner` needs of a communicator, over the
    point-to-point ``group`` (``send`` / ``recv`` of CPU tensors, as
    :class:`~kernels.pytorch.sockets.SocketMesh` and ``ProcessGroupGloo`` have) of ranks
    ``rank`` of ``size``.  Made collectively (every rank at once): it exchanges host names.
    ``clock``: a :class:`~kernels.pytorch.native_exec.PhaseClock` the all-gathers are timed on."""

    ipc = "auto"

    def __init__(self, group, rank: int, size: int, clock=None) -> None:
        self.rank, self.size = rank, size
        self._ctrl, self._data, self.waiter = _Ctrl(group), _Data(group, rank, size, clock), _Waiter(rank)
        from kernels.mpi.waiter import exchange_json
        self.hosts = exchange_json(self._ctrl, self.waiter, socket.gethostname(), size,
                                   "native: exchanging host names", limit=256)


__all__ = ["StoreComm", "TAG_ALLGATHER"]
