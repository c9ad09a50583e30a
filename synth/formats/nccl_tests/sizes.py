"""nccl-tests message sizes: the ``-b/-e/-i`` syntax and the size loop, shared by ``simulate``
and ``sweep`` (one definition; each CLI words its own errors).

>>> parse_size("64K"), parse_size("1.5M"), parse_size("4G"), parse_size("8")
(65536, 1572864, 4294967296, 8)
>>> size_sweep(8, 64, 1, 2)
[8, 16, 32, 64]
>>> size_sweep(100, 400, 100, 1)
[100, 200, 300, 400]
>>> [size_label(n) for n in (8, 1024, 2 << 20, 3 << 29, 4 << 30, 1 << 50)]
['8 B', '1 KiB', '2 MiB', '1.5 GiB', '4 GiB', '1024 TiB']
"""

from __future__ import annotations

import re

from topo_probe.errors import InvalidArgument

_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\s*([KkMmGg])?\s*$")
_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
#: largest message size accepted (bytes): 1 PiB, far beyond any GPU's memory
MAX_SIZE_BYTES = 1 << 50
#: most sizes one sweep may have (nccl-tests has no limit; this guards -i 1 -e 1G typos)
MAX_SIZES = 100_000


def parse_size(text: str) -> int:
    """Bytes for a number with an optional K, M or G suffix (powers of 1024, like nccl-tests).

    Raises ValueError for anything else.
    """
    m = _SIZE.match(text)
    if not m:
        raise InvalidArgument(f"invalid size {text!r}: expected a number with an optional K, M or G suffix")
    number = float(text.strip().rstrip("KkMmGg ")) * _UNITS.get((m.group(2) or "").lower(), 1)
    if number > MAX_SIZE_BYTES:
        raise InvalidArgument(f"size {text!r} is larger than {MAX_SIZE_BYTES} bytes (1 PiB)")
    return int(number)


def size_sweep(minbytes: int, maxbytes: int, stepbytes: int, stepfactor: int) -> list[int]:
    """nccl-tests' size loop: multiply by ``stepfactor`` when > 1, else add ``stepbytes``.

    Raises
    ------
    ValueError
        ``minbytes > maxbytes``, a loop that would never advance, or more than MAX_SIZES sizes.
    """
    if minbytes < 0 or maxbytes < 0:
        raise InvalidArgument(f"invalid sizes: minbytes {minbytes} and maxbytes {maxbytes} must be >= 0")
    if minbytes > maxbytes:
        raise InvalidArgument(f"invalid sizes for 'minbytes' and 'maxbytes': {minbytes} > {maxbytes}")
    if stepfactor > 1 and minbytes == 0:
        raise InvalidArgument(f"minbytes 0 with stepfactor {stepfactor} never grows; use -b >= 1")
    if stepfactor <= 1 and stepbytes <= 0 and minbytes < maxbytes:
        raise InvalidArgument(f"stepbytes {stepbytes} never reaches maxbytes {maxbytes}; use -i > 0 or -f > 1")
    out, size = [], minbytes
    while size <= maxbytes:
        out.append(size)
        if len(out) > MAX_SIZES:
            raise InvalidArgument(f"more than {MAX_SIZES} sizes from {minbytes} to {maxbytes}; raise -i or -f")
        if minbytes == maxbytes:
            break
        size = size * stepfactor if stepfactor > 1 else size + stepbytes
    return out


_BINARY_UNITS = (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10))


def size_label(nbytes: float) -> str:
    """A size for people, in binary units (KiB, MiB, GiB, TiB: powers of 1024, as ``-b/-e``'s
    K/M/G): whole numbers plain, others with one decimal, below 1 KiB in bytes.  Tables keep
    nccl-tests' plain bytes; every label a person reads (reports, console lines, plot axes)
    comes from here, so ``2 MiB`` is never ``2 MB`` elsewhere."""
    n = float(nbytes)
    units = (*_BINARY_UNITS, ("B", 0))
    for i, (unit, k) in enumerate(units):
        v = n / (1 << k)
        if abs(v) >= 1 or k == 0:
            if i > 0 and round(abs(v), 1) >= 1024:     # 1023.96 KiB rounds to a unit more: 1.0 MiB
                unit, v = units[i - 1][0], v / 1024
            return f"{int(v)} {unit}" if v == int(v) else f"{v:.1f} {unit}"
