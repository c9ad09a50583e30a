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
before any byte moves.  Out-of-place, send buffers are never written.

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

from kernels.backends.device import DeviceLayer, RankBuffers
from kernels.backends.memory import CHECK_FROM_BYTES, admit, available_host_bytes
from kernels.program.lowering import INPUT, OUTPUT, SCRATCH, Program, has_input, has_output, lower
from synth.ir.collectives import REDUCE_OPS, CollectiveSpec
from synth.ir.schedule import Schedule
from topo_probe.errors import BufferLayoutError, InvalidArgument

BACKENDS = ("host", "reference", "cupy", "cupy-ops")
P2P_MODES = ("auto", "never")
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


def _span(arr: Any) -> tuple[int, int]:
    """[first, last + 1) byte address of ``arr`` (the bounding range when it is strided)."""
    iface = getattr(arr, "__cuda_array_interface__", None) or getattr(arr, "__array_interface__", None)
    if iface is None:
        raise BufferLayoutError(f"buffer of type {type(arr).__name__} exposes no array interface")
    ptr, item, strides = iface["data"][0], arr.dtype.itemsize, iface.get("strides")
    if strides is None or arr.size == 0:
        return ptr, ptr + arr.size * item
    lo = sum(s * (k - 1) for s, k in zip(strides, arr.shape) if s < 0)
    hi = sum(s * (k - 1) for s, k in zip(strides, arr.shape) if s > 0)
    return ptr + lo, ptr + hi + item


def _keep(top: list, span: tuple) -> None:
    """Keep in ``top`` the span reaching furthest and the furthest of another rank's."""
    if top[0] is None or top[0][2] == span[2]:
        if top[0] is None or span[1] > top[0][1]:
            top[0] = span
    elif span[1] > top[0][1]:
        top[0], top[1] = span, top[0]
    elif top[1] is None or span[1] > top[1][1]:
        top[1] = span


def _clash(top: list, span: tuple) -> tuple | None:
    """A kept span of another rank than ``span``'s reaching past its start, if any."""
    other = top[0] if top[0] is not None and top[0][2] != span[2] else top[1]
    return other if other is not None and other[1] > span[0] else None


#: the element types NCCL moves and reduces (``ncclDataType_t``; bfloat16 and float8 through
#: ml_dtypes), in this machine's byte order: anything else (bool, int16, complex, object,
#: float128, datetime64, strings, big-endian float16, ...) is refused before any work
NCCL_DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32",
               "float64", "float8_e4m3fn", "float8_e5m2")


def dtype_problem(dtype) -> str | None:
    """None for an element type of :data:`NCCL_DTYPES` in native byte order, else why not (one line).

    >>> dtype_problem(np.float32) is None
    True
    >>> dtype_problem(">f2")
    "dtype >f2 is float16 in non-native byte order; pass a.astype(a.dtype.newbyteorder('='))"
    >>> dtype_problem("U3").split(" (")[0], dtype_problem(np.complex64).split(" (")[0]
    ('dtype <U3 is not an NCCL type', 'dtype complex64 is not an NCCL type')
    """
    d = np.dtype(dtype)
    if d.name not in NCCL_DTYPES:
        return f"dtype {d.str if d.kind in 'USV' else d} is not an NCCL type ({', '.join(NCCL_DTYPES)})"
    if not d.isnative:
        return f"dtype {d.str} is {d.name} in non-native byte order; pass a.astype(a.dtype.newbyteorder('='))"
    return None


def plain_ndarray(a) -> bool:
    """``a`` is a NumPy array whose flat view is the caller's memory element for element: an
    ``ndarray``, a ``memmap`` or another subclass that keeps ``reshape(-1)`` a flat view; not
    ``numpy.matrix`` (always 2-D, so a flat write never reaches it) or a masked array (its mask
    would be ignored)."""
    return isinstance(a, np.ndarray) and not isinstance(a, (np.matrix, np.ma.MaskedArray))


def check_buffer_layout(what: str, sends: Sequence, recvs: Sequence) -> None:
    """Refuse, before any byte moves, read-only receive buffers and memory shared across ranks.

    ``sends[r]`` / ``recvs[r]``: rank r's buffers (None where unused).  Written buffers are the
    receive buffers and the send buffers that overlap their own rank's receive buffer (NCCL's
    in-place layouts; whether a rank's own overlap is one of them is its caller's rule).  A
    written buffer may share no byte with another rank's buffer; send buffers that are only
    read may be shared.  One sort of the byte ranges, O(n log n).  BufferLayoutError in one
    line naming ``what``, the two ranks, the buffers and the bytes in common.
    """
    spans = []
    for r, (s, d) in enumerate(zip(sends, recvs)):
        d0 = d1 = 0
        if d is not None:
            if not getattr(d.flags, "writeable", True):
                raise BufferLayoutError(f"{what}: rank {r}'s recvbuf is read-only")
            d0, d1 = _span(d)
            if d1 > d0:
                spans.append((d0, d1, r, "recvbuf", True))
        if s is not None:
            s0, s1 = _span(s)
            if s1 > s0:
                spans.append((s0, s1, r, "sendbuf", s0 < d1 and d0 < s1))
    spans.sort()
    written: list = [None, None]
    every: list = [None, None]
    for span in spans:
        other = _clash(written, span) or (_clash(every, span) if span[4] else None)
        if other is not None:
            a, b = sorted((other, span), key=lambda x: (x[2], x[3]))
            lo, hi = max(a[0], b[0]), min(a[1], b[1])
            raise BufferLayoutError(f"{what}: rank {a[2]}'s {a[3]} overlaps rank {b[2]}'s {b[3]} ({hi - lo} bytes "
                                    f"at {lo:#x}); only a rank's own sendbuf and recvbuf may share memory, "
                                    f"as NCCL's in-place layout")
        _keep(every, span)
        if span[4]:
            _keep(written, span)


def _inplace_rank(spec: CollectiveSpec, r: int, send: Any, recv: Any, count: int) -> bool:
    """Whether rank r's buffers alias as NCCL in-place; raise on any other overlap."""
    (s0, s1), (r0, r1) = _span(send), _span(recv)
    if s1 <= r0 or r1 <= s0 or send.size == 0 or recv.size == 0:
        return False
    item = send.dtype.itemsize
    if spec.name in ("allgather", "gather"):
        ok = s0 == r0 + r * count * item and s1 == s0 + count * item
        rule = f"sendbuf must be block {r} of recvbuf"
    elif spec.name in ("reducescatter", "scatter"):
        ok = r0 == s0 + r * count * item and r1 == r0 + count * item
        rule = f"recvbuf must be block {r} of sendbuf"
    else:
        ok = (s0, s1) == (r0, r1)
        rule = "sendbuf and recvbuf must be the same array"
    if not ok:
        raise BufferLayoutError(f"rank {r}: sendbuf and recvbuf overlap but not as NCCL's in-place "
                                f"{spec.name} ({rule})")
    return True


def bind_buffers(spec: CollectiveSpec, sendbufs: Sequence, recvbufs: Sequence,
                 layer: DeviceLayer | None = None) -> tuple[int, np.dtype, bool, list, list]:
    """Check the user's buffers; return (count, dtype, inplace, flat sends, flat recvs).

    Unused buffers come back as None.  Raises BufferLayoutError naming the rank and rule, among
    them :func:`check_buffer_layout`'s (read-only outputs, memory shared across ranks).
    """
    n = spec.ranks
    for what, bufs in (("sendbufs", sendbufs), ("recvbufs", recvbufs)):
        if bufs is None or len(bufs) != n:
            got = "None" if bufs is None else f"{len(bufs)} entries"
            raise BufferLayoutError(f"{what}: need one entry per rank ({n}), got {got}")
    sends, recvs, dtype, count = [None] * n, [None] * n, None, None
    for r in range(n):
        for what, bufs, needed, blocks, out in (
                ("sendbuf", sendbufs, has_input(spec, r), spec.input_blocks(), sends),
                ("recvbuf", recvbufs, has_output(spec, r), spec.output_blocks(), recvs)):
            arr = bufs[r]
            if not needed:
                continue
            if arr is None:
                raise BufferLayoutError(f"rank {r}: {what} is None but {spec.name} needs one on this rank")
            if layer is not None:
                layer.check_array(arr, f"rank {r}: {what}")
            elif not isinstance(arr, np.ndarray) or not plain_ndarray(arr):
                raise BufferLayoutError(f"rank {r}: {what} must be a plain numpy.ndarray, got "
                                        f"{type(arr).__module__}.{type(arr).__name__}")
            problem = dtype_problem(arr.dtype)
            if problem is not None:
                raise BufferLayoutError(f"rank {r}: {what}: {problem}")
            if not arr.flags.c_contiguous:
                raise BufferLayoutError(f"rank {r}: {what} must be C-contiguous")
            if dtype is None:
                dtype = arr.dtype
            elif arr.dtype != dtype:
                raise BufferLayoutError(f"rank {r}: {what} has dtype {arr.dtype}, other buffers {dtype}")
            if arr.size % blocks:
                raise BufferLayoutError(f"rank {r}: {what} has {arr.size} elements, not a multiple of the "
                                        f"{blocks} blocks {spec.name} puts there")
            c = arr.size // blocks
            if count is None:
                count = c
            elif c != count:
                raise BufferLayoutError(f"rank {r}: {what} holds {blocks} block(s) of {c} elements; "
                                        f"other buffers give count={count}")
            out[r] = arr.reshape(-1) if layer is None else layer.flat(arr)
    flags = {r: _inplace_rank(spec, r, sends[r], recvs[r], count)
             for r in range(n) if sends[r] is not None and recvs[r] is not None}
    if len(set(flags.values())) > 1:
        bad = sorted(r for r, f in flags.items() if not f)
        raise BufferLayoutError(f"ranks {bad}: buffers are out-of-place while other ranks run in-place; "
                                f"all ranks must agree")
    check_buffer_layout(spec.name, sends, recvs)
    return count, np.dtype(dtype), any(flags.values()), sends, recvs


def _layer(backend: Any, p2p: str) -> DeviceLayer | None:
    if p2p not in P2P_MODES:
        raise InvalidArgument(f"p2p must be one of {', '.join(P2P_MODES)}, got {p2p!r}")
    if isinstance(backend, DeviceLayer):
        return backend
    if backend == "reference":
        return None
    key = (backend, p2p)
    if key not in _LAYERS:
        if backend == "host":
            from kernels.backends.host import HostLayer
            _LAYERS[key] = HostLayer()
        elif backend == "cupy":
            from kernels.native.layer import NativeLayer
            _LAYERS[key] = NativeLayer(p2p=p2p)
        elif backend == "cupy-ops":
            from kernels.backends.cupy_executor import CupyLayer
            _LAYERS[key] = CupyLayer(p2p=p2p)
        else:
            raise InvalidArgument(f"backend must be one of {', '.join(BACKENDS)} or a DeviceLayer, "
                                        f"got {backend!r}")
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
    BufferLayoutError, UnsupportedCollective, ScheduleInvalid, DeviceUnavailable
    """
    layer, program, bufs = prepare_call(schedule, sendbufs, recvbufs, op=op, backend=backend, p2p=p2p)
    if program is not None and program.num_ops:
        layer.execute(program, RankBuffers(bufs))
    return recvbufs


def prepare_call(schedule: Schedule, sendbufs: Sequence, recvbufs: Sequence, *, op: str = "sum",
                 backend: Any = "host", p2p: str = "auto") -> tuple[Any, Program | None, list]:
    """Everything :func:`run_schedule` does before the layer runs: checks, lowering, binding,
    scratch.  Returns (layer, program, per-rank buffers); the reference backend runs at once
    and returns program None."""
    if op not in REDUCE_OPS:
        raise InvalidArgument(f"op must be one of {', '.join(REDUCE_OPS)}, got {op!r}")
    layer = _layer(backend, p2p)
    spec = schedule.spec
    count, dtype, inplace, sends, recvs = bind_buffers(spec, sendbufs, recvbufs, layer)
    if layer is None:
        from kernels.backends.reference import run_reference
        run_reference(schedule, sends, recvs, op=op)
        return None, None, []
    program = program_for(schedule, count, dtype, inplace=inplace, op=op)
    bufs = []
    for r in range(spec.ranks):
        user = {"send": sends[r], "recv": recvs[r]}
        bufs.append({name: user[which] for name, which in program.bindings[r].items()})
    layer.place(bufs)
    _admit_scratch(program, layer)
    for r, d in enumerate(bufs):
        if SCRATCH in program.sizes[r]:
            d[SCRATCH] = layer.allocate(r, program.sizes[r][SCRATCH], dtype)
    return layer, program, bufs


__all__ = ["run_schedule", "prepare_call", "program_for", "bind_buffers", "check_buffer_layout", "BACKENDS", "P2P_MODES", "INPUT", "OUTPUT"]
