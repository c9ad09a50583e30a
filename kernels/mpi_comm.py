"""Process-per-rank Communicator over MPI: one array per process, the collectives of
:class:`kernels.communicator.Communicator`.

Start one process per rank (``mpirun -n N python train.py``) and create the communicator from
an MPI communicator::

    from kernels.mpi_comm import MPICommunicator
    comm = MPICommunicator.from_mpi(topology="dgx-a100", plan="auto")   # MPI.COMM_WORLD
    comm.all_reduce(grad, grad, op="avg")                               # in place

Method names and arguments mirror the single-process Communicator with one array instead of a
list per rank (``all_reduce(in_array, out_array, op='sum', stream=None)``, ...; buffers a rank
does not use, like gather's output off the root, may be None).  Each rank lowers the same
verified schedule (plan entry for the nccl-tests size, else a baseline, exactly as the
single-process Communicator chooses) and runs its share with non-blocking point-to-point
messages (:mod:`kernels.mpi_transport`).  NumPy arrays run on the host; CuPy arrays go to MPI
as device pointers when the library is CUDA-aware, else staged through pinned host memory.

Start-up: every rank exchanges (rank count, topology name and fingerprint, GPU count, plan
digest, algorithm) with every other rank; any disagreement raises
:class:`~topo_probe.errors.ProcessGroupMismatch` with the same message on every rank.

Failures: waits poll with a deadline (``timeout_s``, default ``$TOPOCOLL_MPI_TIMEOUT`` or 120 s;
the clock restarts whenever a message completes) and raise :class:`~topo_probe.errors.PeerFailed`
naming the rank that does not answer a liveness ping.  With ``abort_on_error`` (default) an
uncaught exception on any rank prints one line naming the rank, tells the other ranks (they stop
with "rank k failed: ...") and calls ``MPI_Abort``: the job ends, never hangs.

GPUs: pick the device before creating CuPy arrays, e.g.
``cupy.cuda.Device(comm.local_rank % cupy.cuda.runtime.getDeviceCount()).use()``; set
``TOPOCOLL_MPI_CUDA_AWARE=0/1`` to override the library's answer.  Also here:
:meth:`MPICommunicator.fused_all_reduce` (fusion buckets, :mod:`kernels.fusion`),
:meth:`MPICommunicator.compressed_all_reduce` (:mod:`kernels.compression`'s wire formats) and
the ``sweep --backend mpi`` hook :func:`run_sweep_mpi` / :class:`MPISweepBackend`.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
import warnings
from collections import OrderedDict
from pathlib import Path

import numpy as np

from kernels import mpi_transport as mt
from kernels.communicator import Communicator, nccl_bytes, resolve_plan, resolve_topology
from kernels.lowering import SCRATCH, has_input, has_output
from synth.collectives import REDUCE_OPS, ROOTED, CollectiveSpec, canonical
from synth.schedule import Schedule
from topo_probe.errors import (BufferLayoutError, PeerFailed, ProcessGroupMismatch, TopocollError,
                               UnsupportedCollective)

_CACHE_SIZE = 64


def _is_cupy(a) -> bool:
    return type(a).__module__.split(".")[0] == "cupy"


def _ptr(a) -> int:
    iface = getattr(a, "__cuda_array_interface__", None) or a.__array_interface__
    return int(iface["data"][0])


def plan_digest(plan) -> str:
    """16 hex digits over the plan document and the bytes of every schedule it names
    (``"none"`` without a plan), so ranks with different schedule files disagree."""
    if plan is None:
        return "none"
    h = hashlib.sha256(json.dumps(plan.to_dict(), sort_keys=True).encode())
    for e in plan.entries:
        path = Path(plan.base_dir) / e.schedule
        try:
            h.update(path.read_bytes())
        except OSError:
            h.update(f"missing:{e.schedule}".encode())
    return h.hexdigest()[:16]


def compare_descriptors(descs: list[dict]) -> None:
    """Raise ProcessGroupMismatch naming each disagreeing field and which ranks hold which value.

    >>> compare_descriptors([{"fingerprint": "a"}, {"fingerprint": "a"}])
    >>> compare_descriptors([{"fingerprint": "a"}, {"fingerprint": "b"}, {"fingerprint": "a"}])
    Traceback (most recent call last):
    ...
    topo_probe.errors.ProcessGroupMismatch: ranks disagree at start-up: fingerprint: ranks [0, 2] 'a', \
ranks [1] 'b'; every rank must use the same topology, plan and rank count
    """
    parts = []
    for key in sorted({k for d in descs for k in d}):
        groups: dict[str, list[int]] = {}
        for r, d in enumerate(descs):
            groups.setdefault(json.dumps(d.get(key)), []).append(r)
        if len(groups) > 1:
            txt = ", ".join(f"ranks {rs} {json.loads(v)!r}" for v, rs in sorted(groups.items(), key=lambda x: x[1]))
            parts.append(f"{key}: {txt}")
    if parts:
        raise ProcessGroupMismatch("ranks disagree at start-up: " + "; ".join(parts)
                                   + "; every rank must use the same topology, plan and rank count")


class MPICommunicator:
    """Collectives across MPI processes, one rank each (see module docstring).

    Use :meth:`from_mpi`; the constructor takes the same arguments.

    Parameters
    ----------
    comm : mpi4py communicator, optional
        Default ``MPI.COMM_WORLD``; it is duplicated (our messages never match the caller's).
    topology : Topology, preset name or file, optional
        Default ``fully_connected(size)``; its GPU count must equal the number of processes.
    plan : Plan, path, "auto", None or False
        As for :class:`kernels.communicator.Communicator`.
    algo : str, optional
        Force one baseline (``ring``, ``tree``, ``direct``, ``rhd``, ``bruck``) instead of the plan.
    timeout_s : float, optional
        Seconds without progress before a wait raises PeerFailed.
    abort_on_error : bool
        Install a ``sys.excepthook`` that calls :meth:`abort` on any uncaught exception.
    wire : kernels.mpi_transport.HostWire, optional
        Force a buffer layer (tests use a fake-device DeviceWire).

    Raises
    ------
    ProcessGroupMismatch
        Ranks disagree on topology, plan, algorithm or rank count (same message on every rank).
    PeerFailed
        A rank did not join within ``timeout_s`` or reported a failure.
    DeviceUnavailable
        mpi4py / an MPI library is not installed.
    """

    def __init__(self, comm=None, *, topology=None, plan=None, algo: str | None = None,
                 timeout_s: float | None = None, abort_on_error: bool = True, wire=None) -> None:
        MPI = mt.mpi()
        self._world = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.size = self._world.Get_rank(), self._world.Get_size()
        self._ctrl = None
        if abort_on_error:
            self._install_excepthook()
        self.waiter = mt.Waiter(None, self.rank, timeout_s)
        dups = [self._world.Idup() for _ in range(3)]     # non-blocking: a missing rank times out
        self.waiter.all([d[1] for d in dups], "start-up (MPICommunicator.from_mpi on every rank)",
                        lambda i: -1)
        self._data, self._ctrl, self._p2p = (d[0] for d in dups)
        self.waiter.ctrl = self._ctrl
        self.topology = resolve_topology(topology, self.size)
        self.plan = resolve_plan(plan, self.topology) if algo is None else None
        self.algo = algo
        self._wire = wire
        self._wires: dict[str, mt.HostWire] = {}
        self._programs: OrderedDict = OrderedDict()
        self._schedules: dict[tuple, Schedule] = {}
        self._pending: list = []
        self._tag_ub = int(self._world.Get_attr(MPI.TAG_UB) or 32767)
        self._start_up()
        self._local = Communicator(self.size, topology=self.topology, plan=self.plan or False)

    def _start_up(self) -> None:
        """Exchange descriptors with every rank; the same ProcessGroupMismatch everywhere."""
        import socket
        hello = mt.exchange_json(self._ctrl, self.waiter, {"agree": self.descriptor(),
                                                           "host": socket.gethostname()}, self.size, "start-up check")
        self.descriptors = [h["agree"] for h in hello]
        #: host name of every rank, and this rank's index among the ranks on its host
        #: (choose the GPU with it: ``cupy.cuda.Device(comm.local_rank).use()``)
        self.hosts = [h["host"] for h in hello]
        self.local_rank = self.hosts[:self.rank].count(self.hosts[self.rank])
        try:
            compare_descriptors(self.descriptors)
        except ProcessGroupMismatch as e:
            raise ProcessGroupMismatch(f"rank {self.rank}: {e}") from None
        if self.topology.num_gpus != self.size:
            raise ProcessGroupMismatch(f"rank {self.rank}: topology {self.topology.name!r} has "
                                       f"{self.topology.num_gpus} GPUs but {self.size} processes were started "
                                       f"(for part of a machine pass load_topology(spec, gpus=[...]))")

    @classmethod
    def from_mpi(cls, comm=None, **kwargs) -> "MPICommunicator":
        """The communicator of ``comm``'s processes (``MPI.COMM_WORLD`` by default); keyword
        arguments as for the class.  Collective: every process of ``comm`` must call it."""
        return cls(comm, **kwargs)

    def descriptor(self) -> dict:
        """What every rank must agree on (exchanged at start-up)."""
        return {"ranks": self.size, "topology": self.topology.name,
                "fingerprint": self.topology.fingerprint(), "gpus": self.topology.num_gpus,
                "plan": plan_digest(self.plan), "algo": self.algo or "plan"}

    def __repr__(self) -> str:
        return (f"MPICommunicator(rank {self.rank} of {self.size}, topology={self.topology.name!r}, "
                f"plan={'yes' if self.plan else 'no'})")

    # ------------------------------------------------------------------ failures
    def abort(self, reason, errorcode: int = 1, *, notify: bool = True, grace_s: float = 1.0) -> None:
        """Print one line naming this rank, tell the other ranks, then ``MPI_Abort``."""
        text = reason if isinstance(reason, str) else f"{type(reason).__name__}: {reason}"
        print(f"topocoll: rank {self.rank}: error: {text}", file=sys.stderr, flush=True)
        if notify and self.size > 1 and self._ctrl is not None and not isinstance(reason, ProcessGroupMismatch):
            mt.notify_failure(self._ctrl, self.rank, self.size, text, grace_s)
            time.sleep(grace_s)
        self._world.Abort(errorcode)

    def _install_excepthook(self) -> None:
        previous = sys.excepthook

        def hook(tp, val, tb):
            if not isinstance(val, TopocollError):
                previous(tp, val, tb)
            self.abort(val, 1, notify=not isinstance(val, PeerFailed) or val.rank is None)
        sys.excepthook = hook

    # ------------------------------------------------------------------ schedules
    def schedule_for(self, collective: str, nbytes: int, root: int | None = None) -> Schedule:
        """The verified schedule every rank runs for ``collective`` of ``nbytes`` (nccl-tests
        size) and root: ``algo`` if given, else the plan entry, else a baseline (as the
        single-process Communicator chooses; its warnings are shown by rank 0 only)."""
        name = canonical(collective)
        root = root if name in ROOTED else None
        entry = self.plan.select(name, nbytes, root) if self.plan is not None else None
        key = (name, root, entry)
        sched = self._schedules.get(key)
        if sched is not None:
            return sched
        with warnings.catch_warnings():
            if self.rank != 0:
                warnings.simplefilter("ignore")
            if self.algo is None:
                sched = self._local.schedule_for(name, nbytes, root)
            else:
                from synth.baselines import baseline
                from synth.verifier import check
                sched = baseline(self.algo, self._local.fabric, name, root=root)
                check(sched, self._local.fabric)
        self._schedules[key] = sched
        return sched

    def _wire_for(self, arr) -> mt.HostWire:
        if self._wire is not None:
            return self._wire
        kind = "cupy" if _is_cupy(arr) else "host"
        if kind not in self._wires:
            self._wires[kind] = mt.DeviceWire() if kind == "cupy" else mt.HostWire()
        return self._wires[kind]

    def _rank_plan(self, schedule: Schedule, count: int, dtype, inplace: bool, op: str):
        """(Program, RankPlan), cached by schedule identity (hashing a big schedule per call
        would cost more than the call)."""
        key = (id(schedule), count, np.dtype(dtype).str, inplace, op)
        hit = self._programs.get(key)
        if hit is None or hit[0] is not schedule:
            from kernels.executor import program_for
            prog = program_for(schedule, count, dtype, inplace=inplace, op=op)
            hit = (schedule, prog, mt.rank_plan(schedule, prog, self.rank, self._tag_ub))
            self._programs[key] = hit
            if len(self._programs) > _CACHE_SIZE:
                self._programs.popitem(last=False)
        return hit[1], hit[2]

    def run_schedule(self, schedule: Schedule, sendbuf, recvbuf, *, op: str = "sum"):
        """Run ``schedule`` on this rank's buffers (layout of :mod:`synth.collectives`; count
        from their sizes; in-place when they alias as in NCCL).  Returns ``recvbuf``."""
        spec = schedule.spec
        if spec.ranks != self.size:
            raise UnsupportedCollective(f"rank {self.rank}: schedule {schedule.name!r} has {spec.ranks} ranks, "
                                        f"the communicator {self.size}")
        if op not in REDUCE_OPS:
            raise UnsupportedCollective(f"op must be one of {', '.join(REDUCE_OPS)}, got {op!r}")
        me = self.rank
        bound = {}
        count = None
        for what, arr, need, blocks in (("sendbuf", sendbuf, has_input(spec, me), spec.input_blocks()),
                                        ("recvbuf", recvbuf, has_output(spec, me), spec.output_blocks())):
            if not need:
                continue
            if arr is None:
                raise BufferLayoutError(f"rank {me}: {what} is None but {spec.name} needs one on this rank")
            if not arr.flags.c_contiguous:
                raise BufferLayoutError(f"rank {me}: {what} must be C-contiguous")
            if arr.size % blocks or (count is not None and arr.size // blocks != count):
                raise BufferLayoutError(f"rank {me}: {what} has {arr.size} elements: not {blocks} block(s) of "
                                        f"count={count if count is not None else 'n/a'}")
            count = arr.size // blocks
            bound[what] = arr.reshape(-1)
        if len(bound) == 2 and bound["sendbuf"].dtype != bound["recvbuf"].dtype:
            raise BufferLayoutError(f"rank {me}: sendbuf dtype {bound['sendbuf'].dtype} differs from recvbuf's "
                                    f"{bound['recvbuf'].dtype}")
        if not count:
            return recvbuf
        sample = next(iter(bound.values()))
        inplace = len(bound) == 2 and _aliased(spec, me, bound["sendbuf"], bound["recvbuf"], count)
        prog, plan = self._rank_plan(schedule, count, sample.dtype, inplace, op)
        wire = self._wire_for(sample)
        wire.begin()
        user = {"send": bound.get("sendbuf"), "recv": bound.get("recvbuf")}
        bufs = {name: user[which] for name, which in prog.bindings[me].items()}
        if SCRATCH in prog.sizes[me]:
            bufs[SCRATCH] = wire.empty(prog.sizes[me][SCRATCH], sample.dtype)
        mt.execute(plan, bufs, wire, self._data, self.waiter, op=op, nranks=self.size,
                   what=f"{spec.name} ({schedule.name or 'schedule'})")
        return recvbuf

    def _collective(self, name: str, send, recv, count: int, *, root=None, op="sum") -> None:
        if op not in REDUCE_OPS:
            raise UnsupportedCollective(f"{name}: op {op!r} is not one of {', '.join(REDUCE_OPS)}")
        if count == 0:
            return
        if self.size == 1:
            if send is not None and recv is not None and _ptr(send) != _ptr(recv):
                recv[...] = send
            return
        ref = send if send is not None else recv
        sched = self.schedule_for(name, nccl_bytes(name, count, ref.dtype.itemsize, self.size), root)
        self.run_schedule(sched, send, recv, op=op)

    # ------------------------------------------------------------------ collectives
    def all_reduce(self, in_array, out_array, op: str = "sum", stream=None):
        """``out = op over ranks of in`` (count = in size). ``stream`` is accepted and ignored."""
        count = in_array.size
        s = out_array if in_array is out_array else _contig(in_array)
        self._collective("allreduce", _head(s, count), _head(_out(out_array, "all_reduce"), count),
                         count, op=op)
        return out_array

    def all_gather(self, in_array, out_array, count: int | None = None, stream=None):
        """Block r of ``out`` is rank r's input; ``in is out`` means in place (block ``rank``)."""
        n, r = self.size, self.rank
        if in_array is out_array:
            count = out_array.size // n if count is None else count
            in_array = out_array.reshape(-1)[r * count:(r + 1) * count]
        count = in_array.size if count is None else count
        self._collective("allgather", _head(_contig(in_array), count),
                         _head(_out(out_array, "all_gather"), n * count), count)
        return out_array

    def reduce_scatter(self, in_array, out_array, count: int | None = None, op: str = "sum", stream=None):
        """``out`` = reduction of block ``rank`` of every input; ``in is out``: in place."""
        n, r = self.size, self.rank
        if in_array is out_array:
            count = in_array.size // n if count is None else count
            out_array = _out(in_array, "reduce_scatter").reshape(-1)[r * count:(r + 1) * count]
        count = out_array.size if count is None else count
        self._collective("reducescatter", _head(_contig(in_array), n * count),
                         _head(_out(out_array, "reduce_scatter"), count), count, op=op)
        return out_array

    def broadcast(self, in_out_array, root: int = 0, stream=None):
        """Copy rank ``root``'s buffer into every rank's (in place)."""
        buf = _out(in_out_array, "broadcast")
        self._collective("broadcast", buf, buf, buf.size, root=self._root("broadcast", root))
        return in_out_array

    def reduce(self, in_array, out_array, root: int = 0, op: str = "sum", stream=None):
        """``out`` on ``root`` = reduction of all inputs; ``out_array`` may be None elsewhere."""
        root = self._root("reduce", root)
        count = in_array.size
        s = out_array if in_array is out_array else _contig(in_array)
        d = _head(_out(out_array, "reduce"), count) if self.rank == root else None
        self._collective("reduce", _head(s, count), d, count, root=root, op=op)
        return out_array

    def gather(self, in_array, out_array, root: int = 0, stream=None):
        """Block r of ``out`` on ``root`` is rank r's input; ``out_array`` may be None elsewhere."""
        root, n = self._root("gather", root), self.size
        if self.rank == root and in_array is out_array:
            count = out_array.size // n
            in_array = out_array.reshape(-1)[root * count:(root + 1) * count]
        count = in_array.size
        d = _head(_out(out_array, "gather"), n * count) if self.rank == root else None
        self._collective("gather", _head(_contig(in_array), count), d, count, root=root)
        return out_array

    def scatter(self, in_array, out_array, root: int = 0, stream=None):
        """``out`` = block ``rank`` of ``in`` on ``root``; ``in_array`` may be None elsewhere."""
        root, n = self._root("scatter", root), self.size
        if self.rank == root and in_array is out_array:
            count = in_array.size // n
            out_array = _out(in_array, "scatter").reshape(-1)[root * count:(root + 1) * count]
        count = out_array.size
        s = _head(_contig(in_array), n * count) if self.rank == root else None
        self._collective("scatter", s, _head(_out(out_array, "scatter"), count), count, root=root)
        return out_array

    def all_to_all(self, in_array, out_array, stream=None):
        """Block d of ``in`` on rank s lands in block s of ``out`` on rank d."""
        total = in_array.size
        if total % self.size:
            raise ValueError(f"all_to_all: rank {self.rank}: in_array holds {total} elements, not a "
                             f"multiple of {self.size} ranks")
        s = out_array if in_array is out_array else _contig(in_array)
        self._collective("alltoall", _head(s, total), _head(_out(out_array, "all_to_all"), total),
                         total // self.size)
        return out_array

    # ------------------------------------------------------------------ point to point, sync
    def send(self, array, peer: int, *, rank: int | None = None, stream=None) -> None:
        """Post a send of ``array`` to ``peer``; completes once ``peer`` receives (FIFO per pair)."""
        self._check_p2p("send", peer, rank)
        wire = self._wire_for(array)
        buf = wire.send_buffer(_contig(array).reshape(-1), pooled=False)
        self._pending.append((self._p2p.Isend([buf, self.waiter.MPI.BYTE], dest=peer, tag=0), peer, buf))

    def recv(self, array, peer: int, *, rank: int | None = None, stream=None) -> None:
        """Receive into ``array`` from ``peer`` (blocks, with the deadline; see :meth:`send`)."""
        self._check_p2p("recv", peer, rank)
        wire = self._wire_for(array)
        buf, fin = wire.recv_buffer(array.size, array.dtype, into=_out(array, "recv").reshape(-1))
        req = self._p2p.Irecv([buf, self.waiter.MPI.BYTE], source=peer, tag=0)
        self.waiter.all([req], f"recv from rank {peer}", lambda i: peer)
        fin()
        wire.finish()
        self._pending = [p for p in self._pending if not p[0].Test()]

    def wait_sends(self) -> None:
        """Wait (with the deadline) until every posted :meth:`send` is received."""
        pend, self._pending = self._pending, []
        self.waiter.all([p[0] for p in pend], "send", lambda i: pend[i][1])

    def barrier(self) -> None:
        """All ranks reach this point (MPI ``Ibarrier`` polled with the deadline)."""
        self.waiter.all([self._ctrl.Ibarrier()], "barrier", lambda i: -1)

    def allgather_object(self, obj) -> list:
        """Every rank's JSON-able ``obj``, in rank order (small metadata only)."""
        return mt.exchange_json(self._ctrl, self.waiter, obj, self.size, "allgather_object")

    def _check_p2p(self, what: str, peer: int, rank: int | None) -> None:
        if rank is not None and rank != self.rank:
            raise ValueError(f"{what}: rank={rank} but this process is rank {self.rank}")
        if not 0 <= int(peer) < self.size or peer == self.rank:
            raise ValueError(f"{what}: rank {self.rank}: peer {peer} is not another rank (0..{self.size - 1})")

    def _root(self, what: str, root: int) -> int:
        if isinstance(root, bool) or not 0 <= int(root) < self.size:
            raise ValueError(f"{what}: root {root!r} is not a rank (0..{self.size - 1})")
        return int(root)

    # ------------------------------------------------------------------ fusion and compression
    def fused_all_reduce(self, tensors, *, mode: str = "auto", bucket_mb: float = 64, split_points=None,
                         op: str = "sum", compression: str | None = None) -> list[range]:
        """All-reduce this rank's ``tensors`` in place, one collective per fusion bucket
        (:func:`kernels.fusion.plan_buckets`); ``compression`` as :meth:`compressed_all_reduce`."""
        from kernels.fusion import plan_buckets
        buckets = plan_buckets([t.nbytes for t in tensors], mode, bucket_mb=bucket_mb,
                               split_points=split_points, keys=[t.dtype for t in tensors])
        for bucket in buckets:
            ts = [tensors[i] for i in bucket]
            xp = self._wire_for(ts[0]).xp
            single = len(ts) == 1 and ts[0].flags.c_contiguous
            buf = ts[0].reshape(-1) if single else xp.concatenate([t.reshape(-1) for t in ts])
            if compression is None:
                self.all_reduce(buf, buf, op=op)
            else:
                self.compressed_all_reduce(buf, buf, compression=compression, op=op)
            if not single:
                off = 0
                for t in ts:
                    t[...] = buf[off:off + t.size].reshape(t.shape)
                    off += t.size
        return buckets

    def compressed_all_reduce(self, in_array, out_array, *, compression: str = "bf16", op: str = "sum",
                              group_size: int | None = None):
        """This rank's part of :func:`kernels.compression.compressed_all_reduce` (same wire
        format, float32 accumulation in rank order, same error bound)."""
        from kernels import compression as cz
        if op not in ("sum", "avg"):
            raise UnsupportedCollective(f"compressed all_reduce supports op 'sum' and 'avg', got {op!r}")
        fmt = cz.get_format(compression)
        group_size = cz.DEFAULT_GROUP if group_size is None else group_size
        n, count = self.size, int(in_array.size)
        if count == 0:
            return out_array
        b = -(-count // n)
        enc, dec = cz.CAST_KERNELS[("host", fmt.name)]
        if _is_cupy(in_array):
            if ("cupy", fmt.name) in cz.CAST_KERNELS:
                enc, dec = cz.CAST_KERNELS[("cupy", fmt.name)]
            else:  # host casts with a round trip (correct, slow), as kernels.compression does
                import cupy
                henc, hdec = enc, dec
                enc = lambda x, gs: cupy.asarray(henc(cupy.asnumpy(x), gs))  # noqa: E731
                dec = lambda p, b, gs: cupy.asarray(hdec(cupy.asnumpy(p), b, gs))  # noqa: E731
        xp = self._wire_for(in_array).xp
        width = cz.payload_bytes(fmt.name, b, group_size)
        buf = xp.zeros(n * b, np.float32)
        buf[:count] = in_array.reshape(-1)
        send = enc(buf.reshape(n, b), group_size).reshape(-1)
        recv = xp.empty(n * width, np.uint8)
        self.all_to_all(send, recv)
        parts = dec(recv.reshape(n, width), b, group_size)
        acc = parts[0].copy()
        for k in range(1, n):
            acc += parts[k]
        if op == "avg":
            acc /= np.float32(n)
        mine = enc(acc.reshape(1, b), group_size).reshape(-1)
        gathered = xp.empty(n * width, np.uint8)
        self.all_gather(mine, gathered)
        vals = dec(gathered.reshape(n, width), b, group_size).reshape(-1)[:count]
        out_array.reshape(-1)[:count] = vals.astype(out_array.dtype)
        return out_array


def _aliased(spec: CollectiveSpec, r: int, send, recv, count: int) -> bool:
    """NCCL in-place layout of rank r's buffers; BufferLayoutError for any other overlap."""
    item = send.dtype.itemsize
    s0, r0 = _ptr(send), _ptr(recv)
    s1, r1 = s0 + send.size * item, r0 + recv.size * item
    if s1 <= r0 or r1 <= s0:
        return False
    if spec.name in ("allgather", "gather"):
        ok = s0 == r0 + r * count * item
    elif spec.name in ("reducescatter", "scatter"):
        ok = r0 == s0 + r * count * item
    else:
        ok = (s0, s1) == (r0, r1)
    if not ok:
        raise BufferLayoutError(f"rank {r}: sendbuf and recvbuf overlap but not as NCCL's in-place {spec.name}")
    return True


def _contig(a):
    if a is None or a.flags.c_contiguous:
        return a
    return a.copy()


def _out(a, what: str):
    if a is None:
        raise ValueError(f"{what}: the output array is None on a rank that needs one")
    if not a.flags.c_contiguous:
        raise ValueError(f"{what}: the output array is not C-contiguous (as NCCL needs)")
    return a


def _head(a, n: int):
    """The first ``n`` elements of ``a`` as a flat view (ValueError if ``a`` is smaller)."""
    if a is None:
        return None
    flat = a.reshape(-1)
    if flat.size < n:
        raise ValueError(f"buffer has {flat.size} elements, needs at least {n}")
    return flat[:n]


# ---------------------------------------------------------------------- sweep --backend mpi
class MPISweepBackend:
    """The sweep backend (:mod:`kernels.sweep.backends` interface) of one MPI rank.

    Every rank builds its own buffers from ``(seed, rank, index)`` (nccl-tests' data), runs the
    case's schedule with :meth:`MPICommunicator.run_schedule` and times ``iters`` back-to-back
    runs after a barrier (nccl-tests with ``MPI=1``); rank times are combined by ``-a`` (0 rank
    0, 1 mean, 2 min, 3 max).  Validation runs on every rank against NumPy and ``#wrong`` is
    the sum over ranks; every rank returns the same numbers.
    """

    name = "mpi"
    checks = True

    def __init__(self, comm: MPICommunicator) -> None:
        self.comm = comm
        self._rep = 0

    def devices(self, n: int, topology) -> list:
        import os
        import socket
        from kernels.sweep.backends import Device
        mine = {"pid": os.getpid(), "host": socket.gethostname().split(".")[0],
                "info": f"MPI process ({self.comm.waiter.MPI.Get_library_version().splitlines()[0][:40]})"}
        return [Device(r, d["pid"], d["host"], r, "cpu", d["info"])
                for r, d in enumerate(self.comm.allgather_object(mine))]

    def _buffers(self, case, seed: int):
        from kernels.sweep.table import init_data
        e, n, c, me = case.entry, case.nranks, case.counts.count, self.comm.rank
        kin, kout = e.blocks(n)
        mine = init_data(seed, me, kin * c, case.dtype, case.op, n)
        if not case.inplace:
            return mine, np.zeros(kout * c, mine.dtype)
        if kin == kout:
            return mine, mine
        if kout > kin:
            d = np.zeros(kout * c, mine.dtype)
            d[me * c:(me + 1) * c] = mine
            return d[me * c:(me + 1) * c], d
        return mine, mine[me * c:(me + 1) * c]

    def _run(self, case, send, recv) -> None:
        if case.schedule is None:
            if recv is not send:
                recv[...] = send[:recv.size]
            return
        self.comm.run_schedule(case.schedule, send, recv, op=case.op)

    def measure(self, case) -> tuple[float, int | None]:
        from kernels.sweep.table import count_wrong
        send, recv = self._buffers(case, 0)
        with np.errstate(all="ignore"):
            self.comm.barrier()
            for _ in range(case.warmup):
                self._run(case, send, recv)
            self.comm.barrier()
            t0 = time.perf_counter()
            for _ in range(case.iters):
                self._run(case, send, recv)
            mine = (time.perf_counter() - t0) / case.iters * 1e6
        times = [float(t) for t in self.comm.allgather_object(mine)]
        t = {0: times[0], 2: min(times), 3: max(times)}.get(case.average, sum(times) / len(times))
        if case.check <= 0:
            return t, None
        wrong = 0
        for _ in range(case.check):
            self._rep += 1
            s, d = self._buffers(case, self._rep)
            self._run(case, s, d)
            inputs = case.entry.inputs(self._rep, case.counts.count, case.dtype, case.op, case.nranks)
            want = case.entry.expected(inputs, case.counts.count, case.dtype, case.op, case.nranks,
                                       case.root)[self.comm.rank]
            mine = 0 if want is None else count_wrong(d, want, case.dtype, case.op, case.nranks)
            wrong = sum(int(w) for w in self.comm.allgather_object(mine))
            if wrong:
                break
        return t, wrong


def run_sweep_mpi(cfg_for, topology=None, algo: str = "plan", *, argv=(), json_path=None, out=None,
                  comm: MPICommunicator | None = None) -> int:
    """``sweep ... --backend mpi`` on every rank of ``mpirun -n N``: rank 0 prints one
    nccl-tests table (and writes the ``-J`` JSON), ``#wrong`` is checked on every rank.

    Parameters
    ----------
    cfg_for : callable
        ``cfg_for(n) -> SweepConfig`` for ``n`` = the number of processes (the CLI's
        ``lambda n: make_config(args, n)``).
    topology : Topology, preset name, file or None
        None: ``fully_connected(n)``; a machine with more GPUs than processes is cut to the
        first ``n``.
    algo, argv, json_path
        ``--algo``, the command line (for the JSON) and ``-J``.
    out : file, optional
        Where rank 0 prints (default stdout).

    Returns
    -------
    int
        0, or 1 when any result was wrong (the same on every rank).  A rank that fails
        aborts the job through :meth:`MPICommunicator.abort` (one line naming the rank).
    """
    from kernels.sweep import output
    from kernels.sweep.driver import ScheduleSource, run_sweep
    MPI = mt.mpi()
    world = comm._world if comm is not None else MPI.COMM_WORLD
    n = world.Get_size()
    cfg = cfg_for(n)
    topo = _sweep_topology(topology, n)
    comm = comm or MPICommunicator.from_mpi(world, topology=topo, plan="auto" if algo == "plan" else False)
    out = out or sys.stdout
    try:
        source = ScheduleSource(cfg.collective, topo if n > 1 else None, algo)
        backend = MPISweepBackend(comm)
        devices = backend.devices(n, topo)
        start = output.now()
        root0 = comm.rank == 0
        if root0:
            print("\n".join(output.preamble_lines(cfg, devices, [f"backend: mpi ({n} processes)"] + source.notes)
                            + output.header_lines()), file=out, flush=True)
        summary = run_sweep(cfg, backend, source,
                            on_row=(lambda row: print(output.row_line(row), file=out, flush=True)) if root0 else None)
        if root0:
            print("\n".join(output.footer_lines(summary)), file=out, flush=True)
            if json_path:
                doc = output.json_document(cfg, devices, summary, argv=list(argv), start_time=start,
                                           extra={"backend": "mpi", "topology": topo.name})
                output.write_json(output.free_json_path(json_path), doc)
        comm.barrier()
    except (TopocollError, ValueError, OSError) as exc:
        comm.abort(exc)
    return 1 if summary.errors else 0


def _sweep_topology(topology, n: int):
    from topo_probe.model import Topology
    if topology is None or isinstance(topology, Topology):
        return resolve_topology(topology, n)
    from topo_probe.load import load_topology
    topo = load_topology(str(topology))
    if topo.num_gpus > n:
        topo = load_topology(str(topology), gpus=list(range(n)))
    return topo
