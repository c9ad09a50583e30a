"""Communication fusion: one collective per *bucket* of many small tensors.

Like PyTorch DDP's gradient buckets or Horovod's tensor fusion: per rank, the tensors of a
bucket are flattened into one buffer, one collective runs on it, and the results are copied
back into the original tensors (in place).  Which tensors share a bucket is decided by
:func:`plan_buckets`, a pure function of the tensor sizes:

``mode="size"``
    consecutive tensors fill a bucket until adding the next would exceed ``bucket_mb`` MiB
    (2**20 bytes); a tensor larger than that gets a bucket of its own.
``mode="index"``
    ``split_points`` (strictly increasing, each in ``1..len-1``): ``[20, 35]`` gives tensors
    0-19, 20-34 and 35-end.
``mode="auto"``
    ``"index"`` when ``split_points`` is given, else ``"size"`` (default 64 MiB).

A bucket also ends where the dtype changes (tensors of one bucket are concatenated).
"""

from __future__ import annotations

import contextlib
from typing import Sequence

import numpy as np

from topo_probe.errors import InvalidArgument
from topo_probe.limits import MAX_BYTES
from topo_probe.number_checks import check_float

MIB = 1 << 20
MODES = ("auto", "size", "index")


def plan_buckets(sizes_bytes: Sequence[int], mode: str = "auto", *, bucket_mb: float = 64,
                 split_points: Sequence[int] | None = None,
                 keys: Sequence[object] | None = None) -> list[range]:
    """Split tensors ``0..len(sizes_bytes)-1`` into consecutive buckets (index ranges).

    Parameters
    ----------
    sizes_bytes : sequence of int
        Bytes of each tensor, in order.
    mode : {"auto", "size", "index"}
        See the module docstring.
    bucket_mb : float
        Bucket capacity in MiB for ``"size"`` / ``"auto"`` (> 0).
    split_points : sequence of int, optional
        Bucket starts for ``"index"``.
    keys : sequence, optional
        One key per tensor (e.g. dtype); a bucket never spans a key change.

    Returns
    -------
    list of range
        Consecutive, non-empty, covering every index exactly once.

    Examples
    --------
    >>> plan_buckets([3 * MIB, 3 * MIB, 3 * MIB], "size", bucket_mb=6)
    [range(0, 2), range(2, 3)]
    >>> plan_buckets([1] * 50, "index", split_points=[20, 35])
    [range(0, 20), range(20, 35), range(35, 50)]
    """
    sizes = [int(s) for s in sizes_bytes]
    count = len(sizes)
    if any(s < 0 for s in sizes):
        raise InvalidArgument(f"plan_buckets: sizes_bytes[{next(i for i, s in enumerate(sizes) if s < 0)}] is negative")
    if keys is not None and len(keys) != count:
        raise InvalidArgument(f"plan_buckets: {len(keys)} keys for {count} tensors")
    if mode not in MODES:
        raise InvalidArgument(f"plan_buckets: mode {mode!r} is not one of {', '.join(MODES)}")
    if mode == "auto":
        mode = "index" if split_points is not None else "size"
    if mode == "index":
        starts = _check_split_points(split_points, count)
    else:
        cap = check_float(bucket_mb, "plan_buckets: bucket_mb", InvalidArgument, lo=0.0, lo_open=True,
                          hi=float(MAX_BYTES // MIB), unit="MiB") * MIB
        starts, fill = [], 0
        for i, s in enumerate(sizes):
            key_change = keys is not None and i > 0 and keys[i] != keys[i - 1]
            if i > 0 and (fill + s > cap or key_change):
                starts.append(i)
                fill = 0
            fill += s
    cuts = set(starts)
    if keys is not None:
        cuts.update(i for i in range(1, count) if keys[i] != keys[i - 1])
    bounds = [0] + sorted(c for c in cuts if 0 < c < count) + [count]
    return [range(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def _check_split_points(split_points, count: int) -> list[int]:
    if split_points is None:
        raise InvalidArgument("plan_buckets: mode 'index' needs split_points")
    pts = [int(p) for p in split_points]
    for k, p in enumerate(pts):
        if not 0 < p < count:
            raise InvalidArgument(f"plan_buckets: split_points[{k}] = {p} is not in 1..{count - 1}")
        if k and p <= pts[k - 1]:
            raise InvalidArgument(f"plan_buckets: split_points must increase, but [{k}] = {p} <= {pts[k - 1]}")
    return pts


def _xp(a):
    if type(a).__module__.split(".")[0] == "cupy":
        import cupy
        return cupy
    return np


def _on(a):
    """Context making ``a``'s GPU current (CuPy allocates there); a no-op for NumPy."""
    return a.device if type(a).__module__.split(".")[0] == "cupy" else contextlib.nullcontext()


def _check_tensors(comm, tensors_per_rank, what: str) -> None:
    if len(tensors_per_rank) != comm.size:
        raise InvalidArgument(f"{what}: {len(tensors_per_rank)} tensor lists, the communicator has "
                         f"{comm.size} ranks")
    ref = tensors_per_rank[0]
    for r, ts in enumerate(tensors_per_rank):
        if len(ts) != len(ref):
            raise InvalidArgument(f"{what}: rank {r} has {len(ts)} tensors, rank 0 has {len(ref)}")
        for i, (t, t0) in enumerate(zip(ts, ref)):
            if t.shape != t0.shape:
                raise InvalidArgument(f"{what}: rank {r} tensor {i}: shape {t.shape} differs from rank 0's {t0.shape}")
            if t.dtype != t0.dtype:
                raise InvalidArgument(f"{what}: rank {r} tensor {i}: dtype {t.dtype} differs from rank 0's {t0.dtype}")


def _buckets(tensors, mode, bucket_mb, split_points) -> list[range]:
    return plan_buckets([t.nbytes for t in tensors], mode, bucket_mb=bucket_mb,
                        split_points=split_points, keys=[t.dtype for t in tensors])


def _flatten(ts) -> object:
    with _on(ts[0]):
        return _xp(ts[0]).concatenate([t.reshape(-1) for t in ts])


def fused_all_reduce(comm, tensors_per_rank, *, mode: str = "auto", bucket_mb: float = 64,
                     split_points: Sequence[int] | None = None, op: str = "sum",
                     compression: str | None = None) -> list[range]:
    """All-reduce many tensors per rank, one collective per bucket, results written in place.

    Parameters
    ----------
    comm : kernels.comm.communicator.Communicator
    tensors_per_rank : list of list of arrays
        ``tensors_per_rank[r][i]`` is tensor i of rank r; tensor i has one shape and dtype on
        every rank.  Tensors must be writable (any layout; results are assigned back).
    mode, bucket_mb, split_points
        Bucketing, see :func:`plan_buckets`.
    op : {"sum", "prod", "max", "min", "avg"}
    compression : {None, "fp16", "bf16", "fp8"}
        Use :func:`kernels.comm.compression.compressed_all_reduce` per bucket (op sum/avg); the op and name are
        checked first, by that function's rules, refusals naming ``<Communicator class>.fused_all_reduce``.

    Returns
    -------
    list of range
        The buckets used.

    Examples
    --------
    >>> from kernels.comm.communicator import Communicator
    >>> comm = Communicator(2, plan=False)
    >>> ts = [[np.ones(3), np.full((2, 2), 2.0)], [np.ones(3), np.full((2, 2), 5.0)]]
    >>> fused_all_reduce(comm, ts)
    [range(0, 2)]
    >>> ts[1][1].tolist()
    [[7.0, 7.0], [7.0, 7.0]]
    """
    _check_tensors(comm, tensors_per_rank, "fused_all_reduce")
    if compression is not None:   # refused here, naming the method called (not the per-bucket one it calls)
        from kernels.comm.compression import check_compressed_op, get_format
        owner = f"{type(comm).__name__}.fused_all_reduce"
        op = check_compressed_op(op, owner)
        compression = get_format(compression, owner).name
    if not tensors_per_rank[0]:
        return []
    buckets = _buckets(tensors_per_rank[0], mode, bucket_mb, split_points)
    for bucket in buckets:
        single = len(bucket) == 1 and all(ts[bucket[0]].flags.c_contiguous for ts in tensors_per_rank)
        if single:  # one contiguous tensor: reduce it in place, no copies
            bufs = [ts[bucket[0]].reshape(-1) for ts in tensors_per_rank]
        else:
            bufs = [_flatten([ts[i] for i in bucket]) for ts in tensors_per_rank]
        if compression is None:
            comm.all_reduce(bufs, bufs, op=op)
        else:
            from kernels.comm.compression import compressed_all_reduce
            compressed_all_reduce(comm, bufs, bufs, compression=compression, op=op)
        if single:
            continue
        for ts, buf in zip(tensors_per_rank, bufs):
            off = 0
            for i in bucket:
                t = ts[i]
                t[...] = buf[off:off + t.size].reshape(t.shape)
                off += t.size
    return buckets


def fused_all_gather(comm, tensors_per_rank, *, mode: str = "auto", bucket_mb: float = 64,
                     split_points: Sequence[int] | None = None) -> list[list[object]]:
    """All-gather many tensors per rank, one collective per bucket.

    Returns ``out[r][i]`` of shape ``(n, *shape_i)``: tensor i of every rank, as seen by rank
    r.  Bucket sizes count the input bytes (as ``mode="size"`` would for each rank).

    >>> from kernels.comm.communicator import Communicator
    >>> comm = Communicator(2, plan=False)
    >>> out = fused_all_gather(comm, [[np.arange(2)], [np.arange(2) + 10]])
    >>> out[0][0].tolist()
    [[0, 1], [10, 11]]
    """
    _check_tensors(comm, tensors_per_rank, "fused_all_gather")
    n = comm.size
    ref = tensors_per_rank[0]
    outs = []
    for ts in tensors_per_rank:
        with _on(ts[0]) if ts else contextlib.nullcontext():
            outs.append([_xp(t).empty((n,) + tuple(t.shape), t.dtype) for t in ts])
    if not ref:
        return outs
    for bucket in _buckets(ref, mode, bucket_mb, split_points):
        sends = [_flatten([ts[i] for i in bucket]) for ts in tensors_per_rank]
        count = int(sends[0].size)
        recvs = []
        for s in sends:
            with _on(s):
                recvs.append(_xp(s).empty(n * count, s.dtype))
        comm.all_gather(sends, recvs)
        for r, recv in enumerate(recvs):
            blocks = recv.reshape(n, count)
            off = 0
            for i in bucket:
                size = ref[i].size
                outs[r][i][...] = blocks[:, off:off + size].reshape(outs[r][i].shape)
                off += size
    return outs
