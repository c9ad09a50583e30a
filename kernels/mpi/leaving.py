"""How a rank leaves a :class:`~kernels.mpi.communicator.MPICommunicator`, and what its peers learn.

*Normally* (:func:`watch_departure`): when the communicator is closed (``close()``), garbage
collected (the abort hook, :func:`kernels.mpi.startup.install_abort_hook`, holds it weakly), or the
interpreter exits (``sys.exit``, the end of the script), the rank sends every
peer a ``left:<rank>:<calls>`` notice (:func:`kernels.mpi.waiter.departure_notice`) on the control
communicator (the failure notices' tag), ``<calls>`` being the number of collective calls whose
part it finished (:meth:`kernels.mpi.agreement.CallAgreement.done`).  A peer reads it as it
reads failure notices (every call starts with that, and every wait polls for them) and raises
:class:`~topo_probe.errors.PeerFailed` naming the rank in any call numbered above ``<calls>``
(:meth:`kernels.mpi.waiter.Waiter.check_departed`): at once instead of after the deadline.  A
call the rank finished is not failed: its messages completed, so the peers may still drain
them after it left (the last call of a job, whose ranks end one after another).  A ``recv``
from it gets what it sent before it left, else raises once that receive has waited
:data:`kernels.mpi.p2p.LEFT_GRACE_S` from when it first sees the departure (the notice read during
it, or before it began); a send to it, likewise in ``wait_sends``.  The rank's own posted
``send`` s stay posted, their buffers kept past the interpreter's teardown (:func:`keep_abandoned_past_exit`),
so a peer may still receive them while the rank is in ``MPI_Finalize``.

Interpreter exit works because :func:`weakref.finalize` runs its callbacks from an
:mod:`atexit` hook, and Python runs those before the functions registered with ``Py_AtExit``
(``Py_FinalizeEx``; "Python's internal finalization will have completed before the cleanup
function", CPython docs, ``Py_AtExit``), where mpi4py calls ``MPI_Finalize`` (mpi4py 4.1
``src/mpi4py/MPI.src/atimport.pxi``, ``bootstrap()``: ``Py_AtExit(atexit)``, "Cleanup at (the
very end of) Python exit").  An ``MPI.Finalize()`` the program calls itself sends them too
(:func:`_on_finalize`).  Not covered: ``os._exit`` (``mpirun`` ends the job).

*On an error* (:func:`abort`): print one line naming the rank, send a failure notice
(:func:`kernels.mpi.waiter.notify_failure`), then ``MPI_Abort``.
"""

from __future__ import annotations

import sys
import time
import weakref

import numpy as np

from kernels.mpi import transport as mt
from kernels.mpi.waiter import TAG_NOTICE, Waiter, departure_notice, notify_failure
from topo_probe.errors import PeerFailed, ProcessGroupMismatch

#: seconds a leaving rank waits for its notices to leave (they are a few bytes: MPI's eager
#: protocol completes them at once; a peer that died must not hold up the exit)
GRACE_S = 0.2
#: the departures still to send: :func:`_on_finalize` sends them when MPI is finalized first
_LEAVING: list = []
#: set once :func:`keep_abandoned_past_exit` holds the abandoned requests past the interpreter's teardown
_KEPT: list = []
#: the keyval of :func:`_on_finalize`'s ``MPI_COMM_SELF`` attribute, once made
_KEYVAL: list = []


def notify_departure(waiter: Waiter, sends: list | None = None, grace_s: float = GRACE_S) -> None:
    """Tell every peer of ``waiter``'s control communicator that this rank leaves after
    ``waiter.finished`` calls (module docstring); best effort, never raises.  Peers whose own
    departure notice was already read are skipped; later calls on this rank are refused
    (``waiter.closed``).  ``sends`` (the communicator's posted ``send`` s, ``(request, peer,
    buffer)``) move to the requests kept until MPI is done with them (:func:`keep_abandoned_past_exit`)."""
    waiter.closed = True
    MPI, ctrl = waiter.MPI, waiter.ctrl
    if sends:
        mt.abandon([s[0] for s in sends], [False] * len(sends))   # the request holds its buffer
        sends.clear()
    try:
        if ctrl is None or not MPI.Is_initialized() or MPI.Is_finalized():
            return
        size = ctrl.Get_size()
        if size < 2:
            return
        try:
            waiter.check_notices()     # read the peers' own departures first: they need no notice
        except PeerFailed:
            pass
        raw = departure_notice(waiter.rank, waiter.finished, waiter.failure, waiter.failed_rank)
        buf = np.frombuffer(raw, np.uint8).copy()
        reqs = [ctrl.Isend([buf, MPI.BYTE], dest=p, tag=TAG_NOTICE) for p in range(size)
                if p != waiter.rank and p not in waiter.departed]
        mt.keep_abandoned()
        mt.abandon(reqs, [False] * len(reqs))
        end = time.monotonic() + grace_s
        while reqs and not MPI.Request.Testall(reqs) and time.monotonic() < end:
            time.sleep(1e-3)
    except Exception:  # noqa: BLE001 - leaving must not fail a process that ends or collects garbage
        pass


def watch_departure(comm) -> weakref.finalize:
    """Call :func:`notify_departure` once: when ``comm`` is garbage collected, at interpreter
    exit while it lives, when the program calls ``MPI.Finalize()`` itself (:func:`_on_finalize`),
    or when the returned finalizer is called (``comm.close()``).  It holds ``comm``'s waiter,
    never ``comm`` itself (that would keep it alive)."""
    leave = weakref.finalize(comm, notify_departure, comm.waiter, comm._pending)
    _LEAVING[:] = [f for f in _LEAVING if f.alive] + [leave]
    _on_finalize(comm.waiter.MPI)
    keep_abandoned_past_exit()
    return leave


def keep_abandoned_past_exit() -> None:
    """Once per process: one reference to the abandoned requests' list (:data:`kernels.mpi.transport._ABANDONED`,
    where every posted ``send`` of a leaving rank goes) that is never dropped, so the requests in
    it, and the buffers mpi4py's requests hold until they complete, outlive the interpreter's
    teardown (which clears module globals) until mpi4py's ``MPI_Finalize`` runs after it.
    Open MPI's ``MPI_Finalize`` is collective and keeps progressing the messages of a rank until
    every rank has called it: a large ``send`` that a peer receives only after this rank left is
    read from its buffer then (seen: Open MPI 5.0.11 ``mca_pml_ob1_send_request_schedule_once``
    under ``ompi_mpi_finalize``; with the buffer freed it crashed the rank with SIGSEGV).  This
    relies on that library's behaviour: its ``MPI_Finalize(3)`` asks that "all pending
    communications involving a process are complete before the process calls MPI_Finalize", so
    ``wait_sends()`` before leaving stays the portable way.  The memory is the process's until it
    exits.  Off CPython (no ``ctypes.pythonapi``) nothing is kept past the teardown."""
    if _KEPT:
        return
    try:
        import ctypes
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(mt._ABANDONED))
        _KEPT.append(True)
    except Exception:  # noqa: BLE001 - not CPython: the buffers live until module teardown only
        pass


def _on_finalize(MPI) -> None:
    """Once per process: an attribute on ``MPI_COMM_SELF`` whose delete callback sends every
    pending departure.  ``MPI_Finalize`` frees that communicator's attributes before anything
    else (MPI-3.1 section 8.7.1, "Allowing User Functions at Process Termination"), so an
    ``MPI.Finalize()`` the program calls itself tells the peers too; at interpreter exit mpi4py
    skips Python callbacks (``PyMPI_attr_delete_fn``: ``if not Py_IsInitialized()``, mpi4py 4.1
    ``src/mpi4py/MPI.src/attrimpl.pxi``), and the atexit hook has sent them already."""
    if _KEYVAL or not MPI.Is_initialized() or MPI.Is_finalized():
        return
    try:
        _KEYVAL.append(MPI.Comm.Create_keyval(delete_fn=lambda *_: [leave() for leave in list(_LEAVING)]))
        MPI.COMM_SELF.Set_attr(_KEYVAL[0], None)
    except Exception:  # noqa: BLE001 - without it only an explicit MPI.Finalize() goes unseen
        pass


def abort(comm, reason, errorcode: int = 1, *, notify: bool = True, grace_s: float = 1.0) -> None:
    """Print one line naming ``comm``'s rank, tell the other ranks (not for a mismatch: every
    rank raises that itself), then ``MPI_Abort``."""
    text = reason if isinstance(reason, str) else f"{type(reason).__name__}: {reason}"
    print(f"topocoll: rank {comm.rank}: error: {text}", file=sys.stderr, flush=True)
    if notify and comm.size > 1 and comm._ctrl is not None and not isinstance(reason, ProcessGroupMismatch):
        notify_failure(comm._ctrl, comm.rank, comm.size, text, grace_s)
        time.sleep(grace_s)
    comm._world.Abort(errorcode)
