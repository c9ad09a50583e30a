"""Warnings that point at the user's line: the first frame outside topocoll's packages.

A warning raised deep in :mod:`synth.plan.selector` is reached through different call chains (a
:class:`~kernels.comm.communicator.Communicator` call, an
:class:`~kernels.mpi.communicator.MPICommunicator` made by ``from_mpi``, a sweep, a PyTorch process group), each
with its own depth: a fixed ``stacklevel`` points at one of our own lines for all but one of them.
:func:`warn_user` counts the levels instead, up to the first frame whose file is not under ``synth/``,
``kernels/`` or ``topo_probe/`` (Python 3.12's ``warnings.warn(skip_file_prefixes=...)`` does the same; 3.10
and 3.11 lack it).
"""

from __future__ import annotations

import os
import sys
import warnings

#: the packages whose frames a warning skips (absolute folder paths, each with a trailing separator)
PACKAGE_DIRS = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), p, "")
                     for p in ("synth", "kernels", "topo_probe"))


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message)`` attributed to the first calling frame outside :data:`PACKAGE_DIRS` (the
    outermost frame where every one is inside: a command line's own entry)."""
    frame, level = sys._getframe(1), 2
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(PACKAGE_DIRS):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


__all__ = ["PACKAGE_DIRS", "warn_user"]
