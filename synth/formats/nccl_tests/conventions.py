"""nccl-tests conventions: data type names, reduction names, binary and test names per
collective, the bus-bandwidth factors and the size -> count rule.

A sweep size ``S`` (bytes) is ``S // itemsize`` elements.  Collectives whose buffers are one
block (all_reduce, broadcast, reduce) use that as their count; the others (allgather,
reducescatter, gather, scatter, alltoall) cut it into ``n`` blocks of ``count // n`` elements
rounded down to whole 16-byte units, ``(count / n) & ~(16 / itemsize - 1)`` (NVIDIA/nccl-tests
v2.19.6, ``*GetCollByteCount`` in ``src/all_gather.cu``, ``reduce_scatter.cu``, ``gather.cu``,
``scatter.cu`` line 11, ``alltoall.cu`` line 19; since commit 29f4114, v2.13.12), so every
rank's block starts 16-byte aligned.  The printed ``size`` is ``max(send, recv)`` buffer bytes
of one rank and ``count`` the elements of one block (``common.cu`` ``setupArgs`` lines 900-911,
printed at line 938).  ``algbw = size / time`` and ``busbw = algbw * factor`` (GB = 1e9 bytes)::

    all_reduce  S=1024 float n=8  ->  size 1024, count 256
    all_gather  S=1024 float n=8  ->  size 1024, count  32  (each rank sends 32, receives 256)
    all_gather  S=1000 float n=4  ->  size  960, count  60  (250 per rank, rounded down to 4 floats)

>>> block_counts("allgather", 1024, 4, 8)
Counts(count=32, send=32, recv=256, size=1024)
>>> block_counts("allgather", 1000, 4, 4)
Counts(count=60, send=60, recv=240, size=960)
>>> round(BUSBW_FACTOR["allreduce"](8), 3), DTYPE_BYTES["bfloat16"], nccl_dtype("fp16")
(1.75, 2, 'half')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from synth.ir.collectives import REDUCE_OPS, ROOTED, CollectiveSpec, canonical
from topo_probe.errors import InvalidArgument, TopocollError

#: nccl-tests data type names (``-d``) and their sizes in bytes
DTYPE_BYTES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "half": 2,
               "float": 4, "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1}
#: the types the executors run (float8 types are modelled, not run)
DTYPE_NAMES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16")
#: other spellings of the type names
DTYPE_ALIASES = {"char": "int8", "int": "int32", "float16": "half", "fp16": "half", "float32": "float",
                 "fp32": "float", "float64": "double", "bf16": "bfloat16", "fp8_e4m3": "f8e4m3",
                 "fp8_e5m2": "f8e5m2"}
#: nccl-tests reduction names: the reduction ops (``mulsum``, NCCL's pre-multiplied sum, is not supported)
OP_NAMES = REDUCE_OPS
#: nccl-tests binary name stem per canonical collective
NCCL_NAMES = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
              "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
              "alltoall": "alltoall"}
#: nccl-tests' testColl name per canonical collective (in our -J "topocoll" object; its experiment_name is "")
TEST_NAMES = {"allreduce": "AllReduce", "allgather": "AllGather", "reducescatter": "ReduceScatter",
              "broadcast": "Broadcast", "reduce": "Reduce", "gather": "Gather", "scatter": "Scatter",
              "alltoall": "AlltoAll"}
#: nccl-tests bus-bandwidth factor as a function of the rank count n
BUSBW_FACTOR = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}
#: the collectives whose nccl-tests size is cut into one block per rank (on one rank too), each
#: rounded down to whole 16-byte units (:func:`block_counts`)
DIVIDED = ("allgather", "reducescatter", "gather", "scatter", "alltoall")
_NUMPY = {"int8": np.int8, "uint8": np.uint8, "int32": np.int32, "uint32": np.uint32, "int64": np.int64,
          "uint64": np.uint64, "half": np.float16, "float": np.float32, "double": np.float64}


def collective_of(test: str | None) -> str | None:
    """Canonical collective of an nccl-tests binary name (``all_reduce_perf`` -> ``allreduce``;
    ``sendrecv_perf`` -> ``sendrecv``, ``hypercube_perf`` -> ``hypercube``), None if unknown."""
    if not test:
        return None
    stem = re.sub(r"_perf(_mpi)?$", "", Path(test).name)
    try:
        return canonical(stem)
    except TopocollError:
        return stem.replace("_", "") if stem in ("sendrecv", "hypercube", "send_recv") else None


def nccl_dtype(name: str) -> str:
    """The nccl-tests type name of ``name`` (aliases accepted); InvalidArgument otherwise."""
    name = DTYPE_ALIASES.get(name, name)
    if name not in DTYPE_BYTES:
        raise InvalidArgument(f"datatype {name!r} is not an nccl-tests type ({', '.join(DTYPE_BYTES)})")
    return name


def numpy_dtype(name: str) -> np.dtype:
    """NumPy dtype of an nccl-tests type name (``half`` = float16, ``bfloat16`` via ml_dtypes).

    >>> numpy_dtype("half"), numpy_dtype("bfloat16").itemsize
    (dtype('float16'), 2)
    """
    name = nccl_dtype(name)
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    if name not in _NUMPY:
        raise InvalidArgument(f"datatype {name!r} is modelled but not run here; use one of {', '.join(DTYPE_NAMES)}")
    return np.dtype(_NUMPY[name])


def is_float(name: str) -> bool:
    """Whether an nccl-tests type name is a floating-point type."""
    return nccl_dtype(name) in ("half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2")


@dataclass(frozen=True)
class Counts:
    """Element counts of one sweep size: ``count`` per block, ``send``/``recv`` per rank
    buffer, and the nccl-tests ``size`` in bytes (max of send and recv bytes)."""

    count: int
    send: int
    recv: int
    size: int


def buffer_blocks(collective: str, n: int) -> tuple[int, int]:
    """(input blocks, output blocks) of each rank's buffers."""
    name = canonical(collective)
    spec = CollectiveSpec(name, n, 1, 0 if name in ROOTED else None)
    return spec.input_blocks(), spec.output_blocks()


def block_counts(collective: str, size: int, itemsize: int, n: int) -> Counts:
    """Element counts for sweep size ``size`` bytes (see the module docstring): one block of
    ``size // itemsize`` elements, or ``n`` blocks of whole 16-byte units."""
    name = canonical(collective)
    kin, kout = buffer_blocks(name, n)
    elems = size // itemsize
    count = (elems // n) & ~(max(1, 16 // itemsize) - 1) if name in DIVIDED else elems
    return Counts(count, kin * count, kout * count, max(kin, kout) * count * itemsize)


def busbw_gbps(collective: str, n: int, nbytes: float, time_us: float) -> float:
    """nccl-tests bus bandwidth (GB/s): ``nbytes / time`` times the collective's factor; 0 for
    a zero time.

    >>> round(busbw_gbps("allreduce", 8, 4294967296, 32336.0), 2)
    232.44
    """
    if not time_us > 0:
        return 0.0
    return float(nbytes) / (float(time_us) * 1e3) * BUSBW_FACTOR[canonical(collective)](n)


__all__ = ["DIVIDED",
           "DTYPE_BYTES", "DTYPE_NAMES", "DTYPE_ALIASES", "OP_NAMES", "NCCL_NAMES", "TEST_NAMES", "BUSBW_FACTOR",
           "Counts", "collective_of", "nccl_dtype", "numpy_dtype", "is_float", "buffer_blocks", "block_counts", "busbw_gbps"]
