"""Argument checks and buffer preparation for the communicators.

:class:`kernels.comm.communicator.Communicator` (one process, every rank): every buffer argument
is a list with one array per rank (NumPy or CuPy).  :func:`bind_lists` checks the lists (length,
dtype, shape, device kind; a rank's input and output on one device) and each array once (type,
dtype, the rank's device: :func:`kernels.backends.binding.check_buffer`), builds the flat send /
receive views, and binds the call (:func:`kernels.backends.binding.bind_call`: counts, NCCL's
in-place aliasing, memory shared across ranks): one buffer passed as input and output is read
and written in NCCL's in-place layout (all_gather's input = block r of rank r's output,
reduce_scatter's output = block r of rank r's input, ...).  Inputs that overlap their output any
other way, or in-place ranks mixed with out-of-place ones, are copied first so that the result
is always the out-of-place one.  Memory shared across ranks (other than send buffers that are
only read) and read-only outputs are refused first, on the caller's arrays.  Errors are one line
(:class:`~topo_probe.errors.BufferLayoutError` for buffers, InvalidArgument for values) naming
the call, the argument and the rank.  Both communicators share :func:`check_root` and
:func:`kernels.program.reduce_op.check_reduce_op`; the MPI one binds its rank's buffers with the same ``bind_call``.

>>> import numpy as np
>>> bufs = [np.arange(8.0) for _ in range(4)]
>>> sends, recvs = prepare("all_gather", "allgather", [b[2 * r:2 * r + 2] for r, b in enumerate(bufs)], bufs, 2,
...                        size=4)
>>> [s.tolist() for s in sends[:2]], recvs[0].size
([[0.0, 1.0], [2.0, 3.0]], 8)
"""

from __future__ import annotations

import numpy as np

from kernels.backends.binding import BoundCall, _is_cupy, bind_call, check_buffer, check_device, is_view_of
from synth.ir.collectives import CollectiveSpec
from topo_probe.errors import BufferLayoutError, InvalidArgument
from topo_probe.number_rules import is_int as _is_int  # the project's one integer rule (not a bool)


def check_array(a, what: str, rank: int | None = None):
    """``a`` itself when it is a NumPy or CuPy array of one of :data:`NCCL_DTYPES` (or None);
    else BufferLayoutError in one line naming the call, the rank and the type.

    >>> check_array([1.0, 2.0], "all_reduce", 2)
    Traceback (most recent call last):
    ...
    topo_probe.errors.BufferLayoutError: all_reduce: rank 2: got a list, not an array (NumPy or CuPy)
    >>> check_array(np.zeros(2, bool), "all_reduce", 0)
    Traceback (most recent call last):
    ...
    topo_probe.errors.BufferLayoutError: all_reduce: rank 0: dtype bool is not an NCCL type (int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32, float64, float8_e4m3fn, float8_e5m2)
    """
    if a is not None:
        check_buffer(a, f"{what}: rank {rank}" if rank is not None else what)
    return a


def _device(a) -> str:
    return f"cuda:{a.device.id}" if _is_cupy(a) else "cpu"


def _ptr(a) -> int:
    return int(a.data.ptr) if _is_cupy(a) else int(a.__array_interface__["data"][0])


def _flat(a, what: str):
    """A 1-D view of ``a`` (must be C-contiguous so that writes reach the caller)."""
    if not a.flags.c_contiguous:
        raise BufferLayoutError(f"{what} is not C-contiguous; pass a contiguous buffer (as NCCL needs)")
    return a.reshape(-1)


def _is_list(x) -> bool:
    return isinstance(x, (list, tuple))


def _first(arrays):
    """The first array of a list that is not None (None if there is none)."""
    return next((a for a in arrays if a is not None), None) if _is_list(arrays) else None


def _size(arrays, what: str = "collective") -> int:
    """Element count of the first array present (the rest is validated later)."""
    if not _is_list(arrays) or not arrays:
        raise BufferLayoutError(f"{what}: expected a non-empty list with one array per rank, got "
                                f"{type(arrays).__name__}")
    for r, a in enumerate(arrays):
        if a is not None:
            return int(check_array(a, what, r).size)
    raise BufferLayoutError(f"{what}: every array in the list is None")


def _inplace_count(ins, outs, n: int) -> int | None:
    if _is_list(ins) and _is_list(outs) and ins and outs and ins[0] is not None and ins[0] is outs[0]:
        return check_array(ins[0], "in_arrays", 0).size // n
    return None


def same_slot(ins, outs, root: int, n: int) -> bool:
    """Whether the root passes one array as input and output (the in-place gather / scatter);
    lists of another length are left to :func:`bind_lists` to refuse."""
    return (_is_list(ins) and _is_list(outs) and len(ins) == len(outs) == n
            and ins[root] is not None and ins[root] is outs[root])


def _need(what: str, role: str, r: int, have: int, need: int) -> None:
    if have < need:
        raise BufferLayoutError(f"{what}: {role} rank {r} has {have} elements, needs at least {need}")


def check_list(what: str, role: str, arrays, need: set[int], same: list[bool], *, size: int,
               devices: list[int] | None = None, checked: set[int] = frozenset()) -> list:
    """Length ``size``; arrays of the ranks in ``need`` present, each checked once
    (:func:`kernels.backends.binding.check_buffer`: type, dtype, ``devices[r]`` when given; not
    again for arrays whose ``id`` is in ``checked``) and agreeing in dtype, shape (not
    checked for in-place buffers, ``same``) and device kind.  Returns the list with entries of
    the other ranks replaced by None."""
    if not _is_list(arrays):
        raise BufferLayoutError(f"{what}: {role} must be a list with one array per rank, got {type(arrays).__name__}")
    if len(arrays) != size:
        raise BufferLayoutError(f"{what}: {role} has {len(arrays)} arrays, the communicator has {size} ranks")
    first = {}
    for r in sorted(need):
        a = arrays[r]
        if a is None:
            raise BufferLayoutError(f"{what}: {role} rank {r} is None but rank {r} needs a buffer")
        if id(a) not in checked:
            check_buffer(a, f"{what}: {role}: rank {r}", device=None if devices is None else devices[r])
        for attr, mine in (("dtype", a.dtype), ("device kind", _device(a)[:4]),
                           ("shape", None if same[r] else a.shape)):
            if mine is None:
                continue
            r0 = first.setdefault(attr, r)
            theirs = {"dtype": arrays[r0].dtype, "device kind": _device(arrays[r0])[:4],
                      "shape": arrays[r0].shape}[attr]
            if mine != theirs:
                raise BufferLayoutError(f"{what}: {role} rank {r}: {attr} {mine} differs from rank {r0}'s {theirs}")
    return [a if r in need else None for r, a in enumerate(arrays)]


def prepare(what: str, name: str, ins, outs, count, root=None, in_need=None, out_need=None, *, size: int,
            devices: list[int] | None = None) -> tuple[list, list]:
    """:func:`bind_lists` as the flat send and receive views."""
    call = bind_lists(what, name, ins, outs, count, root, in_need, out_need, size=size, devices=devices)
    return list(call.sends), list(call.recvs)


def bind_lists(what: str, name: str, ins, outs, count, root=None, in_need=None, out_need=None, *, size: int,
               devices: list[int] | None = None, sized=None) -> BoundCall:
    """Check the lists and each array once; build flat send/recv views with NCCL in-place
    aliasing (module docstring); bind them (:func:`kernels.backends.binding.bind_call`).

    ``name`` is the canonical collective, ``count`` elements per block; ``in_need`` /
    ``out_need``: ranks that use that buffer (default all); the others get None (their arrays
    are ignored, as NCCL ignores them) unless passed in place; ``sized``: the list whose
    first array :func:`_size` checked already."""
    n = size
    count = check_count(what, count)
    every = set(range(n))
    same = [ins[r] is not None and ins[r] is outs[r] for r in range(n)] if (
        _is_list(ins) and _is_list(outs) and len(ins) == len(outs) == n) else [False] * n
    inplace = {r for r in every if same[r]}
    first = {id(_first(sized))} if sized is not None else set()
    if sized is not None and devices is not None:     # _size checked that array, all but its GPU
        r0 = next(r for r, a in enumerate(sized) if a is not None)
        check_device(sized[r0], f"{what}: rank {r0}", devices[r0])
    in_done = first if sized is ins else set()
    ins = check_list(what, "in_arrays", ins, every if in_need is None else in_need | inplace, same,
                     size=n, devices=devices, checked=in_done)
    out_done = (first if sized is outs else set()) | {id(ins[r]) for r in inplace}   # in place: checked as input
    outs = check_list(what, "out_arrays", outs, every if out_need is None else out_need | inplace, same,
                      size=n, devices=devices, checked=out_done)
    spec = CollectiveSpec(name, n, 1, root)
    kin, kout = spec.input_blocks(), spec.output_blocks()
    sends, recvs, copied = [], [], False
    for r in range(n):
        a, b = ins[r], outs[r]
        if a is not None and b is not None and a.dtype != b.dtype:
            raise BufferLayoutError(f"{what}: rank {r}: out dtype {b.dtype} differs from in dtype {a.dtype}")
        if a is not None and b is not None and _device(a) != _device(b):    # one rank, one device (as NCCL)
            raise BufferLayoutError(f"{what}: rank {r}: out_arrays on {_device(b)} but in_arrays on {_device(a)}; "
                                    f"a rank's buffers live on one device")
        if same[r]:  # one buffer: NCCL's in-place layout
            buf = _flat(b, f"{what}: out_arrays rank {r}")
            _need(what, "in/out", r, buf.size, max(kin, kout) * count)
            s = buf[:kin * count] if kin > 1 or kout == 1 else buf[r * count:(r + 1) * count]
            d = buf[:kout * count] if kout > 1 or kin == 1 else buf[r * count:(r + 1) * count]
            sends.append(s)          # alltoall has no in-place form: bind_call copies its input
            recvs.append(d)
            continue
        s = d = None
        if a is not None:
            _need(what, "in_arrays", r, a.size, kin * count)
            s = a.reshape(-1)[:kin * count]
            copied = copied or not is_view_of(s, a)      # a reshape that had to copy
        if b is not None:
            d = _flat(b, f"{what}: out_arrays rank {r}")
            _need(what, "out_arrays", r, d.size, kout * count)
            d = d[:kout * count]
        sends.append(s)
        recvs.append(d)
    return bind_call(spec, sends, recvs, checked=True, copy_overlaps=True, what=what, copied=copied)


# ---------------------------------------------------------------------- both communicators
def check_count(what: str, count) -> int:
    """``count`` (elements per block) as an int; InvalidArgument naming ``what`` unless it is an
    integer >= 0 (``True`` or ``4.0`` are refused, not read as 1 or 4).

    >>> check_count("all_gather: rank 1", True)
    Traceback (most recent call last):
    ...
    topo_probe.errors.InvalidArgument: all_gather: rank 1: count must be an integer >= 0, got True
    """
    if not _is_int(count) or count < 0:
        raise InvalidArgument(f"{what}: count must be an integer >= 0, got {count!r}")
    return int(count)


def check_root(what: str, root, size: int, role: str = "root") -> int:
    """``root`` as an int, or InvalidArgument when it is not a rank of ``size`` (an int or NumPy
    integer in 0..size-1: not a bool, float or string); ``role`` names the argument ("" for none).

    >>> check_root("reduce", 2, 4)
    2
    >>> check_root("reduce", True, 4)
    Traceback (most recent call last):
    ...
    topo_probe.errors.InvalidArgument: reduce: root True is not a rank (0..3)
    >>> check_root("reduce", 1.5, 4)
    Traceback (most recent call last):
    ...
    topo_probe.errors.InvalidArgument: reduce: root 1.5 is not a rank (0..3)
    """
    if not _is_int(root) or not 0 <= root < size:
        raise InvalidArgument(f"{what}: {role + ' ' if role else ''}{root!r} is not a rank (0..{size - 1})")
    return int(root)


def check_ranks_or_devices(arg) -> tuple[int, list[int] | None]:
    """(ranks, devices) of ``Communicator(devices_or_nranks)``: an integer >= 1 (devices None),
    or a list / tuple / range / 1-D array of CUDA device ids, integers >= 0 (several ranks may share
    one).  InvalidArgument in one line otherwise: a bool, float, string or dict is not read as
    a count or as ids.

    >>> check_ranks_or_devices(3), check_ranks_or_devices((1, 0))
    ((3, None), (2, [1, 0]))
    >>> check_ranks_or_devices("4")
    Traceback (most recent call last):
    ...
    topo_probe.errors.InvalidArgument: Communicator: expected a rank count (int >= 1) or a list of CUDA device ids, got '4'
    """
    if _is_int(arg) and arg >= 1:
        return int(arg), None
    seq = isinstance(arg, (list, tuple, range)) or (isinstance(arg, np.ndarray) and arg.ndim == 1)
    ids = list(arg) if seq else None
    if ids is None or not ids:
        raise InvalidArgument(f"Communicator: expected a rank count (int >= 1) or a list of CUDA device ids, "
                              f"got {arg!r}")
    bad = [d for d in ids if not _is_int(d) or d < 0]
    if bad:
        raise InvalidArgument(f"Communicator: device id {bad[0]!r} is not a CUDA device (an integer >= 0)")
    return len(ids), [int(d) for d in ids]


# ---------------------------------------------------------------------- one array per process
def _contig(a):
    if a is None or a.flags.c_contiguous:
        return a
    return a.copy()


def _out(a, what: str):
    if a is None:
        raise BufferLayoutError(f"{what}: the output array is None on a rank that needs one")
    if not a.flags.c_contiguous:
        raise BufferLayoutError(f"{what}: the output array is not C-contiguous (as NCCL needs)")
    return a


def _head(a, n: int):
    """The first ``n`` elements of ``a`` as a flat view (BufferLayoutError if ``a`` is smaller)."""
    if a is None:
        return None
    flat = a.reshape(-1)
    if flat.size < n:
        raise BufferLayoutError(f"buffer has {flat.size} elements, needs at least {n}")
    return flat[:n]
