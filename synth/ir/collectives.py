"""The one definition of each collective: chunks, pre/postconditions and buffer layout.

Every module (verifier, solver, baselines, executors, MSCCL export, sweep) reads this.

Terms
-----
n
    number of ranks.
C
    ``chunks_per_rank``: how finely each rank's *block* is cut.
count
    elements of one **block**: what one rank contributes or receives.  Per collective:

    ==============  ==============================  ===========================  =====================
    collective      block = count elements is ...   input buffer (per rank)      output buffer
    ==============  ==============================  ===========================  =====================
    allgather       each rank's input               1 block                      n blocks
    reducescatter   each rank's output              n blocks                     1 block
    allreduce       the whole buffer                1 block (n*C pieces)         1 block
    broadcast       the whole buffer                1 block (root's counts)      1 block
    reduce          the whole buffer                1 block                      1 block (root's counts)
    gather          each rank's input               1 block                      n blocks (root only)
    scatter         each rank's output              n blocks (root only)         1 block
    alltoall        what one rank sends one peer    n blocks                     n blocks
    ==============  ==============================  ===========================  =====================

Chunks and where they live
--------------------------
A block is cut into P pieces (P = n*C for allreduce, C otherwise) the way
``numpy.array_split`` does: piece k spans ``[k*q + min(k, r), (k+1)*q + min(k+1, r))`` with
``q, r = divmod(count, P)``, so counts that do not divide evenly give the first ``r`` pieces one
extra element (pieces may be empty when count < P).  Chunk ids and positions
(``block b, piece k`` means elements ``b*count + piece(k)`` of that buffer):

- allgather:     id ``r*C+c``; pre [r]; post all;  input of r: (0, c);  output: (r, c)
- reducescatter: id ``r*C+c``; pre all; post [r];  input of every rank: (r, c);  output of r: (0, c)
- allreduce:     id ``g`` < n*C; pre all; post all; input and output: (0, g)
- broadcast:     id ``c`` < C; pre [root]; post all; input and output: (0, c)
- reduce:        id ``c`` < C; pre all; post [root]; input and output: (0, c)
- gather:        id ``r*C+c``; pre [r]; post [root]; input of r: (0, c);  output of root: (r, c)
- scatter:       id ``r*C+c``; pre [root]; post [r]; input of root: (r, c);  output of r: (0, c)
- alltoall:      id ``(s*n+d)*C+c``; pre [s]; post [d]; input of s: (d, c);  output of d: (s, c)

In-place variants alias the buffers as NCCL does: allgather's input is block r of rank r's
output; reducescatter's output is block r of rank r's input; the others use one buffer.

For combining collectives ``pre`` lists the ranks holding a contribution; each rank in
``post`` must end with the reduction of all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from topo_probe.errors import InvalidArgument, UnsupportedCollective, show

COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce",
               "gather", "scatter", "alltoall")
COMBINING = frozenset({"reducescatter", "allreduce", "reduce"})
ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter"})
#: the reduction ops (NCCL's ``ncclRedOp_t`` without ``premulsum``): the one list
REDUCE_OPS = ("sum", "prod", "max", "min", "avg")


class CheckedOp(str):
    """A reduction op the rule accepted: one of :data:`REDUCE_OPS`, as a plain value.  Made only by the rule:
    the constructor applies it (to the plain value, ``str.__str__``, not a subclass's ``__eq__`` or ``__str__``)
    and refuses anything else in :func:`check_reduce_op`'s one line, so no CheckedOp holds a refused value.
    Passed on (to a lowering, the reference run, a kernel), it is taken as it is: a call's op is checked once, by
    the call's owner.  Internal: in no ``__all__`` (callers pass plain strings).

    >>> CheckedOp("mean", "all_reduce")
    Traceback (most recent call last):
    ...
    topo_probe.errors.InvalidArgument: all_reduce: op must be one of sum, prod, max, min, avg; got 'mean'
    """

    __slots__ = ()

    def __new__(cls, op, what: str = ""):
        value = str.__str__(op) if isinstance(op, str) else None   # the value itself (not a str Enum's name), and
        if value in REDUCE_OPS:                                     # the rule asked of it, not of op's own __eq__
            return super().__new__(cls, value)
        head = f"{what}: op" if what else "op"
        raise InvalidArgument(f"{head} must be one of {', '.join(REDUCE_OPS)}; got {show(op)}")


def check_reduce_op(op, what: str = "") -> CheckedOp:
    """``op`` as a :class:`CheckedOp`: the same object where it is one already (checked once, by the call's owner),
    else a new one, whose constructor applies the rule: one of :data:`REDUCE_OPS` (a string), else InvalidArgument
    in one line, ``"{what}: op must be one of sum, prod, max, min, avg; got {op!r}"`` (without ``what``: from
    ``op``).  The one check of a caller's op: the sweep's and, through :mod:`kernels.program.reduce_op`,
    every executor's and communicator's.

    >>> check_reduce_op("mean", "sweep")
    Traceback (most recent call last):
    ...
    topo_probe.errors.InvalidArgument: sweep: op must be one of sum, prod, max, min, avg; got 'mean'
    """
    return op if type(op) is CheckedOp else CheckedOp(op, what)

#: accepted spellings -> canonical name (nccl-tests, MSCCL and cupy spellings)
ALIASES = {
    "all_gather": "allgather", "allgather": "allgather",
    "reduce_scatter": "reducescatter", "reducescatter": "reducescatter",
    "all_reduce": "allreduce", "allreduce": "allreduce",
    "broadcast": "broadcast", "bcast": "broadcast",
    "reduce": "reduce", "gather": "gather", "scatter": "scatter",
    "alltoall": "alltoall", "all_to_all": "alltoall", "alltoallv": "alltoall",
}

def canonical(name: str) -> str:
    """Canonical collective name for any accepted spelling; raises UnsupportedCollective in one line, the name cut
    (:func:`topo_probe.errors.show`), also for a name that is not a string: the one collective check of the
    communicators and the sweep."""
    hit = ALIASES.get(name) if isinstance(name, str) else None     # the common case: already canonical
    if hit is not None:
        return hit
    key = name.strip().lower().replace("-", "_") if isinstance(name, str) else None
    if key in ALIASES:
        return ALIASES[key]
    raise UnsupportedCollective(f"unknown collective {show(name)}; expected one of {', '.join(COLLECTIVES)}")


@dataclass(frozen=True)
class Chunk:
    """One chunk: ``pre`` ranks hold it (or a contribution) before, ``post`` ranks must hold
    it (fully reduced, for combining collectives) after."""

    id: int
    pre: tuple[int, ...]
    post: tuple[int, ...]


@dataclass(frozen=True)
class Position:
    """Where a chunk lives in a rank's buffer: ``block`` index and ``piece`` index."""

    block: int
    piece: int


@dataclass(frozen=True)
class CollectiveSpec:
    """A collective instance: name, ranks, chunks per rank, root; see module docstring."""

    name: str
    ranks: int
    chunks_per_rank: int
    root: int | None = None

    def __post_init__(self) -> None:
        name = canonical(self.name)
        object.__setattr__(self, "name", name)
        if self.ranks < 1:
            raise InvalidArgument(f"{name}: ranks must be >= 1, got {self.ranks}")
        if self.chunks_per_rank < 1:
            raise InvalidArgument(f"{name}: chunks_per_rank must be >= 1, got {self.chunks_per_rank}")
        if name in ROOTED:
            if self.root is None or not 0 <= self.root < self.ranks:
                raise InvalidArgument(f"{name}: root must be a rank in 0..{self.ranks - 1}, got {self.root}")
        elif self.root is not None:
            raise InvalidArgument(f"{name} takes no root (got root={self.root})")

    @property
    def combining(self) -> bool:
        return self.name in COMBINING

    @property
    def num_chunks(self) -> int:
        n, c = self.ranks, self.chunks_per_rank
        return {"allgather": n * c, "reducescatter": n * c, "allreduce": n * c, "broadcast": c,
                "reduce": c, "gather": n * c, "scatter": n * c, "alltoall": n * n * c}[self.name]

    @property
    def min_transfers(self) -> int:
        """Fewest transfers any correct schedule of this instance has: each chunk must reach
        every ``post`` rank that lacks it, each ``pre`` contribution outside ``post`` must leave
        its rank, and in an allreduce every rank must receive each chunk.

        >>> CollectiveSpec("allgather", 4, 2).min_transfers, CollectiveSpec("allreduce", 4, 1).min_transfers
        (24, 16)
        """
        n, c = self.ranks, self.chunks_per_rank
        if n == 1:
            return 0
        per_rank_chunk = {"allgather": n * (n - 1), "reducescatter": n * (n - 1), "allreduce": n * n,
                          "alltoall": n * (n - 1)}
        return c * per_rank_chunk.get(self.name, n - 1)

    @property
    def pieces_per_block(self) -> int:
        return self.ranks * self.chunks_per_rank if self.name == "allreduce" else self.chunks_per_rank

    def input_blocks(self) -> int:
        """Blocks in each rank's input buffer (the root's, for scatter)."""
        return self.ranks if self.name in ("reducescatter", "scatter", "alltoall") else 1

    def output_blocks(self) -> int:
        """Blocks in each rank's output buffer (the root's, for gather)."""
        return self.ranks if self.name in ("allgather", "gather", "alltoall") else 1

    def chunks(self) -> list[Chunk]:
        n, C, root = self.ranks, self.chunks_per_rank, self.root
        everyone = tuple(range(n))
        out = []
        for g in range(self.num_chunks):
            if self.name == "allgather":
                pre, post = (g // C,), everyone
            elif self.name == "reducescatter":
                pre, post = everyone, (g // C,)
            elif self.name == "allreduce":
                pre, post = everyone, everyone
            elif self.name == "broadcast":
                pre, post = (root,), everyone
            elif self.name == "reduce":
                pre, post = everyone, (root,)
            elif self.name == "gather":
                pre, post = (g // C,), (root,)
            elif self.name == "scatter":
                pre, post = (root,), (g // C,)
            else:  # alltoall
                s, d = divmod(g // C, n)
                pre, post = (s,), (d,)
            out.append(Chunk(g, pre, post))
        return out

    def input_position(self, chunk: int, rank: int) -> Position | None:
        """Position of ``chunk`` in ``rank``'s input buffer, or None if that rank has none."""
        n, C = self.ranks, self.chunks_per_rank
        name = self.name
        if name in ("allgather", "gather"):
            return Position(0, chunk % C) if chunk // C == rank else None
        if name == "reducescatter":
            return Position(chunk // C, chunk % C)
        if name in ("allreduce", "reduce"):
            return Position(0, chunk)
        if name == "broadcast":
            return Position(0, chunk) if rank == self.root else None
        if name == "scatter":
            return Position(chunk // C, chunk % C) if rank == self.root else None
        s, d = divmod(chunk // C, n)
        return Position(d, chunk % C) if s == rank else None

    def output_position(self, chunk: int, rank: int) -> Position | None:
        """Position of ``chunk`` in ``rank``'s output buffer, or None if it does not end there."""
        n, C = self.ranks, self.chunks_per_rank
        name = self.name
        if name == "allgather":
            return Position(chunk // C, chunk % C)
        if name in ("reducescatter", "scatter"):
            return Position(0, chunk % C) if chunk // C == rank else None
        if name in ("allreduce", "broadcast"):
            return Position(0, chunk)
        if name == "reduce":
            return Position(0, chunk) if rank == self.root else None
        if name == "gather":
            return Position(chunk // C, chunk % C) if rank == self.root else None
        s, d = divmod(chunk // C, n)
        return Position(s, chunk % C) if d == rank else None


def check_collective_gpus(topology: str, gpus: int) -> None:
    """Refuse a topology of fewer than 2 GPUs, on which no collective moves data (what ``synthesize``,
    ``simulate`` and the ``sim`` backend of ``sweep`` say).

    >>> check_collective_gpus("one", 1)
    Traceback (most recent call last):
    ...
    topo_probe.errors.InvalidArgument: one: a collective needs at least 2 GPUs, this topology has 1
    """
    if gpus < 2:
        raise InvalidArgument(f"{topology}: a collective needs at least 2 GPUs, this topology has {gpus}")


def piece_bounds(count: int, pieces: int, k: int) -> tuple[int, int]:
    """Element range [start, stop) of piece ``k`` when ``count`` elements are cut into
    ``pieces`` pieces like ``numpy.array_split``.

    >>> [piece_bounds(10, 4, k) for k in range(4)]
    [(0, 3), (3, 6), (6, 8), (8, 10)]
    """
    q, r = divmod(count, pieces)
    return k * q + min(k, r), (k + 1) * q + min(k + 1, r)


def element_range(spec: CollectiveSpec, count: int, pos: Position) -> tuple[int, int]:
    """Element range [start, stop) of a chunk position in a buffer of blocks of ``count``."""
    a, b = piece_bounds(count, spec.pieces_per_block, pos.piece)
    return pos.block * count + a, pos.block * count + b
