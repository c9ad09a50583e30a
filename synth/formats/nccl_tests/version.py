"""The NCCL (or RCCL) version an nccl-tests log prints: an ``NCCL INFO NCCL version 2.22.3`` line (rccl-tests'
``RCCL version : 2.27.7-HEAD``), or the ``nccl-library=22602`` code in the header of newer nccl-tests (rccl-tests':
``rccl-library=22707``)."""

from __future__ import annotations

import re

_VERSION = re.compile(r"(?:NCCL|RCCL) version\s*:?\s*(\d{1,2})\.(\d{1,3})\.(\d{1,3})")
_LIBRARY = re.compile(r"(?<![\w-])[nr]ccl-library=(\d{4,6})(?!\d)")


def version_of(line: str) -> tuple[int, int, int] | None:
    """The NCCL version a line prints, if any.

    >>> version_of("host:25:25 [0] NCCL INFO NCCL version 2.22.3+cuda12.2"), version_of("# nccl-library=22602")
    ((2, 22, 3), (2, 26, 2))
    >>> version_of("RCCL version : 2.27.7-HEAD:0d2c4fd"), version_of("# rccl-headers=22803 rccl-library=22707")
    ((2, 27, 7), (2, 27, 7))
    >>> version_of("# nccl-library=2804"), version_of("# foo-xrccl-library=22707")
    ((2, 8, 4), None)
    >>> version_of("# nccl-tests version 2.13.8") is None
    True
    """
    m = _VERSION.search(line)
    if m:
        return int(m.group(1)), int(m.group(2)), int(m.group(3))
    m = _LIBRARY.search(line)
    if m:
        code = int(m.group(1))
        if len(m.group(1)) == 4:               # up to 2.8: major*1000 + minor*100 + patch (v2.8.4-1 src/nccl.h.in 19)
            return code // 1000, code % 1000 // 100, code % 100
        return code // 10000, code % 10000 // 100, code % 100   # from 2.9: major*10000 + minor*100 + patch
    return None
