"""Warnings that point at the user's line: the first frame outside topocoll's packages.

A warning raised deep in :mod:`synth.plan.selector` is reached through different call chains (a
:class:`~kernels.comm.communicator.Communicator` call, an
:class:`~kernels.mpi.communicator.MPICommunicator` made by ``from_mpi``, a sweep, a PyTorch process group), each
with its own depth: a fixed ``stacklevel`` points at one of our own lines for all but one of them.
:func:`warn_user` counts the levels instead, up to the first frame whose file is not under ``synth/``,
``kernels/`` or ``topo_probe/`` (Python 3.12's ``warnings.warn(skip_file_prefixes=...)`` does the same; 3.10
and 3.11 lack it).  A library that calls into ours on the user's behalf names its own folder with
:func:`skip_frames_under` (:mod:`kernels.pytorch` names torch's: ``dist.all_reduce`` reaches our process group
through ``torch/distributed/distributed_c10d.py``), so the warning points past it, at the user's call.
A call run for the user on another thread (a process group's worker thread) has no user frame on its stack:
the code that hands it over takes the user's place with :func:`user_location` and runs it inside
:func:`warnings_from` that place, so its warnings still point at the user's line (not at
``concurrent/futures/thread.py``).
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from contextlib import contextmanager

#: the packages whose frames a warning skips (absolute folder paths, each with a trailing separator)
PACKAGE_DIRS = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), p, "")
                     for p in ("synth", "kernels", "topo_probe"))
#: more folders whose frames a warning skips (:func:`skip_frames_under`)
_ALSO_SKIPPED: list[str] = []
#: per thread: ``where`` is the (file, line, module globals) its warnings point at (:func:`warnings_from`)
_ORIGIN = threading.local()


def skip_frames_under(folder: str) -> None:
    """Also skip the frames of files under ``folder`` (a library that calls ours for the user, e.g. torch)."""
    folder = os.path.join(os.path.abspath(folder), "")
    if folder not in _ALSO_SKIPPED:
        _ALSO_SKIPPED.append(folder)


def _user_frame(frame):
    """``(frame, levels climbed)``: the first frame from ``frame`` outward outside :data:`PACKAGE_DIRS` and the
    folders given to :func:`skip_frames_under` (the outermost frame where every one is inside)."""
    skipped, level = PACKAGE_DIRS + tuple(_ALSO_SKIPPED), 0
    while frame.f_back is not None and _is_under(frame.f_code.co_filename, skipped):
        frame, level = frame.f_back, level + 1
    return frame, level


def user_location() -> tuple[str, int, dict]:
    """``(file, line, module globals)`` of the user's line that led to this call (the frame
    :func:`warn_user` would name), to hand to :func:`warnings_from` on another thread."""
    where = getattr(_ORIGIN, "where", None)
    if where is not None:                   # already on a handed-over thread: the same user line
        return where
    frame, _ = _user_frame(sys._getframe(1))
    return frame.f_code.co_filename, frame.f_lineno, frame.f_globals


@contextmanager
def warnings_from(where: tuple[str, int, dict] | None):
    """Within the block, :func:`warn_user` on this thread points at ``where`` (:func:`user_location`; None:
    at this thread's own stack, as outside the block)."""
    before, _ORIGIN.where = getattr(_ORIGIN, "where", None), where
    try:
        yield
    finally:
        _ORIGIN.where = before


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message)`` attributed to the first calling frame outside :data:`PACKAGE_DIRS` and the
    folders given to :func:`skip_frames_under` (the outermost frame where every one is inside: a command line's
    own entry); on a thread running a call for the user, to the place :func:`warnings_from` gave."""
    where = getattr(_ORIGIN, "where", None)
    if where is not None:
        file, line, module_globals = where
        warnings.warn_explicit(message, category, file, line, module=module_globals.get("__name__"),
                               registry=module_globals.setdefault("__warningregistry__", {}),
                               module_globals=module_globals)
        return
    _, level = _user_frame(sys._getframe(1))
    warnings.warn(message, category, stacklevel=level + 2)


def _is_under(filename: str, folders: tuple[str, ...]) -> bool:
    """Whether a frame's ``co_filename`` is a file under one of ``folders`` (absolute, each ending in a separator).
    Our modules' names are absolute (Python makes an imported module's path absolute); a relative name or a
    pseudo-file (``<string>``, ``<stdin>``) is the user's, wherever the working directory is: it is not read
    relative to it (``os.path.abspath('<string>')`` inside ``synth/`` would be ``synth/<string>``)."""
    return os.path.isabs(filename) and filename.startswith(folders)


__all__ = ["PACKAGE_DIRS", "skip_frames_under", "user_location", "warn_user", "warnings_from"]
