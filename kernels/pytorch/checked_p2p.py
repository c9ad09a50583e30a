"""The user's ``send`` / ``recv`` over gloo, checked: each message is preceded by a small header
(its sequence number on the pair and tag, element count, dtype) so that a receive whose tensor
does not match raises :class:`~kernels.pytorch.errors.P2PMismatch` on the receiving rank instead
of aborting the process inside gloo.

Why a header: gloo's TCP transport checks a message against the posted receive buffer only as
``op.preamble.length <= op.nbytes`` (the abort torch 2.13's bundled gloo prints: "enforce fail at
gloo/transport/tcp/pair.cc:456 ... Received data size doesn't match expected size"), thrown as
``gloo::EnforceNotMet`` on gloo's own I/O thread, which terminates the process; a smaller message
or another dtype of the same byte size passes silently into the user's tensor.  Here the receiver reads the
header first and posts the payload's receive only then: into the user's tensor when count and
dtype agree, else into a scratch tensor of the sender's count and dtype (so the sender's send
completes and the pair stays in step), and then raises.

Headers travel on a gloo group of their own (same ranks, the user's tag), payloads on the
group's gloo: a receive's header is posted when the call is made (``irecv`` returns at once), a
helper thread waits for it and posts the payload's receive, in the sender's sequence order per
source and tag (gloo matches messages of one pair and tag in the order receives are posted), so
receives from a given source, from any source (``recv_anysource``) and on several tags may be
outstanding together.  Cost: one extra message of :data:`HEADER_WORDS` int64 per send and a
thread hop per receive.
"""

from __future__ import annotations

import concurrent.futures
import threading
from datetime import timedelta

import torch
import torch.distributed as dist

from kernels.pytorch.errors import BadTensor, P2PMismatch, PeerGone

#: header: magic, sequence number on (pair, tag), element count, dtype code
HEADER_WORDS = 4
_MAGIC = 0x7470_3270            # "tp2p"
#: every torch dtype, by name (the same table on every rank of one torch); index + 1 is its code
_DTYPES = tuple(sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str))
_CODE = {t: k + 1 for k, t in enumerate(_DTYPES)}


def _dtype_name(code: int) -> str:
    return str(_DTYPES[code - 1]).replace("torch.", "") if 1 <= code <= len(_DTYPES) else f"dtype code {code}"


def _checked_tensor(tensors, what: str, rank: int) -> torch.Tensor:
    """The one dense contiguous tensor of a send or recv; BadTensor before anything is posted."""
    if len(tensors) != 1:
        raise BadTensor(f"{what} on rank {rank}: takes one tensor, got {len(tensors)}")
    t = tensors[0]
    if t.layout != torch.strided or not t.is_contiguous():
        raise BadTensor(f"{what} on rank {rank}: the tensor must be dense and contiguous "
                        f"(shape {tuple(t.shape)}, {str(t.dtype).replace('torch.', '')})")
    return t


def _scratch(count: int, dtype: torch.dtype, where: str) -> torch.Tensor:
    """Host bytes for a mismatched message of ``count`` elements of ``dtype``, to be discarded
    (gloo compares byte counts only; bytes, so that any dtype's message can be drained)."""
    try:
        return torch.empty(count * dtype.itemsize, dtype=torch.uint8)
    except (RuntimeError, MemoryError, OverflowError, TypeError, ValueError):  # too large for torch.empty
        raise PeerGone(f"{where}: the sender announced {count} elements of {str(dtype).replace('torch.', '')}, "
                       f"more than this host can hold to discard") from None


class CheckedP2P:
    """``send`` / ``recv`` / ``recv_anysource`` of one rank (module docstring): ``payload`` is
    the group's gloo, ``headers`` a gloo group of the same ranks used for nothing else."""

    def __init__(self, payload, headers, rank: int, timeout_s: float) -> None:
        self.payload, self.headers, self.rank, self.timeout_s = payload, headers, rank, timeout_s
        self._send_lock = threading.Lock()
        self._sent: dict[tuple[int, int], int] = {}           # (dst, tag) -> next sequence number
        self._posted = threading.Condition()
        self._next: dict[tuple[int, int], int] = {}           # (src, tag) -> next payload to post

    def send(self, tensors, dst: int, tag: int = 0):
        t = _checked_tensor(tensors, f"send to rank {dst}", self.rank)
        with self._send_lock:                 # header then payload, in one order per (dst, tag)
            seq = self._sent.get((dst, tag), 0)
            self._sent[(dst, tag)] = seq + 1
            header = torch.tensor([_MAGIC, seq, t.numel(), _CODE[t.dtype]], dtype=torch.int64)
            works = [self.headers.send([header], dst, tag), self.payload.send([t], dst, tag)]
        return P2PWork(tensors, sends=works)

    def recv(self, tensors, src: int, tag: int = 0):
        t = _checked_tensor(tensors, f"recv from rank {src}", self.rank)
        header = torch.zeros(HEADER_WORDS, dtype=torch.int64)
        return self._receive(tensors, t, header, self.headers.recv([header], src, tag), src, tag)

    def recv_anysource(self, tensors, tag: int = 0):
        t = _checked_tensor(tensors, "recv from any rank", self.rank)
        header = torch.zeros(HEADER_WORDS, dtype=torch.int64)
        return self._receive(tensors, t, header, self.headers.recv_anysource([header], tag), None, tag)

    def _receive(self, tensors, t, header, header_work, src, tag) -> P2PWork:
        work = P2PWork(tensors)
        threading.Thread(target=self._finish, args=(work, t, header, header_work, src, tag),
                         name=f"topocoll-p2p-r{self.rank}", daemon=True).start()
        return work

    def _finish(self, work: P2PWork, t, header, header_work, src, tag) -> None:
        """On the helper thread: wait for the header, post the payload's receive in sequence
        order, wait for it, and complete ``work`` (with P2PMismatch where they disagree)."""
        try:
            header_work.wait()
            if src is None:
                src = header_work._source_rank()
            magic, seq, count, code = (int(v) for v in header.tolist())
            if magic != _MAGIC or seq < 0 or count < 0 or not 1 <= code <= len(_DTYPES):
                raise PeerGone(f"recv from rank {src} (tag {tag}) on rank {self.rank}: the message header is "
                               f"out of step (magic {magic:#x}, count {count}, dtype code {code})")
            dtype = _DTYPES[code - 1]
            ok = count == t.numel() and dtype == t.dtype
            into = t if ok else _scratch(count, dtype, f"recv from rank {src} (tag {tag}) on rank {self.rank}")
            payload_work = self._post_in_order(into, src, tag, seq)
            payload_work.wait()
            work.source = src
            if not ok:
                raise P2PMismatch(f"recv from rank {src} (tag {tag}) on rank {self.rank}: rank {src} sent "
                                  f"{count} elements of {_dtype_name(code)}, the receiving tensor holds "
                                  f"{t.numel()} elements of {str(t.dtype).replace('torch.', '')}; the message "
                                  f"was discarded")
        except BaseException as exc:  # noqa: BLE001  (raised by the Work's wait())
            work.done.set_exception(exc)
        else:
            work.done.set_result(None)

    def _post_in_order(self, into, src: int, tag: int, seq: int):
        """Post the receive of payload ``seq`` from ``src`` on ``tag`` once ``seq - 1``'s is posted."""
        key = (src, tag)
        with self._posted:
            if not self._posted.wait_for(lambda: self._next.get(key, 0) == seq, self.timeout_s):
                raise PeerGone(f"recv from rank {src} (tag {tag}) on rank {self.rank}: message {seq} arrived but "
                               f"message {self._next.get(key, 0)} did not within {self.timeout_s:g} s")
            posted = self.payload.recv([into], src, tag)
            self._next[key] = seq + 1
            self._posted.notify_all()
        return posted


class P2PWork(dist._Work):
    """The Work of a checked send (its two gloo sends) or receive (done when the helper thread
    has the payload or the error); ``wait()`` raises the error."""

    def __init__(self, tensors, sends=None) -> None:
        super().__init__()
        self._tensors, self._sends, self.source = tensors, sends, None
        self.done: concurrent.futures.Future = concurrent.futures.Future()
        if sends is not None:
            self.done.set_result(None)

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        for w in self._sends or ():
            w.wait()
        secs = timeout.total_seconds() if timeout else 0
        self.done.result(timeout=secs or None)
        return True

    def is_completed(self) -> bool:
        return self.done.done() and all(w.is_completed() for w in self._sends or ())

    def is_success(self) -> bool:
        return self.is_completed() and self.done.exception() is None

    def exception(self):
        return self.done.exception() if self.done.done() else None

    def _source_rank(self) -> int:
        return self.source if self.source is not None else -1

    def source_rank(self) -> int:
        return self._source_rank()

    def get_future(self) -> torch.futures.Future:
        fut = torch.futures.Future()

        def finish(_done) -> None:
            error = self.done.exception()
            if error is None:
                fut.set_result(self._tensors)
            else:
                fut.set_exception(error)
        if self._sends is not None:
            for w in self._sends:
                w.wait()
        self.done.add_done_callback(finish)
        return fut

    def result(self) -> list:
        return self._tensors


__all__ = ["CheckedP2P", "HEADER_WORDS", "P2PWork"]
