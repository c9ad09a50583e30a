"""Repeated collectives on the same buffers: a rank plan bound once to persistent MPI requests.

Training loops call the same collective on the same arrays over and over.  For those calls the
per-message work of :func:`kernels.mpi.transport.execute` (a buffer description, a new
``Isend``/``Irecv``, views of the regions, a temporary for each received partial) is the same
every time, and on small and medium messages it is most of what a call costs in Python.
:class:`BoundPlan` does it once: every transfer of the rank plan becomes a persistent request
(``Send_init``/``Recv_init``) on fixed views of the buffers, each received partial gets a
temporary of its own, and each reduce a prepared call.  A call then only starts requests (one
``Startall`` for those ready at once, ``Start`` for the others as their dependencies finish)
and reduces as partials arrive; ordering, the call agreement (:class:`~kernels.mpi.agreement.CallGate`)
and deadline-bounded waiting are those of :func:`~kernels.mpi.transport.execute`.

:class:`PlanRunner` decides per call: host buffers (:class:`~kernels.mpi.wires.HostWire`) seen
in an earlier call with the same rank plan, data communicator and buffer addresses run bound;
anything else (the first call on some buffers, device buffers, a call whose temporaries and
buffers exceed :data:`MAX_BOUND_BYTES`) runs through ``execute``.  At most :data:`MAX_BOUND`
bindings are kept (least recently used dropped); each keeps its buffers alive (MPI holds them)
until dropped.  A call that stops early (a mismatch, a failed peer, Ctrl-C) hands its posted
requests to :func:`~kernels.mpi.transport.abandon` and drops its binding, so a request still
posted is never started again and no buffer MPI may still touch is freed.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import partial
from operator import is_

import numpy as np

from kernels.backends.kernel_twins import binop_for, plain_ufunc, reduce_copy_with
from kernels.mpi import transport as mt
from kernels.mpi.transport import LOCAL, RECV_COPY, RECV_REDUCE, SEND, RankPlan
from kernels.mpi.waiter import Waiter, mpi
from kernels.mpi.wires import HostWire, _byte
from topo_probe.errors import UnsupportedCollective

#: bindings kept per communicator
MAX_BOUND = 8
#: most bytes a binding may keep alive (its buffers and temporaries); larger calls are not bound
MAX_BOUND_BYTES = 32 << 20


class BoundPlan:
    """``plan`` bound to ``bufs`` on ``comm`` (module docstring): one persistent request per
    message, a temporary per received partial, a prepared call per reduce and local op."""

    def __init__(self, plan: RankPlan, bufs: dict, comm, op: str, nranks: int) -> None:
        self.plan, self.comm = plan, comm
        byte = _byte()
        if not _MPI:
            _MPI.append(mpi())

        def view(reg):
            return bufs[reg.buf][reg.start:reg.stop]

        n_items = len(plan.items)
        self.reqs: list = [None] * n_items
        self.run: list = [None] * n_items       # reduce / local op: a call taking no argument
        self.watch: list = []                   # requests whose completion releases something
        self.slot_item: list[int] = []          # watch index -> item
        self.deferred: list = []                # leaf sends / copies, awaited together at the end
        self.deferred_peers: list[int] = []
        for i, (kind, o, tag, peer) in enumerate(plan.items):
            if kind == SEND:
                self.reqs[i] = comm.Send_init([view(o.src).view(np.uint8), byte], dest=peer, tag=tag)
            elif kind == RECV_COPY:
                self.reqs[i] = comm.Recv_init([view(o.dst).view(np.uint8), byte], source=peer, tag=tag)
            elif kind == RECV_REDUCE:
                dst = view(o.dst)
                tmp = np.empty(dst.size, dst.dtype)
                self.reqs[i] = comm.Recv_init([tmp.view(np.uint8), byte], source=peer, tag=tag)
                self.run[i] = _reducer(dst, view(o.acc), tmp, binop_for(o.premul, op, nranks))
            else:                               # rare (epilogue copies, avg's division): as execute runs them
                self.run[i] = partial(mt._run_local, o, view, HostWire(), op, nranks)
            if kind != LOCAL:
                if kind == RECV_REDUCE or plan.after[i]:
                    self.watch.append(self.reqs[i])
                    self.slot_item.append(i)
                else:
                    self.deferred.append(self.reqs[i])
                    self.deferred_peers.append(peer)
        self.tracked = n_items - len(self.deferred)
        self.start = ([self.reqs[i] for i in plan.reduce_recvs]
                      + [self.reqs[i] for i in plan.ready0 if plan.items[i][0] in (SEND, RECV_COPY)])
        watched = {id(r) for r in self.watch}
        self.start_watched = sum(id(r) in watched for r in self.start)
        self.ready0 = [i for i in plan.ready0 if plan.items[i][0] == LOCAL]

    def execute(self, waiter: Waiter, what: str, gate=None) -> None:
        """One call (see :func:`kernels.mpi.transport.execute` for ``gate``)."""
        if gate is not None and not self.plan.salted:
            gate.wait()
            gate = None
        plan, reqs, run = self.plan, self.reqs, self.run
        items, after, slot_item = plan.items, plan.after, self.slot_item
        need = plan.need[:]
        watch = self.watch
        if gate is not None:
            watch = watch + gate.recvs
        n_watch = len(self.watch)
        done = bytearray(len(watch))
        left = self.tracked
        ready = self.ready0[:]
        mt.keep_abandoned()
        started = False
        testsome = _MPI[0].Request.Testsome

        def awaited(_pending):
            return [items[slot_item[k]][3] if k < n_watch else gate.peers[k - n_watch]
                    for k in range(len(watch)) if not done[k]]

        pending = self.start_watched + (len(gate.recvs) if gate is not None else 0)
        try:
            if self.start:
                _MPI[0].Prequest.Startall(self.start)
            started = True
            while True:
                while ready:
                    i = ready.pop()
                    kind = items[i][0]
                    if kind == SEND or kind == RECV_COPY:
                        reqs[i].Start()
                        if after[i]:
                            pending += 1
                        continue
                    run[i]()
                    left -= 1
                    for j in after[i]:
                        need[j] -= 1
                        if not need[j]:
                            ready.append(j)
                if not left and not (gate is not None and gate.left):
                    break
                if not pending:
                    raise UnsupportedCollective(f"rank {plan.rank}: {what}: ops wait on each other (lowering bug)")
                got = testsome(watch) or waiter.some(watch, what, awaited)
                for k in got:
                    done[k] = 1
                    pending -= 1
                    if k >= n_watch:        # a peer's header
                        gate.arrived(k - n_watch)
                        if gate.mismatch and not gate.left:
                            gate.fail()
                        continue
                    i = slot_item[k]
                    if items[i][0] == RECV_REDUCE:
                        need[i] -= 1
                        if not need[i]:
                            ready.append(i)
                        continue
                    left -= 1
                    for j in after[i]:
                        need[j] -= 1
                        if not need[j]:
                            ready.append(j)
            tail = self.deferred if gate is None else self.deferred + gate.sends
            if tail:
                peers = self.deferred_peers
                waiter.all(tail, what, lambda k: peers[k] if k < len(peers) else gate.peers[k - len(peers)])
        except BaseException:   # posted requests (Test is true at once for inactive ones) are kept
            live = [(r, kind != SEND) for r, (kind, *_) in zip(reqs, items)
                    if r is not None and started and not mt._done(r)]
            if gate is not None:    # headers are never cancelled (they always match)
                live += [(r, False) for r in gate.recvs + gate.sends if not mt._done(r)]
            mt.abandon([r for r, _ in live], [recv for _, recv in live])
            raise


#: the ``mpi4py.MPI`` module, set by the first :class:`BoundPlan`
_MPI: list = []


def _reducer(dst, acc, tmp, binop):
    """``dst = acc (op) tmp`` as a call without arguments, as :func:`reduce_copy_with` computes it
    (a bare ufunc only where that is the same: :func:`plain_ufunc`; float8, avg and floating max/min go through it)."""
    ufunc = plain_ufunc(np, dst.dtype, binop)
    if ufunc is None:
        return lambda: reduce_copy_with(np, dst, acc, tmp, binop)
    return lambda: ufunc(acc, tmp, out=dst)


class PlanRunner:
    """Runs rank plans for one communicator: bound (:class:`BoundPlan`) when the same plan meets
    the same host buffers again, else through :func:`kernels.mpi.transport.execute`."""

    def __init__(self) -> None:
        self._bound: OrderedDict = OrderedDict()   # key -> BoundPlan
        self._seen: OrderedDict = OrderedDict()    # keys met once
        #: the same buffer objects again (a replayed call): (view objects, BoundPlan, key)
        self._by_id: OrderedDict = OrderedDict()
        #: calls run on a binding so far
        self.bound_calls = 0

    def clear(self) -> None:
        """Forget every binding (the data communicator was replaced)."""
        self._bound.clear()
        self._seen.clear()
        self._by_id.clear()

    def execute(self, plan: RankPlan, bufs: dict, wire, comm, waiter: Waiter, *, op: str, nranks: int,
                what: str = "collective", gate=None) -> None:
        if type(wire) is not HostWire:
            mt.execute(plan, bufs, wire, comm, waiter, op=op, nranks=nranks, what=what, gate=gate)
            return
        vals = tuple(bufs.values())
        fast = (id(plan), id(comm), op, nranks, *map(id, vals))   # the same view objects (a replayed call)
        hit = self._by_id.get(fast)
        if hit is not None and all(map(is_, hit[0], vals)):
            bound, key = hit[1], hit[2]
        else:
            key = (id(plan), id(comm), op, nranks,
                   tuple((k, a.__array_interface__["data"][0], a.size) for k, a in bufs.items()))
            bound = self._bound.get(key)
            if bound is not None and bound.plan is plan and bound.comm is comm:
                self._bound.move_to_end(key)
            elif key in self._seen and _bound_bytes(plan, bufs) <= MAX_BOUND_BYTES:
                del self._seen[key]
                bound = self._bound[key] = BoundPlan(plan, bufs, comm, op, nranks)
                if len(self._bound) > MAX_BOUND:
                    self._bound.popitem(last=False)
            else:
                self._seen[key] = None
                if len(self._seen) > 8 * MAX_BOUND:
                    self._seen.popitem(last=False)
                mt.execute(plan, bufs, wire, comm, waiter, op=op, nranks=nranks, what=what, gate=gate)
                return
            self._by_id[fast] = (vals, bound, key)
            if len(self._by_id) > MAX_BOUND:
                self._by_id.popitem(last=False)
        self.bound_calls += 1
        try:
            bound.execute(waiter, what, gate)
        except BaseException:
            self._bound.pop(key, None)     # its requests may still be posted: never start them again
            self._by_id.pop(fast, None)
            raise


def _bound_bytes(plan: RankPlan, bufs: dict) -> int:
    """What a binding keeps alive: the buffers' bytes and its temporaries'."""
    total = sum(a.nbytes for a in bufs.values())
    for i in plan.reduce_recvs:
        o = plan.items[i][1]
        total += (o.dst.stop - o.dst.start) * bufs[o.dst.buf].dtype.itemsize
    return total


__all__ = ["BoundPlan", "PlanRunner", "MAX_BOUND", "MAX_BOUND_BYTES"]

