"""The text of an nccl-tests log file, whatever the shell that saved it wrote.

A byte-order mark picks the encoding: UTF-8 (``EF BB BF``, Notepad, ``Out-File -Encoding utf8`` of
Windows PowerShell 5), UTF-16 little-endian (``FF FE``, what Windows PowerShell 5's ``>`` writes) or
big-endian (``FE FF``); a file without one is read as UTF-8.  Undecodable bytes become U+FFFD, so a
broken byte shows up as a cell that is not a number (an error naming the line), never as a silent
value.

>>> decode_log_bytes(b"\\xef\\xbb\\xbf# nThread 1"), decode_log_bytes("# nThread 1".encode("utf-16"))
('# nThread 1', '# nThread 1')
>>> decode_log_bytes(b"\\xfe\\xff\\x00#")
'#'
"""

from __future__ import annotations

import codecs
from pathlib import Path

from topo_probe.capped_read import read_capped
from topo_probe.errors import NcclTestsLogError
from topo_probe.terminal_text import editor_lines

#: (byte-order mark, codec), the longer marks first
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


def decode_log_bytes(data: bytes) -> str:
    """``data`` decoded by its byte-order mark (the mark removed), else as UTF-8; bad bytes become U+FFFD."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data[len(bom):].decode(codec, errors="replace")
    return data.decode("utf-8", errors="replace")


def log_lines(text: str) -> list[str]:
    r"""The lines of a log as an editor numbers them (so that an error's line is the file's): a line ends at
    ``\n``, ``\r\n`` or ``\r``; a form feed, U+2028 or another character :meth:`str.splitlines` also breaks at stays
    inside its line (it is white space to the reader); byte-order marks are dropped.

    >>> log_lines("a\r\nb\x0cc\u2028d\re\n")
    ['a', 'b\x0cc\u2028d', 'e']
    """
    lines = editor_lines(text.replace("\ufeff", ""))
    return lines[:-1] if lines[-1] == "" else lines


def read_log_text(path: str | Path) -> str:
    """The text of a log file (:func:`decode_log_bytes`), read through the one input guard
    (:func:`topo_probe.capped_read.read_capped`: a regular file of at most MAX_INPUT_BYTES = 32 MiB); errors
    (:class:`NcclTestsLogError`) name the file."""
    return decode_log_bytes(read_capped(Path(path), NcclTestsLogError))


__all__ = ["decode_log_bytes", "log_lines", "read_log_text"]
