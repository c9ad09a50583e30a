"""Process-per-rank Communicator over MPI: one array per process, the collectives of
:class:`kernels.comm.communicator.Communicator`.

Start one process per rank (``mpirun -n N python train.py``) and create the communicator from
an MPI communicator::

    from kernels.mpi.communicator import MPICommunicator
    comm = MPICommunicator.from_mpi(topology="dgx-a100", plan="auto")   # MPI.COMM_WORLD
    comm.all_reduce(grad, grad, op="avg")                               # in place

Method names and arguments mirror the single-process Communicator with one array instead of a
list per rank (buffers a rank does not use, like gather's output off the root, may be None).
Each rank lowers the same verified schedule (plan entry, else a baseline, as the single-process
Communicator chooses) and runs its share with non-blocking point-to-point messages
(:mod:`kernels.mpi.transport`).  NumPy arrays run on the host.  CuPy arrays on one node can run
natively (``native="auto"``, opt-in until measured on several GPUs): one launch per call per
process runs the rank's share of the device program over peers' memory mapped by CUDA IPC
(:mod:`kernels.mpi.native_call`); else they move zero-copy out of mapped peer memory
(``ipc="auto"``, :mod:`kernels.mpi.ipc`), or go to MPI as device pointers when the library is
CUDA-aware, else through pinned host memory.

Agreement: at start-up the ranks exchange rank count, topology, GPU count, plan digest and
algorithm, and every collective call checks that every rank makes the same call (collective,
count, dtype, op, root, schedule; :mod:`kernels.mpi.agreement`): a 16-byte header to every peer
travels beside the data, whose tags carry bits of the same digest; a disagreement raises
ProcessGroupMismatch on every rank.

Failures: waits poll with a deadline (``timeout_s``, default ``$TOPOCOLL_MPI_TIMEOUT`` or 120 s;
the clock restarts whenever a message completes) and raise :class:`~topo_probe.errors.PeerFailed`
naming the rank that does not answer a liveness ping.  With ``abort_on_error`` (default) an
uncaught exception on any rank prints one line naming the rank, tells the other ranks and calls
``MPI_Abort``: the job ends, never hangs.  A rank that leaves (``close()``, garbage collection,
interpreter exit) tells its peers which calls it finished; a peer in a later call raises
PeerFailed at once (:mod:`kernels.mpi.leaving`).

GPUs: pick the device before creating CuPy arrays (``cupy.cuda.Device(comm.local_rank % n).use()``);
``TOPOCOLL_MPI_CUDA_AWARE=0/1`` overrides the library's answer.  Repeated calls on the same host
buffers run on persistent requests (:mod:`kernels.mpi.persistent`).  Elsewhere: fused/compressed
all-reduce (:mod:`kernels.mpi.fused`), send/recv (:mod:`kernels.mpi.p2p`), start-up
(:mod:`kernels.mpi.startup`), buffers (:func:`kernels.backends.binding.bind_call`)."""

from __future__ import annotations

from collections import OrderedDict

from kernels.backends.binding import bind_call
from kernels.comm.communicator import nccl_bytes
from kernels.comm.interface import CommunicatorBase
from kernels.comm.route import MPI_NO_NCCL, plan_route
from kernels.comm.validation import _contig, _head, _out, _ptr, check_count, check_root
from kernels.mpi import fused as mpi_fused
from kernels.mpi import leaving
from kernels.mpi import p2p as mpi_p2p
from kernels.mpi import transport as mt
from kernels.mpi.agreement import CallAgreement, agreed, header_digest
from kernels.mpi.ipc import wire_for
from kernels.mpi.native_call import NativeRunner, plain_value
from kernels.mpi.persistent import PlanRunner
from kernels.mpi.replay import CallMemo
from kernels.mpi.startup import agree, checked_start, descriptor_of, install_abort_hook, start_timeout
from kernels.mpi.waiter import Waiter, exchange_json, mpi
from kernels.mpi.wires import HostWire
from kernels.program.ops import SCRATCH
from kernels.program.reduce_op import check_reduce_op
from synth.ir.schedule import Schedule
from topo_probe.errors import BufferLayoutError, InvalidArgument, ProcessGroupMismatch

_CACHE_SIZE = 64


class MPICommunicator(CommunicatorBase):
    """Collectives across MPI processes, one rank each (see module docstring).

    Use :meth:`from_mpi`; the constructor takes the same arguments.

    Parameters
    ----------
    comm : mpi4py communicator, optional
        Default ``MPI.COMM_WORLD``; it is duplicated (our messages never match the caller's).
    topology : Topology, preset name or file, optional
        Default ``fully_connected(size)``; its GPU count must equal the number of processes.
    plan : Plan, path, "auto", None or False
        As for :class:`kernels.comm.communicator.Communicator`, and checked as it checks it, at start-up:
        a bad entry's file raises the same error on every rank (:func:`kernels.mpi.startup.checked_start`).
    algo : str, optional
        Force one baseline (``ring``, ``tree``, ``direct``, ``rhd``, ``bruck``) or a schedule file instead of
        the plan; None or ``"plan"``: the plan (the start-up descriptor records both as ``plan``).
    timeout_s : float, optional
        Seconds without progress before a wait raises PeerFailed; a refused value (or ``$TOPOCOLL_MPI_TIMEOUT``)
        is raised on every rank at start-up, as a refused plan is (:func:`kernels.mpi.startup.checked_start`).
    abort_on_error : bool
        Install a ``sys.excepthook`` that calls :meth:`abort` on any uncaught exception while this communicator lives.
    wire : kernels.mpi.transport.HostWire, optional
        Force a buffer layer (tests: a fake-device DeviceWire, an IpcWire over shared memory).
    ipc : {"auto", "never"}
        ``auto``: CuPy arrays on a single node move by CUDA IPC (:mod:`kernels.mpi.ipc`);
        ``never``: always through MPI.  The same on every rank (checked at start-up).
    native : {"auto", "never"} or a share backend
        ``auto``: CuPy arrays on one node run natively (:mod:`kernels.mpi.native_call`); ``never``.

    Raises
    ------
    ProcessGroupMismatch
        Ranks disagree on topology, plan, algorithm or rank count (same message on every rank);
        the collective methods raise it too when the ranks make different calls.
    PeerFailed
        A rank did not join within ``timeout_s`` or reported a failure.
    DeviceUnavailable
        mpi4py / an MPI library is not installed.
    """

    def __init__(self, comm=None, *, topology=None, plan=None, algo: str | None = None,
                 timeout_s: float | None = None, abort_on_error: bool = True, wire=None,
                 ipc: str = "auto", native="never") -> None:
        self.ipc, native = plain_value(ipc), plain_value(native)   # no str subclass lies to checked_start or later
        MPI = mpi()
        self._world = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.size = self._world.Get_rank(), self._world.Get_size()
        self._ctrl = None
        if abort_on_error:
            install_abort_hook(self)
        self.waiter = Waiter(None, self.rank, start_timeout(timeout_s))   # refused: checked_start (every rank)
        dups = [self._world.Idup() for _ in range(5)]     # non-blocking: a missing rank times out
        self.waiter.all([d[1] for d in dups], "start-up (MPICommunicator.from_mpi on every rank)",
                        lambda i: -1)
        self._data, self._ctrl, self._p2p, self._ack, agree_comm = (d[0] for d in dups)
        self.waiter.ctrl = self._ctrl
        #: every collective call starts with this check that all ranks make the same call
        self.agreement = CallAgreement(agree_comm, self._ctrl, self.waiter, self.size)
        self.agreement.on_mismatch, self._retired = self._renew_data_comm, []  # old data comms
        self.algo = algo        # the topology and plan checked; refused: raised on every rank (agree)
        self.topology, self.selector, refused = checked_start(topology, self.size, plan, algo, self.rank, ipc=self.ipc,
                                                              native=native, timeout_s=timeout_s)
        self.plan, self.last_route = getattr(self.selector, "plan", None), None   # last_route: kernels.comm.route
        self._wire, self._native = wire, NativeRunner(self, "never" if refused else native)   # refused: agree raises
        self._wires: dict[str, HostWire] = {}
        self._programs: OrderedDict = OrderedDict()
        self._runner, self._memo = PlanRunner(), CallMemo()   # repeated calls: kernels.mpi.persistent, .replay
        self._pending: list = []
        self._tag_ub = int(self._world.Get_attr(MPI.TAG_UB) or 32767)
        #: every rank's descriptor and host name, and this rank's index among the ranks on its host
        #: (``cupy.cuda.Device(comm.local_rank).use()``); a mismatch: the same error on every rank
        self.descriptors, self.hosts, self.local_rank = agree(self._ctrl, self.waiter, self.size,   # refused: sent once
                                                              None if refused else self.descriptor(), self.topology,
                                                              refused)
        self._departure = leaving.watch_departure(self)   # close, collection or exit: tell the peers

    def _renew_data_comm(self) -> None:
        """After a mismatched call (every rank): a fresh data communicator for the next calls."""
        new, req = self._world.Idup()
        self.waiter.all([req], "renewing the data communicator after a mismatched call", lambda i: -1)
        self._retired.append(self._data)
        self._data = new
        self._runner.clear()
        self._memo.clear()

    @classmethod
    def from_mpi(cls, comm=None, **kwargs) -> "MPICommunicator":
        """The communicator of ``comm``'s processes (default ``MPI.COMM_WORLD``; keywords as for the class)."""
        return cls(comm, **kwargs)

    def descriptor(self) -> dict:
        """What every rank must agree on (exchanged at start-up)."""
        return {**descriptor_of(self.size, self.topology, self.plan, self.algo), "ipc": self.ipc,
                "native": self._native.name}

    def __repr__(self) -> str:
        return f"MPICommunicator(rank {self.rank} of {self.size}, topology={self.topology.name!r}, plan={bool(self.plan)})"

    # ------------------------------------------------------------------ failures
    def abort(self, reason, errorcode: int = 1, *, notify: bool = True, grace_s: float = 1.0) -> None:
        """One line naming this rank, a notice to the others, ``MPI_Abort`` (:func:`kernels.mpi.leaving.abort`)."""
        leaving.abort(self, reason, errorcode, notify=notify, grace_s=grace_s)

    def close(self) -> None:
        """Leave: tell the peers how many calls this rank finished, so one waiting in a later call
        raises PeerFailed at once (:mod:`kernels.mpi.leaving`; also done when the communicator
        is collected or the interpreter exits).  Later calls on this rank raise InvalidArgument."""
        self._departure()
        self._runner.clear()
        self._memo.clear()

    # ------------------------------------------------------------------ schedules
    def _wire_for(self, arr) -> HostWire:
        one_node = self.ipc == "auto" and self.size > 1 and len(set(self.hosts)) == 1   # CUDA IPC there
        return self._wire if self._wire is not None else wire_for(arr, self._wires, ipc=one_node)

    def _rank_plan(self, schedule: Schedule, count: int, dtype, inplace: bool, op: str):
        """(schedule, call digest, Program, RankPlan, buffer bindings, scratch size, name), cached
        by schedule identity (hashing a big schedule per call would cost more than the call)."""
        key = (id(schedule), count, dtype, inplace, op)   # dtype objects hash fast; names do not
        hit = self._programs.get(key)
        if hit is None or hit[0] is not schedule:
            from kernels.backends.executor import program_for
            prog = program_for(schedule, count, dtype, inplace=inplace, op=op)
            digest = header_digest(self.agreement.header(schedule, count, dtype, op))
            hit = (schedule, digest, prog, mt.rank_plan(schedule, prog, self.rank, self._tag_ub, digest),
                   tuple(prog.bindings[self.rank].items()), prog.sizes[self.rank].get(SCRATCH),
                   f"{schedule.spec.name} ({schedule.name or 'schedule'})")
            self._programs[key] = hit
            if len(self._programs) > _CACHE_SIZE:
                self._programs.popitem(last=False)
        return hit

    @agreed("schedule")
    def run_schedule(self, schedule: Schedule, sendbuf, recvbuf, *, op: str = "sum"):
        """Run ``schedule`` on this rank's buffers (layout of :mod:`synth.ir.collectives`; count
        from their sizes; in-place when they alias as in NCCL).  Returns ``recvbuf``."""
        return self._run(schedule, sendbuf, recvbuf, op)

    def _run(self, schedule: Schedule, sendbuf, recvbuf, op: str, protocol: str | None = None):
        spec = schedule.spec
        if spec.ranks != self.size:
            raise InvalidArgument(f"{spec.name}: rank {self.rank}: schedule {schedule.name!r} has {spec.ranks} ranks, "
                                  f"the communicator {self.size}")
        op = check_reduce_op(op, spec.name)
        me, none = self.rank, [None] * self.size     # arrays checked by the agreement (@agreed): bound once
        call = bind_call(spec, none[:me] + [sendbuf] + none[me + 1:], none[:me] + [recvbuf] + none[me + 1:],
                         checked=True, ranks=(me,))
        bound = {k: b[me] for k, b in (("sendbuf", call.sends), ("recvbuf", call.recvs)) if b[me] is not None}
        sample, count, inplace = next(iter(bound.values()), None), call.count, call.inplace
        if not count:
            self.agreement.check_plain(self.agreement.header(schedule, 0, getattr(sample, "dtype", "uint8"), op))
            return recvbuf
        _, digest, prog, plan, binding, scratch, what = self._rank_plan(schedule, count, sample.dtype, inplace, op)
        user = {"send": bound.get("sendbuf"), "recv": bound.get("recvbuf")}
        wire = self._native.call(schedule, prog, count, op, inplace, bound, digest, self._wire_for(sample), protocol)
        prepared = (digest, lambda: self.agreement.header(schedule, count, sample.dtype, op), plan,
                    {name: user[which] for name, which in binding}, scratch, sample.dtype, wire,
                    what, op)
        if self._memo.trace is not None:     # kernels.mpi.replay: a later identical call starts here
            self._memo.trace.append(prepared)
        self._launch(prepared)
        return recvbuf

    def _launch(self, prepared) -> None:
        """Agree on the call and run it (what :meth:`_run` prepared)."""
        digest, header, plan, user_bufs, scratch, dtype, wire, what, op = prepared
        gate = self.agreement.start(digest, header)  # headers travel beside the data
        if getattr(wire, "native", False):           # kernels.mpi.native_call: ran it, or today's wire
            wire, gate = wire.run(gate)
            if wire is None:
                return
        wire.begin()
        bufs = dict(user_bufs)
        if scratch is not None:
            bufs[SCRATCH] = wire.empty(scratch, dtype)
        if hasattr(wire, "attach"):          # zero-copy (kernels.mpi.ipc): map the peers' buffers
            gate = gate and gate.wait()     # None: the native path waited for it
            wire.attach(bufs, self.rank, self.size, self._ctrl, self.waiter, self._ack)
        self._runner.execute(plan, bufs, wire, self._data, self.waiter, op=op, nranks=self.size, what=what, gate=gate)

    def _collective(self, name: str, send, recv, count: int, *, root=None, op="sum") -> None:
        op = check_reduce_op(op, name)
        if count == 0:
            if self.size > 1:  # still a call every rank makes: they must agree on it
                ref = send if send is not None else recv
                self.agreement.check_plain(self.agreement.header(None, 0, ref.dtype, op, name, root))
            return
        if self.size == 1:
            if send is not None and recv is not None and _ptr(send) != _ptr(recv):
                recv[...] = send
            return
        ref = send if send is not None else recv
        self.last_route = plan_route(self.selector, name, nccl_bytes(name, count, ref.dtype.itemsize, self.size), root,
                                     dtype=ref.dtype, op=op, no_nccl=MPI_NO_NCCL, layer="mpi")
        # arguments checked by the calling collective; the plan entry's protocol for the native path
        self._run(self.last_route.schedule, send, recv, op, self.last_route.protocol)

    # ------------------------------------------------------------------ collectives
    @agreed("allreduce")
    def all_reduce(self, in_array, out_array, op: str = "sum", stream=None):
        """``out = op over ranks of in`` (count = in size). ``stream`` is accepted and ignored."""
        count = in_array.size
        s = out_array if in_array is out_array else _contig(in_array)
        self._collective("allreduce", _head(s, count), _head(_out(out_array, "all_reduce"), count),
                         count, op=op)
        return out_array

    @agreed("allgather")
    def all_gather(self, in_array, out_array, count: int | None = None, stream=None):
        """Block r of ``out`` is rank r's input; ``in is out`` means in place (block ``rank``)."""
        n, r = self.size, self.rank
        count = None if count is None else check_count(f"all_gather: rank {r}", count)   # once, in place or not
        if in_array is out_array:
            count = out_array.size // n if count is None else count
            in_array = out_array.reshape(-1)[r * count:(r + 1) * count]
        count = in_array.size if count is None else count
        self._collective("allgather", _head(_contig(in_array), count),
                         _head(_out(out_array, "all_gather"), n * count), count)
        return out_array

    @agreed("reducescatter")
    def reduce_scatter(self, in_array, out_array, count: int | None = None, op: str = "sum", stream=None):
        """``out`` = reduction of block ``rank`` of every input; ``in is out``: in place."""
        n, r = self.size, self.rank
        count = None if count is None else check_count(f"reduce_scatter: rank {r}", count)   # once, in place or not
        if in_array is out_array:
            count = in_array.size // n if count is None else count
            out_array = _out(in_array, "reduce_scatter").reshape(-1)[r * count:(r + 1) * count]
        count = out_array.size if count is None else count
        self._collective("reducescatter", _head(_contig(in_array), n * count),
                         _head(_out(out_array, "reduce_scatter"), count), count, op=op)
        return out_array

    @agreed("broadcast")
    def broadcast(self, in_out_array, root: int = 0, stream=None):
        """Copy rank ``root``'s buffer into every rank's (in place)."""
        buf = _out(in_out_array, "broadcast")
        self._collective("broadcast", buf, buf, buf.size, root=check_root("broadcast", root, self.size))
        return in_out_array

    @agreed("reduce")
    def reduce(self, in_array, out_array, root: int = 0, op: str = "sum", stream=None):
        """``out`` on ``root`` = reduction of all inputs; ``out_array`` may be None elsewhere."""
        root = check_root("reduce", root, self.size)
        count = in_array.size
        s = out_array if in_array is out_array else _contig(in_array)
        d = _head(_out(out_array, "reduce"), count) if self.rank == root else None
        self._collective("reduce", _head(s, count), d, count, root=root, op=op)
        return out_array

    @agreed("gather")
    def gather(self, in_array, out_array, root: int = 0, stream=None):
        """Block r of ``out`` on ``root`` is rank r's input; ``out_array`` may be None elsewhere."""
        root, n = check_root("gather", root, self.size), self.size
        if self.rank == root and in_array is out_array:
            count = out_array.size // n
            in_array = out_array.reshape(-1)[root * count:(root + 1) * count]
        count = in_array.size
        d = _head(_out(out_array, "gather"), n * count) if self.rank == root else None
        self._collective("gather", _head(_contig(in_array), count), d, count, root=root)
        return out_array

    @agreed("scatter")
    def scatter(self, in_array, out_array, root: int = 0, stream=None):
        """``out`` = block ``rank`` of ``in`` on ``root``; ``in_array`` may be None elsewhere."""
        root, n = check_root("scatter", root, self.size), self.size
        if self.rank == root and in_array is out_array:
            count = in_array.size // n
            out_array = _out(in_array, "scatter").reshape(-1)[root * count:(root + 1) * count]
        count = out_array.size
        s = _head(_contig(in_array), n * count) if self.rank == root else None
        self._collective("scatter", s, _head(_out(out_array, "scatter"), count), count, root=root)
        return out_array

    @agreed("alltoall")
    def all_to_all(self, in_array, out_array, stream=None):
        """Block d of ``in`` on rank s lands in block s of ``out`` on rank d."""
        total = in_array.size
        if total % self.size:
            raise BufferLayoutError(f"all_to_all: rank {self.rank}: in_array holds {total} elements, not a "
                             f"multiple of {self.size} ranks")
        s = out_array if in_array is out_array else _contig(in_array)
        self._collective("alltoall", _head(s, total), _head(_out(out_array, "all_to_all"), total),
                         total // self.size)
        return out_array

    # ------------------------------------------------------------------ point to point, sync
    def send(self, array, peer: int, *, rank: int | None = None, stream=None) -> None:
        """Post a send of ``array`` to ``peer``; completes once ``peer`` receives (FIFO per pair)."""
        mpi_p2p.send(self, array, peer, rank)

    def recv(self, array, peer: int, *, rank: int | None = None, stream=None) -> None:
        """Receive into ``array`` from ``peer`` (blocks, with the deadline); size and type must be
        the sent ones (:mod:`kernels.mpi.p2p`)."""
        mpi_p2p.recv(self, array, peer, rank)

    def wait_sends(self) -> None:
        """Wait (with the deadline) until every posted :meth:`send` is received."""
        mpi_p2p.wait_sends(self)

    def barrier(self) -> None:
        """All ranks reach this point (the per-call agreement with no data: a rank in another call raises)."""
        self.agreement.check_plain("barrier")   # every rank's header in: a barrier, and a mismatch check
        self.agreement.done()

    def allgather_object(self, obj) -> list:
        """Every rank's JSON-able ``obj``, in rank order (small metadata only)."""
        self.agreement.check_plain("allgather_object")   # not another rank's collective
        got = exchange_json(self._ctrl, self.waiter, obj, self.size, "allgather_object")
        self.agreement.done()   # only now: a rank that leaves before this never finished the call
        return got

    # ------------------------------------------------------------------ fusion and compression
    def fused_all_reduce(self, tensors, *, mode: str = "auto", bucket_mb: float = 64, split_points=None,
                         op: str = "sum", compression: str | None = None) -> list[range]:
        """All-reduce this rank's ``tensors`` in place, one collective per fusion bucket
        (:func:`kernels.comm.fusion.plan_buckets`); ``compression`` as :meth:`compressed_all_reduce`."""
        return mpi_fused.fused_all_reduce(self, tensors, mode=mode, bucket_mb=bucket_mb, split_points=split_points,
                                          op=op, compression=compression)

    @agreed("compressed_allreduce")
    def compressed_all_reduce(self, in_array, out_array, *, compression: str = "bf16", op: str = "sum",
                              group_size: int | None = None):
        """This rank's part of :func:`kernels.comm.compression.compressed_all_reduce` (same wire
        format, float32 accumulation in rank order, same error bound)."""
        return mpi_fused.compressed_all_reduce(self, in_array, out_array, compression=compression, op=op,
                                               group_size=group_size)
