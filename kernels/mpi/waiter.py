"""Deadline-bounded waiting on MPI requests, failure notices between ranks, metadata exchange.

Waiting never blocks in MPI: :class:`Waiter` polls ``Testsome`` (spinning briefly, then
yielding the CPU), probes the control communicator for failure notices from other ranks
(:func:`notify_failure`) and raises :class:`~topo_probe.errors.PeerFailed` naming the rank
when a notice arrives, when a peer that left (:mod:`kernels.mpi.leaving`: ``left:<rank>:<calls
it finished>``) is awaited in a later call, or when nothing completes for ``timeout_s`` seconds (default
``$TOPOCOLL_MPI_TIMEOUT`` or :data:`DEFAULT_TIMEOUT_S`; the clock restarts whenever a request
completes).  :func:`exchange_json` gathers small JSON metadata from every rank the same way.
Used by :mod:`kernels.mpi.transport` and :mod:`kernels.mpi.communicator`.
"""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np

from topo_probe.errors import DeviceUnavailable, InvalidArgument, PeerFailed, show
from topo_probe.number_rules import is_real

TAG_NOTICE, TAG_HELLO, TAG_PING, TAG_PONG = 1, 2, 3, 4
#: seconds without progress before a wait gives up (``$TOPOCOLL_MPI_TIMEOUT`` overrides)
DEFAULT_TIMEOUT_S = 120.0
NOTICE_BYTES = 2048


_yield = getattr(os, "sched_yield", lambda: time.sleep(0))   # time.sleep(0) costs ~100 µs on Linux


def mpi():
    """The ``mpi4py.MPI`` module; DeviceUnavailable (one line) when mpi4py or MPI is missing."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise DeviceUnavailable(f"mpi backend: mpi4py / an MPI library is not usable ({exc}); "
                                f"pip install 'topocoll[mpi]'") from None
    return MPI


#: the shortest deadline taken (seconds): torch's c10d store counts waits in whole milliseconds, so a shorter one
#: waits 0 ms on that rank alone (its store's error, not ours) while the peers wait out theirs
MIN_TIMEOUT_S = 0.001


def checked_timeout(value, source: str = "timeout_s") -> float:
    """``value`` as a finite number of seconds >= :data:`MIN_TIMEOUT_S`; :class:`InvalidArgument` naming ``source``
    otherwise (``nan`` or ``inf`` would disable the deadline, a negative one fail every wait).

    >>> checked_timeout("2.5")
    2.5
    >>> checked_timeout("nan", "TOPOCOLL_MPI_TIMEOUT")
    Traceback (most recent call last):
    ...
    topo_probe.errors.InvalidArgument: TOPOCOLL_MPI_TIMEOUT='nan': expected a finite number of seconds >= 0.001
    """
    try:
        seconds = float(value) if is_real(value) or isinstance(value, str) else math.nan
    except Exception:   # noqa: BLE001 - a subclass's __float__ may raise anything: not a number of seconds
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < MIN_TIMEOUT_S:
        raise InvalidArgument(f"{source}={show(value)}: expected a finite number of seconds >= {MIN_TIMEOUT_S:g}")
    return seconds


def default_timeout() -> float:
    """``$TOPOCOLL_MPI_TIMEOUT`` (seconds) or :data:`DEFAULT_TIMEOUT_S`; a value that is not a
    finite number >= 0.001 is refused in one line (:func:`checked_timeout`)."""
    raw = os.environ.get("TOPOCOLL_MPI_TIMEOUT")
    return DEFAULT_TIMEOUT_S if raw is None or raw.strip() == "" else checked_timeout(raw, "TOPOCOLL_MPI_TIMEOUT")


class Waiter:
    """Deadline-bounded polling of MPI requests (see module docstring).

    Parameters
    ----------
    ctrl : MPI communicator
        Control communicator probed for failure notices (tag :data:`TAG_NOTICE`).
    rank : int
        This process's rank (named in timeout messages).
    timeout_s : float
        Seconds without any completed request before :class:`PeerFailed` is raised.
    source : str
        How a refused ``timeout_s`` is named (its owner's argument: ``MPICommunicator: timeout_s``).
    """

    spin = 20           # Testsome calls before yielding the CPU
    probe_s = 0.002     # seconds between probes for failure notices (and deadline checks)
    nap_after_s = 0.01  # seconds without progress before sleeping between tries
    nap_s = 2e-4        # sleep between tries after that

    def __init__(self, ctrl, rank: int, timeout_s: float | None = None, *, source: str = "timeout_s") -> None:
        self.ctrl, self.rank = ctrl, rank
        self.timeout_s = default_timeout() if timeout_s is None else checked_timeout(timeout_s, source)
        self.MPI = mpi()
        self._sent: list = []   # ping / pong / notice sends (each holds its buffer) until MPI completes them
        #: the first PeerFailed this waiter raised (its text) and the rank it named: the
        #: communicator is closed from then on (:meth:`kernels.mpi.agreement.CallAgreement.start`)
        self.failure: str | None = None
        self.failed_rank: int | None = None
        #: this rank's collective calls (:mod:`kernels.mpi.agreement` numbers them): the one in
        #: progress (or last started), and the last one whose part this rank finished
        self.call = self.finished = 0
        #: peers that left (:func:`read_departure`): rank -> (calls it finished, the rank its own
        #: failure named, or None when it left cleanly / its failure named none)
        self.departed: dict[int, tuple] = {}
        #: this rank left (:func:`kernels.mpi.leaving.notify_departure`): its calls are refused
        self.closed = False

    def _failed(self, message: str, rank: int | None) -> PeerFailed:
        """Remember the first failure (the communicator is closed) and build its PeerFailed."""
        if self.failure is None:
            self.failure, self.failed_rank = message, rank
        return PeerFailed(message, rank=rank, reporter=self.rank)

    def check_notices(self) -> None:
        """Answer liveness pings; raise PeerFailed if another rank has sent a failure notice."""
        if self.ctrl is None:
            return
        MPI, st = self.MPI, self.MPI.Status()
        if len(self._sent) > 64:
            self._sent = [r for r in self._sent if not r.Test()]
        while self.ctrl.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_PING, status=st):
            src = st.Get_source()
            self.ctrl.Recv([np.zeros(1, np.uint8), MPI.BYTE], source=src, tag=TAG_PING)
            self._sent.append(self.ctrl.Isend([np.ones(1, np.uint8), MPI.BYTE], dest=src, tag=TAG_PONG))
        while self.ctrl.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_NOTICE, status=st):
            buf = np.zeros(NOTICE_BYTES, np.uint8)
            src = st.Get_source()
            self.ctrl.Recv([buf, MPI.BYTE], source=src, tag=TAG_NOTICE)
            raw = bytes(buf).rstrip(b"\0").decode("utf-8", "replace")
            left = read_departure(raw, self.ctrl.Get_size())
            if left is not None:     # a peer left: fatal only to calls it will not make
                self.departed.setdefault(src, left)
                continue
            blamed, how, text = read_notice(raw, src, self.ctrl.Get_size())
            raise self._failed(f"rank {self.rank}: stopping because rank {src} {how}: {text}", blamed)
        if self.departed:
            self.check_departed()

    def check_departed(self) -> None:
        """PeerFailed naming a peer that left after fewer calls than the one this rank is in: it
        will never make this call (a peer that finished this call may still be drained).  A peer
        that left cleanly is named before one that left after a failure (which may be this one's
        consequence: that one blames the rank its failure named)."""
        gone = [(src, left) for src, left in self.departed.items() if self.call > left[0]]
        if gone:
            src, (finished, failed, cause) = min(gone, key=lambda g: g[1][1])
            why = f"after its call {finished} failed" if failed else f"after its call {finished}"
            raise self._failed(f"rank {self.rank}: call {self.call}: stopping because rank {src} left {why} "
                               f"(closed its communicator or ended)", cause if failed else src)

    def unresponsive(self, size: int, within_s: float = 1.0) -> list[int]:
        """Ranks that do not answer a ping within ``within_s`` seconds (hung, dead or busy
        outside the communicator); ranks waiting in a Waiter answer."""
        MPI, me = self.MPI, self.rank
        peers = [p for p in range(size) if p != me]
        for p in peers:
            self._sent.append(self.ctrl.Isend([np.zeros(1, np.uint8), MPI.BYTE], dest=p, tag=TAG_PING))
        bufs = {p: np.zeros(1, np.uint8) for p in peers}
        reqs = {p: self.ctrl.Irecv([bufs[p], MPI.BYTE], source=p, tag=TAG_PONG) for p in peers}
        end = time.monotonic() + within_s
        while time.monotonic() < end and not all(r.Test() for r in reqs.values()):
            self.check_notices()
            time.sleep(1e-3)
        return [p for p, r in reqs.items() if not r.Test()]

    def some(self, reqs: list, what: str, peers) -> list[int]:
        """Indices of ``reqs`` that completed (at least one); ``peers(pending_indices)`` names
        the ranks still awaited for the timeout message.

        Polls ``Testsome``: :attr:`spin` times back to back, then yielding the CPU after each
        try (ranks may share cores), and after :attr:`nap_after_s` without progress sleeping
        :attr:`nap_s` between tries.
        """
        testsome = self.MPI.Request.Testsome
        return self._poll(lambda: testsome(reqs), what, lambda: peers(range(len(reqs))))

    def _poll(self, attempt, what: str, awaited):
        """``attempt()`` until it returns something true (see :meth:`some`)."""
        for _ in range(self.spin):
            got = attempt()
            if got:
                return got
        start = time.monotonic()
        next_probe = start + self.probe_s
        while True:
            got = attempt()
            if got:
                return got
            now = time.monotonic()
            if now >= next_probe:
                self.check_notices()
                next_probe = now + self.probe_s
                if now - start > self.timeout_s:
                    self.timed_out(what, sorted(set(awaited())))
            if now - start > self.nap_after_s:
                time.sleep(self.nap_s)
            else:
                _yield()

    def timed_out(self, what: str, waiting: list[int]) -> None:
        """Give up on ``what`` (no progress for :attr:`timeout_s` waiting on ranks ``waiting``): ping
        the peers to say who is silent, tell every peer (:func:`notify_failure`), close the
        communicator (:meth:`_failed`) and raise the PeerFailed."""
        waiting = [w for w in waiting if w >= 0]
        silent = self.unresponsive(self.ctrl.Get_size()) if self.ctrl is not None else []
        blame = silent or waiting
        who = blame[0] if len(blame) == 1 else None
        why = (f"rank(s) {silent} do not respond (hung, dead or busy outside the communicator)" if silent
               else "every rank responds (mismatched collective calls?)" if self.ctrl is not None
               else "some rank did not join")
        text = (f"rank {self.rank}: {what}: no progress for {self.timeout_s:g} s waiting on rank(s) "
                f"{waiting or 'unknown'}; {why}")
        if self.ctrl is not None:   # the others stop too, even a late rank about to join this call
            self._sent += notify_failure(self.ctrl, self.rank, self.ctrl.Get_size(), text, grace_s=0.2, blame=(who,))
        raise self._failed(text, who)

    def all(self, reqs: list, what: str, peers) -> None:
        """Wait for every request of ``reqs`` (``peers(i)`` names the rank of request i),
        polling ``Testall``: one return however many complete, and none is completed (so freed)
        until all are."""
        if reqs:
            testall = self.MPI.Request.Testall
            try:
                self._poll(lambda: testall(reqs), what,
                           lambda: [peers(i) for i, r in enumerate(reqs) if not r.Get_status()])
            except BaseException:   # a peer's notice or the deadline: requests may still be posted, and an
                self._sent += reqs  # mpi4py request dropped while posted frees the buffer MPI then writes
                raise


def notify_failure(ctrl, rank: int, size: int, text: str, grace_s: float = 1.0, blame: tuple = ()) -> list:
    """Send ``text`` to every other rank (tag :data:`TAG_NOTICE`); best effort, waiting at most
    ``grace_s`` seconds.  Ranks waiting in :class:`Waiter` raise PeerFailed naming ``rank``, or,
    for a timeout's notice (``blame=(who,)``), ``who``: the rank the timed-out rank blamed, None
    when it blamed several or none (:func:`read_notice`).

    Returns the send requests (each mpi4py request holds its buffer): a caller that carries on
    must keep them referenced until they complete (mpi4py frees a dropped request, and with it
    the buffer MPI may still be reading)."""
    MPI = mpi()
    raw = (f"timeout:{blame[0]}:" if blame else "failed:").encode() + text.encode("utf-8")
    raw = raw[:NOTICE_BYTES - 1]
    buf = np.zeros(NOTICE_BYTES, np.uint8)
    buf[:len(raw)] = np.frombuffer(raw, np.uint8)
    reqs = []
    for peer in range(size):
        if peer != rank:
            try:
                reqs.append(ctrl.Isend([buf, MPI.BYTE], dest=peer, tag=TAG_NOTICE))
            except Exception:  # noqa: BLE001 - a dead peer must not stop the others' notices
                pass
    end = time.monotonic() + grace_s
    while reqs and time.monotonic() < end:
        try:
            if MPI.Request.Testall(reqs):
                break
        except Exception:  # noqa: BLE001
            break
        time.sleep(1e-3)
    return reqs


def read_notice(text: str, src: int, size: int) -> tuple[int | None, str, str]:
    """(rank to blame, what happened, message) of a notice ``src`` sent (:func:`notify_failure`):
    ``timeout:<rank or None>:`` blames that rank (one of the ``size``), anything else ``src``.

    >>> read_notice("timeout:None:rank 1: allreduce: no progress", 1, 4)
    (None, 'timed out', 'rank 1: allreduce: no progress')
    >>> read_notice("failed:timeout:3:a user's error text", 2, 4)
    (2, 'failed', "timeout:3:a user's error text")
    """
    kind, _, rest = text.partition(":")
    if kind == "timeout":
        who, sep, message = rest.partition(":")
        if sep and (who == "None" or who.isdecimal() and int(who) < size):
            return (None if who == "None" else int(who)), "timed out", message
    return src, "failed", rest if kind == "failed" else text


def departure_notice(rank: int, finished: int, failure: str | None, failed_rank: int | None) -> bytes:
    """What a rank that leaves sends every peer (:mod:`kernels.mpi.leaving`): ``left:<rank>:<calls
    it finished>``, plus ``:failed:<rank its failure named or None>`` when its communicator had failed."""
    tail = "" if failure is None else f":failed:{failed_rank}"
    return f"left:{rank}:{finished}{tail}".encode()


def read_departure(text: str, size: int) -> tuple[int, bool, int | None] | None:
    """(calls the peer finished before it left, whether it had failed, the rank its failure named)
    from its :func:`departure_notice` (``size`` ranks); None for any other notice.

    >>> read_departure("left:3:17", 4), read_departure("left:0:5:failed:3", 4), read_departure("left:0:5:failed:9", 4)
    ((17, False, None), (5, True, 3), (5, True, None))
    >>> read_departure("failed:left:3:17", 4), read_departure("left:x:y", 4)
    (None, None)
    """
    kind, _, rest = text.partition(":")
    fields = rest.split(":")
    if kind != "left" or len(fields) < 2 or not fields[1].isdecimal():
        return None
    failed = fields[2:3] == ["failed"]
    who = fields[3] if failed and len(fields) > 3 else ""
    return int(fields[1]), failed, int(who) if who.isdecimal() and int(who) < size else None


def exchange_json(ctrl, waiter: Waiter, obj, size: int, what: str, limit: int = 1 << 16) -> list:
    """Every rank's ``obj`` (JSON-able), in rank order, through deadline-bounded Isend/Irecv."""
    MPI = waiter.MPI
    me = waiter.rank
    raw = json.dumps(obj, sort_keys=True).encode()
    if len(raw) >= limit:
        raise InvalidArgument(f"rank {me}: {what}: {len(raw)} bytes of metadata exceed {limit}")
    out = np.zeros(limit, np.uint8)
    out[:len(raw)] = np.frombuffer(raw, np.uint8)
    bufs = {p: np.zeros(limit, np.uint8) for p in range(size) if p != me}
    reqs, peers = [], []
    for p, b in bufs.items():
        reqs.append(ctrl.Irecv([b, MPI.BYTE], source=p, tag=TAG_HELLO))
        peers.append(p)
    for p in bufs:
        reqs.append(ctrl.Isend([out, MPI.BYTE], dest=p, tag=TAG_HELLO))
        peers.append(p)
    waiter.all(reqs, what, lambda i: peers[i])
    res = []
    for p in range(size):
        data = raw if p == me else bytes(bufs[p]).rstrip(b"\0")
        res.append(json.loads(data.decode()))
    return res
