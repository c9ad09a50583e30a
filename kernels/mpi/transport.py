"""Run one rank's share of a lowered schedule over MPI: non-blocking point-to-point messages.

One process per rank (``mpirun -n N``).  Every process lowers the same schedule
(:func:`kernels.backends.executor.program_for`) and keeps the ops that concern it
(:func:`rank_plan`): each remote op of the :class:`~kernels.program.lowering.Program` (a schedule
transfer) becomes an ``Isend`` on its source rank and an ``Irecv`` on its destination rank,
tagged with the transfer's global index in the schedule (so messages match whatever order the
ranks post them in); local ops (the epilogue's copies and ``avg``'s division) run in place.

Ordering follows the op dependencies of the lowering, not barriers between steps: a send is
posted once the op that last wrote its source region is done, a copy is received straight into
its destination once the ops that read or write that region are done, and a reduce is
received into a temporary buffer at once and combined (``dst = acc (op) received``) when its
dependencies are done.  Dependencies on other ranks' ops are carried by the messages
themselves.

Waiting (:class:`Waiter`, failure notices, :func:`exchange_json`) lives in
:mod:`kernels.mpi.waiter` and the buffer layers (:class:`HostWire`, :class:`DeviceWire`,
:class:`Arena`, :func:`query_cuda_aware`) in :mod:`kernels.mpi.wires`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernels.backends.kernel_twins import binop_for
from kernels.mpi.waiter import Waiter
from kernels.mpi.wires import HostWire
from kernels.program.ops import Op, Program
from synth.ir.schedule import Schedule
from topo_probe.errors import UnsupportedCollective

SEND, RECV_COPY, RECV_REDUCE, LOCAL = range(4)
#: fewest call-digest bits a tag must carry for receives to be posted before the call's headers
#: arrive (below that, each receive waits for its peer's header)
MIN_SALT_BITS = 12


@dataclass
class RankPlan:
    """The ops of a program that concern ``rank``, ready for :func:`execute`.

    ``sends`` / ``recvs`` are ``(op, tag, peer, deps)`` and ``local`` is ``(op, deps)`` (deps:
    ids of this rank's ops).  ``items`` lists them all as ``(kind, op, tag, peer)`` with
    ``need[i]`` unmet dependencies (a reduce's arrival counts as one), ``after[i]`` the items
    waiting for item i, ``ready0`` those ready at the start and ``reduce_recvs`` the reduces
    (their partials are received into temporaries at once).
    """

    rank: int
    sends: list = field(default_factory=list)
    recvs: list = field(default_factory=list)
    local: list = field(default_factory=list)
    items: list = field(default_factory=list)
    need: list = field(default_factory=list)
    after: list = field(default_factory=list)
    ready0: list = field(default_factory=list)
    reduce_recvs: list = field(default_factory=list)
    #: the tags carry bits of the call's digest (:func:`rank_plan`): receives need not wait
    #: for the peers' headers
    salted: bool = False

    @property
    def num_items(self) -> int:
        return len(self.items)

    def index(self) -> "RankPlan":
        """Fill ``items``, ``need``, ``after``, ``ready0`` and ``reduce_recvs`` from sends, recvs
        and local."""
        rows = ([(SEND, o, tag, peer, deps) for o, tag, peer, deps in self.sends]
                + [(RECV_COPY if o.kind == "copy" else RECV_REDUCE, o, tag, peer, deps)
                   for o, tag, peer, deps in self.recvs]
                + [(LOCAL, o, None, None, deps) for o, deps in self.local])
        rows.sort(key=lambda r: r[1].id)
        self.items = [r[:4] for r in rows]
        self.need = [len(r[4]) + (r[0] == RECV_REDUCE) for r in rows]
        waiting: dict[int, list[int]] = {}          # op id -> items waiting for it
        for i, r in enumerate(rows):
            for d in r[4]:
                waiting.setdefault(d, []).append(i)
        self.after = [tuple(waiting.get(r[1].id, ())) for r in rows]
        self.ready0 = [i for i, k in enumerate(self.need) if k == 0]
        self.reduce_recvs = [i for i, r in enumerate(rows) if r[0] == RECV_REDUCE]
        return self


def transfer_tags(schedule: Schedule) -> list[int]:
    """First tag of each step: transfer ``i`` of step ``t`` is tagged ``offsets[t] + i``
    (tags start above the control tags).

    >>> from synth.ir.schedule import Step, Transfer
    >>> s = Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),))
    >>> transfer_tags(s)
    [16]
    """
    offsets, k = [], 16
    for step in schedule.steps:
        offsets.append(k)
        k += len(step.transfers)
    return offsets


def salt_bits(last_tag: int, tag_ub: int) -> int:
    """How many bits of a call's digest fit in the tags above transfer tags up to ``last_tag``
    when tags may reach ``tag_ub`` (Open MPI: 2**31 - 1; the MPI standard's minimum: 32767).

    >>> salt_bits(40, 2**31 - 1), salt_bits(40, 32767), salt_bits(70000, 2**31 - 1)
    (25, 9, 14)
    """
    return max(0, (tag_ub + 1).bit_length() - 1 - max(1, last_tag).bit_length())


def rank_plan(schedule: Schedule, program: Program, rank: int, tag_ub: int = 32767,
              digest: int | None = None) -> RankPlan:
    """Split ``program`` into this rank's sends, receives and local ops (module docstring).

    With the call's ``digest`` (:func:`kernels.mpi.agreement.header_digest`) and room for at
    least :data:`MIN_SALT_BITS` of it in the tags (:func:`salt_bits`), every tag carries those
    bits above the transfer's index and the plan is :attr:`RankPlan.salted`: a message of a
    call the ranks disagree on (another count, dtype, op, collective, root or schedule) then
    has other tags and can match none of this call's receives, except when the digests agree
    in all those bits (a chance of 2**-bits per mismatched call; 2**-25 for a 4-rank direct
    all-reduce under Open MPI).
    """
    offsets = transfer_tags(schedule)
    last = offsets[-1] + len(schedule.steps[-1].transfers) if schedule.steps else 0
    if last > tag_ub:
        raise UnsupportedCollective(f"schedule {schedule.name!r}: {last} transfers exceed the MPI tag "
                                    f"bound {tag_ub}")
    bits = salt_bits(last, tag_ub) if digest is not None else 0
    salted = bits >= MIN_SALT_BITS
    if salted:
        shift = max(1, last).bit_length()
        base = (digest & ((1 << bits) - 1)) << shift
        offsets = [base + o for o in offsets]
    mine = {o.id for o in program.ops() if o.rank == rank or (o.src is not None and o.src.rank == rank)}
    plan = RankPlan(rank, salted=salted)
    for o in program.ops():
        if o.remote and o.src.rank == rank:
            plan.sends.append((o, offsets[o.step] + o.transfer, o.dst.rank,
                               frozenset(d for d in o.src_deps if d in mine)))
        elif o.rank == rank and o.remote:
            plan.recvs.append((o, offsets[o.step] + o.transfer, o.src.rank,
                               frozenset(d for d in o.dst_deps if d in mine)))
        elif o.rank == rank:
            plan.local.append((o, frozenset(d for d in o.deps if d in mine)))
    _admit_memory(program, rank, plan)
    return plan.index()


def _admit_memory(program: Program, rank: int, plan: RankPlan) -> None:
    """One line instead of the OOM killer: this rank's scratch plus a temporary per received
    message, against the host's available memory (checked from 16 MiB on)."""
    from kernels.backends.memory import CHECK_FROM_BYTES, admit, available_host_bytes
    elems = program.sizes[rank].get("scratch", 0) + sum(o.dst.size for o, *_ in plan.recvs)
    need = elems * program.dtype.itemsize
    if need >= CHECK_FROM_BYTES:
        admit(need, available_host_bytes(), f"rank {rank}: {program.collective}: the schedule's scratch and "
              f"receive buffers", "host memory")


def execute(plan: RankPlan, bufs: dict, wire: HostWire, comm, waiter: Waiter, *, op: str,
            nranks: int, what: str = "collective", gate=None) -> None:
    """Run this rank's ops of a lowered program (see module docstring).

    Parameters
    ----------
    plan : RankPlan
        From :func:`rank_plan`.
    bufs : dict
        Physical buffer name (input/output/scratch) -> flat array of this rank.
    wire : HostWire or DeviceWire
    comm : MPI communicator
        Data communicator (every rank runs the same program on it).
    waiter : Waiter
    op : str
        Reduction op of the collective (sum/prod/max/min/avg).
    nranks : int
        avg's divisor.
    gate : kernels.mpi.agreement.CallGate, optional
        The call's header exchange: it runs beside the data when the plan's tags carry the
        call's digest (:attr:`RankPlan.salted`; else every header is awaited before anything is
        posted); the call ends only once every peer's header is in, and raises on every rank
        if one differs.
    """
    if gate is not None and not plan.salted:   # tags too short for the digest: agree first
        gate.wait()
        gate = None
    run = _Run(plan, bufs, wire, comm, op, nranks, gate)
    keep_abandoned()
    try:
        run.post_first_receives()
        while run.left or run.gate_open():   # a send-only rank still waits for the agreement
            run.start_ready()
            if not run.left and not run.gate_open():
                break
            if not run.pending:
                raise UnsupportedCollective(f"rank {plan.rank}: {what}: ops wait on each other (lowering bug)")
            for k in waiter.some(run.reqs, what, run.awaited):
                run.completed(k)
        if run.deferred:
            waiter.all(run.deferred, what, lambda k: run.deferred_peers[k])
            for fin in run.deferred_fins:
                fin()
    except BaseException:   # a mismatch, a peer failed, a notice, Ctrl-C: nothing posted may be freed
        run.abandon_posted()
        raise
    wire.finish()


class _Run:
    """One :func:`execute` call's state.

    Requests only ever join ``reqs`` (a request MPI completed reads as MPI_REQUEST_NULL and
    Testsome skips it), so indices stay valid: ``owner[k]`` is the item of request k (``-1 - j``
    for the header receive from the gate's peer j), None once it completed.  Sends and copies
    into place that no op waits for are only awaited at the end, together (one wake-up instead
    of one per completion): ``deferred`` requests, their peers and fins.
    """

    def __init__(self, plan: RankPlan, bufs: dict, wire, comm, op: str, nranks: int, gate) -> None:
        self.plan, self.bufs, self.wire, self.comm, self.op, self.nranks, self.gate = (
            plan, bufs, wire, comm, op, nranks, gate)
        self.items, self.after = plan.items, plan.after
        self.need = list(plan.need)
        self.ready = list(plan.ready0)
        self.arrived: dict[int, object] = {}
        self.reqs: list = []
        self.owner: list = []
        self.fins: list = []
        self.deferred: list = []
        self.deferred_peers: list = []
        self.deferred_recv: list = []
        self.deferred_fins: list = []
        self.left = len(self.items)
        self.pending = 0
        self.binops: dict = {}
        self.defer = not wire.finish_completes_peers   # a peer's send may wait for our finish (CUDA IPC)

    def view(self, reg):
        return self.bufs[reg.buf][reg.start:reg.stop]

    def awaited(self, pend):
        return [self.items[self.owner[k]][3] if self.owner[k] >= 0 else self.gate.peers[-1 - self.owner[k]]
                for k in pend if self.owner[k] is not None]

    def gate_open(self) -> bool:
        return self.gate is not None and self.gate.left

    def watch(self, req, i: int, fin) -> None:
        self.reqs.append(req)
        self.owner.append(i)
        self.fins.append(fin)

    def post_first_receives(self) -> None:
        """Partials are received at once (into temporaries); the gate's header receives are
        watched, its sends awaited at the end."""
        for i in self.plan.reduce_recvs:
            _, o, tag, p = self.items[i]
            req, fin = self.wire.post_recv(self.comm, p, tag, o.src, o.dst.stop - o.dst.start,
                                           self.bufs[o.dst.buf].dtype)
            self.watch(req, i, fin)
        if self.gate is not None:
            for k, req in enumerate(self.gate.recvs):
                self.watch(req, -1 - k, None)
            self.deferred.extend(self.gate.sends)
            self.deferred_peers.extend(self.gate.peers)
            self.deferred_recv.extend([False] * len(self.gate.sends))
        self.pending = len(self.reqs)

    def start_ready(self) -> None:
        """Post every ready send and copy receive; run every ready reduce and local op."""
        while self.ready:
            i = self.ready.pop()
            kind, o, tag, peer = self.items[i]
            if kind == SEND:
                req, fin = self.wire.post_send(self.comm, peer, tag, self.view(o.src), o.src)
            elif kind == RECV_COPY:
                dst = self.view(o.dst)
                req, fin = self.wire.post_recv(self.comm, peer, tag, o.src, dst.size, dst.dtype, into=dst)
            else:
                self.run_here(i, kind, o)
                continue
            if self.after[i] or not self.defer:
                self.watch(req, i, fin)
                self.pending += 1
            else:
                self.deferred.append(req)
                self.deferred_peers.append(peer)
                self.deferred_recv.append(kind != SEND)
                if fin is not None:
                    self.deferred_fins.append(fin)
                self.left -= 1

    def run_here(self, i: int, kind, o) -> None:
        if kind == RECV_REDUCE:
            fn = self.binops.get(o.premul)
            if fn is None:
                fn = self.binops[o.premul] = binop_for(o.premul, self.op, self.nranks)
            self.wire.combine(self.view(o.dst), self.view(o.acc), self.arrived.pop(i), fn)
        else:
            _run_local(o, self.view, self.wire, self.op, self.nranks)
        self.done(i)

    def done(self, i: int) -> None:
        self.left -= 1
        for j in self.after[i]:
            self.need[j] -= 1
            if not self.need[j]:
                self.ready.append(j)

    def completed(self, k: int) -> None:
        """Request ``k`` completed: a peer's header, a reduce's partial (now ready to combine),
        or a send or copy (done)."""
        i = self.owner[k]
        self.owner[k] = None
        self.pending -= 1
        if i < 0:               # a peer's header: once all are in, every rank knows the same
            self.gate.arrived(-1 - i)
            if self.gate.mismatch and not self.gate.left:
                self.gate.fail()
            return
        fin = self.fins[k]
        if self.items[i][0] == RECV_REDUCE:
            self.arrived[i] = fin()
            self.need[i] -= 1
            if not self.need[i]:
                self.ready.append(i)
            return
        if fin is not None:
            fin()
        self.done(i)

    def abandon_posted(self) -> None:
        """Keep every request still posted (and its buffers) alive until MPI is done with it."""
        live = [k for k in range(len(self.reqs)) if self.owner[k] is not None]
        abandon([self.reqs[k] for k in live] + self.deferred,
                [self.owner[k] >= 0 and self.items[self.owner[k]][0] != SEND for k in live] + self.deferred_recv)


#: requests still posted when a collective raised, kept (with the buffers they hold) until done
_ABANDONED: list = []
#: set while :func:`keep_abandoned` tests the kept requests
_PRUNING: list = []


def abandon(reqs: list, is_recv: list) -> None:
    """A call stops with ``reqs`` posted: cancel the receives, and keep every request (and so its
    buffer: mpi4py requests hold them) referenced until MPI is done with it, so no memory MPI may
    still write or read is freed or reused by a later call."""
    for req, recv in zip(reqs, is_recv):
        if recv:
            try:
                req.Cancel()
            except Exception:  # noqa: BLE001 - already complete, or the library refuses
                pass
    _ABANDONED.extend(reqs)


def keep_abandoned() -> int:
    """Drop the abandoned requests MPI has finished with; returns how many are still posted.
    The garbage collector may run a communicator's departure meanwhile (:mod:`kernels.mpi.leaving`),
    which abandons its sends and calls this again: that nested call prunes nothing, and the
    requests it appends, past the ``n`` tested here, stay."""
    if _ABANDONED and not _PRUNING:
        _PRUNING.append(True)
        try:
            n = len(_ABANDONED)
            _ABANDONED[:n] = [r for r in _ABANDONED[:n] if not _done(r)]
        finally:
            _PRUNING.clear()
    return len(_ABANDONED)


def _done(req) -> bool:
    try:
        return bool(req.Test())
    except Exception:  # noqa: BLE001 - an error completes the request too
        return True


def _run_local(o: Op, view, wire: HostWire, op: str, nranks: int) -> None:
    if o.kind == "copy":
        wire.copy(view(o.dst), view(o.src))
    elif o.kind == "reduce":
        wire.combine(view(o.dst), view(o.acc), view(o.src), binop_for(o.premul, op, nranks))
    else:
        wire.postdiv(view(o.dst), nranks)
