"""Run any schedule on real buffers: ``run_schedule(schedule, sendbufs, recvbufs, ...)``.

One array per rank, laid out as :mod:`synth.ir.collectives` says (``count`` = elements of one
block is taken from the sizes).  Rooted collectives accept ``None`` where a rank has no such
buffer (gather/reduce receive buffers off the root, broadcast/scatter send buffers off the
root); buffers a rank does not use are ignored.  In-place calls alias like NCCL: allgather's
(and gather's, at the root) send buffer is block ``rank`` of that rank's receive buffer;
reducescatter's (and scatter's, at the root) receive buffer is block ``rank`` of the send
buffer; the others pass the same array twice.  In-place is detected from the arrays; any
other overlap is an error: within a rank, and across ranks unless only send buffers share
memory (:func:`check_buffer_layout`); so is a read-only receive buffer.  Both are refused
before any byte moves, by the one binding step every call path shares
(:func:`kernels.backends.binding.bind_call`).  Out-of-place, send buffers are never written.

Reduction ops (combining collectives; ignored by the others): ``sum``, ``prod``, ``max``,
``min`` and ``avg``.  ``avg`` sums, then divides on the receiving ranks once at the end:
floats use true division (NCCL pre-multiplies each input by 1/n instead, which differs only
by rounding), integers truncate toward zero (NCCL's ``FuncSumPostDiv``: C division of the
wrapped sum).  Integer sums and products wrap like C / NCCL.

Backends: ``"reference"`` (:mod:`kernels.backends.reference`, the ground truth), ``"host"`` (NumPy,
threads; :mod:`kernels.backends.host`), ``"cupy"`` (CuPy arrays, several ranks per GPU allowed:
the native executor of :mod:`kernels.native`, one kernel launch per GPU per call, CUDA graphs
for repeated calls; with ``p2p="never"`` or GPUs that cannot reach each other, the op-by-op
layer of :mod:`kernels.backends.cupy_executor` staging through pinned host memory),
``"cupy-ops"`` (always that op-by-op layer), or any :class:`kernels.backends.device.DeviceLayer` instance.

>>> import numpy as np
>>> from synth.ir.schedule import Schedule, Step, Transfer
>>> ring = Schedule("allgather", 3, 1, tuple(Step(1, tuple(Transfer((r - s) % 3, r, (r + 1) % 3)
...                 for r in range(3))) for s in range(2)))
>>> send = [np.full(2, r, np.int64) for r in range(3)]
>>> recv = [np.zeros(6, np.int64) for _ in range(3)]
>>> run_schedule(ring, send, recv)[2].tolist()
[0, 0, 1, 1, 2, 2]
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

import numpy as np

from kernels.backends.binding import (
    NCCL_DTYPES,
    BoundCall,
    bind_call,
    check_buffer_layout,
    dtype_problem,
    plain_ndarray,
)
from kernels.backends.device import P2P_MODES, DeviceLayer, RankBuffers, check_p2p
from kernels.backends.memory import CHECK_FROM_BYTES, admit, available_host_bytes
from kernels.program.lowering import INPUT, OUTPUT, SCRATCH, Program, lower
from kernels.program.reduce_op import check_reduce_op
from synth.ir.collectives import CollectiveSpec
from synth.ir.schedule import Schedule
from topo_probe.errors import InvalidArgument, TopocollError, show

BACKENDS = ("host", "reference", "cupy", "cupy-ops")
_CACHE: "OrderedDict[tuple, Program]" = OrderedDict()
_CACHE_SIZE = 128
_LAYERS: dict[tuple, DeviceLayer] = {}


def program_for(schedule: Schedule, count: int, dtype: Any, *, inplace: bool = False,
                op: str = "sum") -> Program:
    """:func:`kernels.program.lowering.lower` with a small LRU cache (schedules are hashable)."""
    key = (schedule, int(count), np.dtype(dtype).str, bool(inplace), op)
    prog = _CACHE.get(key)
    if prog is None:
        prog = lower(schedule, count, dtype, inplace=inplace, op=op)
        _CACHE[key] = prog
        if len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(key)
    return prog


def bind_buffers(spec: CollectiveSpec, sendbufs: Sequence, recvbufs: Sequence,
                 layer: DeviceLayer | None = None) -> tuple[int, np.dtype, bool, list, list]:
    """:func:`kernels.backends.binding.bind_call` as a tuple: (count, dtype, inplace, flat
    sends, flat recvs); unused buffers come back as None."""
    call = bind_call(spec, sendbufs, recvbufs, layer=layer)
    return call.count, call.dtype, call.inplace, list(call.sends), list(call.recvs)


def check_backend(backend, p2p, owner: str, *, auto: bool = False) -> tuple[Any, str]:
    """``(backend, p2p)`` where ``backend`` is a name of :data:`BACKENDS` (or ``"auto"`` where ``auto``: a
    Communicator picks by the arrays) or a :class:`DeviceLayer`, and ``p2p`` one of :data:`P2P_MODES`
    (:func:`kernels.backends.device.check_p2p`); else InvalidArgument in one line naming ``owner`` (the
    Communicator when it is made; run_schedule's call) and the value.  The one check of both.

    >>> check_backend("gpu", "auto", "Communicator", auto=True)
    Traceback (most recent call last):
    ...
    topo_probe.errors.InvalidArgument: Communicator: backend must be one of auto, host, reference, cupy, cupy-ops \
or a DeviceLayer, got 'gpu'
    """
    names = ("auto", *BACKENDS) if auto else BACKENDS
    if not isinstance(backend, DeviceLayer) and not (isinstance(backend, str) and backend in names):
        raise _backend_refusal(backend, owner, names)
    return backend, check_p2p(p2p, owner)


def _backend_refusal(backend, owner: str, names: Sequence[str]) -> InvalidArgument:
    """The one line refusing ``backend`` (not one of ``names`` nor a DeviceLayer), naming ``owner``."""
    return InvalidArgument(f"{owner}: backend must be one of {', '.join(names)} or a DeviceLayer, got {show(backend)}")


def make_layer(backend: str, p2p: str = "auto", *, devices: Sequence[int] | None = None,
               topology: Any = None, owner: str = "make_layer") -> DeviceLayer | None:
    """A new device layer of ``backend`` (None: the reference backend), its ranks on ``devices``
    when given (else where their buffers live), the GPU layers' peer access also bounded by
    ``topology``'s P2P facts (GPU index = rank); the caller owns it (a Communicator keeps its own).
    ``p2p`` as :func:`check_backend` returned it (the GPU layers take that as checked, a plain string they check
    themselves, naming the layer); ``backend`` a name of :data:`BACKENDS`, any other value
    (``"auto"`` too, or a name set on a Communicator after it was made) refused in check_backend's line
    naming ``owner``."""
    if backend == "host":
        from kernels.backends.host import HostLayer
        return HostLayer()
    if backend == "cupy":
        from kernels.native.layer import NativeLayer
        return NativeLayer(p2p=p2p, devices=devices, topology=topology, topology_ranks=True)
    if backend == "cupy-ops":
        from kernels.backends.cupy_executor import CupyLayer
        return CupyLayer(p2p=p2p, devices=devices, topology=topology, topology_ranks=True)
    if backend == "reference":
        return None
    raise _backend_refusal(backend, owner, BACKENDS)


def _layer(backend: Any, p2p: str, owner: str) -> DeviceLayer | None:
    """The layer of ``backend`` for :func:`run_schedule` called without one (both checked here,
    :func:`check_backend`, naming ``owner``): a layer instance as given, else one kept per
    (backend, p2p) for this function's callers."""
    backend, p2p = check_backend(backend, p2p, owner)     # p2p checked: the layer made below takes it as is
    if isinstance(backend, DeviceLayer):
        return backend
    key = (backend, p2p)
    if key not in _LAYERS:
        layer = make_layer(backend, p2p, owner=owner)
        if layer is None:
            return None
        _LAYERS[key] = layer
    return _LAYERS[key]


def _admit_scratch(program: Program, layer: DeviceLayer) -> None:
    """Refuse in one line, before anything is allocated, a schedule whose scratch does not fit in
    the host's available memory (NumPy layers; GPU layers check their own devices)."""
    need = sum(s.get(SCRATCH, 0) for s in program.sizes) * program.dtype.itemsize
    if need >= CHECK_FROM_BYTES and getattr(layer, "name", "") in ("host", "reference"):
        admit(need, available_host_bytes(), f"{program.collective}: the schedule's scratch "
              f"({program.count} elements per block)", "host memory")


def run_schedule(schedule: Schedule, sendbufs: Sequence, recvbufs: Sequence, *, op: str = "sum",
                 backend: Any = "host", p2p: str = "auto") -> Sequence:
    """Run ``schedule`` on one buffer per rank and return ``recvbufs`` (see module docstring).

    Parameters
    ----------
    schedule : Schedule
        Any schedule implementing its collective (checked: holdings and contributions).
    sendbufs, recvbufs : sequence of arrays (or None where unused), one per rank
    op : str
        sum, prod, max, min or avg (combining collectives only).
    backend : "host", "reference", "cupy" or DeviceLayer
    p2p : "auto" or "never"
        For ``backend="cupy"``: whether peer copies may be used.

    Raises
    ------
    InvalidArgument (not a Schedule, bad op, backend or p2p), BufferLayoutError, UnsupportedCollective,
    ScheduleInvalid, DeviceUnavailable
    """
    layer, program, bufs = prepare_call(schedule, sendbufs, recvbufs, op=op, backend=backend, p2p=p2p)
    if program is not None and program.num_ops:
        layer.execute(program, RankBuffers(bufs))
    return recvbufs


def prepare_call(schedule: Schedule, sendbufs: Sequence, recvbufs: Sequence, *, op: str = "sum",
                 backend: Any = "host", p2p: str = "auto") -> tuple[Any, Program | None, list]:
    """Everything :func:`run_schedule` does before the layer runs: ``backend`` and ``p2p`` checked
    (:func:`check_backend`), binding (:func:`kernels.backends.binding.bind_call`, with the layer's
    ``devices`` where it has them), lowering, scratch.  Returns (layer, program, per-rank buffers);
    the reference backend runs at once and returns program None.  Every refusal is one line that
    starts with the schedule's collective (``allreduce``, as :func:`run_schedule`'s caller named it)."""
    def work():
        checked = check_reduce_op(op, schedule.collective)      # once: the lowering takes it as is
        return _prepare(schedule, sendbufs, recvbufs, checked, _layer(backend, p2p, schedule.collective), None)
    return _named(schedule, None, work)


def prepare_bound(schedule: Schedule, call: BoundCall, layer: DeviceLayer | None, *,
                  op: str = "sum") -> tuple[Any, Program | None, list]:
    """:func:`prepare_call` for a caller that bound the ``call`` itself, checked ``op``, and owns its
    ``layer`` (None: the reference backend), made from a backend and p2p it checked when it was made
    (a Communicator: :func:`check_backend`); none of them is checked again.  Every refusal is one line
    that starts with the ``call``'s ``what`` (the Communicator's method, ``all_reduce``), once."""
    return _named(schedule, call, lambda: _prepare(schedule, call.sends, call.recvs, op, layer, call))


def _named(schedule: Schedule, bound: BoundCall | None, work):
    """``work()`` for ``schedule``, its TopocollError named by the call (:func:`name_the_call`)."""
    if not isinstance(schedule, Schedule):
        raise InvalidArgument(f"schedule must be a Schedule (load one with Schedule.load(path) or make one "
                              f"with synth.baseline(name, fabric, collective)), got {type(schedule).__name__}")
    try:
        return work()
    except TopocollError as err:
        name_the_call(err, (bound.what if bound is not None else "") or schedule.collective, schedule.collective)
        raise


def name_the_call(err: BaseException, what: str, collective: str) -> None:
    """Start ``err``'s line with ``what``, once: a line that starts with ``collective`` (a layer's,
    the lowering's) gets ``what`` instead, one that names no call gets it in front.

    >>> err = InvalidArgument("allreduce: op must be one of sum; got 'x'")
    >>> name_the_call(err, "all_reduce", "allreduce"); str(err)
    "all_reduce: op must be one of sum; got 'x'"
    """
    text = str(err.args[0]) if err.args else ""
    if not text.startswith(f"{what}: "):
        err.args = (f"{what}: {text.removeprefix(f'{collective}: ')}", *err.args[1:])


def _prepare(schedule: Schedule, sendbufs: Sequence, recvbufs: Sequence, op: str, layer: DeviceLayer | None,
             bound: BoundCall | None) -> tuple[Any, Program | None, list]:
    """:func:`prepare_call`'s work on ``layer``, ``op`` checked, its errors named by the caller."""
    spec = schedule.spec
    call = bound if bound is not None else bind_call(spec, sendbufs, recvbufs, getattr(layer, "devices", None),
                                                     layer=layer)
    sends, recvs, dtype = call.sends, call.recvs, call.dtype
    if layer is None:
        from kernels.backends.reference import run_reference
        run_reference(schedule, list(sends), list(recvs), op=op)
        return None, None, []
    program = program_for(schedule, call.count, dtype, inplace=call.inplace, op=op)
    bufs = []
    for r in range(spec.ranks):
        user = {"send": sends[r], "recv": recvs[r]}
        bufs.append({name: user[which] for name, which in program.bindings[r].items()})
    layer.place(bufs)        # a layer's own errors name ranks, not the call: prepare_call names it
    _admit_scratch(program, layer)
    for r, d in enumerate(bufs):
        if SCRATCH in program.sizes[r]:
            d[SCRATCH] = layer.allocate(r, program.sizes[r][SCRATCH], dtype)
    return layer, program, bufs


__all__ = [
    "BACKENDS",
    "INPUT",
    "NCCL_DTYPES",
    "OUTPUT",
    "P2P_MODES",
    "bind_buffers",
    "check_backend",
    "check_buffer_layout",
    "dtype_problem",
    "name_the_call",
    "plain_ndarray",
    "prepare_bound",
    "prepare_call",
    "program_for",
    "run_schedule",
]
