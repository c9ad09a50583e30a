"""Read a schedule from any file a user has: topocoll schedule JSON (also gzip-compressed,
``.json.gz``) or an MSCCL XML algorithm.  The format is told from the content, not the name.

>>> import tempfile, pathlib
>>> from synth.ir.schedule import Schedule, Step, Transfer
>>> s = Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),))
>>> with tempfile.TemporaryDirectory() as tmp:
...     d = pathlib.Path(tmp)
...     s.save(d / "ag.json"); save_schedule(s, d / "ag.json.gz")
...     load_schedule(d / "ag.json") == load_schedule(d / "ag.json.gz") == s
True
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

from synth.ir.schedule import Schedule, atomic_write_bytes, check_transfer_count, read_schedule_bytes
from topo_probe.capped_read import decode_utf8
from topo_probe.errors import ScheduleFormatError
from topo_probe.json_guard import parse_json
from topo_probe.limits import MAX_INPUT_BYTES

def load_schedule(path: str | os.PathLike, *, fabric=None) -> Schedule:
    """The schedule in ``path`` (topocoll JSON, gzip JSON or MSCCL XML).

    ``fabric`` is passed to the MSCCL XML reader (rank count and names); JSON documents carry
    their own.  Errors are :class:`~topo_probe.errors.ScheduleFormatError` naming the file, or
    :class:`~topo_probe.errors.ScheduleInvalid` for a schedule with fewer transfers than its
    collective needs (:func:`~synth.ir.schedule.check_transfer_count`).  The limits of
    :mod:`topo_probe.limits` apply.
    """
    path = Path(path)
    text = decode_utf8(read_schedule_bytes(path), str(path), ScheduleFormatError)
    head = text.lstrip("\ufeff \t\r\n")[:1]
    if head == "<":
        if len(text) > MAX_INPUT_BYTES:       # the larger schedule limits are for JSON only
            raise ScheduleFormatError(f"{path}: more than the {MAX_INPUT_BYTES} bytes of MSCCL XML a loader reads")
        from synth.formats.msccl.reader import from_msccl_xml
        return check_transfer_count(from_msccl_xml(text, source=str(path), fabric=fabric), str(path))
    doc = parse_json(text, str(path), ScheduleFormatError, free_form=("meta",), schedule=True)   # solvers write Infinity there
    return check_transfer_count(Schedule.from_dict(doc, str(path)), str(path))


def save_schedule(schedule: Schedule, path: str | os.PathLike) -> None:
    """Write ``schedule`` as JSON, gzip-compressed when ``path`` ends in ``.gz`` (atomically)."""
    path = Path(path)
    text = schedule.to_json()
    data = gzip.compress(text.encode(), compresslevel=6, mtime=0) if path.suffix == ".gz" else text.encode()
    atomic_write_bytes(path, data)


__all__ = ["load_schedule", "save_schedule"]
