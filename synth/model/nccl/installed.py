"""Which NCCL the model follows: a version a user names (``--nccl-version``), the one this
machine has installed, or the model's default (:data:`~.constants.NCCL_VERSION`).

Most of the model's rules are keyed by NCCL (major, minor) (:mod:`.versions`: tuning tables, LL128 by
default, channel rules, tree threshold, point-to-point parts...); a few changed at a patch release
(:mod:`.versions_patch`: Blackwell's ring LL128 and NVLS-tree rows, p2p epochs, NVLS's GPU count), so a
version is kept as stated: ``(major, minor, patch)`` where a patch is named, printed by a log or
installed, a bare ``(major, minor)`` otherwise (read as :mod:`.versions_patch` says).  A plan made by probing this
machine compares our schedules with the NCCL it would really call; a plan for a described machine
(``--topology``) with the NCCL its owner names, else the default.

The installed library is asked through its own C entry point ``ncclGetVersion(int*)`` (NCCL's
``nccl.h``): the code is ``major*10000 + minor*100 + patch`` from NCCL 2.9 on and
``major*1000 + minor*100 + patch`` before (``NCCL_VERSION(X,Y,Z)`` in ``nccl.h.in``, changed with
2.9.6); RCCL answers the same call.

>>> parse_nccl_version("2.21.5-1"), parse_nccl_version("v2.8"), version_from_code(22105), version_from_code(2804)
((2, 21, 5), (2, 8), (2, 21, 5), (2, 8, 4))
"""

from __future__ import annotations

import ctypes
import re

from topo_probe.errors import UsageError

#: the oldest NCCL whose rules the model holds (NCCL 2.4: trees; LL128 came with 2.5)
OLDEST = (2, 4)
#: shared-library names tried, NCCL's first
LIBRARIES = ("libnccl.so.2", "libnccl.so", "librccl.so.1", "librccl.so")
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:-\d+)?")


def parse_nccl_version(text: str, what: str = "--nccl-version") -> tuple[int, ...]:
    """``(major, minor)`` of ``2.21``, ``(major, minor, patch)`` of ``2.21.5`` or ``v2.21.5-1`` (the
    ``-1`` is the packaging); a one-line UsageError naming ``what`` for anything else or for a version
    older than the model's oldest rules (checked on its ``(major, minor)``)."""
    m = _VERSION.fullmatch(str(text).strip())
    if m is None:
        raise UsageError(f"{what} {text!r}: not an NCCL version MAJOR.MINOR[.PATCH] (e.g. 2.21.5)")
    version = tuple(int(g) for g in m.groups() if g is not None)
    if version[0] != 2 or version[:2] < OLDEST:
        raise UsageError(f"{what} {text}: the NCCL model holds NCCL's rules from 2.4 on (2.x releases only)")
    return version


def version_from_code(code: int) -> tuple[int, int, int]:
    """NCCL's ``ncclGetVersion`` code as ``(major, minor, patch)`` (both encodings, see above)."""
    if code >= 10000:
        return code // 10000, code % 10000 // 100, code % 100
    return code // 1000, code % 1000 // 100, code % 100


def resolve_nccl_version(named: str | None, printed: tuple | None = None,
                         probed: bool = False) -> tuple[tuple[int, ...] | None, str]:
    """The NCCL version the model follows, its patch kept where one is known, and where it comes from,
    first that applies: ``named`` (``--nccl-version``), ``printed`` (what an imported log prints), the
    installed library when ``probed`` (the topology is this machine's), else None (the model's default).

    >>> resolve_nccl_version("2.28.9", (2, 22, 3)), resolve_nccl_version("2.28"), resolve_nccl_version(None, (2, 28, 9))
    (((2, 28, 9), '--nccl-version'), ((2, 28), '--nccl-version'), ((2, 28, 9), 'the log'))
    >>> resolve_nccl_version(None)
    (None, "the model's default")
    """
    if named is not None:
        return parse_nccl_version(named), "--nccl-version"
    if printed:
        return tuple(int(x) for x in printed[:3]), "the log"
    found = installed_nccl_version() if probed else None
    if found is not None and found[0] == 2 and tuple(found[:2]) >= OLDEST:
        return tuple(found), "installed"
    return None, "the model's default"


def installed_nccl_version(libraries=LIBRARIES) -> tuple[int, int, int] | None:
    """The version of the first NCCL (or RCCL) library this process can load; None where there is
    none or it does not answer.  Never raises: a machine without NCCL plans against the default."""
    for name in libraries:
        try:
            lib = ctypes.CDLL(name)
            code = ctypes.c_int(0)
            if lib.ncclGetVersion(ctypes.byref(code)) == 0 and code.value > 0:
                return version_from_code(code.value)
        except (OSError, AttributeError):
            continue
    return None


__all__ = ["OLDEST", "LIBRARIES", "parse_nccl_version", "resolve_nccl_version", "version_from_code",
           "installed_nccl_version"]
