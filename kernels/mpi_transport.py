"""Run one rank's share of a lowered schedule over MPI: non-blocking point-to-point messages.

One process per rank (``mpirun -n N``).  Every process lowers the same schedule
(:func:`kernels.executor.program_for`) and keeps the ops that concern it
(:func:`rank_plan`): each remote op of the :class:`~kernels.lowering.Program` (a schedule
transfer) becomes an ``Isend`` on its source rank and an ``Irecv`` on its destination rank,
tagged with the transfer's global index in the schedule (so messages match whatever order the
ranks post them in); local ops (the epilogue's copies and ``avg``'s division) run in place.

Ordering follows the op dependencies of the lowering, not barriers between steps: a send is
posted once the op that last wrote its source region is done, a copy is received straight into
its destination once the ops that read or write that region are done, and a reduce is
received into a temporary buffer at once and combined (``dst = acc (op) received``) when its
dependencies are done.  Dependencies on other ranks' ops are carried by the messages
themselves.

Waiting never blocks in MPI: :class:`Waiter` polls ``Testsome`` (spinning briefly, then
yielding the CPU), probes the control communicator for failure notices from other ranks
(:func:`notify_failure`) and raises :class:`~topo_probe.errors.PeerFailed` naming the rank
when a notice arrives or when nothing completes for ``timeout_s`` seconds.

Buffers (:class:`HostWire`, :class:`DeviceWire`): NumPy arrays travel as bytes; CuPy arrays
travel as device pointers when the MPI library is CUDA-aware (:func:`query_cuda_aware`) and
are staged through pinned host buffers otherwise.  Temporaries (received partials, the
lowering's scratch, pinned staging) are carved from an :class:`Arena` kept across calls.
"""

from __future__ import annotations

import ctypes
import json
import os
import time
from dataclasses import dataclass, field

import numpy as np

from kernels.device import BINARY_OP
from kernels.lowering import Op, Program
from synth.schedule import Schedule
from topo_probe.errors import DeviceUnavailable, PeerFailed, UnsupportedCollective

TAG_NOTICE, TAG_HELLO, TAG_PING, TAG_PONG = 1, 2, 3, 4
#: seconds without progress before a wait gives up (``$TOPOCOLL_MPI_TIMEOUT`` overrides)
DEFAULT_TIMEOUT_S = 120.0
NOTICE_BYTES = 2048
_UFUNCS = {"sum": "add", "prod": "multiply", "max": "maximum", "min": "minimum"}


_yield = getattr(os, "sched_yield", lambda: time.sleep(0))   # time.sleep(0) costs ~100 µs on Linux


def mpi():
    """The ``mpi4py.MPI`` module; DeviceUnavailable (one line) when mpi4py or MPI is missing."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise DeviceUnavailable(f"mpi backend: mpi4py / an MPI library is not usable ({exc}); "
                                f"pip install 'topocoll[mpi]'") from None
    return MPI


def default_timeout() -> float:
    """``$TOPOCOLL_MPI_TIMEOUT`` (seconds) or :data:`DEFAULT_TIMEOUT_S`."""
    try:
        return float(os.environ.get("TOPOCOLL_MPI_TIMEOUT", DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def query_cuda_aware() -> bool:
    """Whether the loaded MPI library accepts CUDA device pointers.

    ``$TOPOCOLL_MPI_CUDA_AWARE`` = 0/1 overrides; else Open MPI's ``MPIX_Query_cuda_support``
    or MPICH's ``MPIX_GPU_query_support`` is called on the loaded ``libmpi``; False if neither
    answers.
    """
    env = os.environ.get("TOPOCOLL_MPI_CUDA_AWARE")
    if env is not None:
        return env.strip() not in ("", "0", "false", "no")
    try:
        with open("/proc/self/maps") as f:
            paths = {ln.split()[-1] for ln in f if "libmpi" in ln and "/" in ln}
    except OSError:
        return False
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if hasattr(lib, "MPIX_Query_cuda_support"):
            return bool(lib.MPIX_Query_cuda_support())
        if hasattr(lib, "MPIX_GPU_query_support"):
            flag = ctypes.c_int(0)
            if lib.MPIX_GPU_query_support(ctypes.c_int(0), ctypes.byref(flag)) == 0:  # MPIX_GPU_SUPPORT_CUDA
                return bool(flag.value)
    return False


# ---------------------------------------------------------------------- waiting and failures
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
    """

    spin = 20           # Testsome calls before yielding the CPU
    probe_s = 0.002     # seconds between probes for failure notices (and deadline checks)
    nap_after_s = 0.01  # seconds without progress before sleeping between tries
    nap_s = 2e-4        # sleep between tries after that

    def __init__(self, ctrl, rank: int, timeout_s: float | None = None) -> None:
        self.ctrl, self.rank = ctrl, rank
        self.timeout_s = default_timeout() if timeout_s is None else float(timeout_s)
        self.MPI = mpi()
        self._sent: list = []   # ping / pong sends (completed or abandoned on failure)

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
        if self.ctrl.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_NOTICE, status=st):
            buf = np.zeros(NOTICE_BYTES, np.uint8)
            src = st.Get_source()
            self.ctrl.Recv([buf, MPI.BYTE], source=src, tag=TAG_NOTICE)
            text = bytes(buf).rstrip(b"\0").decode("utf-8", "replace")
            raise PeerFailed(f"rank {self.rank}: stopping because rank {src} failed: {text}",
                             rank=src, reporter=self.rank)

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
        for _ in range(self.spin):
            idx = testsome(reqs)
            if idx:
                return idx
        start = time.monotonic()
        next_probe = start + self.probe_s
        while True:
            idx = testsome(reqs)
            if idx:
                return idx
            now = time.monotonic()
            if now >= next_probe:
                self.check_notices()
                next_probe = now + self.probe_s
                if now - start > self.timeout_s:
                    self._timeout(what, sorted(set(peers(range(len(reqs))))))
            if now - start > self.nap_after_s:
                time.sleep(self.nap_s)
            else:
                _yield()

    def _timeout(self, what: str, waiting: list[int]) -> None:
        waiting = [w for w in waiting if w >= 0]
        silent = self.unresponsive(self.ctrl.Get_size()) if self.ctrl is not None else []
        blame = silent or waiting
        who = blame[0] if len(blame) == 1 else None
        why = (f"rank(s) {silent} do not respond (hung, dead or busy outside the communicator)" if silent
               else "every rank responds (mismatched collective calls?)" if self.ctrl is not None
               else "some rank did not join")
        raise PeerFailed(f"rank {self.rank}: {what}: no progress for {self.timeout_s:g} s waiting on rank(s) "
                         f"{waiting or 'unknown'}; {why}", rank=who, reporter=self.rank)

    def all(self, reqs: list, what: str, peers) -> None:
        """Wait for every request of ``reqs`` (``peers(i)`` names the rank of request i)."""
        reqs = list(reqs)
        ranks = [peers(i) for i in range(len(reqs))]
        while reqs:
            done = set(self.some(reqs, what, lambda pend: [ranks[i] for i in pend]))
            reqs = [r for i, r in enumerate(reqs) if i not in done]
            ranks = [p for i, p in enumerate(ranks) if i not in done]


def notify_failure(ctrl, rank: int, size: int, text: str, grace_s: float = 1.0) -> None:
    """Send ``text`` to every other rank (tag :data:`TAG_NOTICE`); best effort, at most
    ``grace_s`` seconds.  Ranks waiting in :class:`Waiter` raise PeerFailed naming ``rank``."""
    MPI = mpi()
    raw = text.encode("utf-8")[:NOTICE_BYTES - 1]
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


def exchange_json(ctrl, waiter: Waiter, obj, size: int, what: str, limit: int = 1 << 16) -> list:
    """Every rank's ``obj`` (JSON-able), in rank order, through deadline-bounded Isend/Irecv."""
    MPI = waiter.MPI
    me = waiter.rank
    raw = json.dumps(obj, sort_keys=True).encode()
    if len(raw) >= limit:
        raise UnsupportedCollective(f"rank {me}: {what}: {len(raw)} bytes of metadata exceed {limit}")
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


# ---------------------------------------------------------------------- buffers on the wire
def _combine(xp, dst, acc, src, op: str) -> None:
    getattr(xp, _UFUNCS[BINARY_OP[op]])(acc, src, out=dst)


def _postdiv(xp, x, n: int) -> None:
    """avg's division: floats divide, integers truncate toward zero (as kernels.numba_kernels)."""
    if x.dtype.kind in "iu":
        q = xp.floor_divide(x, n)
        if x.dtype.kind == "i":
            q += ((x < 0) & (q * n != x)).astype(x.dtype)
        x[...] = q
    else:
        xp.divide(x, x.dtype.type(n), out=x)


class Arena:
    """Reusable scratch memory: :meth:`take` carves 64-byte aligned views out of one block that
    persists across calls (:meth:`reset` at the start of each collective), so large collectives
    do not pay for fresh pages every call.  A block too small is replaced by one twice as large
    (views already taken keep the old block alive).

    >>> a = Arena(lambda nbytes: np.zeros(nbytes, np.uint8))
    >>> first = a.take(1000, np.uint8); a.reset()
    >>> x, y = a.take(3, np.float64), a.take(2, np.int32)
    >>> int(y.ctypes.data - x.ctypes.data), bool(np.shares_memory(x, first))
    (64, True)
    """

    ALIGN = 64

    def __init__(self, alloc) -> None:
        self.alloc, self.block, self.offset = alloc, None, 0

    def reset(self) -> None:
        self.offset = 0

    def take(self, n: int, dtype):
        dt = np.dtype(dtype)
        nbytes = max(1, n * dt.itemsize)
        start = -(-self.offset // self.ALIGN) * self.ALIGN
        if self.block is None or start + nbytes > self.block.size:
            size = max(nbytes, 2 * (self.block.size if self.block is not None else 0))
            self.block, start = self.alloc(size), 0
        self.offset = start + nbytes
        return self.block[start:start + n * dt.itemsize].view(dt)


class HostWire:
    """NumPy buffers: sent and received as their bytes; temporaries come from an :class:`Arena`."""

    name = "host"
    xp = np

    def __init__(self) -> None:
        self.arena = Arena(lambda nbytes: np.empty(nbytes, np.uint8))

    def begin(self) -> None:
        """Start of a collective: temporaries of the previous one may be reused."""
        self.arena.reset()

    def empty(self, n: int, dtype):
        """A temporary valid until the next :meth:`begin`."""
        return self.arena.take(n, dtype)

    def send_buffer(self, view, pooled: bool = True):
        """What MPI sends for ``view`` (``pooled=False``: staging outlives the collective)."""
        return view.view(np.uint8)

    def recv_buffer(self, n: int, dtype, into=None):
        """``(wire buffer, finish)``: MPI fills the wire buffer; ``finish()`` returns the data."""
        arr = self.empty(n, dtype) if into is None else into
        return arr.view(np.uint8), (lambda: arr)

    def combine(self, dst, acc, src, op: str) -> None:
        _combine(np, dst, acc, src, op)

    def copy(self, dst, src) -> None:
        np.copyto(dst, src)

    def postdiv(self, dst, n: int) -> None:
        _postdiv(np, dst, n)

    def finish(self) -> None:
        """Called once the program is done (device layers synchronise here)."""


class DeviceWire(HostWire):
    """CuPy buffers (see module docstring); hooks make it testable without a GPU.

    Parameters
    ----------
    xp : module, optional
        ``cupy`` (default) or a stand-in with the same array functions.
    cuda_aware : bool, optional
        Hand device buffers to MPI; default :func:`query_cuda_aware`.
    pinned_empty, to_host, to_device, synchronize : callables, optional
        Pinned host allocation ``(n, dtype)``, device->host ``(host, dev)``, host->device
        ``(dev, host)`` and a stream synchronisation; CuPy's by default.
    """

    name = "cupy"

    def __init__(self, xp=None, cuda_aware: bool | None = None, *, pinned_empty=None, to_host=None,
                 to_device=None, synchronize=None) -> None:
        if xp is None:
            try:
                import cupy as xp
            except ImportError:
                raise DeviceUnavailable("mpi backend: CuPy arrays need cupy (pip install 'topocoll[cuda12]')") from None
        self.xp = xp
        self.cuda_aware = query_cuda_aware() if cuda_aware is None else bool(cuda_aware)
        self._pinned = pinned_empty or _cupy_pinned_empty
        self._to_host = to_host or (lambda host, dev: dev.get(out=host))
        self._to_device = to_device or (lambda dev, host: dev.set(host))
        self._sync = synchronize or (lambda: xp.cuda.get_current_stream().synchronize())
        self.arena = Arena(lambda nbytes: xp.empty(nbytes, xp.uint8))
        self.pinned = Arena(lambda nbytes: self._pinned(nbytes, np.uint8))
        self.staged = {"to_host": 0, "to_device": 0}

    def begin(self) -> None:
        self.arena.reset()
        self.pinned.reset()

    def send_buffer(self, view, pooled: bool = True):
        if self.cuda_aware:
            self._sync()
            return view.view(self.xp.uint8)
        host = self.pinned.take(view.size, view.dtype) if pooled else self._pinned(view.size, view.dtype)
        self._to_host(host, view)
        self._sync()
        self.staged["to_host"] += 1
        return host.view(np.uint8)

    def recv_buffer(self, n: int, dtype, into=None):
        dev = self.empty(n, dtype) if into is None else into
        if self.cuda_aware:
            self._sync()
            return dev.view(self.xp.uint8), (lambda: dev)
        host = self.pinned.take(n, dtype)

        def finish():
            self._to_device(dev, host)
            self.staged["to_device"] += 1
            return dev
        return host.view(np.uint8), finish

    def combine(self, dst, acc, src, op: str) -> None:
        _combine(self.xp, dst, acc, src, op)

    def copy(self, dst, src) -> None:
        dst[...] = src

    def postdiv(self, dst, n: int) -> None:
        _postdiv(self.xp, dst, n)

    def finish(self) -> None:
        self._sync()


def _cupy_pinned_empty(n: int, dtype):
    import cupyx
    return cupyx.empty_pinned(n, dtype)


# ---------------------------------------------------------------------- one rank's program
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
        self.dependents = {}
        for i, r in enumerate(rows):
            for d in r[4]:
                self.dependents.setdefault(d, []).append(i)
        return self


def transfer_tags(schedule: Schedule) -> list[int]:
    """First tag of each step: transfer ``i`` of step ``t`` is tagged ``offsets[t] + i``
    (tags start above the control tags).

    >>> from synth.schedule import Step, Transfer
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
            nranks: int, what: str = "collective") -> None:
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
    """
    byte = waiter.MPI.BYTE
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

    for i, (kind, o, tag, peer) in enumerate(items):
        if kind == RECV_REDUCE:    # receive partials at once (into temporaries)
            buf, fin = wire.recv_buffer(o.dst.size, bufs[o.dst.buf].dtype)
            reqs.append(comm.Irecv([buf, byte], source=peer, tag=tag))
            active.append((i, fin))
    while left:
        while ready:
            i = ready.pop()
            kind, o, tag, peer = items[i]
            if kind == SEND:
                reqs.append(comm.Isend([wire.send_buffer(view(o.src)), byte], dest=peer, tag=tag))
                active.append((i, None))
            elif kind == RECV_COPY:
                dst = view(o.dst)
                buf, fin = wire.recv_buffer(dst.size, dst.dtype, into=dst)
                reqs.append(comm.Irecv([buf, byte], source=peer, tag=tag))
                active.append((i, fin))
            elif kind == RECV_REDUCE:
                wire.combine(view(o.dst), view(o.acc), arrived.pop(i), op)
                complete(i)
            else:
                _run_local(o, view, wire, op, nranks)
                complete(i)
        if not left:
            break
        if not reqs:
            raise UnsupportedCollective(f"rank {plan.rank}: {what}: ops wait on each other (lowering bug)")
        finished = waiter.some(reqs, what, lambda pend: [items[active[k][0]][3] for k in pend])
        for k in finished:
            i, fin = active[k]
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
    wire.finish()


def _run_local(o: Op, view, wire: HostWire, op: str, nranks: int) -> None:
    if o.kind == "copy":
        wire.copy(view(o.dst), view(o.src))
    elif o.kind == "reduce":
        wire.combine(view(o.dst), view(o.acc), view(o.src), op)
    else:
        wire.postdiv(view(o.dst), nranks)
