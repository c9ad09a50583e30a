"""Compressed collectives: all_reduce / all_gather with fp16, bf16 or fp8 (e4m3) payloads.

The wire carries a low-precision copy of the data; every reduction happens in float32.

Wire formats (:mod:`kernels.comm.compression_casts`): ``"fp16"`` (unit
roundoff ``u = 2**-11``, max 65504), ``"bf16"`` (``u = 2**-8``), ``"fp8"`` (e4m3 with one
float32 scale ``s`` per group of ``group_size`` elements, ``u = 2**-4``); ``alpha`` is each
format's subnormal rounding error (relative to ``s`` for fp8).

Quantizing value x then costs at most ``|Q(x) - x| <= u'|x| + alpha' s`` with
``u' = u + 4e``, ``alpha' = alpha (1 + e)``, ``e = 2**-24`` (float32 roundoff: conversion to
float32, the division by and multiplication with the scale), and ``s = 1`` for fp16/bf16.

all_reduce algorithm (where the precision goes)
-----------------------------------------------
Each rank's buffer of N elements is cut into n blocks of ``B = ceil(N / n)`` elements (zero
padded); block d belongs to rank d.

1. every rank quantizes its n blocks (per-group scales travel in the block payload);
2. ``all_to_all`` of the compressed blocks (a direct reduce-scatter on the wire);
3. rank d dequantizes the n contributions to block d and sums them **in float32**
   (``avg``: then divides by n in float32);
4. rank d re-quantizes its reduced block, ``all_gather`` spreads the compressed blocks;
5. every rank dequantizes all blocks into its output (cast to the output dtype).

Wire volume per rank is ``2 (n-1)/n`` compressed buffers, like a ring all_reduce, and no
partial sum is ever rounded to the compressed format: each value is rounded twice (once
before, once after the reduction) whatever n is.

Error bound
-----------
For element i let ``S_i = sum_r |x_{r,i}|``, ``sigma_i = sum_r s_{r,i}`` (the scale of the
group holding i on rank r; ``n`` for fp16/bf16), ``s_y,i`` the scale of the group holding i in
the reduced block, ``gamma_k = k e / (1 - k e)`` and ``m = n - 1`` (sum) or ``n`` (avg,
with ``d = n``; ``d = 1`` for sum).  With ``B1_i = (1 + u') S_i + alpha' sigma_i`` (a bound
on ``sum_r |x^_{r,i}|``)::

    |out_i - y_i| <= ((1 + gamma_m)(1 + u') B1_i - S_i) / d + alpha' s_y,i

where ``y_i`` is the exact (float64) sum or mean.  Derivation: stage 1 moves the sum by at
most ``B1 - S``; float32 summation (and the division) by ``gamma_m B1``; re-quantization by
``u' |t| + alpha' s_y`` with ``|t| <= (1 + gamma_m) B1 / d``.  Since
``s <= (1+e)^2 max_group|x| / 448``, :func:`error_bound` evaluates this a priori from the
inputs.  To first order: ``|err_i| ~ 2u S_i + alpha (sigma_i + s_y,i)``, i.e. at most about
``2 u n max|x|`` -- e.g. fp8: ``2**-3 n max|x|``.  A float16 output adds its own rounding.
Assumes finite inputs and no float32 overflow/underflow of the scales.

all_gather is one quantization: ``|out - x| <= u'|x| + alpha' s``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from kernels.comm.compression_casts import (
    CAST_KERNELS,
    DEFAULT_GROUP,
    E32,
    FORMATS,
    Decode,
    Encode,
    Format,
    _groups,
    _kernels,
    _on,
    _xp,
    decode_bf16,
    decode_bf16_bits,
    decode_fp8,
    decode_fp16,
    encode_bf16,
    encode_bf16_bits,
    encode_fp8,
    encode_fp16,
    get_format,
    payload_bytes,
    register_cast,
)
from topo_probe.errors import InvalidArgument, show

__all__ = ["check_compressed_op", "compressed_all_gather", "compressed_all_reduce", "error_bound",
           "COMPRESSED_OPS", "CAST_KERNELS", "DEFAULT_GROUP",
           "E32", "FORMATS", "Decode", "Encode", "Format", "decode_bf16", "decode_bf16_bits", "decode_fp16",
           "decode_fp8", "encode_bf16", "encode_bf16_bits", "encode_fp16", "encode_fp8", "get_format",
           "payload_bytes", "register_cast"]


# ---------------------------------------------------------------- collectives
def _check(comm, in_arrays, out_arrays, what: str) -> None:
    n = comm.size
    for name, arrs in (("in_arrays", in_arrays), ("out_arrays", out_arrays)):
        if len(arrs) != n:
            raise InvalidArgument(f"{what}: {name} has {len(arrs)} arrays, the communicator has {n} ranks")
        for r, a in enumerate(arrs):
            if not np.issubdtype(np.dtype(a.dtype), np.floating) and np.dtype(a.dtype) != ml_dtypes.bfloat16:
                raise InvalidArgument(f"{what}: {name} rank {r}: compression needs floating-point "
                                            f"arrays, got {a.dtype}")


COMPRESSED_OPS = ("sum", "avg")
"""Reductions of :func:`compressed_all_reduce` (computed in float32)."""


def check_compressed_op(op, owner: str) -> str:
    """``op`` as a plain str when it is one of :data:`COMPRESSED_OPS`, else InvalidArgument in one line naming
    ``owner`` (the caller, e.g. ``"MPICommunicator.compressed_all_reduce"``), the value through
    :func:`topo_probe.errors.show`.  The one rule for a compressed all-reduce's op; it reads the plain string
    (``str.__str__``), so a str subclass cannot pass by lying in ``__eq__``.

    >>> check_compressed_op("max", "demo")
    Traceback (most recent call last):
    ...
    topo_probe.errors.InvalidArgument: demo: compressed all_reduce op must be one of sum, avg; got 'max'
    """
    plain = str.__str__(op) if isinstance(op, str) else None
    if plain not in COMPRESSED_OPS:
        raise InvalidArgument(f"{owner}: compressed all_reduce op must be one of {', '.join(COMPRESSED_OPS)}; "
                              f"got {show(op)}")
    return plain


def compressed_all_reduce(comm, in_arrays, out_arrays, *, compression: str = "bf16", op: str = "sum",
                          group_size: int | None = DEFAULT_GROUP) -> list:
    """All-reduce ``in_arrays`` into ``out_arrays`` with a compressed wire format.

    Parameters
    ----------
    comm : kernels.comm.communicator.Communicator
        Runs the ``all_to_all`` and ``all_gather`` of compressed bytes.
    in_arrays, out_arrays : list of arrays
        One floating-point array per rank, equal sizes; ``out_arrays`` may be ``in_arrays``.
    compression : {"fp16", "bf16", "fp8"}
        Wire format (see module docstring).
    op : {"sum", "avg"}
        Reduction, always computed in float32.
    group_size : int or None
        Elements per fp8 scale (None: one scale per block of ``ceil(N / n)`` elements).

    Returns
    -------
    list of arrays
        ``out_arrays``; the error obeys :func:`error_bound`.
    """
    owner = f"{type(comm).__name__}.compressed_all_reduce"
    op = check_compressed_op(op, owner)
    fmt = get_format(compression, owner)
    _check(comm, in_arrays, out_arrays, "compressed all_reduce")
    n, count = comm.size, int(in_arrays[0].size)
    for r in range(n):
        if in_arrays[r].size != count or out_arrays[r].size < count:
            raise InvalidArgument(f"compressed all_reduce: rank {r}: in has {in_arrays[r].size} and out "
                             f"{out_arrays[r].size} elements, rank 0's in has {count}")
    if count == 0:
        return out_arrays
    b = -(-count // n)
    enc, dec = _kernels(fmt.name, in_arrays[0])
    width = payload_bytes(fmt.name, b, group_size)
    sends, recvs = [], []
    for x in in_arrays:
        with _on(x):
            xp = _xp(x)
            buf = xp.zeros(n * b, np.float32)
            buf[:count] = x.reshape(-1)
            sends.append(enc(buf.reshape(n, b), group_size).reshape(-1))
            recvs.append(xp.empty(n * width, np.uint8))
    comm.all_to_all(sends, recvs)
    reduced, gathered = [], []
    for rcv in recvs:
        with _on(rcv):
            parts = dec(rcv.reshape(n, width), b, group_size)
            acc = parts[0].copy()
            for k in range(1, n):  # float32 accumulation, rank order
                acc += parts[k]
            if op == "avg":
                acc /= np.float32(n)
            reduced.append(enc(acc.reshape(1, b), group_size).reshape(-1))
            gathered.append(_xp(rcv).empty(n * width, np.uint8))
    comm.all_gather(reduced, gathered)
    for out, g in zip(out_arrays, gathered):
        with _on(out):
            vals = dec(g.reshape(n, width), b, group_size).reshape(-1)[:count]
            out.reshape(-1)[:count] = vals.astype(out.dtype)
    return out_arrays


def compressed_all_gather(comm, in_arrays, out_arrays, *, compression: str = "bf16",
                          group_size: int | None = DEFAULT_GROUP) -> list:
    """All-gather with a compressed wire format: out block r = dequantized input of rank r.

    ``out_arrays[r]`` needs ``n * in_arrays[0].size`` elements; the error of each element is
    at most ``u'|x| + alpha' s`` (module docstring).
    """
    fmt = get_format(compression, f"{type(comm).__name__}.compressed_all_gather")
    _check(comm, in_arrays, out_arrays, "compressed all_gather")
    n, count = comm.size, int(in_arrays[0].size)
    for r in range(n):
        if in_arrays[r].size != count or out_arrays[r].size < n * count:
            raise InvalidArgument(f"compressed all_gather: rank {r}: in has {in_arrays[r].size} and out "
                             f"{out_arrays[r].size} elements; need {count} and >= {n * count}")
    if count == 0:
        return out_arrays
    enc, dec = _kernels(fmt.name, in_arrays[0])
    width = payload_bytes(fmt.name, count, group_size)
    sends, recvs = [], []
    for x in in_arrays:
        with _on(x):
            sends.append(enc(x.reshape(1, count).astype(np.float32), group_size).reshape(-1))
            recvs.append(_xp(x).empty(n * width, np.uint8))
    comm.all_gather(sends, recvs)
    for out, g in zip(out_arrays, recvs):
        with _on(out):
            vals = dec(g.reshape(n, width), count, group_size).reshape(-1)
            out.reshape(-1)[:n * count] = vals.astype(out.dtype)
    return out_arrays


# ---------------------------------------------------------------- a priori error bound
def _group_max(a: np.ndarray, n_blocks: int, b: int, group_size: int | None) -> np.ndarray:
    """Per element: max |a| over the fp8 group holding it (blocks of b, zero padded)."""
    ng, g = _groups(b, group_size)
    buf = np.zeros((n_blocks, ng * g))
    buf[:, :b] = np.pad(np.abs(a), (0, n_blocks * b - a.size)).reshape(n_blocks, b)
    m = np.repeat(buf.reshape(n_blocks, ng, g).max(axis=2), g, axis=1)[:, :b]
    return m.reshape(-1)[:a.size]


def error_bound(in_arrays, compression: str, *, op: str = "sum", group_size: int | None = DEFAULT_GROUP,
                out_dtype=np.float64) -> np.ndarray:
    """Per-element bound on ``|compressed_all_reduce - exact|`` (module docstring formula).

    Parameters
    ----------
    in_arrays : list of numpy arrays
        The inputs, one per rank.
    compression, op, group_size
        As for :func:`compressed_all_reduce`.
    out_dtype : dtype
        Output dtype; below float32 precision its rounding is added.

    Returns
    -------
    numpy.ndarray of float64, shape ``(N,)``.

    Examples
    --------
    >>> xs = [np.ones(4, np.float32), np.ones(4, np.float32)]
    >>> float(error_bound(xs, "bf16")[0]) < 2 * 2 * 2**-8 * 1.01
    True
    """
    fmt = get_format(compression, "error_bound")
    xs = [np.abs(np.asarray(x, np.float64).reshape(-1)) for x in in_arrays]
    n, count = len(xs), xs[0].size
    up, ap = fmt.u + 4 * E32, fmt.alpha * (1 + E32)
    m = n - 1 if op == "sum" else n
    d = 1 if op == "sum" else n
    gamma = m * E32 / (1 - m * E32)
    s_total = np.sum(xs, axis=0)
    b = -(-count // n) if count else 0
    if fmt.scaled and count:
        sigma = sum(_group_max(x, n, b, group_size) for x in xs) * (1 + E32) ** 2 / 448.0
    else:
        sigma = np.full(count, float(n))
    b1 = (1 + up) * s_total + ap * sigma
    t_bound = (1 + gamma) * b1 / d
    if fmt.scaled and count:
        s_y = _group_max(t_bound, n, b, group_size) * (1 + E32) / 448.0
    else:
        s_y = np.ones(count)
    bound = ((1 + gamma) * (1 + up) * b1 - s_total) / d + ap * s_y
    out_dtype = np.dtype(out_dtype)
    if out_dtype.itemsize < 4:
        eps = float(ml_dtypes.finfo(out_dtype).eps) / 2
        bound = bound + eps * ((1 + up) * t_bound + ap * s_y)
    return bound
