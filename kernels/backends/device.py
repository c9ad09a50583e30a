"""The device-layer interface every backend implements, and the generic op loop.

A backend owns one memory space per rank (a GPU, or the host for the NumPy backends) and
offers: ``allocate`` (scratch), ``copy`` (within a rank or between ranks), ``reduce_copy``
(``dst = a op b``), ``scale`` (avg's division), ``record_event`` / ``wait_event`` (ordering
between the per-rank streams) and ``synchronize``.  :meth:`DeviceLayer.execute` runs a
:class:`kernels.program.lowering.Program` with those primitives: every op goes to the stream of the
rank it writes, and waits on the event of each dependency that ran on another stream
(skipping waits a stream already covered).  Backends may override ``execute`` wholesale (the
host backend runs each step on a thread pool; the CuPy backend plans peer vs staged copies).

Buffers reach a layer as :class:`RankBuffers`: for each rank the physical buffers named in
``Program.bindings`` / ``Program.sizes`` as flat (1-D, contiguous) arrays.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from kernels.backends.kernel_twins import binop_for
from kernels.program.lowering import Op, Program, Region
from synth.ir.collectives import CheckedOp
from topo_probe.errors import InvalidArgument, show

#: reduction op -> the binary op applied by reduce-copy (avg sums, then scales at the end); checked ops
#: (:class:`synth.ir.collectives.CheckedOp`, each made by the rule), so the kernels applying them take them as they are
BINARY_OP = {op: CheckedOp(binop) for op, binop in
             {"sum": "sum", "avg": "sum", "prod": "prod", "max": "max", "min": "min"}.items()}
#: a GPU layer's ``p2p``: peer access where allowed, or always staged through pinned host memory
P2P_MODES = ("auto", "never")


class CheckedP2PMode(str):
    """A p2p mode the rule accepted: one of :data:`P2P_MODES`, as a plain value.  Made only by the rule: the
    constructor applies it (to the plain value, ``str.__str__``) and refuses anything else in :func:`check_p2p`'s
    one line (naming ``owner`` where given), so no CheckedP2PMode holds a refused value.  A GPU layer made from one
    (by ``make_layer``, for the Communicator or run_schedule call that checked it) takes it as it is.  Internal: in
    no ``__all__`` (callers pass plain strings).  Not :class:`kernels.pytorch.checked_p2p.CheckedP2P` (a send/recv
    group)."""

    __slots__ = ()

    def __new__(cls, p2p, owner: str = ""):
        value = str.__str__(p2p) if isinstance(p2p, str) else None   # the value itself (not a str Enum's name),
        if value in P2P_MODES:                                        # the rule asked of it, not of p2p's __eq__
            return super().__new__(cls, value)
        head = f"{owner}: p2p" if owner else "p2p"
        raise InvalidArgument(f"{head} must be one of {', '.join(P2P_MODES)}, got {show(p2p)}")


def check_p2p(p2p, owner: str) -> CheckedP2PMode:
    """``p2p`` as a :class:`CheckedP2PMode`: the same object where it is one already, else a new one, whose
    constructor applies the rule: one of :data:`P2P_MODES`, else InvalidArgument in one line naming ``owner`` and
    the value.  The one p2p rule, once per value: :func:`kernels.backends.executor.check_backend` (a Communicator
    when it is made, each run_schedule call) and the GPU layers' constructors for a value no one checked
    (:func:`layer_p2p`); here, below both: a layer module cannot import the executor's.

    >>> check_p2p("always", "CupyLayer")
    Traceback (most recent call last):
    ...
    topo_probe.errors.InvalidArgument: CupyLayer: p2p must be one of auto, never, got 'always'
    """
    return p2p if type(p2p) is CheckedP2PMode else CheckedP2PMode(p2p, owner)


def layer_p2p(p2p, owner: str) -> CheckedP2PMode:
    """A GPU layer's ``p2p``: as it is where the rule already accepted it (a :class:`CheckedP2PMode`: the layer's
    maker checked it, naming itself), else checked now naming ``owner`` (a layer made directly)."""
    return check_p2p(p2p, owner)


class RankBuffers:
    """Physical buffers of every rank: ``bufs[rank][name]`` with name input/output/scratch."""

    def __init__(self, bufs: list[dict[str, Any]]):
        self.bufs = bufs

    def view(self, region: Region) -> Any:
        """The slice of the array backing ``region``."""
        return self.bufs[region.rank][region.buf][region.start:region.stop]

    def __len__(self) -> int:
        return len(self.bufs)


class DeviceLayer(ABC):
    """What an executor backend must provide (see module docstring).

    ``stream`` arguments are rank numbers: a layer keeps one ordered stream per rank.
    Events are opaque objects returned by :meth:`record_event`.
    """

    name = "device"

    # ------------------------------------------------------------------ arrays
    def check_array(self, arr: Any, what: str) -> None:
        """Raise ``BufferLayoutError`` if ``arr`` cannot be used by this layer (default: accept)."""

    def flat(self, arr: Any) -> Any:
        """A 1-D view of a contiguous array (default: ``arr.reshape(-1)``)."""
        return arr.reshape(-1)

    def place(self, buffers: list[dict]) -> None:
        """Told each rank's user buffers (name -> array) before any scratch is allocated, so a
        layer can learn where each rank lives (default: nothing to learn)."""

    @abstractmethod
    def allocate(self, rank: int, nelems: int, dtype: Any) -> Any:
        """A new uninitialised 1-D array of ``nelems`` elements in ``rank``'s memory."""

    # ------------------------------------------------------------------ data movement
    @abstractmethod
    def copy(self, dst: Any, src: Any, stream: int) -> None:
        """Enqueue ``dst[:] = src`` on ``stream``; ``src`` may live on another rank."""

    @abstractmethod
    def reduce_copy(self, dst: Any, a: Any, b: Any, op: str, stream: int) -> None:
        """Enqueue ``dst[:] = a (op) b`` elementwise; op is sum/prod/max/min; ``b`` may be remote."""

    @abstractmethod
    def scale(self, dst: Any, divisor: int, stream: int) -> None:
        """Enqueue ``dst[:] = dst / divisor`` (floats) or truncating division (integers)."""

    # ------------------------------------------------------------------ ordering
    @abstractmethod
    def record_event(self, stream: int) -> Any:
        """Record and return an event marking everything enqueued on ``stream`` so far."""

    @abstractmethod
    def wait_event(self, stream: int, event: Any) -> None:
        """Make later work on ``stream`` wait until ``event`` has completed."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block the host until all enqueued work of every stream has finished."""

    # ------------------------------------------------------------------ the op loop
    def begin(self, program: Program, buffers: RankBuffers) -> None:
        """Hook before the first op (e.g. order the streams after the caller's work)."""

    def finish(self, program: Program, buffers: RankBuffers) -> None:
        """Hook after the last op; the default blocks until everything is done."""
        self.synchronize()

    def run_op(self, op: Op, buffers: RankBuffers, reduce_op: str) -> None:
        """Enqueue one op on its stream (dependencies are already waited for)."""
        dst = buffers.view(op.dst)
        if op.kind == "copy":
            self.copy(dst, buffers.view(op.src), op.rank)
        elif op.kind == "reduce":
            self.reduce_copy(dst, buffers.view(op.acc), buffers.view(op.src),
                             binop_for(op.premul, BINARY_OP[reduce_op], program_ranks(buffers)), op.rank)
        else:
            self.scale(dst, program_ranks(buffers), op.rank)

    def execute(self, program: Program, buffers: RankBuffers) -> None:
        """Run every op of ``program`` in order, with events between dependent streams."""
        self.begin(program, buffers)
        ops = list(program.ops())
        stream_of = {o.id: o.rank for o in ops}
        needed = {d for o in ops for d in o.deps if stream_of[d] != o.rank}
        pos: dict[int, int] = {}              # op id -> position on its stream
        events: dict[int, Any] = {}           # op id -> event recorded right after it
        seen: dict[tuple[int, int], int] = {}  # (stream, other stream) -> position waited for
        count = [0] * program.ranks
        for o in ops:
            for d in o.deps:
                s = stream_of[d]
                if s != o.rank and seen.get((o.rank, s), -1) < pos[d]:
                    self.wait_event(o.rank, events[d])
                    seen[(o.rank, s)] = pos[d]
            self.run_op(o, buffers, program.op)
            pos[o.id] = count[o.rank]
            count[o.rank] += 1
            if o.id in needed:
                events[o.id] = self.record_event(o.rank)
        self.finish(program, buffers)


def program_ranks(buffers: RankBuffers) -> int:
    """Number of ranks (the avg divisor)."""
    return len(buffers)
