"""nccl-tests message sizes: the ``-b/-e/-i`` syntax and the size loop, shared by ``simulate``
and ``sweep`` (one definition; each CLI words its own errors).

>>> parse_size("64K"), parse_size("1.5M"), parse_size("4G"), parse_size("8")
(65536, 1572864, 4294967296, 8)
>>> parse_size("1KB"), parse_size("0x100"), parse_size("2 GiB"), parse_size("1e3")
(1024, 256, 2147483648, 1000)
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

#: what glibc's ``sscanf("%lf")`` takes at the start of a size, after blanks: a signed ``0x`` hexadecimal or
#: decimal number; an exponent mark without digits (``1e``, ``0x1p+``) is taken and ignored, as glibc does
#: (checked against glibc's own ``sscanf`` in tests/synth/formats/nccl_tests/test_sizes.py)
_BLANKS = " \t\n\v\f\r"
_HEX = re.compile(r"([+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]*))(?:[pP]([+-]?[0-9]*))?")
_DEC = re.compile(r"([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(?:[eE]([+-]?[0-9]*))?")
_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
#: largest message size accepted (bytes): 1 PiB, far beyond any GPU's memory
MAX_SIZE_BYTES = 1 << 50
#: most sizes one sweep may have (nccl-tests has no limit; this guards -i 1 -e 1G typos)
MAX_SIZES = 100_000


def parse_size(text: str) -> int:
    """Bytes for a size as nccl-tests' ``parsesize`` reads it (NVIDIA/nccl-tests v2.19.6 src/common.cu lines
    227-261, ``sscanf(value, "%lf %1s")``): a decimal or ``0x`` hexadecimal number, then optionally, after
    blanks, one of K, M, G (either case; powers of 1024) and whatever follows it (``1KB``, ``2 GiB``); the
    bytes are the product, its fraction dropped (``(size_t)parsed``).

    Raises InvalidArgument for anything else (nccl-tests' ``invalid size``: no number, another letter
    after it such as ``8B``, a negative size) and for sizes above :data:`MAX_SIZE_BYTES`.
    """
    start = len(text) - len(text.lstrip(_BLANKS))
    m = _HEX.match(text, start) or _DEC.match(text, start)
    if m is not None and m.re is _HEX and m.group(1).rstrip(".")[-1] in "xX" and m.group(2) is not None:
        m = None                                    # "0x.p3": glibc takes no number
    rest = text[m.end():].lstrip(_BLANKS) if m else ""
    if m is None or (rest and rest[0] not in "KkMmGg"):
        raise InvalidArgument(f"invalid size {text!r}: expected a number with an optional K, M or G suffix")
    exponent = m.group(2) if m.group(2) and m.group(2).lstrip("+-") else "0"
    if m.re is _HEX:            # glibc reads a bare "0x." as 0
        try:
            value = 0.0 if m.group(1).rstrip(".")[-1] in "xX" else float.fromhex(f"{m.group(1)}p{exponent}")
        except OverflowError:
            value = float("inf")
    else:
        value = float(f"{m.group(1)}e{exponent}")
    number = value * _UNITS.get(rest[:1].lower(), 1)
    if number < 0:
        raise InvalidArgument(f"invalid size {text!r}: a size cannot be negative")
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


def size_label(nbytes: float, exact: bool = False) -> str:
    """A size for people, in binary units (KiB, MiB, GiB, TiB: powers of 1024, as ``-b/-e``'s
    K/M/G): whole numbers plain, others with one decimal, below 1 KiB in bytes.  Tables keep
    nccl-tests' plain bytes; every label a person reads (reports, console lines, plot axes)
    comes from here, so ``2 MiB`` is never ``2 MB`` elsewhere.  ``exact``: plain bytes where the
    rounded label would hide a difference (a plan's range boundary ``1048577 B``, not ``1.0 MiB``).

    >>> size_label(1 << 20), size_label((1 << 20) + 1), size_label((1 << 20) + 1, exact=True)
    ('1 MiB', '1.0 MiB', '1048577 B')
    """
    if exact and nbytes == int(nbytes):          # integer arithmetic: a float loses bytes past 2**53
        n = int(nbytes)
        unit, k = next(((u, k) for u, k in _BINARY_UNITS if n >= 1 << k), ("B", 0))   # the largest unit <= n
        return f"{n >> k} {unit}" if n % (1 << k) == 0 else f"{n} B"
    if exact:
        label = size_label(nbytes)
        return label if "." not in label else f"{int(nbytes)} B"
    n = float(nbytes)
    units = (*_BINARY_UNITS, ("B", 0))
    for i, (unit, k) in enumerate(units):
        v = n / (1 << k)
        if abs(v) >= 1 or k == 0:
            if i > 0 and round(abs(v), 1) >= 1024:     # 1023.96 KiB rounds to a unit more: 1.0 MiB
                unit, v = units[i - 1][0], v / 1024
            return f"{int(v)} {unit}" if v == int(v) else f"{v:.1f} {unit}"
