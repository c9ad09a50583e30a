"""What the MSCCL XML writer and reader share: collective names per runtime, buffer locations."""

from __future__ import annotations

from synth.ir.collectives import CollectiveSpec

#: collective names per runtime style: "msccl" (microsoft/msccl) and "azure" (msccl-executor-nccl)
COLL_NAMES = {
    "msccl": {"allgather": "allgather", "reducescatter": "reduce_scatter", "allreduce": "allreduce",
              "alltoall": "alltoall", "broadcast": "broadcast", "reduce": "reduce",
              "gather": "gather", "scatter": "scatter"},
    "azure": {"allgather": "allgather", "reducescatter": "reducescatter", "allreduce": "allreduce",
              "alltoall": "alltoall", "broadcast": "broadcast", "reduce": "reduce",
              "gather": "gather", "scatter": "scatter"},
}

Loc = tuple[str, int]  # (buffer, chunk offset)


def chunks_in(spec: CollectiveSpec, blocks: int) -> int:
    """MSCCL chunks in a buffer of ``blocks`` blocks (``pieces_per_block`` chunks each)."""
    return blocks * spec.pieces_per_block


def chunk_offset(spec: CollectiveSpec, pos) -> int:
    """MSCCL chunk offset of a :class:`~synth.ir.collectives.Position` in its buffer."""
    return pos.block * spec.pieces_per_block + pos.piece
