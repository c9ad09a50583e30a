"""Point-to-point transfers of :class:`kernels.mpi.communicator.MPICommunicator`: ``send`` posts,
``recv`` blocks with the deadline, ``wait_sends`` waits for every posted send.

As in NCCL, a receive must name exactly the size that was sent: the receiver probes the message
first (``Improbe``) and compares its byte count with its own buffer's, and its element type
(the message's tag is the type's index in :data:`~kernels.backends.binding.NCCL_DTYPES`, plus 1:
stricter than NCCL and MPI over ``MPI_BYTE``, which reinterpret the bytes); a mismatch is received
into a throwaway buffer (the channel stays clean for the next message) and raises
:class:`~topo_probe.errors.BufferLayoutError` naming both ranks and both sizes (MPI alone accepts
a shorter message silently and fails a longer one with ``MPI_ERR_TRUNCATE``).
"""

from __future__ import annotations

import time

import numpy as np

from kernels.backends.binding import NCCL_DTYPES
from kernels.comm.validation import _contig, _out, check_array
from kernels.mpi.transport import abandon
from topo_probe.errors import BufferLayoutError, InvalidArgument

#: seconds a receive from (a send to) a peer that left still waits for its message, from when that
#: wait first sees the departure (the notice may have been read before it began)
LEFT_GRACE_S = 1.0


def check_peer(comm, what: str, peer: int, rank: int | None) -> None:
    """The communicator must be open (not closed by a failed call: the same PeerFailed as a
    collective's), ``peer`` another rank and ``rank`` (if given) this process's."""
    comm.agreement.refuse_if_closed()
    if rank is not None and rank != comm.rank:
        raise InvalidArgument(f"{what}: rank={rank} but this process is rank {comm.rank}")
    if not 0 <= int(peer) < comm.size or peer == comm.rank:
        raise InvalidArgument(f"{what}: rank {comm.rank}: peer {peer} is not another rank (0..{comm.size - 1})")


def send(comm, array, peer: int, rank: int | None = None) -> None:
    """Post a send of ``array`` to ``peer``; it completes once ``peer`` receives (FIFO per pair)."""
    check_peer(comm, "send", peer, rank)
    array = check_array(array, "send", comm.rank)
    wire = comm._wire_for(array)
    buf = wire.send_buffer(_contig(array).reshape(-1), pooled=False)
    tag = 1 + NCCL_DTYPES.index(array.dtype.name)   # checked NCCL type (check_array): the receiver compares
    comm._pending.append((comm._p2p.Isend([buf, comm.waiter.MPI.BYTE], dest=peer, tag=tag), peer, buf))


def recv(comm, array, peer: int, rank: int | None = None) -> None:
    """Receive ``array.size`` elements from ``peer`` into ``array`` (see module docstring)."""
    check_peer(comm, "recv", peer, rank)
    array = _out(check_array(array, "recv", comm.rank), "recv")      # before a message is matched
    if not getattr(array.flags, "writeable", True):
        raise BufferLayoutError(f"recv: rank {comm.rank}'s array is read-only")
    MPI, waiter, me = comm.waiter.MPI, comm.waiter, comm.rank
    msg, got, tag = _probe(comm, peer)
    want = array.size * array.dtype.itemsize
    sent = NCCL_DTYPES[tag - 1] if 0 < tag <= len(NCCL_DTYPES) else f"tag {tag}"
    if got != want or sent != array.dtype.name:
        sink = np.empty(max(got, 1), np.uint8)
        waiter.all([msg.Irecv([sink, MPI.BYTE])], f"recv from rank {peer}", lambda i: peer)
        raise BufferLayoutError(f"recv: rank {me} expects {array.size} {array.dtype.name} ({want} bytes) from "
                                f"rank {peer}, which sent {got} bytes of {sent}; send and recv must name the "
                                f"same size and type")
    wire = comm._wire_for(array)
    buf, fin = wire.recv_buffer(array.size, array.dtype, into=array.reshape(-1))
    req = msg.Irecv([buf, MPI.BYTE])
    try:
        waiter.all([req], f"recv from rank {peer}", lambda i: peer)
    except BaseException:
        abandon([req], [False])  # matched already: it cannot be cancelled, only kept alive
        raise
    fin()
    wire.finish()
    comm._pending[:] = [p for p in comm._pending if not p[0].Test()]   # in place: leaving holds this list


def _probe(comm, peer: int):
    """The next message from ``peer`` (matched: no other receive can take it), its bytes and tag.
    A ``peer`` that left (:mod:`kernels.mpi.leaving`) without it: PeerFailed once nothing came for
    :data:`LEFT_GRACE_S` from when this wait first saw its departure (its notice read now or before;
    its sends went out before the notice)."""
    MPI, waiter = comm.waiter.MPI, comm.waiter
    status = MPI.Status()
    start, gone = time.monotonic(), None
    while True:
        msg = comm._p2p.Improbe(source=peer, tag=MPI.ANY_TAG, status=status)   # in order: one source
        if msg is not None:
            return msg, status.Get_count(MPI.BYTE), status.Get_tag()
        waiter.check_notices()
        now = time.monotonic()
        if peer in waiter.departed:
            gone = now if gone is None else gone
            if now - gone > LEFT_GRACE_S:
                raise waiter._failed(f"rank {comm.rank}: recv from rank {peer}: rank {peer} left (closed its "
                                     f"communicator or ended) without sending it", peer)
        if now - start > waiter.timeout_s:   # the peers stop too, the communicator closes
            waiter.timed_out(f"recv from rank {peer}", [peer])
        time.sleep(2e-5)


def wait_sends(comm) -> None:
    """Wait (with the deadline) until every posted :func:`send` is received; PeerFailed once one
    to a peer that left (:mod:`kernels.mpi.leaving`) is still open :data:`LEFT_GRACE_S` after this wait
    first saw its departure (its notice read now or before)."""
    comm.agreement.refuse_if_closed()   # its sends stay posted (comm._pending keeps their buffers)
    pend = comm._pending[:]   # emptied in place (kernels.mpi.leaving holds this list); a send posted meanwhile stays
    del comm._pending[:len(pend)]
    waiter, reqs, gone = comm.waiter, [p[0] for p in pend], {}
    testall = waiter.MPI.Request.Testall

    def received() -> bool:
        if testall(reqs):
            return True
        for peer in {p[1] for p in pend if p[1] in waiter.departed and not p[0].Get_status()}:
            if time.monotonic() - gone.setdefault(peer, time.monotonic()) > LEFT_GRACE_S:
                raise waiter._failed(f"rank {comm.rank}: send to rank {peer}: rank {peer} left (closed its "
                                     f"communicator or ended) without receiving it", peer)
        return False
    try:
        waiter._poll(received, "send", lambda: [p[1] for p in pend if not p[0].Get_status()])
    except BaseException:   # a departure, a notice, the deadline, Ctrl-C: posted still, keep them (and their buffers)
        abandon(reqs, [False] * len(reqs))
        raise
