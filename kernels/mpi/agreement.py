"""Per-call agreement of :class:`kernels.mpi.communicator.MPICommunicator`: before any message of a
collective is posted, the ranks check that they are in the same call.

Every rank makes a *header* of its call (:data:`FIELDS`: collective, root, count, dtype, op and the
schedule, plus the call's number on the communicator) and reduces a 62-bit digest of it and the call
number with one non-blocking ``Iallreduce(MAX)`` of ``[d, -d, c, -c]`` on a communicator of its
own: equal everywhere iff the maximum equals minus the maximum of the negations.  That is one
small collective in C per call, and its latency overlaps the call's first messages: the
transport posts the call's *sends* at once but its *receives* only once the agreement has
completed (:func:`kernels.mpi.transport.execute`'s ``gate``), so no receive can ever match a
message of another shape.

When the ranks disagree, every rank sees it in the same result, so every rank exchanges its full
header (:func:`kernels.mpi.waiter.exchange_json`), replaces its data communicator (sends of the
call that nobody will receive stay behind on the old one, kept alive, and can never match a later
call) and raises :class:`~topo_probe.errors.ProcessGroupMismatch` with the same message naming each
field that differs and which ranks hold which value.  No receive of the call was posted, so no
buffer can be written late (without this, a rank with another count or dtype truncated or overran
the peers' receives: MPI errors or heap corruption; another op gave a silent wrong result;
another collective or root hung until the timeout).  A rank whose arguments fail its own checks
before the agreement joins it with its error, so the others stop at once too
(:meth:`CallAgreement.failed`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections import OrderedDict

import numpy as np

from kernels.comm.validation import check_array
from kernels.mpi.waiter import Waiter, exchange_json
from topo_probe.errors import PeerFailed, ProcessGroupMismatch

#: the fields every rank's call must agree on, in the order a mismatch names them
FIELDS = ("collective", "root", "count", "dtype", "op", "schedule")
_MASK = (1 << 62) - 1
#: the digest of a rank that could not start the call (never a real digest: those are >= 0)
_FAILED = -1
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
        Used only for the digest reduction (a duplicate: never mixed with other collectives).
    ctrl : MPI communicator
        Where headers are exchanged when the digests differ.
    waiter : Waiter
        Deadline and failure notices.
    size : int
        Number of ranks.
    """

    def __init__(self, comm, ctrl, waiter: Waiter, size: int) -> None:
        self.comm, self.ctrl, self.waiter, self.size = comm, ctrl, waiter, size
        self.calls = 0
        #: nesting of the communicator's collective methods, and whether the outermost one has
        #: reached :meth:`start` (see :func:`agreed`)
        self.depth, self.agreed = 0, False
        #: called on every rank when a call's ranks disagree, before ProcessGroupMismatch is raised
        self.on_mismatch = None
        self._mine = np.zeros(4, np.int64)
        self._all = np.zeros(4, np.int64)
        self._type = waiter.MPI.INT64_T
        self._max = waiter.MPI.MAX
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

    def check(self, digest: int, header) -> None:
        """Agree on this call (``digest`` = :func:`header_digest` of ``header()``, which is only
        built when the ranks disagree); raise ProcessGroupMismatch on every rank if they do not."""
        self.finish(self.start(digest), digest, header)

    def start(self, digest: int):
        """Post this call's digest reduction (local work can overlap it); :meth:`finish` waits."""
        self.calls += 1
        self.agreed = True
        mine = self._mine
        mine[0], mine[1], mine[2], mine[3] = digest, -digest, self.calls, -self.calls
        return self.comm.Iallreduce([mine, self._type], [self._all, self._type], op=self._max)

    def finish(self, request, digest: int, header) -> None:
        """Wait for :meth:`start`'s reduction, then :meth:`verdict`."""
        self.waiter.all([request], WHAT, lambda i: -1)
        self.verdict(digest, header)

    def verdict(self, digest: int, header) -> None:
        """After :meth:`start`'s reduction completed: return if every rank made this call, else
        (on every rank, from the same result) exchange the headers, call :attr:`on_mismatch` (the
        communicator drops its data communicator, where sends of the call may wait unmatched)
        and raise ProcessGroupMismatch with the same message everywhere."""
        every = self._all
        if every[0] == -every[1] and every[2] == -every[3] and every[0] == digest:
            return
        headers = exchange_json(self.ctrl, self.waiter, {**header(), "call": self.calls}, self.size,
                                "call agreement")
        if self.on_mismatch is not None:
            self.on_mismatch()
        raise ProcessGroupMismatch(describe_mismatch(headers))

    def failed(self, header: dict, error: BaseException) -> None:
        """Join this call's agreement as a rank that could not start it; the peers raise
        ProcessGroupMismatch naming ``error`` (this rank then re-raises ``error`` itself)."""
        try:
            self.check(_FAILED, lambda: {**header, "error": f"{type(error).__name__}: {error}"})
        except ProcessGroupMismatch:
            pass


def agreed(collective: str):
    """Decorator of a collective method of the communicator: its array arguments must be NumPy
    or CuPy arrays of an NCCL type (:func:`kernels.comm.validation.check_array`), and an error
    this rank raises before its call reached the agreement (bad arguments, a buffer too small)
    is first reported to the peers through the agreement (:meth:`CallAgreement.failed`), so
    they raise at once instead of waiting for this rank until the timeout.  Nested calls (a
    collective built from others) report once, from the outermost."""
    def wrap(method):
        @functools.wraps(method)
        def call(self, *args, **kwargs):
            state = self.agreement
            outermost = not state.depth
            if outermost:
                state.agreed = False
            state.depth += 1
            try:
                for a in (*args, *kwargs.values()):
                    if isinstance(a, (list, tuple)) or hasattr(a, "dtype"):  # not counts, ops, streams
                        check_array(a, method.__name__, self.rank)
                return method(self, *args, **kwargs)
            except Exception as exc:
                if outermost and not state.agreed and not isinstance(exc, (PeerFailed, ProcessGroupMismatch)):
                    if isinstance(exc, ValueError) and f"rank {self.rank}" not in str(exc):
                        exc.args = (f"{method.__name__}: rank {self.rank}: {exc}",)  # say whose call it was
                    if self.size > 1:
                        state.failed({"collective": collective}, exc)
                raise
            finally:
                state.depth -= 1
        return call
    return wrap
