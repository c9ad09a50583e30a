"""What the MSCCL XML writer and reader share: dialects, runtime limits, buffer layout.

Buffers and chunks
------------------
An MSCCL algorithm cuts each buffer into ``nchunksperloop``-sized loops of equal chunks; a
step names a buffer (``i`` input, ``o`` output, ``s`` scratch), a chunk offset and a count.
Our chunk positions (:mod:`synth.ir.collectives`) map onto MSCCL offsets as
``block * P + piece`` with P pieces per block, so chunk ``g`` of an allreduce is ``i[g]``/``o[g]``,
allgather chunk ``r*C+c`` is ``o[r*C+c]`` and rank r's ``i[c]``, and so on.

In-place calls alias the buffers the way NCCL and RCCL do (RCCL ``msccl_lifecycle.cc``,
``mscclInternalSchedulerSelectAlgo``: allgather/gather are in place when ``sendbuff ==
recvbuff + rank * count``, reducescatter/scatter when ``recvbuff == sendbuff + rank * count``,
the others when the two pointers are equal).  :func:`alias` folds a (buffer, offset) onto the
one place it names in such a call.

>>> from synth.ir.collectives import CollectiveSpec
>>> ag = CollectiveSpec("allgather", 4, 2)
>>> alias(ag, 3, "i", 1, inplace=True), alias(ag, 3, "i", 1, inplace=False)
(('o', 7), ('i', 1))
>>> alias(CollectiveSpec("allreduce", 4, 1), 0, "o", 2, inplace=True)
('i', 2)
"""

from __future__ import annotations

from synth.ir.collectives import CollectiveSpec

#: collective spellings per dialect: "msccl" (microsoft/msccl), "azure" (Azure's
#: msccl-executor-nccl) and "rccl" (ROCm/rccl).  All three write what both runtime parsers accept
#: (``src/misc/msccl/msccl_parser.cc``: ``reducescatter``; msccl-tools' ``reduce_scatter`` is
#: refused there, so no dialect writes it; the reader still takes it)
COLL_NAMES = {
    "azure": {"allgather": "allgather", "reducescatter": "reducescatter", "allreduce": "allreduce",
              "alltoall": "alltoall", "broadcast": "broadcast", "reduce": "reduce",
              "gather": "gather", "scatter": "scatter"},
}
COLL_NAMES["msccl"] = dict(COLL_NAMES["azure"])
COLL_NAMES["rccl"] = dict(COLL_NAMES["azure"])
DIALECTS = tuple(COLL_NAMES)

#: MSCCL protocols (RCCL ``mscclProtocolStrToId``)
PROTOCOLS = ("Simple", "LL", "LL128")

#: step types and what they do (RCCL ``msccl_kernel_impl.h``, ``mscclRunInterpreter``)
STEP_TYPES = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop")
RECEIVES = frozenset({"r", "rcs", "rrs", "rrc", "rrcs"})
SENDS = frozenset({"s", "rcs", "rrs", "rrcs"})
REDUCES = frozenset({"rrs", "rrc", "rrcs", "re"})
#: step types that read their ``src`` place / write their ``dst`` place
READS_SRC = frozenset({"s", "rrs", "rrc", "rrcs", "cpy", "re"})
WRITES_DST = frozenset({"r", "rcs", "rrc", "rrcs", "cpy", "re"})

# Runtime limits (per GPU).  RCCL src/include/msccl/msccl_struct.h: MSCCL_MAX_NUM_STEPS (64 in
# recent RCCL, 256 before), MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL 32, MSCCL_MAX_COUNT 72
# (``cnt`` must stay below it), MSCCL_MAX_REDUCE_FUSION 16; the original microsoft/msccl caps
# thread blocks at 108 * 2 = 216 per GPU.
RUNTIME_MAX_STEPS_PER_TB = 64
RUNTIME_MAX_TBS_PER_CHANNEL = 32
RUNTIME_MAX_COUNT = 72
DEFAULT_MAX_TBS_PER_GPU = 216

Loc = tuple[str, int]  # (buffer, chunk offset)


def chunks_in(spec: CollectiveSpec, blocks: int) -> int:
    """MSCCL chunks in a buffer of ``blocks`` blocks (``pieces_per_block`` chunks each)."""
    return blocks * spec.pieces_per_block


def chunk_offset(spec: CollectiveSpec, pos) -> int:
    """MSCCL chunk offset of a :class:`~synth.ir.collectives.Position` in its buffer."""
    return pos.block * spec.pieces_per_block + pos.piece


def chunks_per_rank_of(coll: str, ngpus: int, nchunksperloop: int) -> int | None:
    """Our ``chunks_per_rank`` for an MSCCL algorithm, or None when its loop does not cut
    into whole chunks per rank.

    ``nchunksperloop`` counts the chunks of the larger buffer: n*C for allgather,
    reducescatter, alltoall, gather, scatter and allreduce (whose one block holds n*C pieces),
    C for broadcast and reduce.

    >>> chunks_per_rank_of("allreduce", 8, 256), chunks_per_rank_of("broadcast", 8, 3)
    (32, 3)
    >>> chunks_per_rank_of("allgather", 8, 12) is None
    True
    """
    if coll in ("broadcast", "reduce"):
        return nchunksperloop
    c, rest = divmod(nchunksperloop, ngpus)
    return c if c >= 1 and rest == 0 else None


def alias(spec: CollectiveSpec, rank: int, buf: str, off: int, *, inplace: bool) -> Loc:
    """The place ``buf[off]`` of ``rank`` names: itself out of place; in place, input and
    output are one buffer (see the module docstring)."""
    if not inplace or buf == "s":
        return buf, off
    c = spec.chunks_per_rank
    name = spec.name
    if name in ("allgather", "gather"):
        return ("o", rank * c + off) if buf == "i" else (buf, off)
    if name in ("reducescatter", "scatter"):
        return ("i", rank * c + off) if buf == "o" else (buf, off)
    return ("i", off) if buf == "o" else (buf, off)
