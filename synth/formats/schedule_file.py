"""Read a schedule from any file a user has: topocoll schedule JSON (also gzip-compressed,
``.json.gz``) or an MSCCL XML algorithm.  The format is told from the content, not the name.

>>> import tempfile, pathlib
>>> from synth.ir.schedule import Schedule, Step, Transfer
>>> s = Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),))
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> s.save(d / "ag.json"); save_schedule(s, d / "ag.json.gz")
>>> load_schedule(d / "ag.json") == load_schedule(d / "ag.json.gz") == s
True
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path

from synth.ir.schedule import Schedule, atomic_write_bytes
from topo_probe.errors import ScheduleFormatError

_GZIP_MAGIC = b"\x1f\x8b"


def _read_bytes(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ScheduleFormatError(f"{path}: cannot read: {e.strerror or e}") from None
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise ScheduleFormatError(f"{path}: broken gzip data: {e}") from None
    return data


def load_schedule(path: str | os.PathLike, *, fabric=None) -> Schedule:
    """The schedule in ``path`` (topocoll JSON, gzip JSON or MSCCL XML).

    ``fabric`` is passed to the MSCCL XML reader (rank count and names); JSON documents carry
    their own.  Errors are :class:`~topo_probe.errors.ScheduleFormatError` naming the file.
    """
    path = Path(path)
    data = _read_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScheduleFormatError(f"{path}: not UTF-8 text (byte {e.start})") from None
    head = text.lstrip("\ufeff \t\r\n")[:1]
    if head == "<":
        from synth.formats.msccl.reader import from_msccl_xml
        return from_msccl_xml(text, source=str(path), fabric=fabric)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ScheduleFormatError(f"{path}: line {e.lineno} column {e.colno}: invalid JSON: {e.msg}") from None
    return Schedule.from_dict(doc, str(path))


def save_schedule(schedule: Schedule, path: str | os.PathLike) -> None:
    """Write ``schedule`` as JSON, gzip-compressed when ``path`` ends in ``.gz`` (atomically)."""
    path = Path(path)
    text = schedule.to_json()
    data = gzip.compress(text.encode(), compresslevel=6, mtime=0) if path.suffix == ".gz" else text.encode()
    atomic_write_bytes(path, data)


__all__ = ["load_schedule", "save_schedule"]
