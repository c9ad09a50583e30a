"""Fused and compressed all-reduce on one MPI rank (:class:`kernels.mpi.communicator.MPICommunicator`).

:func:`fused_all_reduce` packs this rank's tensors into the fusion buckets of
:func:`kernels.comm.fusion.plan_buckets` and runs one all-reduce per bucket;
:func:`compressed_all_reduce` is this rank's part of
:func:`kernels.comm.compression.compressed_all_reduce` (same wire format, float32 accumulation in
rank order, same error bound), built from the communicator's all-to-all and all-gather.
The communicator's methods of the same names call these.
"""

from __future__ import annotations

import numpy as np

from kernels.comm.validation import _is_cupy, check_array
from topo_probe.errors import InvalidArgument


def fused_all_reduce(comm, tensors, *, mode: str = "auto", bucket_mb: float = 64, split_points=None,
                     op: str = "sum", compression: str | None = None) -> list[range]:
    """All-reduce this rank's ``tensors`` in place over ``comm``, one collective per fusion
    bucket; ``compression`` as :func:`compressed_all_reduce`, its op and name checked first by the same rules,
    a refusal naming ``MPICommunicator.fused_all_reduce`` and the rank.  Returns the buckets."""
    from kernels.comm.fusion import plan_buckets
    try:      # this rank's own errors reach the peers (waiting in the first bucket's call) at once
        if compression is not None:
            op, compression = _checked_compression(comm, op, compression)
        for i, t in enumerate(tensors):
            check_array(t, f"fused_all_reduce: tensors[{i}]", comm.rank)
        buckets = plan_buckets([t.nbytes for t in tensors], mode, bucket_mb=bucket_mb,
                               split_points=split_points, keys=[t.dtype for t in tensors])
    except Exception as exc:
        comm.agreement.report("fused_allreduce", exc)
        raise
    for bucket in buckets:
        ts = [tensors[i] for i in bucket]
        xp = comm._wire_for(ts[0]).xp
        single = len(ts) == 1 and ts[0].flags.c_contiguous
        buf = ts[0].reshape(-1) if single else xp.concatenate([t.reshape(-1) for t in ts])
        if compression is None:
            comm.all_reduce(buf, buf, op=op)
        else:
            comm.compressed_all_reduce(buf, buf, compression=compression, op=op)
        if not single:
            off = 0
            for t in ts:
                t[...] = buf[off:off + t.size].reshape(t.shape)
                off += t.size
    return buckets


def _checked_compression(comm, op, compression) -> tuple[str, str]:
    """``(op, format name)`` by :mod:`kernels.comm.compression`'s rules, a refusal (InvalidArgument, one line)
    naming ``<class>.fused_all_reduce`` and this rank, as the communicator's collectives name theirs."""
    from kernels.comm import compression as cz
    owner = f"{type(comm).__name__}.fused_all_reduce"
    try:
        return cz.check_compressed_op(op, owner), cz.get_format(compression, owner).name
    except InvalidArgument as exc:
        exc.args = (f"{owner}: rank {comm.rank}: {str(exc).removeprefix(f'{owner}: ')}",)
        raise


def compressed_all_reduce(comm, in_array, out_array, *, compression: str = "bf16", op: str = "sum",
                          group_size: int | None = None):
    """This rank's part of :func:`kernels.comm.compression.compressed_all_reduce` over ``comm``
    (see module docstring).  Returns ``out_array``."""
    from kernels.comm import compression as cz
    owner = f"{type(comm).__name__}.compressed_all_reduce"
    op = cz.check_compressed_op(op, owner)
    fmt = cz.get_format(compression, owner)
    group_size = cz.DEFAULT_GROUP if group_size is None else group_size
    n, count = comm.size, int(in_array.size)
    # every rank must use the same format, group and op (the wire is bytes: no dtype would differ)
    comm.agreement.check_plain({**comm.agreement.header(None, count, in_array.dtype, op, "compressed_allreduce"),
                                "schedule": f"{fmt.name}/{group_size}"})
    if count == 0:
        return out_array
    b = -(-count // n)
    enc, dec = cz.CAST_KERNELS[("host", fmt.name)]
    if _is_cupy(in_array):
        if ("cupy", fmt.name) in cz.CAST_KERNELS:
            enc, dec = cz.CAST_KERNELS[("cupy", fmt.name)]
        else:  # host casts with a round trip (correct, slow), as kernels.comm.compression does
            import cupy
            henc, hdec = enc, dec
            enc = lambda x, gs: cupy.asarray(henc(cupy.asnumpy(x), gs))  # noqa: E731
            dec = lambda p, b, gs: cupy.asarray(hdec(cupy.asnumpy(p), b, gs))  # noqa: E731
    xp = comm._wire_for(in_array).xp
    width = cz.payload_bytes(fmt.name, b, group_size)
    buf = xp.zeros(n * b, np.float32)
    buf[:count] = in_array.reshape(-1)
    send = enc(buf.reshape(n, b), group_size).reshape(-1)
    recv = xp.empty(n * width, np.uint8)
    comm.all_to_all(send, recv)
    parts = dec(recv.reshape(n, width), b, group_size)
    acc = parts[0].copy()
    for k in range(1, n):
        acc += parts[k]
    if op == "avg":
        acc /= np.float32(n)
    mine = enc(acc.reshape(1, b), group_size).reshape(-1)
    gathered = xp.empty(n * width, np.uint8)
    comm.all_gather(mine, gathered)
    vals = dec(gathered.reshape(n, width), b, group_size).reshape(-1)[:count]
    out_array.reshape(-1)[:count] = vals.astype(out_array.dtype)
    return out_array
