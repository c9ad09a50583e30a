"""Bruck's algorithms (``ceil(log2 n)`` steps, any n).

* allgather: in step ``k`` rank ``r`` copies to ``r - 2^k`` the blocks of owners
  ``r, r+1, ..., r + min(2^k, n - 2^k) - 1`` (mod n) it holds; after the step ``r - 2^k`` holds
  ``2^(k+1)`` consecutive blocks (all n after the last step).
* alltoall: the block from ``s`` to ``d`` travels ``(d - s) mod n`` forward in powers of two: in
  step ``k`` every block whose distance has bit ``k`` set moves from its current rank ``r`` to
  ``r + 2^k``.

Every pair ``r -> r -+ 2^k`` used must be a channel.
"""

from __future__ import annotations

from synth.baselines._common import Builder, make_spec, require_channels
from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule
from topo_probe.errors import UnsupportedCollective


def _allgather(b: Builder) -> None:
    n, C = b.spec.ranks, b.spec.chunks_per_rank
    k = 0
    while (1 << k) < n:
        step = 1 << k
        for r in range(n):
            for j in range(min(step, n - step)):
                o = (r + j) % n
                for c in range(C):
                    b.add(k, o * C + c, r, (r - step) % n)
        k += 1


def _alltoall(b: Builder) -> None:
    n, C = b.spec.ranks, b.spec.chunks_per_rank
    # a block travelling distance d makes one hop per set bit of d; every rank sends each distance once
    b.expect(C * n * sum(bin(d).count("1") for d in range(n)))
    for g in range(b.spec.num_chunks):
        s, d = divmod(g // C, n)
        dist, cur, k = (d - s) % n, s, 0
        while (1 << k) < n:
            if dist >> k & 1:
                nxt = (cur + (1 << k)) % n
                b.add(k, g, cur, nxt)
                cur = nxt
            k += 1


def build(fabric: Fabric, collective: str, *, root: int | None = None, chunks: int | None = None) -> Schedule:
    """Bruck allgather or alltoall (default 1 chunk per rank); see the module docstring.

    Raises
    ------
    UnsupportedCollective
        Other collectives, or a needed pair ``r -> r -+ 2^k`` that is not a channel.
    """
    spec = make_spec("bruck", fabric, collective, root, chunks, 1)
    n = spec.ranks
    if spec.name not in ("allgather", "alltoall"):
        raise UnsupportedCollective(f"bruck: {spec.name} is not available (bruck builds allgather, alltoall)")
    sign = -1 if spec.name == "allgather" else 1
    pairs = [(r, (r + sign * (1 << k)) % n) for k in range(max(n - 1, 0).bit_length()) for r in range(n)]
    require_channels("bruck", fabric, pairs, f"bruck {spec.name} sends from r to r {'-' if sign < 0 else '+'} 2^k")
    b = Builder("bruck", spec, fabric)
    if n > 1:
        (_allgather if spec.name == "allgather" else _alltoall)(b)
    return b.finish("bruck", {})
