"""Every rank checks every call before any data moves: one small all-gather of a fixed-size
int64 header per call over the group's internal transport group.

A header says what this rank was asked to do (collective, dtype, elements per block, root,
reduce op, the tensor shape's digest, the device kind (CPU or CUDA: ranks whose tensors live on
different kinds would take different paths), split sizes of an uneven all-to-all) and whether its own
tensors failed the local checks (non-contiguous, wrong device, unsupported dtype ...).  After the
exchange each rank compares all headers and, if any rank failed or any field differs, raises
the same one-line error on every rank: :class:`~kernels.pytorch.errors.BadTensor` or
:class:`~kernels.pytorch.errors.CollectiveMismatch`.  Only the headers travel on the transport
group's own all-gather; the data then moves as the schedule says.

>>> h = Header("allreduce", dtype_code=1, count=8, op="sum")
>>> compare([h.encode(2), h.encode(2)], ["", ""], this_rank=0)
>>> other = Header("allreduce", dtype_code=1, count=4, op="sum")
>>> try:
...     compare([h.encode(2), other.encode(2)], ["", ""], this_rank=0)
... except CollectiveMismatch as e:
...     print(str(e)[:75])
allreduce: ranks disagree on elements per block: rank 0 has 8, rank 1 has 4
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from kernels.pytorch.dtypes import OP_CODES, dtype_from_code
from kernels.pytorch.errors import BadTensor, CollectiveMismatch

COLLECTIVE_CODES = {name: k + 1 for k, name in enumerate(
    ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "gather", "scatter", "alltoall",
     "barrier", "allgather_list", "reducescatter_list", "alltoall_list"))}
_NAMES = {v: k for k, v in COLLECTIVE_CODES.items()}
_OPS = {v: k for k, v in OP_CODES.items()}
#: local-check failures a rank reports in its header (0: none)
FAILURES = ("", "a tensor is not contiguous", "a tensor is on another device than the group's",
            "unsupported dtype", "tensor sizes do not fit the call", "tensors of one call have different dtypes",
            "root out of range", "split sizes do not fit the tensor")
_FIXED = 9                    # code, collective, dtype, count, root, op, shape digest, device, split count
#: device kinds in the header
DEVICES = ("cpu", "cuda")


@dataclass
class Header:
    """One rank's description of a call (module docstring); ``splits``: elements this rank sends
    to each peer in an all-to-all (empty otherwise)."""

    collective: str
    dtype_code: int = 0
    count: int = 0
    root: int = -1
    op: str = ""
    shape_digest: int = 0
    splits: tuple = ()          # all-to-all: elements sent to, then received from, each rank
    failure: int = 0
    device: str = "cpu"         # the kind of device the call's tensors are on (DEVICES)

    def encode(self, nranks: int) -> torch.Tensor:
        row = [self.failure, COLLECTIVE_CODES[self.collective], self.dtype_code, self.count, self.root,
               OP_CODES.get(self.op, 0), self.shape_digest, _device_code(self.device), len(self.splits)]
        splits = list(self.splits) + [0] * (2 * nranks - len(self.splits))
        return torch.tensor(row + splits[:2 * nranks], dtype=torch.int64, device="cpu")


def shape_digest(shapes) -> int:
    """A 48-bit digest of tensor shapes (ranks must agree on them where gloo does)."""
    text = ";".join(",".join(str(d) for d in s) for s in shapes)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=6).digest(), "little")


def _fields(rows) -> dict:
    return {"collective": [_NAMES.get(int(r[1]), "?") for r in rows],
            "dtype": [dtype_from_code(int(r[2])) for r in rows],
            "elements per block": [int(r[3]) for r in rows],
            "root": [int(r[4]) for r in rows],
            "reduce op": [_OPS.get(int(r[5]), "none") for r in rows],
            "tensor shapes": [int(r[6]) for r in rows],
            "device": [DEVICES[int(r[7])] if 0 <= int(r[7]) < len(DEVICES) else "?" for r in rows]}


def compare(rows: list, local_notes: list[str], this_rank: int) -> None:
    """Raise the call's error on this rank if any rank failed or ranks disagree (module docstring)."""
    what = _NAMES.get(int(rows[this_rank][1]), "call")
    failed = [(r, int(row[0])) for r, row in enumerate(rows) if int(row[0])]
    if failed:
        parts = [f"rank {r}: {local_notes[r] or FAILURES[code] if r == this_rank else FAILURES[code]}"
                 for r, code in failed]
        raise BadTensor(f"{what}: " + "; ".join(parts) + " (every rank raises this before any data moves)")
    for field, values in _fields(rows).items():
        if len(set(values)) > 1:
            first = values[0]
            odd = next(r for r, v in enumerate(values) if v != first)
            if field == "tensor shapes":
                msg = f"rank 0 and rank {odd} pass tensors of different shapes"
            else:
                msg = f"rank 0 has {first}, rank {odd} has {values[odd]}"
            raise CollectiveMismatch(f"{what}: ranks disagree on {field}: {msg} (every rank raises this "
                                     f"before any data moves)")


def agree(group, header: Header, nranks: int, rank: int, local_note: str = "") -> list:
    """Exchange ``header`` with every rank of ``group`` (an internal gloo group) and check
    (:func:`compare`); returns the headers' rows (split sizes of an all-to-all are in them)."""
    mine = header.encode(nranks)
    rows = [torch.empty_like(mine) for _ in range(nranks)]
    group.allgather([rows], [mine]).wait()
    notes = ["" for _ in range(nranks)]
    notes[rank] = local_note
    compare(rows, notes, rank)
    return rows


def splits_of(rows: list) -> list[list[int]]:
    """Each rank's all-to-all split sizes from the headers: ``splits[s][d]`` elements rank ``s``
    sends rank ``d``, ``splits[s][n + d]`` elements it expects from rank ``d``."""
    return [[int(v) for v in row[_FIXED:_FIXED + int(row[8])]] for row in rows]


def _device_code(kind: str) -> int:
    return DEVICES.index(kind) if kind in DEVICES else len(DEVICES)


__all__ = ["Header", "agree", "compare", "shape_digest", "splits_of", "COLLECTIVE_CODES", "FAILURES"]
