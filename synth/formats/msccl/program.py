"""An MSCCL XML algorithm as plain data: :class:`Program` > :class:`XGpu` > :class:`XThreadblock` >
:class:`XStep`, every field already an int or a checked string (see :mod:`.parse`).

Offsets and counts are in MSCCL chunks; ``-1`` means unused (``depid``/``deps`` of a step
without a dependency).  ``hasdep`` is None when the file leaves it out (older msccl-tools
output): every step then counts as signalling.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class XStep:
    """One ``<step>``: ``kind`` is the ``type`` attribute (s, r, rcs, rrs, rrc, rrcs, cpy, re, nop)."""

    index: int
    kind: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int | None
    line: int = 0


@dataclass(frozen=True)
class XThreadblock:
    """One ``<tb>``: at most one ``send`` and one ``recv`` peer (-1 = none) on channel ``chan``."""

    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[XStep, ...]


@dataclass(frozen=True)
class XGpu:
    """One ``<gpu>``: buffer sizes in chunks and its threadblocks (indexed by id)."""

    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: tuple[XThreadblock, ...]

    def size(self, buf: str) -> int:
        """Chunks in buffer ``buf`` (``i``, ``o`` or ``s``)."""
        return {"i": self.i_chunks, "o": self.o_chunks, "s": self.s_chunks}[buf]


@dataclass(frozen=True)
class Program:
    """The ``<algo>`` element and everything under it; ``gpus[k].id == k``."""

    name: str
    coll: str              # canonical collective name
    coll_spelling: str     # as written in the file
    ngpus: int
    nchunksperloop: int
    nchannels: int
    proto: str
    inplace: bool
    outofplace: bool
    min_bytes: int
    max_bytes: int         # 0 = no upper limit (inclusive otherwise)
    gpus: tuple[XGpu, ...]
    missing: tuple[str, ...] = field(default=())  # runtime-required <algo> attributes left out

    @property
    def num_steps(self) -> int:
        return sum(len(tb.steps) for g in self.gpus for tb in g.tbs)

    def instruction_counts(self) -> dict[str, int]:
        """How many steps of each type the program has (``nop`` included)."""
        out: dict[str, int] = {}
        for g in self.gpus:
            for tb in g.tbs:
                for st in tb.steps:
                    out[st.kind] = out.get(st.kind, 0) + 1
        return out
