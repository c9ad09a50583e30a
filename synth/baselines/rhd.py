"""Recursive halving / doubling (Rabenseifner) for a power-of-two number of ranks.

Partners at distance ``2^k`` are ``r XOR 2^k``; every partner pair must be a channel.

* reducescatter (recursive halving): for ``m = n/2, n/4, ..., 1`` rank ``r`` reduces into its
  partner ``r ^ m`` the chunks of every destination still in its half that lies on the partner's
  side of bit ``m``; after ``log2 n`` steps rank ``r`` holds its own block fully reduced.
* allgather (recursive doubling): for ``m = 1, 2, ..., n/2`` rank ``r`` copies every block it
  holds (the owners that differ from ``r`` only in bits below ``m``) to ``r ^ m``.
* allreduce: reducescatter then allgather (``2 log2 n`` steps), chunk ``g`` reduced at ``g // C``.
"""

from __future__ import annotations

import numpy as np

from synth.baselines._common import Builder, make_spec, require_channels
from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule
from topo_probe.errors import UnsupportedCollective

COLLECTIVES = ("reducescatter", "allgather", "allreduce")


def _blocks(n: int, C: int, m: int, base):
    """For every rank ``r`` in order, the chunks of the ``m`` owners ``base(r) + low`` (``low`` =
    0..m-1 ascending), each owner's ``C`` pieces in order: ``(ranks, chunk ids)``, one entry per
    transfer, in the order the loops over ``r``, owner and piece would add them."""
    r = np.repeat(np.arange(n, dtype=np.int64), m * C)
    low = np.tile(np.repeat(np.arange(m, dtype=np.int64), C), n)
    piece = np.tile(np.arange(C, dtype=np.int64), n * m)
    return r, (base(r) | low) * C + piece


def _halving(b: Builder, t0: int) -> int:
    """Rank ``r`` reduces into ``p = r ^ m`` the chunks of every owner ``d`` that shares ``r``'s
    bits above ``m`` and ``p``'s bit ``m`` (its bits below ``m``: any, ascending)."""
    n, C = b.spec.ranks, b.spec.chunks_per_rank
    t, m = t0, n // 2
    while m >= 1:
        high = ~(2 * m - 1)
        r, chunk = _blocks(n, C, m, lambda r: (r & high) | ((r ^ m) & m))
        b.add_many(t, chunk, r, r ^ m, "reduce")
        t, m = t + 1, m // 2
    return t


def _doubling(b: Builder, t0: int) -> int:
    """Rank ``r`` copies to ``r ^ m`` the blocks of every owner ``o`` with ``o ^ r < m``."""
    n, C = b.spec.ranks, b.spec.chunks_per_rank
    t, m = t0, 1
    while m < n:
        r, chunk = _blocks(n, C, m, lambda r: r & ~(m - 1))
        b.add_many(t, chunk, r, r ^ m)
        t, m = t + 1, m * 2
    return t


def build(fabric: Fabric, collective: str, *, root: int | None = None, chunks: int | None = None) -> Schedule:
    """Recursive halving/doubling schedule (default 1 chunk per rank); see the module docstring.

    Raises
    ------
    UnsupportedCollective
        Other collectives, a rank count that is not a power of two, or a partner pair that is
        not a channel.
    """
    spec = make_spec("rhd", fabric, collective, root, chunks, 1)
    n = spec.ranks
    if spec.name not in COLLECTIVES:
        raise UnsupportedCollective(f"rhd: {spec.name} is not available (rhd builds {', '.join(COLLECTIVES)})")
    if n & (n - 1):
        raise UnsupportedCollective(f"rhd: {n} ranks is not a power of two")
    pairs = [(r, r ^ (1 << k)) for k in range(n.bit_length() - 1) for r in range(n)]
    require_channels("rhd", fabric, pairs, "recursive halving/doubling exchanges with rank XOR 2^k")
    b = Builder("rhd", spec, fabric)
    t = _halving(b, 0) if spec.name in ("reducescatter", "allreduce") else 0
    if spec.name in ("allgather", "allreduce"):
        _doubling(b, t)
    return b.finish("rhd", {})
