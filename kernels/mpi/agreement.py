"""Per-call agreement of :class:`kernels.mpi.communicator.MPICommunicator`: the ranks check that
they are in the same call, and no message of another call can land in one of its buffers.

Every rank makes a *header* of its call (:data:`FIELDS`: collective, root, count, dtype, op and the
schedule) and sends a 62-bit digest of it with the call's number to every other rank (16 bytes,
on a communicator of its own).  The headers travel beside the call's data: the data tags carry
bits of the same digest (:func:`kernels.mpi.transport.rank_plan`), so a receive cannot match a
message of a call with another header, and receives are posted at once (where the MPI
library's tags are too short for the digest, the call waits for every header first).  A call
ends only when every peer's header is in, so every rank sees every disagreement.  (One
``MPI_Iallreduce`` instead of the headers took twice as long on 4 ranks: its rounds need every
rank's progress.)

When the ranks disagree, every rank exchanges its full header
(:func:`kernels.mpi.waiter.exchange_json`), replaces its data communicator (sends of the call
that nobody will receive stay behind on the old one, kept alive, and can never match a later
call) and raises :class:`~topo_probe.errors.ProcessGroupMismatch` with the same message naming
each field that differs and which ranks hold which value.  No buffer can be written late
(without this, a rank with another count or dtype truncated or overran the peers' receives: MPI
errors or heap corruption; another op gave a silent wrong result; another collective or root hung
until the timeout).  A rank whose arguments fail its own checks before the agreement joins it
with its error, so the others stop at once too (:meth:`CallAgreement.failed`).  Calls without
data (``barrier``, ``allgather_object``, a compressed all-reduce's format) agree the same way
(:meth:`CallAgreement.check_plain`).  After a :class:`~topo_probe.errors.PeerFailed` the
communicator is closed (:meth:`CallAgreement.start` raises at once), and each call first reads
failure notices, so a rank that arrives late at a call a peer gave up on fails too.  Calls are
numbered alike on every rank (:attr:`CallAgreement.calls`); the last one whose part a rank
finished (:meth:`CallAgreement.done`) is what it tells its peers when it leaves
(:mod:`kernels.mpi.leaving`), so they fail only the calls it will not make.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections import OrderedDict

import numpy as np

from kernels.comm.validation import check_array
from kernels.mpi.waiter import Waiter, exchange_json
from topo_probe.errors import InvalidArgument, PeerFailed, ProcessGroupMismatch

#: the fields every rank's call must agree on, in the order a mismatch names them
FIELDS = ("collective", "root", "count", "dtype", "op", "schedule")
_MASK = (1 << 62) - 1
#: the digest of a rank that could not start the call (never a real digest: those are >= 0)
_FAILED = -1
TAG_HEADER = 1
WHAT = "the start of a collective call (every rank must make the same call)"


def header_digest(header: dict) -> int:
    """A 62-bit digest of the :data:`FIELDS` of ``header`` (the same on every rank, unlike
    Python's ``hash`` of strings).

    >>> h = dict(collective="allreduce", root=None, count=8, dtype="float32", op="sum", schedule="ab")
    >>> header_digest(h) == header_digest(dict(h)) != header_digest({**h, "op": "max"})
    True
    """
    text = json.dumps([header.get(k) for k in FIELDS], separators=(",", ":"))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") & _MASK


def schedule_digest(schedule) -> str:
    """16 hex digits over a schedule's JSON (which ranks, steps and transfers it runs)."""
    return hashlib.blake2b(schedule.to_json().encode(), digest_size=8).hexdigest()


def describe_mismatch(headers: list[dict]) -> str:
    """The one message every rank raises for the rank-ordered ``headers`` of one call.

    >>> a = dict(call=3, collective="allreduce", root=None, count=8, dtype="float32", op="sum", schedule="x")
    >>> describe_mismatch([a, a, {**a, "op": "max"}, a])
    "call 3 (allreduce): ranks disagree on op: ranks [0, 1, 3] 'sum', ranks [2] 'max'"
    >>> describe_mismatch([a, {**a, "error": "rank 1: recvbuf has 7 elements"}])
    'call 3 (allreduce): rank 1 could not start it: rank 1: recvbuf has 7 elements'
    """
    first = headers[0]
    what = f"call {first.get('call')} ({first.get('collective')})"
    failed = [(r, h["error"]) for r, h in enumerate(headers) if h.get("error")]
    if failed:
        return f"{what}: " + "; ".join(f"rank {r} could not start it: {e}" for r, e in failed)
    parts = []
    for key in ("call",) + FIELDS:
        groups: dict[str, list[int]] = {}
        for r, h in enumerate(headers):
            groups.setdefault(json.dumps(h.get(key)), []).append(r)
        if len(groups) > 1:
            parts.append(f"{key}: " + ", ".join(f"ranks {rs} {json.loads(v)!r}"
                                                for v, rs in sorted(groups.items(), key=lambda x: x[1])))
    return f"{what}: ranks disagree on " + "; ".join(parts or ["nothing (digest collision?)"])


class CallAgreement:
    """The check of every collective call (module docstring).

    Parameters
    ----------
    comm : MPI communicator
        Carries only the headers (a duplicate: never mixed with other messages).
    ctrl : MPI communicator
        Where full headers are exchanged when the ranks disagree.
    waiter : Waiter
        Deadline and failure notices.
    size : int
        Number of ranks.
    """

    def __init__(self, comm, ctrl, waiter: Waiter, size: int) -> None:
        self.comm, self.ctrl, self.waiter, self.size = comm, ctrl, waiter, size
        self.rank = waiter.rank
        self.calls = 0
        #: nesting of the communicator's collective methods, and whether the outermost one has
        #: reached :meth:`start` (see :func:`agreed`)
        self.depth, self.agreed = 0, False
        #: called on every rank when a call's ranks disagree, before ProcessGroupMismatch is raised
        self.on_mismatch = None
        self.peers = [p for p in range(size) if p != self.rank]
        self.peer_index = np.array(self.peers, dtype=np.intp)
        self._type = waiter.MPI.INT64_T
        self._persistent = None   # (all requests, receives, sends, our header, theirs)
        self._digests: OrderedDict = OrderedDict()

    def header(self, schedule, count: int, dtype, op: str, collective: str | None = None,
               root: int | None = None) -> dict:
        """The :data:`FIELDS` of a call of ``schedule`` (or, without one, of ``collective`` and
        ``root``: a call with nothing to move); schedule digests are cached per schedule object."""
        if schedule is None:
            return {"collective": collective, "root": root, "count": count, "dtype": np.dtype(dtype).name,
                    "op": op, "schedule": None}
        hit = self._digests.get(id(schedule))
        if hit is None or hit[0] is not schedule:
            hit = self._digests[id(schedule)] = (schedule, schedule_digest(schedule))
            if len(self._digests) > 64:
                self._digests.popitem(last=False)
        spec = schedule.spec
        return {"collective": spec.name, "root": spec.root, "count": count, "dtype": np.dtype(dtype).name,
                "op": op, "schedule": f"{schedule.name or 'schedule'}:{hit[1]}"}

    def start(self, digest: int, header) -> "CallGate":
        """Send this call's ``[digest, call number]`` to every peer and post a receive for each
        peer's; the :class:`CallGate` says whether they agree (``header()`` is only built when
        they do not).  The messages are persistent requests, started together; a set still
        active (a call that stopped before its headers were in) is left to MPI and replaced."""
        waiter, MPI = self.waiter, self.waiter.MPI
        self.refuse_if_closed()
        self.calls += 1
        waiter.call = self.calls
        waiter.check_notices()             # a peer gave up on an earlier call, or left: stop before posting anything
        self.agreed = True
        if self._persistent is None or not MPI.Request.Testall(self._persistent[0]):
            out = np.empty(2, np.int64)
            ins = np.empty((self.size, 2), np.int64)
            t = self._type
            recvs = [self.comm.Recv_init([ins[p], t], source=p, tag=TAG_HEADER) for p in self.peers]
            sends = [self.comm.Send_init([out, t], dest=p, tag=TAG_HEADER) for p in self.peers]
            self._persistent = (recvs + sends, recvs, sends, out, ins)
        every, recvs, sends, out, ins = self._persistent
        out[0], out[1] = digest, self.calls
        MPI.Prequest.Startall(every)
        return CallGate(self, header, recvs, sends, out, ins)

    def refuse_if_closed(self) -> None:
        """PeerFailed at once when a call of this communicator already failed (it is closed: its
        peers stopped, or will, at that call too); every call checks first, point to point too."""
        waiter = self.waiter
        if waiter.closed:
            raise InvalidArgument(f"rank {self.rank}: this communicator was closed after call {self.calls} "
                                  f"(close(), or it was collected); make a new one")
        if waiter.failure is not None:
            raise PeerFailed(f"rank {self.rank}: this communicator is closed after call {self.calls} failed "
                             f"({waiter.failure}); make a new one", rank=waiter.failed_rank, reporter=self.rank)

    def check(self, digest: int, header) -> None:
        """Agree on this call before anything else happens (raise ProcessGroupMismatch on every
        rank if the ranks disagree).  The call is not :meth:`done` yet: its data may follow."""
        self.start(digest, header).wait()

    def done(self) -> None:
        """This rank finished its part of the current call (every message of it completed, or
        every rank raised the same ProcessGroupMismatch): a peer may drain it after this rank
        left (:mod:`kernels.mpi.leaving` tells the peers this number)."""
        self.waiter.finished = self.calls

    def check_plain(self, header) -> None:
        """:meth:`check` of a call that moves no data: ``header`` is a dict of :data:`FIELDS`, or
        the name of a call without arguments (``"barrier"``: every peer's header in is a barrier)."""
        if isinstance(header, str):
            header = {"collective": header, "root": None, "count": 0, "dtype": None, "op": None, "schedule": None}
        self.check(header_digest(header), lambda: header)

    def mismatch(self, header) -> None:
        """Every rank, once it knows the ranks disagree on this call: exchange the full headers,
        call :attr:`on_mismatch` (the communicator replaces its data communicator, where sends of
        the call may wait unmatched) and raise ProcessGroupMismatch with the same message."""
        headers = exchange_json(self.ctrl, self.waiter, {**header(), "call": self.calls}, self.size,
                                "call agreement")
        if self.on_mismatch is not None:
            self.on_mismatch()
        self.done()
        raise ProcessGroupMismatch(describe_mismatch(headers))

    def failed(self, header: dict, error: BaseException) -> None:
        """Join this call's agreement as a rank that could not start it; the peers raise
        ProcessGroupMismatch naming ``error`` (this rank then re-raises ``error`` itself)."""
        try:
            self.check(_FAILED, lambda: {**header, "error": f"{type(error).__name__}: {error}"})
        except ProcessGroupMismatch:
            pass

    def report(self, collective: str, error: BaseException) -> None:
        """An error this rank raised before its call of ``collective`` reached the agreement, told to the peers
        (:meth:`failed`; nothing to tell on one rank); the caller re-raises it."""
        if self.size > 1:
            self.failed({"collective": collective}, error)


class CallGate:
    """The header exchange of one call: :attr:`recvs` (one per peer, in ``agreement.peers``
    order) and :attr:`sends`.  :meth:`arrived` is told when receive ``k`` completed; once every
    header is in it sets :attr:`mismatch` if a peer's call differs (one comparison of all);
    :attr:`left` counts receives still open."""

    def __init__(self, agreement: CallAgreement, header, recvs: list, sends: list, mine, theirs) -> None:
        self.agreement, self.header = agreement, header
        self.recvs, self.sends, self.mine, self.theirs = recvs, sends, mine, theirs
        self.peers = agreement.peers
        self.left = len(recvs)
        self.mismatch = False

    def arrived(self, k: int) -> None:
        self.left -= 1
        if not self.left:
            self.mismatch = bool((self.theirs[self.agreement.peer_index] != self.mine).any())

    def fail(self) -> None:
        """After :attr:`mismatch`, with every header in: the ranks' common error (raises)."""
        self.agreement.mismatch(self.header)

    def wait(self) -> None:
        """Wait for every header; raise (on every rank) if any peer's call differs."""
        self.agreement.waiter.all(self.recvs + self.sends, WHAT, lambda i: -1)
        for k in range(len(self.recvs)):
            self.arrived(k)
        if self.mismatch:
            self.fail()


def agreed(collective: str):
    """Decorator of a collective method of the communicator: its array arguments must be NumPy
    or CuPy arrays of an NCCL type (:func:`kernels.comm.validation.check_array`), and an error
    this rank raises before its call reached the agreement (bad arguments, a buffer too small)
    is first reported to the peers through the agreement (:meth:`CallAgreement.failed`), so
    they raise at once instead of waiting for this rank until the timeout.  Nested calls (a
    collective built from others) report once, from the outermost.  A call with the same
    arguments as an earlier one is replayed (:mod:`kernels.mpi.replay`)."""
    def wrap(method):
        name = method.__name__

        @functools.wraps(method)
        def call(self, *args, **kwargs):
            state, memo = self.agreement, self._memo
            outermost = not state.depth
            key = None
            if outermost:
                state.agreed = False
                key = memo.key(name, args, kwargs)
            state.depth += 1
            try:
                if key is not None:
                    hit = memo.get(key, args, kwargs)
                    if hit is not None:
                        try:
                            self._launch(hit[0])
                        except BaseException:
                            memo.drop(key)
                            raise
                        state.done()
                        return hit[1]
                    memo.trace = []
                if outermost:   # nested calls get views of arrays checked already
                    for a in (*args, *kwargs.values()):
                        if isinstance(a, (list, tuple)) or hasattr(a, "dtype"):  # not counts, ops, streams
                            check_array(a, name, self.rank)
                result = method(self, *args, **kwargs)
                if outermost:
                    state.done()
                if key is not None:
                    memo.keep(key, args, kwargs, result)
                return result
            except Exception as exc:
                if outermost and not state.agreed and not isinstance(exc, (PeerFailed, ProcessGroupMismatch)):
                    if isinstance(exc, ValueError) and f"rank {self.rank}" not in str(exc):
                        owner = f"{type(self).__name__}.{name}"     # a rule that names its owner keeps it
                        head = owner if str(exc).startswith(f"{owner}: ") else name
                        text = str(exc).removeprefix(f"{owner}: ").removeprefix(f"{collective}: ")
                        text = text.removeprefix(f"{name}: ")   # named once
                        exc.args = (f"{head}: rank {self.rank}: {text}",)  # say whose call it was
                    state.report(collective, exc)
                raise
            finally:
                state.depth -= 1
                if outermost:
                    memo.trace = None
        return call
    return wrap
