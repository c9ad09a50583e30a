"""Every rank checks every call before any data moves: one small all-gather of a fixed-size
int64 header per call over the group's internal transport group.

A header says what this rank was asked to do (collective, dtype, elements per block, root,
reduce op, the tensor shape's digest, the device kind (CPU or CUDA: ranks whose tensors live on
different kinds would take different paths), the memory layouts its tensors share (bits of
:data:`~kernels.pytorch.checks.LAYOUTS`: ranks whose bytes are in different element orders must not
combine them; ranks agree where one layout is in every rank's bits), split sizes of an uneven
all-to-all) and whether its own tensors failed the local checks (non-contiguous, wrong device,
unsupported dtype, tensors of one call in different layouts ...).  After the
exchange each rank compares all headers and, if any rank failed or any field differs, raises
the same one-line error on every rank: :class:`~kernels.pytorch.errors.BadTensor` or
:class:`~kernels.pytorch.errors.CollectiveMismatch`.  Only the headers travel on the transport
group's own all-gather; the data then moves as the schedule says, except for a small call whose
schedule is one step (:mod:`kernels.pytorch.fused`): its data rides in the same message as its
header (:func:`agree_with_data`), received into private buffers, and the header says how many
bytes follow it (a peer whose message holds another number of bytes is out of step:
:class:`~kernels.pytorch.errors.PeerGone`).  Where every rank's header is byte for byte this
rank's and no rank failed, nothing more is compared.

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

import functools
import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from kernels.pytorch.checks import ANY_LAYOUT, layout_names, odd_layout
from kernels.pytorch.dtypes import OP_CODES, dtype_from_code
from kernels.pytorch.errors import BadTensor, CollectiveMismatch, PeerGone

COLLECTIVE_CODES = {name: k + 1 for k, name in enumerate(
    ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "gather", "scatter", "alltoall",
     "barrier", "allgather_list", "reducescatter_list", "alltoall_list", "allreduce_coalesced", "allgather_coalesced",
     "reducescatter_coalesced"))}
_NAMES = {v: k for k, v in COLLECTIVE_CODES.items()}
_OPS = {v: k for k, v in OP_CODES.items()}
#: local-check failures a rank reports in its header (0: none)
FAILURES = ("", "a tensor is not contiguous", "a tensor is on another device than the group's",
            "unsupported dtype", "tensor sizes do not fit the call", "tensors of one call have different dtypes",
            "root out of range", "split sizes do not fit the tensor", "a dtype PREMUL_SUM does not take",
            "tensors of one call are in different memory layouts", "AVG does not take bool tensors")
_FIXED = 11                   # code, collective, dtype, count, root, op, shape digest, device, split count, data bytes,
#                               layout bits
#: the most bytes of data a header may carry (:func:`agree_with_data`; a peer may send this much
#: whatever this rank's own call is, received into buffers the group keeps, one per peer)
DATA_BYTES_MAX = 2 << 20
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
    data_bytes: int = 0         # bytes of the call's data that follow the header in its message
    layouts: int = ANY_LAYOUT   # the memory layouts every tensor of the call is dense in (bits of LAYOUTS)

    def values(self, nranks: int) -> list[int]:
        row = [self.failure, COLLECTIVE_CODES[self.collective], self.dtype_code, self.count, self.root,
               OP_CODES.get(self.op, 0), self.shape_digest, _device_code(self.device), len(self.splits),
               self.data_bytes, self.layouts]
        splits = list(self.splits) + [0] * (2 * nranks - len(self.splits))
        return row + splits[:2 * nranks]

    def encode(self, nranks: int) -> torch.Tensor:
        return torch.tensor(self.values(nranks), dtype=torch.int64, device="cpu")

    def row(self, nranks: int) -> bytes:
        """The header as it travels: ``_FIXED + 2 * nranks`` little-endian int64 words."""
        return np.asarray(self.values(nranks), dtype="<i8").tobytes()


def shape_digest(shapes) -> int:
    """A 48-bit digest of tensor shapes (ranks must agree on them where gloo does)."""
    return _digest_of(tuple(tuple(s) for s in shapes))


@functools.lru_cache(maxsize=1024)
def _digest_of(shapes: tuple) -> int:
    text = ";".join(",".join(str(d) for d in s) for s in shapes)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=6).digest(), "little")


def _fields(rows) -> dict:
    return {"collective": [_NAMES.get(int(r[1]), "?") for r in rows],
            "dtype": [dtype_from_code(int(r[2])) for r in rows],
            "elements per block": [int(r[3]) for r in rows],
            "root": [int(r[4]) for r in rows],
            "reduce op": [_OPS.get(int(r[5]), "none") for r in rows],
            "tensor shapes": [int(r[6]) for r in rows],
            "device": [DEVICES[int(r[7])] if 0 <= int(r[7]) < len(DEVICES) else "?" for r in rows],
            "bytes of data sent with the header": [int(r[9]) for r in rows]}


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
            if field == "tensor shapes" and (what.endswith("_coalesced") or what == "allgather_list"):  # every part
                msg = (f"rank 0 and rank {odd} pass different parts (how many, or a part's shapes, dtype or "
                       f"memory layout)")
            elif field == "tensor shapes":
                msg = f"rank 0 and rank {odd} pass tensors of different shapes"
            else:
                msg = f"rank 0 has {first}, rank {odd} has {values[odd]}"
            raise CollectiveMismatch(f"{what}: ranks disagree on {field}: {msg} (every rank raises this "
                                     f"before any data moves)")
    _compare_layouts(what, [int(r[10]) for r in rows])


def _compare_layouts(what: str, bits: list[int]) -> None:
    """Ranks agree on a layout where one is in every rank's bits (a tensor in which two layouts
    coincide counts as both); else the first rank whose bits share none with the ranks before it
    (:func:`~kernels.pytorch.checks.odd_layout`) is named."""
    odd = odd_layout(bits)
    if odd is not None:
        raise CollectiveMismatch(f"{what}: ranks disagree on memory layout: rank 0 has {layout_names(bits[0])}, "
                                 f"rank {odd} has {layout_names(bits[odd])} (their bytes are in different "
                                 f"element orders; every rank raises this before any data moves)")


def agree(group, header: Header, nranks: int, rank: int, local_note: str = "") -> list:
    """Exchange ``header`` with every rank of ``group`` (the group's transport: a
    :class:`~kernels.pytorch.sockets.SocketMesh`, or an internal gloo group) and check
    (:func:`compare`); returns the headers' rows (split sizes of an all-to-all are in them)."""
    if hasattr(group, "gather_rows"):
        return agree_with_data(group, header, nranks, rank, local_note)[0]
    mine = header.encode(nranks)
    rows = [torch.empty_like(mine) for _ in range(nranks)]
    group.allgather([rows], [mine]).wait()
    _check(rows, rank, local_note)
    return rows


def agree_with_data(mesh, header: Header | bytes, nranks: int, rank: int, local_note: str = "", data=None):
    """:func:`agree` over a :class:`~kernels.pytorch.sockets.SocketMesh`, with ``data`` (bytes of
    the call, ``header.data_bytes`` of them; None: none) in the same message as the header
    (a :class:`Header`, or its :meth:`Header.row` made once for a repeated call);
    returns ``(rows, extra)``: the headers' rows and, per peer, the bytes that followed its header
    (private buffers; None where none did).  A peer whose header does not say how many bytes came
    with it is out of step (:class:`~kernels.pytorch.errors.PeerGone`), checked before the headers
    are compared."""
    mine = header if isinstance(header, bytes) else header.row(nranks)
    got, extra = mesh.gather_rows(mine, data, DATA_BYTES_MAX)
    same = all(r == mine for r in got)
    if same:                                        # the usual case: one row to read
        rows = [np.frombuffer(mine, dtype="<i8")] * nranks
    else:
        rows = [np.frombuffer(r, dtype="<i8") for r in got]
    for p, more in enumerate(extra):
        came, said = 0 if more is None else len(more), int(rows[p][9])
        if p != rank and came != said:
            raise PeerGone(f"rank {rank}: rank {p}'s call header says {said} bytes of data follow it, {came} came "
                           f"(the ranks' calls went out of step)")
    if rows[rank][0] or not same:
        _check(rows, rank, local_note)
    return rows, extra


def _check(rows, rank: int, local_note: str) -> None:
    notes = ["" for _ in rows]
    notes[rank] = local_note
    compare(rows, notes, rank)


def splits_of(rows: list) -> list[list[int]]:
    """Each rank's all-to-all split sizes from the headers: ``splits[s][d]`` elements rank ``s``
    sends rank ``d``, ``splits[s][n + d]`` elements it expects from rank ``d``."""
    return [[int(v) for v in row[_FIXED:_FIXED + int(row[8])]] for row in rows]


def _device_code(kind: str) -> int:
    return DEVICES.index(kind) if kind in DEVICES else len(DEVICES)


__all__ = ["Header", "agree", "agree_with_data", "compare", "shape_digest", "splits_of", "COLLECTIVE_CODES", "FAILURES",
           "DATA_BYTES_MAX"]
