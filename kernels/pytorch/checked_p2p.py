"""The user's ``send`` / ``recv`` over gloo, checked: each message is preceded by a small header
(its sequence number on the pair and tag, element count, dtype), or rides inside the header's
message up to :data:`INLINE_BYTES` (16 KiB), so that a receive whose tensor does not match
raises :class:`~kernels.pytorch.errors.P2PMismatch` on the receiving rank instead of aborting
the process inside gloo.

Why a header: gloo's TCP transport checks a message against the posted receive buffer only as
``op.preamble.length <= op.nbytes`` (the abort torch 2.13's bundled gloo prints: "enforce fail at
gloo/transport/tcp/pair.cc:456 ... Received data size doesn't match expected size"), thrown as
``gloo::EnforceNotMet`` on gloo's own I/O thread, which terminates the process; a smaller message
or another dtype of the same byte size passes silently into the user's tensor.  Here the receiver
reads the header first: an inline payload is copied out of the header's message only where count
and dtype agree; a larger one's receive is posted only then, into the user's tensor where they
agree, else into a scratch tensor of the sender's count and dtype (so the sender's send completes
and the pair stays in step), and then it raises.

Headers and payloads travel on two gloo groups of their own (same ranks, the user's tag;
:func:`make_p2p`): a receive's header is posted when the call is made (``irecv`` returns at once);
once it is in, the payload's receive is posted, in the sender's sequence order per source and tag
(gloo matches messages of one pair and tag in the order receives are posted), so receives from a
given source, from any source (``recv_anysource``) and on several tags may be outstanding
together.  That second step runs on the caller's thread where ``wait()`` (no timeout) comes first,
else on a reused helper thread (:class:`_Helpers`).

Small messages: a payload of at most :data:`INLINE_BYTES` bytes rides in its header's message
(magic ``tp2i``; one gloo send) then an 8-byte trailer, and every header's receive is posted with
room for one.  gloo takes a message shorter than the posted receive: torch's
``ProcessGroupGloo::recv`` posts the tensor's byte size as an unbound buffer and checks nothing
more, and gloo's TCP pair reads the message's ``preamble.length`` bytes into the front of that
buffer after checking only ``length <= nbytes`` (``Pair::prepareRead``, gloo/transport/tcp/pair.cc;
tested: a 10-byte send into a 100-byte receive fills 10 bytes, the other 90 stay as they were).
gloo does not say how many bytes arrived: the trailer must sit right after the announced bytes,
only zero fill behind it (else PeerGone).  Count and dtype are checked before the bytes are copied
into the user's tensor (a mismatch writes nothing and drains nothing: the message is in); the
message takes its turn in the (source, tag) order so that a later payload's receive is posted in
sequence.

Cost (docs/pytorch.md, measured by benchmarks/bench_p2p.py): a message above
:data:`INLINE_BYTES` pays one extra message of :data:`HEADER_WORDS` int64 and one extra round trip
(gloo's TCP pair writes a message only once the receiver's "receive posted" notice is in:
``Pair::handleRemotePendingRecv`` in gloo/transport/tcp/pair.cc; the payload's receive is posted
only once its header is in); a smaller one pays two copies of its bytes and the Python around
them; every topocoll group connects two more gloo groups.  ``TOPOCOLL_P2P_CHECK=0``: none of it,
gloo as is.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import queue
import struct
import threading
from datetime import timedelta

import torch
import torch.distributed as dist

from kernels.pytorch.dtypes import any_dtype_code, any_dtype_from_code, dtype_name
from kernels.pytorch.errors import BadTensor, P2PMismatch, PeerGone, TorchBackendError

#: header: magic, sequence number on (pair, tag), element count, dtype code (int64 words, this host's byte order)
HEADER_WORDS = 4
_HEADER_BYTES = HEADER_WORDS * 8
_WORDS = struct.Struct(f"={HEADER_WORDS}q")
#: a payload of at most this many bytes travels inside its header's message (one gloo send, no
#: payload round trip); every header's receive is posted with room for one (module docstring)
INLINE_BYTES = 16 << 10
_MAGIC = 0x7470_3270            # "tp2p": the payload follows on the payload group
_MAGIC_INLINE = 0x7470_3269     # "tp2i": the payload follows the header in its message
#: ends an inline message, right after its payload (8 nonzero bytes: a receive's zero fill is not one)
_TRAILER = b"tp2i-end"
_INLINE_ROOM = _HEADER_BYTES + INLINE_BYTES + len(_TRAILER)     # a header receive's bytes


def _dtype_name(code: int) -> str:
    dtype = any_dtype_from_code(code)
    return dtype_name(dtype) if dtype is not None else f"dtype code {code}"


def _checked_tensor(tensors, what: str, rank: int) -> torch.Tensor:
    """The one dense contiguous tensor of a send or recv; BadTensor before anything is posted."""
    if len(tensors) != 1:
        raise BadTensor(f"{what} on rank {rank}: takes one tensor, got {len(tensors)}")
    t = tensors[0]
    if t.layout != torch.strided or not t.is_contiguous():
        raise BadTensor(f"{what} on rank {rank}: the tensor must be dense and contiguous "
                        f"(shape {tuple(t.shape)}, {dtype_name(t.dtype)})")
    return t


def _header_buffer() -> torch.Tensor:
    """A header's receive: the header's words, zero until it arrives, and room for an inline
    payload and its trailer (gloo's TCP pair takes a message shorter than the posted receive: it reads the
    message's length into the front of the buffer and leaves the rest as it was;
    ``Pair::prepareRead`` checks only ``op.preamble.length <= op.nbytes``, gloo/transport/tcp/pair.cc)."""
    return torch.zeros(_INLINE_ROOM, dtype=torch.uint8)


def _scratch(count: int, dtype: torch.dtype, where: str) -> torch.Tensor:
    """Host bytes for a mismatched message of ``count`` elements of ``dtype``, to be discarded
    (gloo compares byte counts only; bytes, so that any dtype's message can be drained)."""
    try:
        return torch.empty(count * dtype.itemsize, dtype=torch.uint8)
    except (RuntimeError, MemoryError, OverflowError, TypeError, ValueError):  # too large for torch.empty
        raise PeerGone(f"{where}: the sender announced {count} elements of {dtype_name(dtype)}, "
                       f"more than this host can hold to discard") from None


def _as_bytes(t: torch.Tensor) -> torch.Tensor | None:
    """A dense contiguous tensor's bytes, flat (a view); None for a dtype torch will not view as
    bytes (such a message takes the payload group)."""
    try:
        return t.reshape(-1).view(torch.uint8)
    except (RuntimeError, TypeError):
        return None


def _header(*words: int) -> torch.Tensor:
    return torch.frombuffer(bytearray(_WORDS.pack(*words)), dtype=torch.uint8)


def _message(seq: int, t: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """What goes on the header group for ``t``, and whether ``t``'s bytes are in it: the header,
    the bytes and :data:`_TRAILER` where ``t`` holds at most :data:`INLINE_BYTES` bytes, else the
    header alone."""
    data = _as_bytes(t) if t.numel() * t.element_size() <= INLINE_BYTES else None
    if data is None:
        return _header(_MAGIC, seq, t.numel(), any_dtype_code(t.dtype)), False
    trailer = torch.frombuffer(bytearray(_TRAILER), dtype=torch.uint8)
    return torch.cat([_header(_MAGIC_INLINE, seq, t.numel(), any_dtype_code(t.dtype)), data, trailer]), True


def _read_header(message: torch.Tensor, where: str) -> tuple[int, int, int, bool]:
    """A header receive's bytes as (sequence number, count, dtype code, inline); PeerGone where the
    words are no header or an inline message's trailer is not right after its announced bytes with
    zero fill behind it (a message shorter or longer than it says: gloo does not say its length)."""
    data = message.numpy()
    magic, seq, count, code = _WORDS.unpack_from(data)
    if magic not in (_MAGIC, _MAGIC_INLINE) or seq < 0 or count < 0 or any_dtype_from_code(code) is None:
        raise PeerGone(f"{where}: the message header is out of step (magic {magic:#x}, count {count}, "
                       f"dtype code {code})")
    end = _HEADER_BYTES + count * any_dtype_from_code(code).itemsize
    if magic == _MAGIC_INLINE and (data[end:end + len(_TRAILER)].tobytes() != _TRAILER
                                   or data[end + len(_TRAILER):].any()):
        raise PeerGone(f"{where}: the message header is out of step (its message does not end right after the "
                       f"{count} elements of {_dtype_name(code)} it announces; a sender of another topocoll version?)")
    return seq, count, code, magic == _MAGIC_INLINE


def check_on() -> bool:
    """Whether the user's send/recv are checked: ``TOPOCOLL_P2P_CHECK`` unset or ``1`` (default),
    ``0``: straight to gloo (the same on every rank of a group)."""
    value = os.environ.get("TOPOCOLL_P2P_CHECK", "1").strip()
    if value not in ("0", "1"):
        raise TorchBackendError(f"TOPOCOLL_P2P_CHECK={value!r}: expected 0 (send/recv straight to gloo) or 1 (checked)")
    return value == "1"


def make_p2p(store, rank: int, size: int, timeout: timedelta, gloo):
    """The group of a topocoll group's send/recv: a :class:`CheckedP2P` over two gloo groups of
    its own (headers, payloads), or ``gloo`` itself where ``TOPOCOLL_P2P_CHECK=0``.  The payloads
    never share ``gloo``: a receive there (a device the backend string gives to gloo) is posted at
    once, a checked payload's only after its header, and gloo hands a pair and tag's messages to
    the receives in the order they are posted, so the unchecked one would take the checked payload."""
    if not check_on():
        return gloo
    headers, payloads = (dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), rank, size, timeout)
                         for prefix in ("topocoll/p2ph/", "topocoll/p2pd/"))
    return CheckedP2P(payloads, headers, rank, timeout.total_seconds())


class _Helpers:
    """The threads that finish receives: an idle one takes the next receive, a new one starts only
    where none is idle (each blocks until its header arrives, so a bounded pool could wait for a
    receive that only a later one would let in); a thread idle for ``idle_s`` seconds ends."""

    def __init__(self, name: str, idle_s: float = 30.0) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock, self._idle, self._name, self._idle_s = threading.Lock(), 0, name, idle_s

    def submit(self, fn, *args) -> None:
        with self._lock:
            start = self._idle == 0
            self._idle -= 0 if start else 1
        self._jobs.put((fn, args))
        if start:
            threading.Thread(target=self._run, name=self._name, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                fn, args = self._jobs.get(timeout=self._idle_s)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:          # the others idle can take what comes next
                        self._idle -= 1
                        return
                continue
            fn(*args)
            with self._lock:
                self._idle += 1


class CheckedP2P:
    """``send`` / ``recv`` / ``recv_anysource`` of one rank (module docstring): ``payload`` and
    ``headers`` are gloo groups of the same ranks used for nothing else."""

    def __init__(self, payload, headers, rank: int, timeout_s: float) -> None:
        self.payload, self.headers, self.rank, self.timeout_s = payload, headers, rank, timeout_s
        self._send_lock = threading.Lock()
        self._sent: dict[tuple[int, int], int] = {}           # (dst, tag) -> next sequence number
        self._posted = threading.Condition()
        self._next: dict[tuple[int, int], int] = {}           # (src, tag) -> next payload to post
        self._broken: dict[tuple[int, int], str] = {}         # (src, tag) -> its first failure
        self._helpers = _Helpers(f"topocoll-p2p-r{rank}")

    def send(self, tensors, dst: int, tag: int = 0):
        t = _checked_tensor(tensors, f"send to rank {dst}", self.rank)
        with self._send_lock:                 # header then payload, in one order per (dst, tag)
            seq = self._sent.get((dst, tag), 0)
            self._sent[(dst, tag)] = seq + 1
            message, inline = _message(seq, t)
            works = [self.headers.send([message], dst, tag)]
            if not inline:
                works.append(self.payload.send([t], dst, tag))
        return P2PWork(tensors, f"send to rank {dst} (tag {tag}) on rank {self.rank}", sends=works)

    def recv(self, tensors, src: int, tag: int = 0):
        t = _checked_tensor(tensors, f"recv from rank {src}", self.rank)
        work = P2PWork(tensors, f"recv from rank {src} (tag {tag}) on rank {self.rank}")
        with self._posted:
            broken = self._broken.get((src, tag))
        if broken is not None:                # its header would be out of step too: nothing posted
            work.done.set_exception(PeerGone(self._broken_line(src, tag, broken)))
            return work
        header = _header_buffer()
        return self._start(work, t, header, self.headers.recv([header], src, tag), src, tag)

    def recv_anysource(self, tensors, tag: int = 0):
        t = _checked_tensor(tensors, "recv from any rank", self.rank)
        header = _header_buffer()
        work = P2PWork(tensors, f"recv from any rank (tag {tag}) on rank {self.rank}")
        return self._start(work, t, header, self.headers.recv_anysource([header], tag), None, tag)

    def _start(self, work: P2PWork, *args) -> P2PWork:
        """Hand the receive to a helper thread; a ``wait()`` without timeout that comes first runs
        it on the caller's thread instead (``dist.recv``: no thread hop there and back)."""
        work._job = functools.partial(self._finish, work, *args)
        self._helpers.submit(work._run_job)
        return work

    def _broken_line(self, src: int, tag: int, first: str) -> str:
        return (f"recv from rank {src} (tag {tag}) on rank {self.rank}: messages from rank {src} on tag {tag} are "
                f"out of step since an earlier receive failed ({first})")

    def _finish(self, work: P2PWork, t, header, header_work, src, tag) -> None:
        """On a helper thread: wait for the header, post the payload's receive in sequence order,
        wait for it, and complete ``work`` (with P2PMismatch where they disagree).  A header or
        scratch failure leaves (src, tag) broken: later receives from it raise at once."""
        try:
            header_work.wait()
            if src is None:
                src = header_work._source_rank()
            message = header                  # flat uint8 already (_header_buffer)
            seq, count, code, inline = _read_header(message, f"recv from rank {src} (tag {tag}) on rank {self.rank}")
            dtype = any_dtype_from_code(code)
            ok = count == t.numel() and dtype == t.dtype
            if inline:                        # in order too: a later payload's receive waits for its turn
                self._post_in_order(None, src, tag, seq)
                if ok:
                    _as_bytes(t).copy_(message[_HEADER_BYTES:_HEADER_BYTES + count * dtype.itemsize])
            else:
                into = t if ok else _scratch(count, dtype, f"recv from rank {src} (tag {tag}) on rank {self.rank}")
                self._post_in_order(into, src, tag, seq).wait()
            work.source = src
            if not ok:
                raise P2PMismatch(f"recv from rank {src} (tag {tag}) on rank {self.rank}: rank {src} sent "
                                  f"{count} elements of {_dtype_name(code)}, the receiving tensor holds "
                                  f"{t.numel()} elements of {dtype_name(t.dtype)}; the message "
                                  f"was discarded")
        except BaseException as exc:  # noqa: BLE001  (raised by the Work's wait())
            if isinstance(exc, PeerGone) and src is not None:
                with self._posted:
                    self._broken.setdefault((src, tag), str(exc))
                    self._posted.notify_all()
            work.done.set_exception(exc)
        else:
            work.done.set_result(None)

    def _post_in_order(self, into, src: int, tag: int, seq: int):
        """Post the receive of payload ``seq`` from ``src`` on ``tag`` once ``seq - 1``'s is posted
        (``into`` None: an inline payload, only its turn is taken); raises at once where (src, tag)
        is broken or ``seq`` was posted already."""
        key = (src, tag)
        with self._posted:
            if not self._posted.wait_for(lambda: key in self._broken or self._next.get(key, 0) >= seq,
                                         self.timeout_s):
                raise PeerGone(f"recv from rank {src} (tag {tag}) on rank {self.rank}: message {seq} arrived but "
                               f"message {self._next.get(key, 0)} did not within {self.timeout_s:g} s")
            if key in self._broken:
                raise PeerGone(self._broken_line(src, tag, self._broken[key]))
            if self._next.get(key, 0) > seq:
                raise PeerGone(f"recv from rank {src} (tag {tag}) on rank {self.rank}: message {seq} arrived again "
                               f"(message {self._next[key] - 1} was received already)")
            posted = self.payload.recv([into], src, tag) if into is not None else None
            self._next[key] = seq + 1
            self._posted.notify_all()
        return posted


class P2PWork(dist._Work):
    """The Work of a checked send (its two gloo sends, waited for once, by the first ``wait``, the
    result kept: gloo's send Work completes one wait only) or receive (done when the helper thread
    has the payload or the error); ``wait()`` raises the error, any number of times."""

    def __init__(self, tensors, what: str, sends=None) -> None:
        super().__init__()
        self._tensors, self._what, self._sends, self.source = tensors, what, sends, None
        self.done: concurrent.futures.Future = concurrent.futures.Future()
        self._sends_lock = threading.Lock()
        self._job, self._claim = None, threading.Lock()         # a receive's work: run once, by whoever comes first

    def _run_job(self) -> None:
        if self._job is not None and self._claim.acquire(blocking=False):
            self._job()

    def _wait_sends(self, secs: float) -> None:
        """Wait for the gloo sends (once; ``secs`` > 0: at most that long, gloo's own timeout) and
        complete ``done`` with the outcome."""
        if not self._sends_lock.acquire(timeout=secs if secs > 0 else -1):
            raise PeerGone(f"{self._what}: not complete within {secs:g} s")
        try:
            if self.done.done():
                return
            try:
                for w in self._sends:
                    w.wait(timedelta(seconds=secs)) if secs > 0 else w.wait()
            except BaseException as exc:  # noqa: BLE001  (kept: every later wait() raises it)
                self.done.set_exception(exc)
            else:
                self.done.set_result(None)
        finally:
            self._sends_lock.release()

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        """Wait until done (``timeout`` 0: the group's timeout, else at most ``timeout``) and raise
        its error; past ``timeout``, PeerGone (a RuntimeError, as torch's backends raise)."""
        secs = timeout.total_seconds() if timeout else 0.0
        if self._sends is not None:
            self._wait_sends(secs)
        elif secs <= 0:
            self._run_job()
        try:
            self.done.result(timeout=secs if secs > 0 else None)
        except concurrent.futures.TimeoutError:
            raise PeerGone(f"{self._what}: not complete within {secs:g} s") from None
        return True

    def is_completed(self) -> bool:
        return self.done.done() or (self._sends is not None and all(w.is_completed() for w in self._sends))

    def is_success(self) -> bool:
        return self.done.exception() is None if self.done.done() else self.is_completed()

    def exception(self):
        return self.done.exception() if self.done.done() else None

    def _source_rank(self) -> int:
        return self.source if self.source is not None else -1

    def source_rank(self) -> int:
        return self._source_rank()

    def get_future(self) -> torch.futures.Future:
        """A future of the tensors, completed (or failed) with the Work; returns at once (a send's
        gloo Works have no future: a thread waits for them)."""
        fut = torch.futures.Future()

        def finish(_done) -> None:
            error = self.done.exception()
            if error is None:
                fut.set_result(self._tensors)
            else:
                fut.set_exception(error)
        self.done.add_done_callback(finish)
        if self._sends is not None and not self.done.done():
            threading.Thread(target=self._wait_sends, args=(0.0,), name="topocoll-p2p-send", daemon=True).start()
        return fut

    def result(self) -> list:
        return self._tensors


__all__ = ["CheckedP2P", "HEADER_WORDS", "INLINE_BYTES", "P2PWork", "check_on", "make_p2p"]
