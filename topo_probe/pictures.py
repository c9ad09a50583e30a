"""The PNG pictures topocoll draws carry a mark, so that a later run may replace its own picture
and never a user's: every picture is written by :func:`save_png`, which puts a PNG ``tEXt`` chunk
``Software`` = ``topocoll: <command>`` into the file (matplotlib's ``savefig`` metadata, placed
right after the ``IHDR`` chunk), and :func:`is_our_png` recognises it in a file's first bytes.

The chunk layout read here is the PNG specification's (ISO/IEC 15948, 5.2 signature, 5.3 chunk
layout: 4-byte big-endian length, 4-byte type, data, CRC-32 over type and data; 11.3.4.3 ``tEXt``:
keyword, a zero byte, Latin-1 text).  A chunk whose CRC does not match, a truncated chunk or any
byte after the signature that is not a chunk makes the file *not ours*.
"""

from __future__ import annotations

import io
import os
import struct
import zlib

from topo_probe.topology.serialize import atomic_write

#: the eight bytes every PNG file begins with (PNG specification, 5.2)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: the ``tEXt`` keyword of the mark (a PNG predefined keyword: "software used to create the image")
MARK_KEY = "Software"
#: how the mark's text begins; the command that drew the picture follows
MARK_PREFIX = "topocoll: "


def png_metadata(command: str) -> dict[str, str]:
    """The ``savefig(metadata=...)`` that marks a picture as drawn by topocoll's ``command``
    (e.g. ``"sweep --plot"``, ``"benchmarks/bench_scale.py"``).

    >>> png_metadata("sweep --plot")
    {'Software': 'topocoll: sweep --plot'}
    """
    return {MARK_KEY: MARK_PREFIX + " ".join(command.split())}


def png_text_chunks(head: bytes) -> dict[str, str] | None:
    """The ``tEXt`` chunks (keyword -> text) before the first ``IDAT`` among a PNG file's first
    bytes ``head``; None when ``head`` is not a PNG's beginning (no signature, a chunk that is cut
    short before ``IDAT`` is reached, a bad length, type or CRC-32).

    >>> png_text_chunks(b"GIF89a") is None
    True
    """
    if not head.startswith(PNG_SIGNATURE):
        return None
    texts, at = {}, len(PNG_SIGNATURE)
    while True:
        if at + 8 > len(head):
            return None
        length, kind = struct.unpack(">I4s", head[at:at + 8])
        if length > 2**31 - 1 or not kind.isalpha():        # 5.3: length < 2^31; type: ASCII letters
            return None
        if kind == b"IDAT":
            return texts
        end = at + 8 + length
        if end + 4 > len(head):
            return None
        data = head[at + 8:end]
        if struct.unpack(">I", head[end:end + 4])[0] != zlib.crc32(kind + data):
            return None
        if kind == b"tEXt" and b"\0" in data:
            key, text = data.split(b"\0", 1)
            texts.setdefault(key.decode("latin-1"), text.decode("latin-1"))
        at = end + 4


def is_our_png(head: bytes) -> bool:
    """Whether a file's first bytes (4 KiB is plenty: the mark precedes the image data) are a PNG
    :func:`save_png` wrote: its ``Software`` text begins with ``topocoll: ``."""
    texts = png_text_chunks(head)
    return texts is not None and texts.get(MARK_KEY, "").startswith(MARK_PREFIX)


def save_png(fig, path: str | os.PathLike, command: str, **savefig_kw) -> None:
    """Write matplotlib figure ``fig`` to ``path`` as a marked PNG (:func:`png_metadata`),
    atomically (:func:`topo_probe.topology.serialize.atomic_write`: a temporary file in the same
    folder, renamed over ``path``, the mode a plain ``open`` would give).  ``savefig_kw`` goes to
    ``fig.savefig`` (``dpi``, ...)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata=png_metadata(command), **savefig_kw)
    atomic_write(path, buf.getvalue())


__all__ = ["MARK_KEY", "MARK_PREFIX", "PNG_SIGNATURE", "is_our_png", "png_metadata", "png_text_chunks", "save_png"]
