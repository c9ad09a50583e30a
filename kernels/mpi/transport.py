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


@dataclass
class RankPlan:
    """The ops of a program that concern ``rank``, ready for :func:`execute`.

    ``sends`` / ``recvs`` are ``(op, tag, peer, deps)`` and ``local`` is ``(op, deps)`` (deps:
    ids of this rank's ops).  ``items`` lists them all as ``(kind, op, tag, peer)`` with
    ``need[i]`` unmet dependencies (a reduce's arrival counts as one) and ``dependents[op id]``
    the items waiting for that op.
    """

    rank: int
    sends: list = field(default_factory=list)
    recvs: list = field(default_factory=list)
    local: list = field(default_factory=list)
    items: list = field(default_factory=list)
    need: list = field(default_factory=list)
    dependents: dict = field(default_factory=dict)
    #: peer -> indices (in ``items``) of the reduces received from it
    reduce_recvs: dict = field(default_factory=dict)

    @property
    def num_items(self) -> int:
        return len(self.items)

    def index(self) -> "RankPlan":
        """Fill ``items``, ``need`` and ``dependents`` from sends, recvs and local."""
        rows = ([(SEND, o, tag, peer, deps) for o, tag, peer, deps in self.sends]
                + [(RECV_COPY if o.kind == "copy" else RECV_REDUCE, o, tag, peer, deps)
                   for o, tag, peer, deps in self.recvs]
                + [(LOCAL, o, None, None, deps) for o, deps in self.local])
        rows.sort(key=lambda r: r[1].id)
        self.items = [r[:4] for r in rows]
        self.need = [len(r[4]) + (r[0] == RECV_REDUCE) for r in rows]
        self.dependents, self.reduce_recvs = {}, {}
        for i, r in enumerate(rows):
            for d in r[4]:
                self.dependents.setdefault(d, []).append(i)
            if r[0] == RECV_REDUCE:
                self.reduce_recvs.setdefault(r[3], []).append(i)
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


def rank_plan(schedule: Schedule, program: Program, rank: int, tag_ub: int = 32767) -> RankPlan:
    """Split ``program`` into this rank's sends, receives and local ops (module docstring)."""
    offsets = transfer_tags(schedule)
    last = offsets[-1] + len(schedule.steps[-1].transfers) if schedule.steps else 0
    if last > tag_ub:
        raise UnsupportedCollective(f"schedule {schedule.name!r}: {last} transfers exceed the MPI tag "
                                    f"bound {tag_ub}")
    mine = {o.id for o in program.ops() if o.rank == rank or (o.src is not None and o.src.rank == rank)}
    plan = RankPlan(rank)
    for o in program.ops():
        if o.remote and o.src.rank == rank:
            plan.sends.append((o, offsets[o.step] + o.transfer, o.dst.rank,
                               frozenset(d for d in o.src_deps if d in mine)))
        elif o.rank == rank and o.remote:
            plan.recvs.append((o, offsets[o.step] + o.transfer, o.src.rank,
                               frozenset(d for d in o.dst_deps if d in mine)))
        elif o.rank == rank:
            plan.local.append((o, frozenset(d for d in o.deps if d in mine)))
    return plan.index()


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
        The call's header exchange: sends are posted as soon as they are ready, a receive from
        a peer only once that peer's header has matched ours; the call ends when every header
        is in (and raises, on every rank, if one did not match).
    """
    items, dependents = plan.items, plan.dependents
    need = list(plan.need)
    ready = [i for i, k in enumerate(need) if k == 0]
    arrived: dict[int, object] = {}
    reqs, active = [], []          # MPI requests and (item index, finish) per request
    left = len(items)

    def view(reg):
        return bufs[reg.buf][reg.start:reg.stop]

    def complete(i: int) -> None:
        nonlocal left
        left -= 1
        for j in dependents.get(items[i][1].id, ()):
            need[j] -= 1
            if need[j] == 0:
                ready.append(j)

    open_all = gate is None
    opened: set = set()
    held: dict[int, list[int]] = {}            # receives that wait for their peer's header

    def post_reduce_receives(peer) -> None:    # partials are received at once (into temporaries)
        for i in (plan.reduce_recvs.get(peer, ()) if peer is not None else
                  [i for lst in plan.reduce_recvs.values() for i in lst]):
            _, o, tag, p = items[i]
            req, fin = wire.post_recv(comm, p, tag, o.src, o.dst.size, bufs[o.dst.buf].dtype)
            reqs.append(req)
            active.append((i, fin))

    keep_abandoned()
    try:
        if open_all:
            post_reduce_receives(None)
        else:
            reqs.extend(gate.requests)
            active.extend((-1 - k, None) for k in range(len(gate.requests)))
        while left or (gate is not None and gate.left):   # a send-only rank still waits for headers
            while ready:
                i = ready.pop()
                kind, o, tag, peer = items[i]
                if kind == RECV_COPY and not open_all and peer not in opened:
                    held.setdefault(peer, []).append(i)
                    continue
                if kind == SEND:
                    req, fin = wire.post_send(comm, peer, tag, view(o.src), o.src)
                    reqs.append(req)
                    active.append((i, fin))
                elif kind == RECV_COPY:
                    dst = view(o.dst)
                    req, fin = wire.post_recv(comm, peer, tag, o.src, dst.size, dst.dtype, into=dst)
                    reqs.append(req)
                    active.append((i, fin))
                elif kind == RECV_REDUCE:
                    wire.combine(view(o.dst), view(o.acc), arrived.pop(i), binop_for(o.premul, op, nranks))
                    complete(i)
                else:
                    _run_local(o, view, wire, op, nranks)
                    complete(i)
            if not left and not (gate is not None and gate.left):
                break
            if gate is not None and gate.mismatch:    # only the other headers are still awaited
                gate_reqs = [r for r, (i, _) in zip(reqs, active) if i < 0]
                waiter.all(gate_reqs, what, lambda k: -1)
                gate.fail()
            if not reqs:
                raise UnsupportedCollective(f"rank {plan.rank}: {what}: ops wait on each other (lowering bug)")
            finished = waiter.some(reqs, what, lambda pend: [items[active[k][0]][3] if active[k][0] >= 0 else -1
                                                             for k in pend])
            for k in finished:
                i, fin = active[k]
                if i < 0:               # a header arrived (or ours was sent)
                    peer = gate.arrived(-1 - i)
                    if peer is not None:
                        opened.add(peer)
                        post_reduce_receives(peer)
                        ready.extend(held.pop(peer, ()))
                    continue
                if items[i][0] == RECV_REDUCE:
                    arrived[i] = fin()
                    need[i] -= 1
                    if need[i] == 0:
                        ready.append(i)
                    continue
                if fin is not None:
                    fin()
                complete(i)
            done = set(finished)
            reqs = [r for k, r in enumerate(reqs) if k not in done]
            active = [x for k, x in enumerate(active) if k not in done]
        if gate is not None and gate.mismatch:    # the last header in was the odd one
            gate.fail()
    except BaseException:   # a mismatch, a peer failed, a notice, Ctrl-C: nothing posted may be freed
        abandon(reqs, [items[i][0] != SEND if i >= 0 else gate.is_recv(-1 - i) for i, _ in active])
        raise
    wire.finish()


#: requests still posted when a collective raised, kept (with the buffers they hold) until done
_ABANDONED: list = []


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
    """Drop the abandoned requests MPI has finished with; returns how many are still posted."""
    if _ABANDONED:
        _ABANDONED[:] = [r for r in _ABANDONED if not _done(r)]
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
