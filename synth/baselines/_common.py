"""Shared pieces of the baselines: a step-indexed schedule builder and channel checks.

Every baseline places transfers at integer step indices with :class:`Builder`, then
:meth:`Builder.finish` drops empty steps, gives each step the fewest rounds its fabric load
needs (:func:`synth.ir.verifier.required_rounds`) and runs the verifier before returning.
"""

from __future__ import annotations

from itertools import repeat
from typing import Iterable, Sequence

from synth.ir.collectives import ROOTED, CollectiveSpec, canonical
from synth.ir.fabric import Fabric
from synth.ir.schedule import OPS, Schedule, Transfer
from synth.ir.verifier import check, sized_steps
from topo_probe.errors import InvalidArgument, UnsupportedCollective
from topo_probe.number_rules import is_int


#: a baseline with more transfers than this is refused (a schedule in memory costs ~200 bytes a transfer)
MAX_TRANSFERS = 3_000_000


class TooManyTransfers(UnsupportedCollective):
    """A baseline would need more than :data:`MAX_TRANSFERS` transfers (e.g. 8 rings x 8 chunks
    of an allgather on 1,024 ranks)."""


def make_spec(algo: str, fabric: Fabric, collective: str, root: int | None, chunks: int | None,
              default_chunks: int) -> CollectiveSpec:
    """The collective instance a baseline builds for (``root`` defaults to 0 when rooted)."""
    name = canonical(collective)
    if name in ROOTED and root is None:
        root = 0
    c = default_chunks if chunks is None else chunks
    if not is_int(c) or c < 1:
        raise InvalidArgument(f"{algo} {name}: chunks must be an integer >= 1, got {c!r}")
    return CollectiveSpec(name, fabric.num_ranks, int(c), root)


def require_channels(algo: str, fabric: Fabric, pairs: Iterable[tuple[int, int]], why: str) -> None:
    """Raise UnsupportedCollective naming the first pair of ``pairs`` that is not a channel."""
    for i, j in pairs:
        if i != j and not fabric.has_channel(i, j):
            raise UnsupportedCollective(f"{algo}: rank {i} -> {j} is not a channel of fabric "
                                        f"{fabric.topology_name!r} ({why})")


class Builder:
    """Collects transfers by step index for one collective instance on one fabric."""

    def __init__(self, algo: str, spec: CollectiveSpec, fabric: Fabric) -> None:
        self.algo, self.spec, self.fabric = algo, spec, fabric
        self.steps: dict[int, list[Transfer]] = {}
        self.count = 0

    def add(self, step: int, chunk: int, src: int, dst: int, op: str = "copy") -> None:
        self.count += 1
        if self.count > MAX_TRANSFERS:
            raise TooManyTransfers(f"{self.algo} {self.spec.name} on {self.spec.ranks} ranks with "
                                   f"{self.spec.chunks_per_rank} chunks per rank needs more than "
                                   f"{MAX_TRANSFERS:,} transfers")
        at = self.steps.get(step)
        if at is None:
            at = self.steps[step] = []
        at.append(Transfer(chunk, src, dst, op))

    def extend(self, step: int, transfers: list[Transfer]) -> None:
        """Add ``transfers`` at step index ``step``, in order (as many :meth:`add` calls would)."""
        if self.count + len(transfers) > MAX_TRANSFERS:
            self.expect(self.count + len(transfers))
        self.count += len(transfers)
        at = self.steps.get(step)
        if at is None:
            at = self.steps[step] = []
        at.extend(transfers)

    def add_many(self, step: int, chunks, srcs, dsts, op: str = "copy") -> None:
        """Add transfers ``chunks[k]: srcs[k] -> dsts[k]`` (sequences or integer NumPy arrays of one
        length) with ``op`` at step index ``step``, in ``k`` order: what ``add(step, chunks[k], srcs[k],
        dsts[k], op)`` for each ``k`` would do, without a Python call per transfer."""
        cols = [c.tolist() if hasattr(c, "tolist") else list(c) for c in (chunks, srcs, dsts)]
        self.extend(step, list(map(Transfer, *cols, repeat(op, len(cols[0])))))

    def add_steps(self, steps, chunks, srcs, dsts, reduce) -> None:
        """Add transfers ``chunks[k]: srcs[k] -> dsts[k]`` at step index ``steps[k]`` (integer NumPy
        arrays of one length), a reduce where ``reduce[k]`` (a boolean array) else a copy: what
        ``add`` for each ``k`` in order would do (each step keeps its transfers in ``k`` order)."""
        import numpy as np
        order = np.argsort(steps, kind="stable")
        at = steps[order]
        ops = np.array(OPS, dtype=object)[np.asarray(reduce, dtype=np.intp)[order]].tolist()
        moved = list(map(Transfer, chunks[order].tolist(), srcs[order].tolist(), dsts[order].tolist(), ops))
        cuts = [0, *(np.flatnonzero(np.diff(at)) + 1).tolist(), len(at)]
        for a, z in zip(cuts, cuts[1:]):
            if z > a:
                self.extend(int(at[a]), moved[a:z])

    def expect(self, transfers: int) -> None:
        """Refuse early (:class:`TooManyTransfers`) when the schedule will need ``transfers`` transfers."""
        if transfers > MAX_TRANSFERS:
            self.count = transfers
            self.add(0, 0, 0, 0)

    def path(self, chunk: int, ranks: Sequence[int], times: Sequence[int], mode: str = "copy") -> None:
        """Move ``chunk`` along ``ranks[0] -> ranks[1] -> ...``, hop ``h`` at step ``times[h]``.

        ``mode="reduce"`` carries a partial reduction that starts as ``ranks[0]``'s own
        contribution: each hop reduces into a rank not yet on the way and copies onto a rank
        already visited (its copy is an older, smaller partial of the same chunk), so relays
        through intermediate GPUs never count a contribution twice.
        """
        seen = {ranks[0]}
        for h, (u, v) in enumerate(zip(ranks, ranks[1:])):
            op = "reduce" if mode == "reduce" and v not in seen else "copy"
            seen.add(v)
            self.add(times[h], chunk, u, v, op)

    def finish(self, name: str, meta: dict) -> Schedule:
        """The verified schedule: steps in index order, empty ones dropped, rounds from the load."""
        steps, loads = sized_steps(self.fabric, (self.steps[t] for t in sorted(self.steps)))
        spec = self.spec
        sched = Schedule(spec.name, spec.ranks, spec.chunks_per_rank, steps, spec.root, False,
                         name, self.fabric.topology_name, self.fabric.fingerprint,
                         {"baseline": name, **meta})
        check(sched, self.fabric, loads=loads)
        return sched


def block_chunks(spec: CollectiveSpec) -> list[tuple[int, int, int]]:
    """``(chunk id, block owner, piece c)`` for collectives whose chunks are ``r*C + c``."""
    C = spec.chunks_per_rank
    return [(g, g // C, g % C) for g in range(spec.num_chunks)]
