"""The transport a ``topocoll`` group's schedules run over: one TCP connection per pair of ranks,
set up through torch's own store (each rank publishes the address it listens on; the higher rank
of each pair connects), so ``torchrun`` needs nothing else.

Messages between a pair arrive in the order they were sent; every rank posts a call's sends and
receives in the lowering's op order (:mod:`kernels.pytorch.schedule_share`), so a pair's next
message is always the one its receiver expects: each carries its tag and byte count, checked on
arrival.  A send is queued to the pair's sender thread (it returns at once; the receiver may be
busy sending too), except a small message (:data:`INLINE_BYTES`) while that thread is idle: it
goes out from the caller's thread in one non-blocking ``writev`` (the rest, if the kernel takes
only part, to the thread), as a hand-off to the thread costs a thread wake-up (a context
switch) per message, more than the socket round trip itself on a busy machine.  A receive reads
straight into the destination tensor.  Every wait is bounded
by the group's timeout, and a peer that closes its end (a dead process) ends the call at once:
:class:`~kernels.pytorch.errors.PeerGone`.

gloo's own send/recv would do the same job; on the 2-core machine of ``results/pytorch/`` a
4-byte exchange through it took 2.4 ms against 0.4 ms for its all-reduce, so the schedules run
here instead.
"""

from __future__ import annotations

import ctypes
import os
import queue
import socket
import struct
import threading

import torch

from kernels.pytorch.errors import PeerGone

_HEADER = struct.Struct("<qq")          # tag, payload bytes
#: messages (header included) up to this many bytes leave from the caller's thread when the
#: pair's sender thread is idle (module docstring)
INLINE_BYTES = 64 << 10
#: what a message may hold beyond :data:`INLINE_BYTES` and still be written inline: a call
#: header (:meth:`SocketMesh.gather_rows`) in front of that much data
_HEADER_ROOM = 1024
#: the tag of the per-call header round
TAG_HEADER = 1
#: a received message to be reduced is handed on in pieces of this many bytes
#: (:meth:`SocketMesh.recv_pieces`)
PIECE_BYTES = 1 << 20


def _local_address() -> str:
    """The address peers reach this host at: the interface on the route to ``MASTER_ADDR``
    (loopback when it is not set or is this host)."""
    master = os.environ.get("TOPOCOLL_TORCH_HOST") or os.environ.get("MASTER_ADDR")
    if not master:
        return "127.0.0.1"
    if os.environ.get("TOPOCOLL_TORCH_HOST"):
        return master
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master, 9))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def _bytes_of(t: torch.Tensor) -> memoryview:
    """The bytes of contiguous CPU tensor ``t``, read and written in place.  Made from its address
    rather than through ``view``/``numpy``: every torch op lets go of the GIL and waits to get it
    back from the pair threads, up to hundreds of µs each on a busy machine.  The view does not
    keep ``t`` alive: its holder does (a send's ``_Pending``, a receive's caller)."""
    nbytes = t.numel() * t.element_size()
    if not t.is_contiguous() or t.device.type != "cpu":
        raise ValueError("a message is a contiguous CPU tensor")
    if not nbytes:
        return memoryview(bytearray(0))
    return memoryview((ctypes.c_char * nbytes).from_address(t.data_ptr())).cast("B")


class _Pending:
    """A queued send of ``parts`` (byte buffers; ``keep``: what they view, kept alive):
    ``wait()`` returns once its bytes are handed to the kernel.  ``done`` is an event made only
    for a send handed to the pair's thread (one written at once shares a set one)."""

    def __init__(self, keep, parts: list) -> None:
        self.keep, self.parts, self.done, self.error = keep, parts, _SENT, None
        self.nbytes = sum(len(p) for p in parts)

    def wait(self, timeout: float | None = None) -> bool:
        self.done.wait(timeout)
        if self.error is not None:
            raise self.error
        return True


_SENT = threading.Event()
_SENT.set()


class _Stream(_Pending):
    """A message queued in pieces (:meth:`SocketMesh.send_stream`)."""

    def __init__(self, mesh: SocketMesh, peer: int, t: torch.Tensor) -> None:
        mv = _bytes_of(t)
        super().__init__(t, [mv])
        self.mesh, self.peer, self.size, self.fed = mesh, peer, t.element_size(), 0
        self.done = threading.Event()

    def feed(self, start: int, stop: int) -> None:
        """Elements ``start:stop`` (the next ones, in order) are final: queue their bytes."""
        a, z = start * self.size, stop * self.size
        if a != self.fed or z <= a:
            raise ValueError(f"a stream's pieces come in order: bytes {a}:{z} after {self.fed}")
        self.fed = z
        with self.mesh._locks[self.peer]:
            self.mesh._queue(self.peer, (self, None, [self.parts[0][a:z]], z == self.nbytes))

    def abort(self) -> None:
        """End a stream not fed to its end (the call failed): its message can never be whole, so
        the connection is shut (the peer's receive fails at once instead of reading the pair's
        next message as the rest of this one); returns once the pair's thread lets go of it."""
        if self.fed == self.nbytes:
            return
        self.fed = self.nbytes
        try:
            self.mesh.socks[self.peer].shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        with self.mesh._locks[self.peer]:
            self.mesh._queue(self.peer, (self, None, [], True))
        self.done.wait()
        self.error = None


class _Received:
    def wait(self) -> bool:
        return True


class SocketMesh:
    """Connections from ``rank`` to every other rank of a group of ``size`` (module docstring);
    ``prefix`` keeps two meshes on one store apart."""

    def __init__(self, store, rank: int, size: int, timeout_s: float, prefix: str = "topocoll/mesh") -> None:
        self.rank, self.size, self.timeout_s = rank, size, timeout_s
        self.socks: dict[int, socket.socket] = {}
        self._queues: dict[int, queue.Queue] = {}
        self._locks: dict[int, threading.Lock] = {}
        self._busy: dict[int, int] = {}             # sends queued to the pair's thread, not yet written
        self.frames_sent = 0                        # messages sent (what the tests and the benchmark count)
        self._inboxes: dict[int, bytearray] = {}    # per peer: what came after its call header
        if size == 1:
            return
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("0.0.0.0", 0))
        listener.listen(size)
        listener.settimeout(timeout_s)
        store.set(f"{prefix}/{rank}", f"{_local_address()}:{listener.getsockname()[1]}")
        for peer in range(rank):                           # connect down, accept up
            host, port = store.get(f"{prefix}/{peer}").decode().rsplit(":", 1)
            s = socket.create_connection((host, int(port)), timeout=timeout_s)
            s.sendall(struct.pack("<q", rank))
            self._keep(peer, s)
        for _ in range(rank + 1, size):
            s, _ = listener.accept()
            s.settimeout(timeout_s)
            peer = struct.unpack("<q", self._read_exact(s, 8, None))[0]
            self._keep(peer, s)
        listener.close()

    def _keep(self, peer: int, s: socket.socket) -> None:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(self.timeout_s)
        self.socks[peer] = s
        q = self._queues[peer] = queue.Queue()
        self._locks[peer], self._busy[peer] = threading.Lock(), 0
        threading.Thread(target=self._sender, args=(peer, s, q), daemon=True, name=f"topocoll-send-{peer}").start()

    def _sender(self, peer: int, s: socket.socket, q: queue.Queue) -> None:
        """Write the pair's queued items in order: ``(pending, head, body, last)``: ``head``
        (a frame, or None) then ``body`` (byte buffers); ``last``: the item ends ``pending``."""
        while True:
            item = q.get()
            if item is None:
                return
            pending, head, body, last = item
            try:
                if pending.error is None:         # a stream's pieces after a failed write: none
                    if head is not None:
                        s.sendall(head)
                    for part in body:
                        s.sendall(part)
            except OSError as exc:
                pending.error = self._send_failed(peer, exc)
            with self._locks[peer]:
                self._busy[peer] -= 1
            if last:
                pending.done.set()

    def _queue(self, peer: int, item: tuple) -> None:
        """Hand ``item`` (:meth:`_sender`) to the pair's thread; the caller holds the pair's lock."""
        self._busy[peer] += 1
        self._queues[peer].put(item)

    def _send_failed(self, peer: int, exc: OSError) -> PeerGone:
        return PeerGone(f"rank {self.rank}: sending to rank {peer} failed ({exc}); did it exit?")

    def _write_now(self, peer: int, pending: _Pending, tag: int):
        """Write a small message at once, without blocking (module docstring): None when all of it
        went out (or the connection failed: ``pending`` holds the error), else the bytes left."""
        parts = [_HEADER.pack(tag, pending.nbytes), *pending.parts]
        try:                  # the socket has a timeout, so its descriptor is non-blocking
            sent = os.writev(self.socks[peer].fileno(), parts)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            pending.error = self._send_failed(peer, exc)
            sent = None
        whole = sum(len(p) for p in parts)
        if sent is None or sent == whole:
            return None
        return memoryview(b"".join(bytes(p) for p in parts))[sent:]

    def _read_exact(self, s: socket.socket, nbytes: int, peer: int | None, into: memoryview | None = None):
        buf = into if into is not None else memoryview(bytearray(nbytes))
        got = 0
        while got < nbytes:
            try:
                k = s.recv_into(buf[got:], nbytes - got)
            except socket.timeout:
                raise PeerGone(f"rank {self.rank}: no message from rank {peer} within the group's timeout "
                               f"({self.timeout_s:g} s)") from None
            except OSError as exc:
                raise PeerGone(f"rank {self.rank}: the connection to rank {peer} failed ({exc})") from None
            if k == 0:
                raise PeerGone(f"rank {self.rank}: rank {peer} closed its connection (did it exit?)")
            got += k
        return buf

    # -------------------------------------------------------------- the group interface
    def send(self, tensors, peer: int, tag: int) -> _Pending:
        """Queue ``tensors[0]`` (kept alive, not to be written until ``wait()``) for ``peer``."""
        t = tensors[0]
        return self._send_parts(peer, tag, [_bytes_of(t)] if t.numel() else [], keep=t)

    def _send_parts(self, peer: int, tag: int, parts: list, keep=None, *, volatile: bool = False) -> _Pending:
        """One message of ``parts`` (byte buffers) to ``peer``; they are not to be written until
        ``wait()``, unless ``volatile`` (what is not written at once is then copied first)."""
        pending = _Pending(keep, parts)
        with self._locks[peer]:                         # one writer at a time, in order
            self.frames_sent += 1
            rest = None
            if not self._busy[peer] and _HEADER.size + pending.nbytes <= INLINE_BYTES + _HEADER_ROOM:
                rest = self._write_now(peer, pending, tag)
                if rest is None:
                    return pending
            elif volatile:
                pending.parts = [b"".join(bytes(p) for p in parts)]
            pending.done = threading.Event()
            if rest is not None:
                self._queue(peer, (pending, None, [rest], True))
            else:
                self._queue(peer, (pending, _HEADER.pack(tag, pending.nbytes), pending.parts, True))
        return pending

    def send_stream(self, t: torch.Tensor, peer: int, tag: int) -> _Stream:
        """One message of ``t``'s bytes to ``peer`` (as :meth:`send`) whose frame is queued now and
        whose bytes are queued as :meth:`_Stream.feed` says each range of them is final: a send
        whose source is still being reduced goes out piece by piece behind the reduction
        (:func:`kernels.pytorch.schedule_share.run_share`).  Nothing else may be sent to
        ``peer`` until the last piece is fed or the stream is ended by :meth:`_Stream.abort`."""
        stream = _Stream(self, peer, t)
        with self._locks[peer]:
            self.frames_sent += 1
            self._queue(peer, (stream, _HEADER.pack(tag, stream.nbytes), [], not stream.nbytes))
        return stream

    def recv(self, tensors, peer: int, tag: int) -> _Received:
        """Receive the pair's next message into ``tensors[0]`` (its tag and size must match)."""
        t = tensors[0]
        if self._frame(t, peer, tag):
            self._read_exact(self.socks[peer], t.numel() * t.element_size(), peer, _bytes_of(t))
        return _Received()

    def recv_pieces(self, t: torch.Tensor, peer: int, tag: int, on_piece, piece_bytes: int | None = None) -> None:
        """:meth:`recv` into ``t``, calling ``on_piece(start, stop)`` (elements) as each piece of
        about ``piece_bytes`` (default :data:`PIECE_BYTES`) has arrived, so that it is used while the next one comes (and while
        it is still in the cache)."""
        if not self._frame(t, peer, tag):
            return
        size, mv = t.element_size(), _bytes_of(t)
        step = max(1, (piece_bytes or PIECE_BYTES) // size) * size
        for a in range(0, len(mv), step):
            z = min(len(mv), a + step)
            self._read_exact(self.socks[peer], z - a, peer, mv[a:z])
            on_piece(a // size, z // size)

    def _frame(self, t: torch.Tensor, peer: int, tag: int) -> int:
        """Read the pair's next message frame; it must be message ``tag`` of ``t``'s size (its bytes)."""
        got_tag, nbytes = _HEADER.unpack(self._read_exact(self.socks[peer], _HEADER.size, peer))
        want = t.numel() * t.element_size()
        if got_tag != tag or nbytes != want:
            raise PeerGone(f"rank {self.rank}: rank {peer} sent message {got_tag} of {nbytes} bytes where "
                           f"message {tag} of {want} bytes was due (the ranks' calls went out of step)")
        return nbytes

    def gather_rows(self, row: bytes, data: memoryview | None = None, max_data: int = 0):
        """The per-call header round: ``row`` (this rank's header, the same length on every rank),
        followed in the same message by ``data`` (a small call's bytes, or None), goes to every
        peer; returns ``(rows, extra)``: every rank's row (``bytes``) and, per peer, the bytes
        that came after its row (None where none did), read into private buffers (kept per
        peer: valid until the next header round), never into a caller's tensor.  ``data`` over
        :data:`INLINE_BYTES` is sent from its own memory, which is not to be written until this
        returns or raises (every send is done or failed by then).  A peer may send up to
        ``max_data`` bytes after its row (whatever this rank's own call is, so that ranks that
        disagree stay in step and can say so); more, a shorter message or another tag is a
        message out of step: :class:`PeerGone`."""
        parts = [row] if data is None or not len(data) else [row, data]
        small = data is None or len(data) <= INLINE_BYTES          # copied where it cannot go at once
        sends = [self._send_parts(p, TAG_HEADER, parts, volatile=small) for p in range(self.size) if p != self.rank]
        try:
            rows, extra = self._read_rows(row, max_data)
        except PeerGone:
            for w in sends if not small else ():      # the caller may write ``data`` once this raises
                try:
                    w.wait()                          # done or failed within the socket's timeout
                except PeerGone:
                    pass
            raise
        for w in sends:
            w.wait()
        return rows, extra

    def _read_rows(self, row: bytes, max_data: int):
        """Every peer's header row and the bytes after it (:meth:`gather_rows`)."""
        rows, extra = [b""] * self.size, [None] * self.size
        rows[self.rank] = row
        for p in range(self.size):
            if p == self.rank:
                continue
            s = self.socks[p]
            head = self._read_exact(s, _HEADER.size + len(row), p)     # frame and row: one read
            tag, nbytes = _HEADER.unpack_from(head)
            if tag != TAG_HEADER or not len(row) <= nbytes <= len(row) + max_data:
                raise PeerGone(f"rank {self.rank}: rank {p} sent message {tag} of {nbytes} bytes where a call "
                               f"header of {len(row)} bytes (and at most {max_data} bytes of data) was due "
                               f"(the ranks' calls went out of step)")
            rows[p] = bytes(head[_HEADER.size:])
            if nbytes > len(row):
                extra[p] = self._read_exact(s, nbytes - len(row), p, self._inbox(p, nbytes - len(row)))
        return rows, extra

    def _inbox(self, peer: int, nbytes: int) -> memoryview:
        """``nbytes`` of the buffer kept for what ``peer`` sends after its call header (valid
        until the next header round; a fresh large buffer costs a page fault per page)."""
        buf = self._inboxes.get(peer)
        if buf is None or len(buf) < nbytes:
            buf = self._inboxes[peer] = bytearray(nbytes)
        return memoryview(buf)[:nbytes]

    def allgather(self, outputs, inputs):
        """Every rank's ``inputs[0]`` (an int64 header) into ``outputs[0][r]``, by :meth:`gather_rows`."""
        mine, rows = inputs[0], outputs[0]
        got, _ = self.gather_rows(bytes(_bytes_of(mine)))
        for p, row in enumerate(got):
            rows[p].copy_(torch.frombuffer(bytearray(row), dtype=mine.dtype).view(mine.shape))
        return _Received()

    def close(self) -> None:
        for q in self._queues.values():
            q.put(None)
        for s in self.socks.values():
            try:
                s.close()
            except OSError:
                pass


__all__ = ["SocketMesh", "INLINE_BYTES", "TAG_HEADER", "PIECE_BYTES"]
