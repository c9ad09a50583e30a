"""The writer's threadblocks as a :class:`~.program.Program`, without XML text in between.

The in-place check of an export (:func:`synth.formats.msccl.writer.Export.runs_in_place`)
replays the program the XML describes.  Printing the XML and parsing it back costs more than
the replay itself (about 7 s for a 32-rank one-shot all-reduce); :func:`program_of` builds the
same :class:`~.program.Program` the parser would return from the text (every field but the
source line numbers) in one pass over the steps.  :func:`parser_refuses` says when the parser
would have refused the text for its size (then the export is not declared in-place, as
before).
"""

from __future__ import annotations

from synth.formats.msccl.layout import chunks_in
import synth.formats.msccl.parse as parse
from synth.formats.msccl.program import Program, XGpu, XStep, XThreadblock


def _step(op) -> XStep:
    dep = op.deps[0] if op.deps else None
    src = op.src or ("i", -1)
    dst = op.dst or ("o", -1)
    return XStep(op.index, op.kind, src[0], src[1], dst[0], dst[1], 0 if op.kind == "nop" else op.cnt,
                 dep.tb if dep else -1, dep.index if dep else -1, int(op.hasdep))


def program_of(schedule, head: dict, scratch: list[int], tbs: list) -> Program:
    """The Program of the XML that :func:`synth.formats.msccl.writer._emit` writes for ``head``,
    ``scratch`` and ``tbs`` (threadblocks per GPU), with ``line`` left 0."""
    spec = schedule.spec
    i_chunks = chunks_in(spec, spec.input_blocks())
    o_chunks = chunks_in(spec, spec.output_blocks())
    gpus = tuple(XGpu(r, i_chunks, o_chunks, scratch[r],
                      tuple(XThreadblock(tid, t.send, t.recv, t.chan, tuple(_step(op) for op in t.ops))
                            for tid, t in enumerate(rank_tbs)))
                 for r, rank_tbs in enumerate(tbs))
    return Program(name=str(head["name"])[:200], coll=spec.name, coll_spelling=head["coll"], ngpus=head["ngpus"],
                   nchunksperloop=head["nchunksperloop"], nchannels=head["nchannels"], proto=head["proto"],
                   inplace=bool(head["inplace"]), outofplace=bool(head["outofplace"]),
                   min_bytes=head["minBytes"], max_bytes=head["maxBytes"], gpus=gpus)


def element_count(tbs: list) -> int:
    """``<algo>``, ``<gpu>``, ``<tb>`` and ``<step>`` elements of the XML of ``tbs``."""
    return 1 + len(tbs) + sum(len(rank_tbs) + sum(len(t.ops) for t in rank_tbs) for rank_tbs in tbs)


def parser_refuses(text_chars: int, tbs: list) -> bool:
    """Whether :func:`~synth.formats.msccl.parse.parse_program` refuses XML this long with these
    threadblocks for its size alone (:data:`~.parse.MAX_XML_CHARS`, :data:`~.parse.MAX_ELEMENTS`)."""
    return text_chars > parse.MAX_XML_CHARS or element_count(tbs) > parse.MAX_ELEMENTS


__all__ = ["element_count", "parser_refuses", "program_of"]
