"""Argument validation and buffer preparation for the communicators.

:class:`kernels.comm.communicator.Communicator` (one process, every rank): every buffer argument
is a list with one array per rank (NumPy or CuPy).  :func:`prepare`
checks the lists (length, dtype, shape, device kind, the rank's device) and builds the flat
send / receive views the executor runs on, with NCCL's in-place aliasing: one buffer passed
as input and output is read and written in NCCL's in-place layout (all_gather's input = block
r of rank r's output, reduce_scatter's output = block r of rank r's input, ...).  Inputs that
overlap their output any other way, or in-place ranks mixed with out-of-place ones, are
copied first so that the result is always the out-of-place one.  Memory shared across ranks
(other than send buffers that are only read) and read-only outputs are refused first, on the
caller's arrays (:func:`kernels.backends.executor.check_buffer_layout`).  Errors are one line
(:class:`~topo_probe.errors.BufferLayoutError` for buffers, InvalidArgument for values) naming the call, the argument and the rank.

:class:`kernels.mpi.communicator.MPICommunicator` (one array per process): :func:`bind_rank_buffers`
checks one rank's buffers against the schedule's layout, and :func:`rank_inplace` accepts
only NCCL's in-place layouts (any other overlap is a ``BufferLayoutError``).  Both
communicators share :func:`check_root` and :func:`check_op`.

>>> import numpy as np
>>> bufs = [np.arange(8.0) for _ in range(4)]
>>> sends, recvs = prepare("all_gather", "allgather", [b[2 * r:2 * r + 2] for r, b in enumerate(bufs)], bufs, 2,
...                        size=4)
>>> [s.tolist() for s in sends[:2]], recvs[0].size
([[0.0, 1.0], [2.0, 3.0]], 8)
"""

from __future__ import annotations

import functools

import numpy as np

from kernels.backends.executor import check_buffer_layout, dtype_problem, plain_ndarray
from kernels.program.ops import has_input, has_output
from synth.ir.collectives import REDUCE_OPS, CollectiveSpec
from topo_probe.errors import BufferLayoutError, InvalidArgument




def _is_cupy(a) -> bool:
    return type(a).__module__.split(".")[0] == "cupy"


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
    if a is None:
        return a
    if not (isinstance(a, np.ndarray) or (_is_cupy(a) and hasattr(a, "dtype"))):
        problem = f"got a {type(a).__name__}, not an array (NumPy or CuPy)"
    elif isinstance(a, np.ndarray) and not plain_ndarray(a):
        problem = f"got a {type(a).__module__}.{type(a).__name__}; pass a plain numpy.ndarray (numpy.asarray)"
    elif not nccl_dtype(a.dtype):
        problem = dtype_problem(a.dtype)
    else:
        return a
    raise BufferLayoutError(f"{what}: rank {rank}: {problem}" if rank is not None else f"{what}: {problem}")


_KNOWN_DTYPES: dict = {}


def nccl_dtype(dtype) -> bool:
    """Whether ``dtype`` is one of :data:`NCCL_DTYPES` (remembered per dtype: asking a dtype its
    name costs microseconds, and the MPI communicator asks on every call)."""
    ok = _KNOWN_DTYPES.get(dtype)
    if ok is None:
        ok = _KNOWN_DTYPES[dtype] = dtype_problem(dtype) is None
    return ok


def _device(a) -> str:
    return f"cuda:{a.device.id}" if _is_cupy(a) else "cpu"


def _ptr(a) -> int:
    return int(a.data.ptr) if _is_cupy(a) else int(a.__array_interface__["data"][0])


def _shares(a, b) -> bool:
    if _is_cupy(a) or _is_cupy(b):
        import cupy
        return bool(cupy.shares_memory(a, b))
    return bool(np.shares_memory(a, b))


def _flat(a, what: str):
    """A 1-D view of ``a`` (must be C-contiguous so that writes reach the caller)."""
    if not a.flags.c_contiguous:
        raise BufferLayoutError(f"{what} is not C-contiguous; pass a contiguous buffer (as NCCL needs)")
    return a.reshape(-1)


def _is_list(x) -> bool:
    return isinstance(x, (list, tuple))


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
        return ins[0].size // n
    return None


def _need(what: str, role: str, r: int, have: int, need: int) -> None:
    if have < need:
        raise BufferLayoutError(f"{what}: {role} rank {r} has {have} elements, needs at least {need}")


def check_list(what: str, role: str, arrays, need: set[int], same: list[bool], *, size: int,
               devices: list[int] | None = None) -> list:
    """Length ``size``; arrays of the ranks in ``need`` present and agreeing in dtype, shape
    (not checked for in-place buffers, ``same``) and device kind, and on ``devices[r]`` when
    given.  Returns the list with entries of the other ranks replaced by None."""
    if not _is_list(arrays):
        raise BufferLayoutError(f"{what}: {role} must be a list with one array per rank, got {type(arrays).__name__}")
    if len(arrays) != size:
        raise BufferLayoutError(f"{what}: {role} has {len(arrays)} arrays, the communicator has {size} ranks")
    first = {}
    for r in sorted(need):
        a = arrays[r]
        if a is None:
            raise BufferLayoutError(f"{what}: {role} rank {r} is None but rank {r} needs a buffer")
        check_array(a, f"{what}: {role}", r)
        if devices is not None and _is_cupy(a) and a.device.id != devices[r]:
            raise BufferLayoutError(f"{what}: {role} rank {r}: device {_device(a)} is not rank {r}'s "
                             f"cuda:{devices[r]}")
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
    """Validate; build flat send/recv views with NCCL in-place aliasing (module docstring).

    ``name`` is the canonical collective, ``count`` elements per block; ``in_need`` /
    ``out_need``: ranks that use that buffer (default all); the others get None (their arrays
    are ignored, as NCCL ignores them) unless passed in place."""
    n = size
    if isinstance(count, (bool, np.bool_)) or not isinstance(count, (int, np.integer)) or count < 0:
        raise InvalidArgument(f"{what}: count must be an integer >= 0, got {count!r}")
    count = int(count)
    every = set(range(n))
    same = [ins[r] is not None and ins[r] is outs[r] for r in range(n)] if (
        _is_list(ins) and _is_list(outs) and len(ins) == len(outs) == n) else [False] * n
    inplace = {r for r in every if same[r]}
    ins = check_list(what, "in_arrays", ins, every if in_need is None else in_need | inplace, same,
                     size=n, devices=devices)
    outs = check_list(what, "out_arrays", outs, every if out_need is None else out_need | inplace, same,
                      size=n, devices=devices)
    spec = CollectiveSpec(name, n, 1, root)
    kin, kout = spec.input_blocks(), spec.output_blocks()
    sends, recvs = [], []
    for r in range(n):
        a, b = ins[r], outs[r]
        if a is not None and b is not None and a.dtype != b.dtype:
            raise BufferLayoutError(f"{what}: rank {r}: out dtype {b.dtype} differs from in dtype {a.dtype}")
        if same[r]:  # one buffer: NCCL's in-place layout
            buf = _flat(b, f"{what}: out_arrays rank {r}")
            _need(what, "in/out", r, buf.size, max(kin, kout) * count)
            s = buf[:kin * count] if kin > 1 or kout == 1 else buf[r * count:(r + 1) * count]
            d = buf[:kout * count] if kout > 1 or kin == 1 else buf[r * count:(r + 1) * count]
            sends.append(s.copy() if kin > 1 and kout > 1 else s)  # alltoall: no in-place form
            recvs.append(d)
            continue
        s = d = None
        if a is not None:
            _need(what, "in_arrays", r, a.size, kin * count)
            s = a.reshape(-1)[:kin * count]
        if b is not None:
            d = _flat(b, f"{what}: out_arrays rank {r}")
            _need(what, "out_arrays", r, d.size, kout * count)
            d = d[:kout * count]
        sends.append(s)
        recvs.append(d)
    check_buffer_layout(what, sends, recvs)     # before the copies below could hide an overlap
    _fix_aliasing(sends, recvs, count, kin, kout)
    return sends, recvs


def _is_alias(s, d, r: int, count: int, kin: int, kout: int) -> bool:
    """True for NCCL's in-place layouts, which the executor handles without a copy."""
    item = s.dtype.itemsize
    if not (s.flags.c_contiguous and d.flags.c_contiguous):   # a strided view at the same address is not in place
        return False
    if kin == kout == 1:
        return _ptr(s) == _ptr(d) and s.size == d.size
    if kin == 1 and kout > 1:
        return _ptr(s) == _ptr(d) + r * count * item and s.size == count
    if kout == 1 and kin > 1:
        return _ptr(d) == _ptr(s) + r * count * item and d.size == count
    return False


def _fix_aliasing(sends: list, recvs: list, count: int, kin: int, kout: int) -> None:
    """Copy inputs (in ``sends``) that overlap their output other than as NCCL's in-place
    layout, that are in place while other ranks are not (the executor needs all or none), or
    that are strided (the executor reads contiguous buffers)."""
    aliased = {}
    for r, (s, d) in enumerate(zip(sends, recvs)):
        if s is None or d is None or s.size == 0 or d.size == 0 or not _shares(s, d):
            aliased[r] = False if s is not None and d is not None else None
            if s is not None and not s.flags.c_contiguous:     # a strided input is read, as NCCL cannot
                sends[r] = s.copy()
        elif _is_alias(s, d, r, count, kin, kout):
            aliased[r] = True
        else:
            sends[r], aliased[r] = s.copy(), False
    flags = {f for f in aliased.values() if f is not None}
    if len(flags) > 1:
        for r, f in aliased.items():
            if f:
                sends[r] = sends[r].copy()


# ---------------------------------------------------------------------- both communicators
def check_root(what: str, root, size: int) -> int:
    """``root`` as an int, or InvalidArgument when it is not a rank of ``size``.

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
    if isinstance(root, (bool, np.bool_)) or not isinstance(root, (int, np.integer)) or not 0 <= root < size:
        raise InvalidArgument(f"{what}: root {root!r} is not a rank (0..{size - 1})")
    return int(root)


def check_op(name: str, op: str) -> None:
    """InvalidArgument unless ``op`` is a reduction op of :mod:`synth.ir.collectives`."""
    if op not in REDUCE_OPS:
        raise InvalidArgument(f"{name}: op {op!r} is not one of {', '.join(REDUCE_OPS)}")


# ---------------------------------------------------------------------- one array per process
def bind_rank_buffers(spec: CollectiveSpec, rank: int, sendbuf, recvbuf) -> tuple[dict, int | None]:
    """Flat views of the buffers ``rank`` uses in ``spec`` (``{"sendbuf": .., "recvbuf": ..}``)
    and the block count their sizes give (None when the rank uses neither buffer).

    Raises BufferLayoutError for a missing or non-contiguous buffer, sizes that are not whole
    blocks of one count, or differing dtypes.

    >>> bound, count = bind_rank_buffers(CollectiveSpec("allgather", 4, 1), 1, np.zeros(3), np.zeros(12))
    >>> sorted(bound), count
    (['recvbuf', 'sendbuf'], 3)
    """
    bound = {}
    count = None
    need_in, in_blocks, need_out, out_blocks = _rank_layout(spec, rank)
    for what, arr, need, blocks in (("sendbuf", sendbuf, need_in, in_blocks),
                                    ("recvbuf", recvbuf, need_out, out_blocks)):
        if not need:
            continue
        if arr is None:
            raise BufferLayoutError(f"rank {rank}: {what} is None but {spec.name} needs one on this rank")
        if not arr.flags.c_contiguous:
            raise BufferLayoutError(f"rank {rank}: {what} must be C-contiguous")
        if arr.size % blocks or (count is not None and arr.size // blocks != count):
            raise BufferLayoutError(f"rank {rank}: {what} has {arr.size} elements: not {blocks} block(s) of "
                                    f"count={count if count is not None else 'n/a'}")
        count = arr.size // blocks
        bound[what] = arr.reshape(-1)
    if len(bound) == 2 and bound["sendbuf"].dtype != bound["recvbuf"].dtype:
        raise BufferLayoutError(f"rank {rank}: sendbuf dtype {bound['sendbuf'].dtype} differs from recvbuf's "
                                f"{bound['recvbuf'].dtype}")
    return bound, count


@functools.lru_cache(maxsize=1024)
def _rank_layout(spec: CollectiveSpec, rank: int) -> tuple[bool, int, bool, int]:
    """Whether ``rank`` has an input and an output in ``spec``, and their sizes in blocks."""
    return has_input(spec, rank), spec.input_blocks(), has_output(spec, rank), spec.output_blocks()


def rank_inplace(spec: CollectiveSpec, r: int, send, recv, count: int) -> bool:
    """Whether rank r's non-empty buffers are NCCL's in-place layout; BufferLayoutError for
    any other overlap."""
    if type(send) is np.ndarray and type(recv) is np.ndarray and not np.may_share_memory(send, recv):
        return False
    item = send.dtype.itemsize
    s0, r0 = _ptr(send), _ptr(recv)
    s1, r1 = s0 + send.size * item, r0 + recv.size * item
    if s1 <= r0 or r1 <= s0:
        return False
    if not (send.flags.c_contiguous and recv.flags.c_contiguous):
        ok = False
    elif spec.name in ("allgather", "gather"):
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
