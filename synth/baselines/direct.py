"""Direct baselines: every rank exchanges with every peer at once (switch boxes, MI300X).

One step of all-pairs transfers per collective (allreduce: a direct reducescatter step, then a
direct allgather step), so every needed rank pair must be a channel.  The step declares the
rounds its load needs: one round for allgather on a fully connected box with a link per pair;
on an NVSwitch box ``ceil((n-1) C / port capacity)`` for the ``(n-1) C`` chunks a GPU port carries.

Per collective: allgather/alltoall/gather/scatter/broadcast copy each chunk from its holder to
every rank that needs it; reducescatter/reduce reduce every contribution straight into its
destination (concurrent reduces of disjoint contributions).
"""

from __future__ import annotations

import numpy as np

from synth.baselines._common import Builder, make_spec, require_channels
from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule, Transfer


def _moves(spec, step0: int) -> list[tuple[int, int, int, int, str]]:
    """(step, chunk, src, dst, op) of the direct algorithm."""
    out = []
    C, n = spec.chunks_per_rank, spec.ranks
    for ch in spec.chunks():
        if spec.name in ("reducescatter", "reduce"):
            out += [(step0, ch.id, r, ch.post[0], "reduce") for r in ch.pre if r != ch.post[0]]
        elif spec.name == "allreduce":
            d = ch.id // C
            out += [(step0, ch.id, r, d, "reduce") for r in range(n) if r != d]
            out += [(step0 + 1, ch.id, d, r, "copy") for r in range(n) if r != d]
        else:
            src = ch.pre[0]
            out += [(step0, ch.id, src, d, "copy") for d in ch.post if d != src]
    return out


def _owner_exchanges(spec):
    """For the collectives whose chunk ``g`` gathers at or spreads from its owner ``g // C``
    (reducescatter, allgather, allreduce): ``(chunk ids, the owners, the other ranks)``, one entry
    per (chunk, other rank), chunks in order and ranks ascending, as :func:`_moves` lists them."""
    n, m = spec.ranks, spec.num_chunks
    chunk = np.repeat(np.arange(m, dtype=np.int64), n - 1)
    owner = chunk // spec.chunks_per_rank
    other = np.tile(np.arange(n - 1, dtype=np.int64), m)
    other += other >= owner
    return chunk, owner, other


def build(fabric: Fabric, collective: str, *, root: int | None = None, chunks: int | None = None) -> Schedule:
    """Direct schedule for ``collective`` (default 1 chunk per rank); see the module docstring.

    Raises
    ------
    UnsupportedCollective
        When a needed rank pair is not a channel of ``fabric``.
    """
    spec = make_spec("direct", fabric, collective, root, chunks, 1)
    why = f"direct {spec.name} needs every pair it sends over to be a channel"
    b = Builder("direct", spec, fabric)
    if spec.name in ("reducescatter", "allgather", "allreduce"):   # every ordered pair, over arrays
        n = spec.ranks
        require_channels("direct", fabric, ((i, j) for i in range(n) for j in range(n) if i != j), why)
        chunk, owner, other = _owner_exchanges(spec)
        if spec.name != "allgather":
            b.add_many(0, chunk, other, owner, "reduce")
        if spec.name != "reducescatter":
            b.add_many(1 if spec.name == "allreduce" else 0, chunk, owner, other)
        return b.finish("direct", {})
    moves = _moves(spec, 0)
    require_channels("direct", fabric, sorted({(m[2], m[3]) for m in moves}), why)
    for step in sorted({m[0] for m in moves}):        # the moves of each step in order, as one batch
        b.extend(step, [Transfer(chunk, src, dst, op) for st, chunk, src, dst, op in moves if st == step])
    return b.finish("direct", {})
