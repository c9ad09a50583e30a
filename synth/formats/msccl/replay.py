"""Replay a checked MSCCL :class:`~synth.formats.msccl.program.Program` into the schedule IR.

Every buffer slot's chunk is tracked from the collective's input layout.  A receive (``r``,
``rcs``, ``rrc``, ``rrs``, ``rrcs``) matched first-in first-out to the sender's send on the same
(sender, receiver, channel) connection becomes a :class:`~synth.ir.schedule.Transfer`: a
``reduce`` when the receiver combines it (``rrc``, ``rrs``, ``rrcs``, or a local ``re`` that
later folds the received scratch slot into its chunk), a ``copy`` otherwise.  Each transfer gets
the earliest step consistent with what it reads, what it overwrites, its threadblock running one
network operation per step, and the ``depid``/``deps`` it waits for.  In-place programs
(``inplace="1"``) address the input inside the output (allgather: block r of the output; reduce-
scatter: the output is block r of the input; the others share one buffer).  At the end every
rank's output slots must hold the chunks the collective puts there.
"""

from __future__ import annotations

from synth.formats.msccl.layout import chunk_offset
from synth.formats.msccl.program import RECEIVES, SENDS, Op, Program
from synth.ir.collectives import CollectiveSpec
from synth.ir.schedule import Transfer
from topo_probe.errors import ScheduleFormatError

Loc = tuple[str, int]


def infer_spec(prog: Program) -> CollectiveSpec:
    """The collective instance a program implements (chunks per rank from its buffer sizes)."""
    n, name = prog.ngpus, prog.collective
    chunks = max([max(c["i"], c["o"]) for c in prog.chunks.values()] + [prog.nchunksperloop if name != "allgather"
                                                                       else 0])
    per_rank = chunks if name in ("broadcast", "reduce") else max(1, chunks // n)
    root = None
    if name in ("broadcast", "reduce", "gather", "scatter"):
        senders = {op.rank for ops in prog.tbs.values() for op in ops if op.kind in SENDS}
        receivers = {op.rank for ops in prog.tbs.values() for op in ops if op.kind in RECEIVES}
        pool = receivers if name in ("broadcast", "scatter") else senders
        lonely = [r for r in range(n) if r not in pool]
        root = lonely[0] if lonely else 0
    try:
        return CollectiveSpec(name, n, per_rank, root)
    except Exception as e:
        raise ScheduleFormatError(f"{prog.name or 'program'}: not a {name} of {n} ranks: {e}") from None


class Replay:
    """The replay state (see the module docstring); :meth:`run` returns ``[(step, Transfer)]``."""

    def __init__(self, prog: Program, spec: CollectiveSpec, source: str) -> None:
        self.prog, self.spec, self.source = prog, spec, source
        self.per_in = spec.input_blocks() * spec.pieces_per_block
        self.per_out = spec.output_blocks() * spec.pieces_per_block
        n = prog.ngpus
        self.content: list[dict[Loc, int]] = [{} for _ in range(n)]
        self.origin: list[dict[Loc, int]] = [{} for _ in range(n)]       # slot -> index of the transfer that filled it
        self.write_t: list[dict[Loc, float]] = [{} for _ in range(n)]
        self.read_t: list[dict[Loc, float]] = [{} for _ in range(n)]
        self.fifo: dict[tuple[int, int, int], list] = {}
        self.transfers: list[list] = []                                  # [step, Transfer]
        for ch in spec.chunks():
            for r in ch.pre:
                self.content[r][self.norm(r, ("i", chunk_offset(spec, spec.input_position(ch.id, r))))] = ch.id

    def norm(self, rank: int, loc: Loc) -> Loc:
        """One name per physical slot: in-place programs see the input inside the output."""
        if not self.prog.inplace:
            return loc
        buf, off = loc
        name = self.spec.name
        if name in ("allgather", "gather") and buf == "i":
            return ("o", rank * self.per_in + off)
        if name in ("reducescatter", "scatter") and buf == "o":
            return ("i", rank * self.per_out + off)
        if name not in ("allgather", "gather", "reducescatter", "scatter") and buf == "i":
            return ("o", off)
        return loc

    def _holding(self, op: Op, loc: Loc) -> int:
        rank = op.rank
        if loc not in self.content[rank]:
            raise ScheduleFormatError(f"{self.source}: {op.where}: reads {loc[0]}[{loc[1]}] before anything is there")
        return self.content[rank][loc]

    # ------------------------------------------------------------------ one operation
    def local(self, op: Op, t0: float) -> float:
        """``cpy`` and ``re``: a local copy or reduce."""
        r, src, dst = op.rank, self.norm(op.rank, op.src), self.norm(op.rank, op.dst)
        chunk = self._holding(op, src)
        t = max(t0, self.write_t[r].get(src, 0.0), self.read_t[r].get(dst, 0.0), self.write_t[r].get(dst, 0.0))
        if op.kind == "re":
            if self.content[r].get(dst) != chunk:
                raise ScheduleFormatError(f"{self.source}: {op.where}: reduces chunk {chunk} into a slot holding "
                                          f"{self.content[r].get(dst)}")
            k = self.origin[r].get(src)
            if k is not None:                       # the received partial is combined here
                self.transfers[k][1] = Transfer(chunk, self.transfers[k][1].src, r, "reduce")
        else:
            self.content[r][dst] = chunk
            if src in self.origin[r]:
                self.origin[r][dst] = self.origin[r][src]
        self.read_t[r][src] = max(self.read_t[r].get(src, 0.0), t)
        self.write_t[r][dst] = t
        return t

    def send(self, op: Op, loc: Loc, chunk: int, t: float) -> None:
        self.fifo.setdefault((op.rank, op.send_peer, op.chan), []).append((chunk, t, loc))

    def receive(self, op: Op, t0: float) -> float | None:
        """A receive (alone or fused); None while its message has not been sent."""
        queue = self.fifo.get((op.recv_peer, op.rank, op.chan))
        if not queue:
            return None
        chunk, t_send, src_loc = queue.pop(0)
        r, dst = op.rank, self.norm(op.rank, op.dst)
        combine = op.kind in ("rrc", "rrs", "rrcs")
        if combine:
            local = self.norm(r, op.src)
            if self._holding(op, local) != chunk:
                raise ScheduleFormatError(f"{self.source}: {op.where}: receives chunk {chunk} to reduce with "
                                          f"{local[0]}[{local[1]}] holding chunk {self.content[r][local]}")
        stores = op.kind in ("r", "rcs", "rrc", "rrcs")
        t = max(t0, t_send)
        if stores:
            t = max(t, self.read_t[r].get(dst, 0.0), self.write_t[r].get(dst, 1.0) - 1)
        t = float(int(t))
        sender_reads = self.read_t[op.recv_peer]
        sender_reads[src_loc] = max(sender_reads.get(src_loc, 0.0), t)
        self.transfers.append([int(t), Transfer(chunk, op.recv_peer, r, "reduce" if combine else "copy")])
        if stores:
            self.content[r][dst] = chunk
            self.origin[r][dst] = len(self.transfers) - 1
            self.write_t[r][dst] = t + 1
        if op.kind in SENDS:                           # fused: forward what arrived (reduced) next step
            self.send(op, dst if stores else self.norm(r, op.src), chunk, t + 1)
        return t

    def check_outputs(self) -> None:
        """Every rank ends with the chunks the collective puts in its output slots."""
        spec = self.spec
        for ch in spec.chunks():
            for r in ch.post:
                loc = self.norm(r, ("o", chunk_offset(spec, spec.output_position(ch.id, r))))
                if self.content[r].get(loc) != ch.id:
                    raise ScheduleFormatError(f"{self.source}: gpu {r} ends with {loc[0]}[{loc[1]}] holding "
                                              f"{self.content[r].get(loc)}, the collective needs chunk {ch.id} there")


__all__ = ["Replay", "infer_spec"]
