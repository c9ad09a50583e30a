"""MSCCL XML to a verified :class:`~synth.ir.schedule.Schedule`.

Three stages, each refusing bad input with one :class:`~topo_probe.errors.ScheduleFormatError`
line that names the file, gpu, threadblock and step:

1. :func:`~synth.formats.msccl.parse.parse_program`: bounded parsing and the runtime's own
   attribute checks;
2. :func:`~synth.formats.msccl.replay.replay`: the program run symbolically as the runtime runs
   it, out of place when ``outofplace="1"`` and in place (input inside the output buffer, as
   NCCL's in-place calls) when ``inplace="1"`` — both when both are set — ending with every
   output checked;
3. the chunks that crossed between GPUs become the schedule IR: a transfer per chunk in the
   round it crossed, ``reduce`` when the receiver already holds other contributions of that
   chunk, ``copy`` otherwise; then :func:`synth.ir.verifier.verify` replays the IR.

The IR keeps one copy of each chunk per rank; a program whose rank sends one partial sum of a
chunk while it holds another (say, relays a neighbour's partial without adding its own) has no
IR form and is refused with that reason.  With a ``fabric`` of the same rank count, each step
declares the rounds its load needs on that fabric, every transfer must use one of its channels
(:class:`~topo_probe.errors.ScheduleInvalid` otherwise) and the schedule is tagged with its
topology.
"""

from __future__ import annotations

from itertools import groupby

from synth.formats.msccl.layout import RECEIVES, SENDS, chunks_per_rank_of
from synth.formats.msccl.parse import parse_program
from synth.formats.msccl.program import Program
from synth.formats.msccl.replay import NetTransfer, check_size, replay, where
from synth.ir.collectives import ROOTED, CollectiveSpec
from synth.ir.schedule import Schedule, Step, Transfer
from topo_probe.errors import ScheduleFormatError, ScheduleInvalid, TopocollError


#: most (rank, chunk) pairs a collective instance may have here (the verifier tracks each)
MAX_STATE = 16_000_000


def _spec_candidates(p: Program, source: str) -> list[CollectiveSpec]:
    c = chunks_per_rank_of(p.coll, p.ngpus, p.nchunksperloop)
    if c is None:
        raise ScheduleFormatError(f"{source}: <algo>: nchunksperloop={p.nchunksperloop} does not cut into "
                                  f"whole chunks for each of the {p.ngpus} gpus of a {p.coll}")
    cells = p.ngpus * CollectiveSpec(p.coll, p.ngpus, c, 0 if p.coll in ROOTED else None).num_chunks
    if cells > MAX_STATE:
        raise ScheduleFormatError(f"{source}: <algo>: a {p.coll} of {p.ngpus} gpus with {p.nchunksperloop} chunks "
                                  f"per loop has {cells} (rank, chunk) pairs, more than the {MAX_STATE} this "
                                  f"reader tracks")
    if p.coll not in ROOTED:
        return [CollectiveSpec(p.coll, p.ngpus, c)]
    senders = {g.id for g in p.gpus for tb in g.tbs for st in tb.steps if st.kind in SENDS}
    receivers = {g.id for g in p.gpus for tb in g.tbs for st in tb.steps if st.kind in RECEIVES}
    quiet = receivers if p.coll in ("broadcast", "scatter") else senders
    roots = [r for r in range(p.ngpus) if r not in quiet] or list(range(p.ngpus))
    return [CollectiveSpec(p.coll, p.ngpus, c, r) for r in roots[:4]]


#: passes of :func:`_ir_steps` that may move a send of an older partial to its round
RETIME_PASSES = 4


def _ir_steps(transfers: list[NetTransfer], spec: CollectiveSpec, source: str):
    """Group transfers by round into IR steps, choosing copy/reduce from the receiver's copy.

    A send of a partial sum its sender held at the start of an earlier round (a one-shot
    all-reduce sends its own input while it already reduces its peers' into its output) is the
    IR transfer of that earlier round, where the IR reads the state at the step's start: such
    sends are moved there and the grouping redone (at most :data:`RETIME_PASSES` times)."""
    for _ in range(RETIME_PASSES):
        moved = _retimed(transfers, spec)
        if moved is None:
            break
        transfers = moved
    return _group(transfers, spec, source)


def _retimed(transfers: list[NetTransfer], spec: CollectiveSpec) -> list[NetTransfer] | None:
    """The transfers with each stale send moved to the last round whose start saw its sender
    hold exactly what it sent; None when no send is stale (or none can move)."""
    if not spec.combining:
        return None
    history: dict[tuple[int, int], list[tuple[int, int]]] = {}     # (rank, chunk) -> [(round, mask)]
    for ch in spec.chunks():
        for r in ch.pre:
            history[(r, ch.id)] = [(-1, 1 << r)]
    held = {key: v[0][1] for key, v in history.items()}
    out, changed = [], False
    for time, group in groupby(sorted(transfers, key=lambda t: (t.time, t.dst, t.chunk, t.src)), key=lambda t: t.time):
        group = list(group)
        for t in group:
            if held.get((t.src, t.chunk), 0) != t.mask:
                earlier = [w for w, m in history.get((t.src, t.chunk), []) if m == t.mask and w < time]
                if earlier:
                    t = NetTransfer(max(earlier[-1], 0), t.chunk, t.src, t.dst, t.mask, t.origin)
                    changed = True
            out.append(t)
        for t in group:
            cur = held.get((t.dst, t.chunk), 0)
            held[(t.dst, t.chunk)] = cur | t.mask if cur and not cur & t.mask else t.mask
            history.setdefault((t.dst, t.chunk), []).append((time + 1, held[(t.dst, t.chunk)]))
    return out if changed else None


def _group(transfers: list[NetTransfer], spec: CollectiveSpec, source: str):
    held: list[dict[int, int]] = [{} for _ in range(spec.ranks)]
    for ch in spec.chunks():
        for r in ch.pre:
            held[r][ch.id] = 1 << r if spec.combining else 1
    steps, origins = [], []
    for _, group in groupby(sorted(transfers, key=lambda t: (t.time, t.dst, t.chunk, t.src)), key=lambda t: t.time):
        group = list(group)
        out, updates = [], []
        for t in group:
            have = held[t.src].get(t.chunk, 0)
            if spec.combining and have != t.mask:
                raise ScheduleFormatError(
                    f"{source}: {where(t.origin)}: receives from gpu {t.src} the contributions "
                    f"{_ranks(t.mask)} to chunk {t.chunk}, but gpu {t.src}'s copy then holds {_ranks(have)}: the "
                    f"schedule IR keeps one copy of a chunk per rank, so this program has no IR form")
            cur = held[t.dst].get(t.chunk, 0)
            op = "reduce" if spec.combining and cur and not cur & t.mask else "copy"
            out.append(Transfer(t.chunk, t.src, t.dst, op))
            updates.append((t, op))
        for t, op in updates:
            mask = t.mask if spec.combining else 1
            held[t.dst][t.chunk] = held[t.dst].get(t.chunk, 0) | mask if op == "reduce" else mask
        steps.append(out)
        origins.append([t.origin for t in group])
    return steps, origins


def _ranks(mask: int) -> list[int]:
    return [r for r in range(mask.bit_length()) if mask >> r & 1]


def _schedule(p: Program, spec: CollectiveSpec, inplace: bool, transfers, source: str, fabric):
    from synth.ir.verifier import required_rounds, verify
    steps, origins = _ir_steps(transfers, spec, source)
    rounds = [1] * len(steps)
    topo_name = topo_fp = ""
    if fabric is not None and fabric.num_ranks == spec.ranks:
        for ts, os_ in zip(steps, origins):
            for t, o in zip(ts, os_):
                if not fabric.has_channel(t.src, t.dst):
                    raise ScheduleInvalid(f"{source}: {where(o)}: gpu {t.src} -> gpu {t.dst} is not a channel of "
                                          f"topology {fabric.topology_name!r}", rule="no-channel", rank=t.src,
                                          chunk=t.chunk)
        rounds = [required_rounds(fabric, [(t.src, t.dst) for t in ts]) for ts in steps]
        topo_name, topo_fp = fabric.topology_name, fabric.fingerprint
    meta = {"imported_from": "msccl-xml",
            "msccl": {"name": p.name, "proto": p.proto, "nchannels": p.nchannels,
                      "nchunksperloop": p.nchunksperloop, "inplace": p.inplace, "outofplace": p.outofplace,
                      "min_bytes": p.min_bytes, "max_bytes": p.max_bytes,
                      "max_threadblocks": max(len(g.tbs) for g in p.gpus),
                      "instructions": p.instruction_counts(), "coll": p.coll_spelling}}
    sched = Schedule(spec.name, spec.ranks, spec.chunks_per_rank,
                     tuple(Step(r, tuple(ts)) for r, ts in zip(rounds, steps)), spec.root,
                     inplace, p.name, topo_name, topo_fp, meta=meta)
    report = verify(sched)
    if not report.ok:
        v = report.violations[0]
        at = f"{where(origins[v.step][v.transfer])}: " if v.step is not None and v.transfer is not None else ""
        raise ScheduleFormatError(f"{source}: {at}{v.message}")
    return sched


def from_msccl_xml(text: str, *, source: str = "<xml>", fabric=None) -> Schedule:
    """Read an MSCCL XML algorithm into a verified Schedule (see the module docstring).

    Parameters
    ----------
    text : str
        The XML.
    source : str
        File name used in messages.
    fabric : synth.ir.fabric.Fabric, optional
        When it has the algorithm's rank count: steps declare the rounds they need on it and the
        schedule is tagged with its topology.

    Raises
    ------
    ScheduleFormatError
        Malformed, hostile, wrong (deadlock, race, double count, wrong output) or IR-less programs.
    ScheduleInvalid
        A transfer between GPUs that ``fabric`` does not connect.

    Examples
    --------
    >>> from synth.ir.schedule import Schedule, Step, Transfer
    >>> from synth.formats.msccl.writer import to_msccl_xml
    >>> ag = Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),))
    >>> back = from_msccl_xml(to_msccl_xml(ag))
    >>> len(back.steps), set(back.steps[0].transfers) == set(ag.steps[0].transfers)
    (1, True)
    """
    program = parse_program(text, source=source)
    check_size(program, source)
    modes = ([False] if program.outofplace else []) + ([True] if program.inplace else [])
    first_error: TopocollError | None = None
    for spec in _spec_candidates(program, source):
        try:
            runs = [replay(program, spec, inplace=m, source=source) for m in modes]
            return _schedule(program, spec, modes[0], runs[0].transfers, source, fabric)
        except ScheduleFormatError as e:
            first_error = first_error or e
    raise first_error


__all__ = ["from_msccl_xml"]
