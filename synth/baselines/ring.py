"""NCCL-style ring baselines for all eight collectives.

Rings come from :func:`synth.baselines.ringsearch.find_rings` (as many capacity-disjoint
directed Hamiltonian rings as the fabric offers).  Each ring is one NCCL "channel" and carries
an equal share: piece ``c`` of a block (chunk ``r*C + c``, or ``c`` for broadcast/reduce) runs
on ring ``c % R``, so ``chunks_per_rank = R x pipelining`` uses every ring evenly (the default
is ``C = R``).  Per collective, on a ring ``p0 -> p1 -> ... -> p{n-1} -> p0``:

* allgather: a block leaves its owner and is copied n-1 hops on (n-1 steps);
* reducescatter: the block of rank ``p_k`` starts at ``p_{k+1}`` and is reduced into each next
  rank for n-1 hops, ending reduced at ``p_k`` (n-1 steps);
* allreduce: reducescatter then allgather with the same chunk ids (chunk ``g`` is reduced at
  rank ``g // C`` after the first half), 2(n-1) steps;
* broadcast / reduce: a chain along the ring from / to the root; chunk ``m`` of a ring enters the
  chain at step ``m`` (pipelined: ``M + n - 2`` steps for ``M`` chunks per ring);
* gather / scatter: every block moves hop by hop along the ring to / from the root at once
  (scatter sends the farthest blocks first), n-1 steps;
* alltoall: each block is relayed along the ring from source to destination (n-1 steps).

Relays: where the channel graph has no Hamiltonian ring (some partial DGX-1 allocations), one
ring over all ranks is used and a hop between ranks without a channel follows a shortest
channel path through intermediate GPUs; each ring step then takes ``L`` schedule steps (``L``
= longest such path) and empty steps are dropped.  A relaying GPU of a combining collective
adds its own contribution the first time the partial passes it (and only copies later), so
nothing is counted twice.
"""

from __future__ import annotations

import numpy as np

from synth.baselines._common import Builder, block_chunks, make_spec
from synth.baselines.ringsearch import RingPlan, find_rings
from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule


class _Rings:
    """Ring plan plus position lookups and hop timing."""

    def __init__(self, plan: RingPlan, used: int) -> None:
        self.plan = plan
        self.R = used
        self.L = max((len(p) - 1 for hops in plan.hops for p in hops), default=1)
        self.pos = [{r: k for k, r in enumerate(ring)} for ring in plan.rings]

    def route(self, b: Builder, i: int, chunk: int, start_rank: int, nhops: int, t0: int,
              mode: str = "copy") -> None:
        """Move ``chunk`` ``nhops`` ring hops along ring ``i`` from ``start_rank``, ring hop h
        during ring step ``t0 + h``."""
        if nhops <= 0:
            return
        ring, hops = self.plan.rings[i], self.plan.hops[i]
        n, k0 = len(ring), self.pos[i][start_rank]
        ranks, times = [start_rank], []
        for h in range(nhops):
            p = hops[(k0 + h) % n]
            for j in range(len(p) - 1):
                ranks.append(p[j + 1])
                times.append((t0 + h) * self.L + j)
        b.path(chunk, ranks, times, mode)

    def at(self, i: int, rank: int, offset: int) -> int:
        """The rank ``offset`` positions after ``rank`` on ring ``i``."""
        ring = self.plan.rings[i]
        return ring[(self.pos[i][rank] + offset) % len(ring)]

    def dist(self, i: int, a: int, b: int) -> int:
        """Ring hops from ``a`` forward to ``b`` on ring ``i``."""
        return (self.pos[i][b] - self.pos[i][a]) % len(self.plan.rings[i])


def _blocks(b: Builder, rg: _Rings, mode: str) -> None:
    """allgather / reducescatter / allreduce halves; ``mode`` is 'gather', 'scatter' or 'all'."""
    if not rg.plan.relayed:
        _blocks_direct(b, rg, mode)
        return
    spec = b.spec
    n, C = spec.ranks, spec.chunks_per_rank
    for g in range(spec.num_chunks):
        owner, i = g // C, (g % C) % rg.R
        if mode in ("scatter", "all"):
            rg.route(b, i, g, rg.at(i, owner, 1), n - 1, 0, "reduce")
        if mode in ("gather", "all"):
            rg.route(b, i, g, owner, n - 1, n - 1 if mode == "all" else 0)


def _blocks_direct(b: Builder, rg: _Rings, mode: str) -> None:
    """:func:`_blocks` on rings without relays, one ring step at a time over all chunks at once: ring
    step ``h`` of every chunk's route is one transfer, so each step holds one transfer per chunk,
    in chunk order, as the chunk-by-chunk routes would place them (every hop of a reduce route
    reaches a rank not yet on its way: all reduces)."""
    spec = b.spec
    n, C = spec.ranks, spec.chunks_per_rank
    g = np.arange(spec.num_chunks)
    ring_of = (g % C) % rg.R
    rings = np.array(rg.plan.rings[:rg.R], dtype=np.int64)
    pos = np.empty_like(rings)
    pos[np.arange(rg.R)[:, None], rings] = np.arange(n)
    home = pos[ring_of, g // C]              # the owner's place on its chunk's ring
    halves = {"scatter": [(home + 1, 0, "reduce")], "gather": [(home, 0, "copy")],
              "all": [(home + 1, 0, "reduce"), (home, n - 1, "copy")]}[mode]
    for k0, t0, op in halves:
        for h in range(n - 1):
            b.add_many(t0 + h, g, rings[ring_of, (k0 + h) % n], rings[ring_of, (k0 + h + 1) % n], op)


def _rooted(b: Builder, rg: _Rings) -> None:
    spec = b.spec
    n, root, name = spec.ranks, spec.root, spec.name
    if name in ("broadcast", "reduce"):
        for c in range(spec.num_chunks):
            i, m = c % rg.R, c // rg.R
            if name == "broadcast":
                rg.route(b, i, c, root, n - 1, m)
            else:
                rg.route(b, i, c, rg.at(i, root, 1), n - 1, m, "reduce")
        return
    for g, r, c in block_chunks(spec):
        i = c % rg.R
        if r == root:
            continue
        if name == "gather":
            rg.route(b, i, g, r, rg.dist(i, r, root), 0)
        else:  # scatter
            d = rg.dist(i, root, r)
            rg.route(b, i, g, root, d, n - 1 - d)


def _alltoall(b: Builder, rg: _Rings) -> None:
    spec = b.spec
    n, C = spec.ranks, spec.chunks_per_rank
    for g in range(spec.num_chunks):
        s, d = divmod(g // C, n)
        i = (g % C) % rg.R
        rg.route(b, i, g, s, rg.dist(i, s, d), 0)


def build(fabric: Fabric, collective: str, *, root: int | None = None, chunks: int | None = None,
          max_rings: int = 64) -> Schedule:
    """Ring schedule for ``collective`` on ``fabric`` (see the module docstring).

    Parameters
    ----------
    fabric : Fabric
        Channels and capacities; the rings are searched on it.
    collective : str
        Any spelling :func:`synth.ir.collectives.canonical` accepts.
    root : int, optional
        Root of broadcast/reduce/gather/scatter (default 0).
    chunks : int, optional
        Chunks per rank ``C`` (default: the number of rings found).
    max_rings : int
        Upper limit on the rings searched for.

    Returns
    -------
    Schedule
        Verified against ``fabric``; ``meta`` has ``rings`` (rank orders used), ``relayed``
        and ``rings_found``.
    """
    plan = find_rings(fabric, max_rings)
    spec = make_spec("ring", fabric, collective, root, chunks, len(plan.rings))
    per_ring = spec.num_chunks if spec.name in ("broadcast", "reduce") else spec.chunks_per_rank
    rg = _Rings(plan, min(len(plan.rings), per_ring))
    b = Builder("ring", spec, fabric)
    hops = {"allgather": spec.ranks - 1, "reducescatter": spec.ranks - 1, "allreduce": 2 * (spec.ranks - 1),
            "alltoall": spec.ranks // 2}.get(spec.name, 0)
    b.expect(spec.num_chunks * hops)
    if spec.ranks > 1:
        if spec.name == "allgather":
            _blocks(b, rg, "gather")
        elif spec.name == "reducescatter":
            _blocks(b, rg, "scatter")
        elif spec.name == "allreduce":
            _blocks(b, rg, "all")
        elif spec.name == "alltoall":
            _alltoall(b, rg)
        else:
            _rooted(b, rg)
    meta = {"rings": [list(r) for r in plan.rings[:rg.R]], "rings_found": len(plan.rings),
            "relayed": plan.relayed}
    if plan.relayed:
        meta["relay_paths"] = [[list(p) for p in hops] for hops in plan.hops]
    return b.finish("ring", meta)
