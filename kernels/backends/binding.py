"""The one binding step of a collective call: ``bind_call(spec, sends, recvs, devices) -> BoundCall``.

Every call path (the :class:`~kernels.comm.communicator.Communicator`, the
:class:`~kernels.mpi.communicator.MPICommunicator`, :func:`kernels.backends.executor.run_schedule`
and the sweep through them) hands its per-rank buffers to :func:`bind_call` once; the layers
take the :class:`BoundCall` and check nothing again.  What is checked here, once per call:

* each buffer (:func:`check_buffer`): a NumPy (plain ``ndarray``) or CuPy array, or what the
  layer takes; an NCCL element type in native byte order (:func:`dtype_problem`); on its
  rank's GPU where the caller names the devices.  A front end that already checked the user's
  arrays (the Communicator's lists, the MPI agreement) passes ``checked=True`` with views of
  them, so no buffer is checked twice;
* counts: whole blocks of one ``count`` across the ranks; one dtype; contiguity;
* aliasing: the one in-place rule (:func:`inplace_rank`: NCCL's layouts, contiguous buffers
  only; a strided view at the same address is not in place), every rank in place or none, and
  no memory shared across ranks except send buffers only read (:func:`check_buffer_layout`).

Roots are checked where the collective's arguments are (:func:`kernels.comm.validation.check_root`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.program.ops import has_input, has_output
from synth.ir.collectives import CollectiveSpec
from topo_probe.errors import BufferLayoutError


def _is_cupy(a) -> bool:
    return type(a).__module__.split(".")[0] == "cupy"


def is_view_of(view: Any, arr: Any) -> bool:
    """Whether ``view`` (made from ``arr`` by a reshape or a slice) is ``arr``'s memory, not a copy."""
    if view.size == 0:
        return True
    (v0, _), (a0, a1) = _span(view), _span(arr)
    return a0 <= v0 < a1


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
            if s0 < d1 and d0 < s1 and not getattr(s.flags, "writeable", True):
                raise BufferLayoutError(f"{what}: rank {r}'s sendbuf is read-only but shares memory with its recvbuf "
                                        f"(an in-place call writes it)")
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


def inplace_rank(spec: CollectiveSpec, r: int, send: Any, recv: Any, count: int) -> bool:
    """Whether rank r's buffers alias as NCCL's in-place layout (the one rule of every call
    path): allgather / gather: ``send`` is block r of ``recv``; reducescatter / scatter:
    ``recv`` is block r of ``send``; the others: the same memory.  Both must be contiguous: a
    strided view at the same address is not in place.  False when they do not overlap;
    BufferLayoutError for any other overlap (callers that copy instead catch it)."""
    (s0, s1), (r0, r1) = _span(send), _span(recv)
    if s1 <= r0 or r1 <= s0 or send.size == 0 or recv.size == 0:
        return False
    item = send.dtype.itemsize
    contiguous = send.flags.c_contiguous and recv.flags.c_contiguous
    if spec.name in ("allgather", "gather"):
        ok = s0 == r0 + r * count * item and s1 == s0 + count * item
        rule = f"sendbuf must be block {r} of recvbuf"
    elif spec.name in ("reducescatter", "scatter"):
        ok = r0 == s0 + r * count * item and r1 == r0 + count * item
        rule = f"recvbuf must be block {r} of sendbuf"
    else:
        ok = (s0, s1) == (r0, r1)
        rule = "sendbuf and recvbuf must be the same array"
    if not (ok and contiguous):
        rule = rule if contiguous else "a strided buffer is never in place"
        raise BufferLayoutError(f"{spec.name}: rank {r}: sendbuf and recvbuf overlap but not as NCCL's in-place "
                                f"call ({rule})")
    return True


def check_buffer(arr: Any, what: str, *, layer: Any = None, numpy_only: bool = False,
                 device: int | None = None) -> None:
    """The check of one buffer, made once per buffer per call: an array the path takes (the
    ``layer``'s check where one is given; NumPy only where ``numpy_only``; else a plain NumPy
    array or a CuPy array), an NCCL dtype in native byte order, and on GPU ``device`` when
    given (CuPy arrays).  BufferLayoutError in one line starting with ``what``."""
    CHECKS.append(what) if CHECKS is not None else None
    if layer is not None:
        layer.check_array(arr, what)
    elif numpy_only and not plain_ndarray(arr):
        raise BufferLayoutError(f"{what} must be a plain numpy.ndarray, got {type(arr).__module__}."
                                f"{type(arr).__name__}")
    elif not (isinstance(arr, np.ndarray) or (_is_cupy(arr) and hasattr(arr, "dtype"))):
        raise BufferLayoutError(f"{what}: got a {type(arr).__name__}, not an array (NumPy or CuPy)")
    if isinstance(arr, np.ndarray) and not plain_ndarray(arr):
        raise BufferLayoutError(f"{what}: got a {type(arr).__module__}.{type(arr).__name__}; pass a plain "
                                f"numpy.ndarray (numpy.asarray)")
    ok = _KNOWN_DTYPES.get(arr.dtype)
    if ok is None:            # asking a dtype its name costs microseconds: once per dtype
        ok = _KNOWN_DTYPES[arr.dtype] = dtype_problem(arr.dtype) is None
    if not ok:
        raise BufferLayoutError(f"{what}: {dtype_problem(arr.dtype)}")
    if device is not None:
        check_device(arr, what, device)


def check_device(arr: Any, what: str, device: int) -> None:
    """A CuPy array's GPU against its rank's ``device``: the call's one device check (part of
    :func:`check_buffer`; the layers make none).  BufferLayoutError starting with ``what``."""
    if _is_cupy(arr):
        CHECKS.append(f"{what}: device") if CHECKS is not None else None
        if arr.device.id != device:
            raise BufferLayoutError(f"{what}: device cuda:{arr.device.id} is not its rank's cuda:{device}")


_KNOWN_DTYPES: dict = {}
#: tests set a list here to see every :func:`check_buffer` call (its ``what``, and ``what +
#: ": device"`` where it checks the rank's GPU); None otherwise
CHECKS: list | None = None


@dataclass(frozen=True)
class BoundCall:
    """A call's buffers, checked: ``count`` elements per block, one ``dtype``, whether every
    rank runs ``inplace``, each rank's flat send / receive buffer (None where unused), and
    whether a send buffer is a copy, not the caller's memory (a replay of the call would read
    the copy); ``what``: the call as its errors name it (the Communicator's method, e.g.
    ``all_reduce``; '' where the caller named none: the collective)."""

    spec: CollectiveSpec
    count: int
    dtype: np.dtype
    inplace: bool
    sends: tuple
    recvs: tuple
    copied: bool = False
    what: str = ""


def bind_call(spec: CollectiveSpec, sends: Sequence, recvs: Sequence, devices: Sequence[int] | None = None, *,
              layer: Any = None, checked: bool = False, ranks: Sequence[int] | None = None,
              copy_overlaps: bool = False, what: str | None = None, copied: bool = False) -> BoundCall:
    """Check one call's buffers and bind them (module docstring): one array (or None where
    unused) per rank, ``count`` taken from the sizes.  ``devices[r]``: rank r's GPU, checked on
    CuPy arrays; ``layer``: the device layer (its array check and flat views); ``checked``:
    the buffers are views of arrays the caller checked already (:func:`check_buffer` is not
    repeated); ``ranks``: the ranks whose buffers this process holds (default all; the MPI
    communicator binds its own); ``copy_overlaps``: the Communicator's promise, where an input
    that is strided, overlaps its output other than in place, or is in place while other ranks
    are not is copied (so the result is the out-of-place one) instead of refused; ``what``: the
    call as errors name it (default the collective); ``copied``: the caller passes copies
    already.  Raises BufferLayoutError naming the rank
    and rule, each prefixed with ``what`` (default the collective)."""
    n, who = spec.ranks, what or spec.name
    for role, bufs in (("sendbufs", sends), ("recvbufs", recvs)):
        if not hasattr(bufs, "__len__") or not hasattr(bufs, "__getitem__") or len(bufs) != n:
            got = (f"{len(bufs)} entries" if hasattr(bufs, "__len__") else "None" if bufs is None
                   else f"a {type(bufs).__name__}")
            raise BufferLayoutError(f"{who}: {role}: need one entry per rank ({n}), got {got}")
    flat_s, flat_r, dtype, count = [None] * n, [None] * n, None, None
    for r in (range(n) if ranks is None else ranks):
        for role, bufs, needed, blocks, out in (
                ("sendbuf", sends, has_input(spec, r), spec.input_blocks(), flat_s),
                ("recvbuf", recvs, has_output(spec, r), spec.output_blocks(), flat_r)):
            arr = bufs[r]
            if not needed:
                continue
            if arr is None:
                raise BufferLayoutError(f"{who}: rank {r}: {role} is None but {spec.name} needs one on this rank")
            if not checked:
                check_buffer(arr, f"{who}: rank {r}: {role}", layer=layer, numpy_only=layer is None,
                             device=None if devices is None else devices[r])
            if not arr.flags.c_contiguous and not (copy_overlaps and out is flat_s):
                raise BufferLayoutError(f"{who}: rank {r}: {role} must be C-contiguous")
            if dtype is None:
                dtype = arr.dtype
            elif arr.dtype != dtype:
                raise BufferLayoutError(f"{who}: rank {r}: {role} has dtype {arr.dtype}, other buffers {dtype}")
            c = _blocks_of(spec, r, role, arr.size, blocks, count, who)
            count = c if count is None else count
            out[r] = arr.reshape(-1) if layer is None else layer.flat(arr)
    if copy_overlaps:       # refused on the caller's own views, before a copy could hide an overlap
        check_buffer_layout(who, flat_s, flat_r)
        before = list(flat_s)
        inplace = _copied_unless_in_place(spec, flat_s, flat_r, count)
        copied = copied or any(a is not b for a, b in zip(before, flat_s))
    else:
        inplace = _in_place(spec, flat_s, flat_r, count, who)
        check_buffer_layout(who, flat_s, flat_r)      # the bound ranks' buffers (the others None)
    return BoundCall(spec, count or 0, np.dtype(dtype if dtype is not None else np.uint8), inplace,
                     tuple(flat_s), tuple(flat_r), copied, what or "")


def _blocks_of(spec: CollectiveSpec, r: int, what: str, size: int, blocks: int, count: int | None,
               who: str) -> int:
    """Elements per block of a buffer of ``size`` elements holding ``blocks`` blocks (errors name ``who``)."""
    if size % blocks:
        raise BufferLayoutError(f"{who}: rank {r}: {what} has {size} elements, not a multiple of the "
                                f"{blocks} blocks {spec.name} puts there")
    if count is not None and size // blocks != count:
        raise BufferLayoutError(f"{who}: rank {r}: {what} holds {blocks} block(s) of {size // blocks} elements; "
                                f"other buffers give count={count}")
    return size // blocks


def _in_place(spec: CollectiveSpec, sends: list, recvs: list, count: int | None, who: str) -> bool:
    """Whether every rank runs in place (:func:`inplace_rank`); mixing is refused (naming ``who``)."""
    flags = {r: inplace_rank(spec, r, s, d, count)
             for r, (s, d) in enumerate(zip(sends, recvs)) if s is not None and d is not None}
    if len(set(flags.values())) > 1:
        bad = sorted(r for r, f in flags.items() if not f)
        raise BufferLayoutError(f"{who}: ranks {bad}: buffers are out-of-place while other ranks run in-place; "
                                f"all ranks must agree")
    return any(flags.values())


def _copied_unless_in_place(spec: CollectiveSpec, sends: list, recvs: list, count: int | None) -> bool:
    """:func:`_in_place` where inputs are copied instead of refused: strided ones, ones that
    overlap their output other than in place (all-to-all has no in-place form), and, where
    ranks mix, the in-place ones.  Returns whether every rank runs in place."""
    flags = {}
    for r, (s, d) in enumerate(zip(sends, recvs)):
        if s is None:
            continue
        try:
            flag = d is not None and spec.name != "alltoall" and inplace_rank(spec, r, s, d, count)
        except BufferLayoutError:
            flag = False
            sends[r] = s = s.copy()
        if d is not None and not flag and _span(s)[0] < _span(d)[1] and _span(d)[0] < _span(s)[1] and s.size:
            sends[r] = s = s.copy()          # all-to-all's same memory
        if not s.flags.c_contiguous:
            sends[r] = s.copy()
        if d is not None:
            flags[r] = flag
    if len(set(flags.values())) > 1:
        for r, f in flags.items():
            if f:
                sends[r] = sends[r].copy()
        return False
    return any(flags.values())


__all__ = [
    "NCCL_DTYPES",
    "BoundCall",
    "bind_call",
    "check_buffer",
    "check_buffer_layout",
    "check_device",
    "dtype_problem",
    "inplace_rank",
    "is_view_of",
    "plain_ndarray",
]
