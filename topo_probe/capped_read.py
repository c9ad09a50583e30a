"""A user's file read within the size limit: every loader reads its bytes through :func:`read_capped` (at most
:data:`~topo_probe.limits.MAX_INPUT_BYTES`), gzip through :func:`gunzip_capped` (a gzip bomb stops at the limit)
and text through :func:`decode_utf8` (strict UTF-8; the error names the line and column of the bad byte).  Each
failure is one line of the caller's error class naming the file.

>>> decode_utf8(b"ok\\n\\xff", "f.txt", ValueError)
Traceback (most recent call last):
...
ValueError: f.txt: line 2 column 1: not UTF-8 text (byte 0xff)
"""

from __future__ import annotations

import os
import stat
import zlib

from topo_probe.limits import MAX_INPUT_BYTES

__all__ = ["read_capped", "gunzip_capped", "decode_utf8", "read_text"]


def read_capped(path: str | os.PathLike, error: type[Exception], limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of regular file ``path``, refusing more than ``limit`` bytes (reads at most ``limit + 1``)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError) as exc:       # ValueError: a NUL in the path
        raise error(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{path}: is not a regular file")
    if info.st_size > limit:
        raise error(f"{path}: {info.st_size} bytes is more than the {limit} bytes a loader reads")
    try:
        with open(path, "rb") as fh:
            data = _read_up_to(fh, limit + 1)
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise error(f"{path}: more than the {limit} bytes a loader reads")
    return data


def _read_up_to(fh, most: int) -> bytes:
    """At most ``most`` bytes of ``fh``, in 1 MiB reads (``read(n)`` allocates ``n`` bytes up front)."""
    parts, total = [], 0
    while total < most:
        part = fh.read(min(1 << 20, most - total))
        if not part:
            break
        parts.append(part)
        total += len(part)
    return b"".join(parts)


def gunzip_capped(data: bytes, source: str, error: type[Exception], limit: int = MAX_INPUT_BYTES) -> bytes:
    """Decompress gzip ``data`` (one or more members), stopping with ``error`` once the output passes ``limit``."""
    out, rest = bytearray(), data
    while rest:
        unz = zlib.decompressobj(wbits=31)
        try:
            out += unz.decompress(rest, limit + 1 - len(out))
        except zlib.error as exc:
            raise error(f"{source}: broken gzip data: {exc}") from None
        if len(out) > limit or unz.unconsumed_tail:
            raise error(f"{source}: gzip data decompresses to more than the {limit} bytes a loader reads")
        if not unz.eof:
            raise error(f"{source}: broken gzip data: truncated")
        rest = unz.unused_data
        if rest and not rest.startswith(b"\x1f\x8b"):
            if rest.strip(b"\0"):
                raise error(f"{source}: broken gzip data: {len(rest)} bytes of garbage after the end")
            break
    return bytes(out)


def decode_utf8(data: bytes, source: str, error: type[Exception]) -> str:
    """``data`` as UTF-8 text (a leading byte-order mark dropped); a bad byte is an error naming its line and column."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(f"{source}: line {line} column {col}: not UTF-8 text (byte 0x{data[exc.start]:02x})") from None
    return text[1:] if text.startswith("\ufeff") else text


def read_text(path: str | os.PathLike, error: type[Exception], limit: int = MAX_INPUT_BYTES) -> str:
    """:func:`read_capped` then :func:`decode_utf8`."""
    return decode_utf8(read_capped(path, error, limit), str(path), error)
