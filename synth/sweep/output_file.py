"""Whether a table command may write a file it was asked for (``-J``, ``--plot``, ``--csv``),
checked before anything runs: an existing, writable folder, never a folder itself, so a command
never creates folders or ends with a write error after all its work."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from topo_probe.errors import UsageError


def check_output_file(flag: str, path: Path) -> None:
    """Refuse ``flag path`` unless it names a file in an existing folder this process may write
    (UsageError naming the flag, the path and the reason).  Writable is tried, not inferred from
    the permission bits: a file is made there and removed (root passes ``os.access`` on ``/proc``,
    where no file can be made).

    >>> check_output_file("-J", Path("/no/such/folder/out.json"))
    Traceback (most recent call last):
    topo_probe.errors.UsageError: -J /no/such/folder/out.json: folder /no/such/folder does not exist
    """
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a folder; name a file")
    if not path.parent.is_dir():
        raise UsageError(f"{flag} {path}: folder {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: folder {path.parent} is not writable")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot write in folder {path.parent} ({e.strerror or e})") from None
    os.close(fd)
    os.unlink(probe)


__all__ = ["check_output_file"]
