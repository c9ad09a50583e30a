"""The lowered program: concrete per-step buffer ops that every backend runs.

:func:`kernels.program.lowering.lower` turns a schedule into a :class:`Program`; the backends
(:mod:`kernels.backends.device`, :mod:`kernels.backends.host`, :mod:`kernels.backends.cupy_executor`,
:mod:`kernels.mpi.transport`) only read it.  Each :class:`Op` names the :class:`Region` it
writes and reads (rank, physical buffer ``input`` / ``output`` / ``scratch``, element range)
and the earlier ops it depends on; :func:`bindings` says which user array (``send`` /
``recv``) backs each physical buffer of a rank, with NCCL's in-place aliasing.

>>> from synth.ir.collectives import CollectiveSpec
>>> spec = CollectiveSpec("allgather", 4, 1)
>>> bindings(spec, 2, inplace=False), bindings(spec, 2, inplace=True)
({'input': 'send', 'output': 'recv'}, {'output': 'recv'})
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from synth.ir.collectives import CollectiveSpec

INPUT, OUTPUT, SCRATCH = "input", "output", "scratch"
_FLOAT_NAMES = frozenset({"float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"})


def is_float(dtype) -> bool:
    """Whether ``dtype`` is a floating type (ml_dtypes' bfloat16 / float8 included: their numpy
    ``kind`` is not ``'f'``).

    >>> import ml_dtypes
    >>> is_float(np.float16), is_float(ml_dtypes.bfloat16), is_float(np.int32)
    (True, True, False)
    """
    return np.dtype(dtype).name in _FLOAT_NAMES
BUFFERS = (INPUT, OUTPUT, SCRATCH)
OP_KINDS = ("copy", "reduce", "scale")

_HAS_INPUT_ALL = frozenset({"allgather", "reducescatter", "allreduce", "reduce", "gather", "alltoall"})
_HAS_OUTPUT_ALL = frozenset({"allgather", "reducescatter", "allreduce", "broadcast", "scatter", "alltoall"})


@dataclass(frozen=True)
class Region:
    """Elements ``[start, stop)`` of physical buffer ``buf`` (input/output/scratch) of ``rank``."""

    rank: int
    buf: str
    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Op:
    """One concrete op, run on the stream of ``rank`` (the rank it writes).

    ``kind`` is ``copy`` (dst <- src), ``reduce`` (dst <- acc op src) or ``scale``
    (dst <- dst / ranks, for integer avg).  ``transfer`` is the index of the schedule transfer
    it implements (None for epilogue ops).  Floating avg has no scale: each contribution is
    multiplied by 1/n in its own type as it enters its first reduce (``premul``), so the sum
    never leaves the type's range (float16 avg of 4 x 60000 is 60000, not inf).
    """

    id: int
    step: int
    kind: str
    dst: Region
    src: Region | None = None
    acc: Region | None = None
    src_deps: tuple[int, ...] = ()
    dst_deps: tuple[int, ...] = ()
    chunk: int = -1
    transfer: int | None = None
    #: avg of a floating type (NCCL's ``ncclDevPreMulSum``): whether ``acc`` / ``src`` of this
    #: reduce is still one rank's raw contribution, to be multiplied by 1/n before the sum
    premul: tuple[bool, bool] = (False, False)

    @property
    def rank(self) -> int:
        return self.dst.rank

    @property
    def deps(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.src_deps) | set(self.dst_deps)))

    @property
    def remote(self) -> bool:
        """True when the op reads another rank's memory (a real transfer)."""
        return self.src is not None and self.src.rank != self.dst.rank

    def reads(self) -> tuple[Region, ...]:
        regs = [r for r in (self.src, self.acc) if r is not None]
        if self.kind == "scale":
            regs.append(self.dst)
        return tuple(regs)

    def traffic_bytes(self, itemsize: int) -> int:
        """Bytes read plus bytes written by this op."""
        return (len(self.reads()) + 1) * self.dst.size * itemsize


@dataclass(frozen=True)
class Program:
    """A lowered schedule (see module docstring).

    ``sizes[r]`` maps each physical buffer rank ``r`` needs to its length in elements;
    ``bindings[r]`` maps ``input``/``output`` to the user array backing it (``"send"`` or
    ``"recv"``).  Steps ``schedule_steps..`` are the epilogue.
    """

    collective: str
    ranks: int
    chunks_per_rank: int
    root: int | None
    count: int
    dtype: np.dtype
    inplace: bool
    op: str
    schedule_steps: int
    steps: tuple[tuple[Op, ...], ...]
    sizes: tuple[dict, ...]
    bindings: tuple[dict, ...]

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    def ops(self) -> Iterator[Op]:
        for step in self.steps:
            yield from step

    @property
    def num_ops(self) -> int:
        return sum(len(s) for s in self.steps)

    def traffic_bytes(self) -> int:
        """Memory traffic (bytes read + written, all ranks) of the whole program."""
        return sum(o.traffic_bytes(self.dtype.itemsize) for o in self.ops())

    def describe(self) -> str:
        lines = [f"{self.collective} n={self.ranks} C={self.chunks_per_rank} count={self.count} "
                 f"{self.dtype} op={self.op}{' in-place' if self.inplace else ''}: "
                 f"{self.num_ops} ops in {self.num_steps} steps ({self.schedule_steps} scheduled)"]
        for o in self.ops():
            pre = ["/n" if p else "" for p in o.premul]
            what = {"copy": f"{_fmt(o.src)}", "reduce": f"{_fmt(o.acc)}{pre[0]} {self.op} {_fmt(o.src)}{pre[1]}",
                    "scale": f"{_fmt(o.dst)} / {self.ranks}"}[o.kind]
            lines.append(f"  [{o.step}] #{o.id} {o.kind:6s} {_fmt(o.dst)} <- {what}  deps {list(o.deps)}")
        return "\n".join(lines)


def _fmt(r: Region | None) -> str:
    return "-" if r is None else f"r{r.rank}.{r.buf}[{r.start}:{r.stop}]"


def has_input(spec: CollectiveSpec, rank: int) -> bool:
    """Whether ``rank`` has an input (send) buffer in this collective."""
    return spec.name in _HAS_INPUT_ALL or rank == spec.root


def has_output(spec: CollectiveSpec, rank: int) -> bool:
    """Whether ``rank`` has an output (receive) buffer in this collective."""
    return spec.name in _HAS_OUTPUT_ALL or rank == spec.root


def bindings(spec: CollectiveSpec, rank: int, inplace: bool) -> dict:
    """Physical buffer name -> user array (``"send"``/``"recv"``) for ``rank``."""
    hi, ho = has_input(spec, rank), has_output(spec, rank)
    if inplace and hi and ho:
        if spec.name in ("reducescatter", "scatter"):
            return {INPUT: "send"}
        return {OUTPUT: "recv"}
    out = {}
    if hi:
        out[INPUT] = "send"
    if ho:
        out[OUTPUT] = "recv"
    return out
