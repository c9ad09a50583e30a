"""The ``synthesize`` output folder: which folders it may write into, and an update that leaves
complete results at the documented paths, as plain files, whatever instant the run is killed at.

It writes only into a folder that is new, empty, or marked as holding ``synthesize`` results
(:data:`MARKER`, written first, held under an exclusive ``flock`` while a run works in it);
results of earlier versions without the marker are recognised by their exact layout and adopted.
Anything else is refused with one line: a file, a folder with other files, the current folder or
one of its parents, anything under ``/proc``, ``/sys`` or ``/dev``.  Inside a marked folder only
these names are ever created, replaced or deleted; other files there are never touched::

    .topocoll-result          the marker
    plan.json summary.json topology.json report.md busbw.png schedules msccl
                              the documented paths: plain files and folders
    .v-<time>-<pid>-<k>/      a run's complete results, before and while they are put in place
    .publishing               link to the .v-* folder being put in place, while it is
    .<name>.tmp-<pid>         an entry about to be renamed in place, for an instant
    .<name>.old-<pid>         an entry just replaced (without renameat2), for an instant

and, from the layout of earlier versions, the ``.current`` link and documented paths that are
links through it, which become plain files.  How a version is put in place, and what a run
killed meanwhile leaves: :mod:`synth.pipeline.publish`.  A run that is stopped removes its
unfinished ``.v-*`` (and the folder itself if the run created it); what a killed run left, the
next run removes, also one that reuses the results.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from synth.pipeline.publish import (CURRENT, ENTRIES, JOURNAL, MARKER, MSCCL_SUBFOLDERS, VERSION_PREFIX,
                                    _only_our_files, _pid_alive, _remove, journal_target, publish, put_in_place,
                                    tidy)
from topo_probe.errors import InvalidArgument, TopocollError

#: files that may sit beside results of versions before the marker (``synthesize --nccl-tuner-conf
#: results/<name>/nccl_tuner.conf``); accepted there and left as they are
LEGACY_EXTRAS = ("nccl_tuner.conf",)
_MARKER_DOC = {"written_by": "topocoll synthesize", "layout": 2,
               "note": "synthesize writes only the names listed in docs/synthesis.md (What --out touches); "
                       "other files here are left alone"}
_SYSTEM_ROOTS = ("/proc", "/sys", "/dev")
#: how each documented file begins, when synthesize wrote it
_HEADS = {"plan.json": b'"format": "topocoll.plan"', "topology.json": b'"format": "topocoll.topology"',
          "report.md": b"# Synthesis report", "busbw.png": b"\x89PNG\r\n\x1a\n"}


_SHELL_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SUBSET = re.compile(r"(.+)\[((?:0|[1-9][0-9]*)(?:,(?:0|[1-9][0-9]*))*)\]")
#: endings only :func:`folder_name` makes: a subset's GPUs, a digest of a name that needed one
_MADE = re.compile(r"-(gpus[0-9.-]+|x[0-9a-f]{8})$")
_MAX_NAME = 160


def folder_name(name: str) -> str:
    """The default folder of a topology, ``results/<folder_name(name)>/``: shell-safe (letters,
    digits, ``.``, ``_``, ``-``; no leading ``.`` or ``-``), one path component, and different for
    different names.  A safe name is itself; a partial allocation ``NAME[i,j,...]`` (what
    ``--gpus`` makes) is ``NAME-gpus`` and its GPUs in order, runs written ``a-b`` and joined by
    ``.``; any other name is its safe characters and ``-x`` with 8 hex digits of its SHA-256.

    >>> folder_name("dgx1-v100"), folder_name("dgx1-v100[0,1,2,3,4]"), folder_name("dgx1-v100[4,0,1,2]")
    ('dgx1-v100', 'dgx1-v100-gpus0-4', 'dgx1-v100-gpus4.0-2')
    >>> folder_name("../../etc"), folder_name("..")
    ('etc-x74ccf3c5', 'topology-x5ec1f7e7')
    """
    m = _SUBSET.fullmatch(name)
    if m:
        made = f"{folder_name(m.group(1))}-gpus{_runs([int(g) for g in m.group(2).split(',')])}"
        if len(made) <= _MAX_NAME:
            return made
    elif _SHELL_SAFE.fullmatch(name) and not _MADE.search(name) and len(name) <= _MAX_NAME:
        return name
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:_MAX_NAME - 10].rstrip("._-")
    return f"{stem or 'topology'}-x{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def _runs(gpus: list[int]) -> str:
    """``[0, 1, 2, 5, 4]`` -> ``0-2.5.4``: maximal runs of consecutive increasing GPUs."""
    parts, start = [], 0
    for k in range(1, len(gpus) + 1):
        if k == len(gpus) or gpus[k] != gpus[k - 1] + 1:
            a, b = gpus[start], gpus[k - 1]
            parts.append(f"{a}-{b}" if b > a else f"{a}")
            start = k
    return ".".join(parts)


def _refuse(out: Path, why: str) -> InvalidArgument:
    return InvalidArgument(f"output folder {out}: {why}")


def _marked(out: Path) -> bool:
    try:
        doc = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("written_by") == _MARKER_DOC["written_by"]


def _our_link(path: Path, name: str) -> bool:
    return path.is_symlink() and os.readlink(path) == f"{CURRENT}/{name}"


def _legacy_entry(path: Path, name: str) -> bool:
    """``path`` is a real (not linked) entry as synthesize writes it."""
    if path.is_symlink():
        return False
    if name in ("schedules", "msccl"):
        return path.is_dir() and _only_our_files(path, ".json" if name == "schedules" else ".xml",
                                                 subfolders=MSCCL_SUBFOLDERS if name == "msccl" else ())
    if not path.is_file():
        return False
    if name != "summary.json":
        try:
            with open(path, "rb") as f:
                head = f.read(256)
        except OSError:
            return False
        return _HEADS[name] in head
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and "fingerprint" in doc and "collectives" in doc


def classify(out: Path) -> str:
    """``'new'``, ``'empty'``, ``'ours'`` or ``'legacy'``; any other folder raises InvalidArgument.

    >>> import tempfile
    >>> classify(Path(tempfile.mkdtemp()) / "results")
    'new'
    """
    resolved = Path(os.path.abspath(out))
    try:
        resolved = out.resolve()
    except (OSError, RuntimeError):
        pass
    if any(resolved == Path(r) or Path(r) in resolved.parents for r in _SYSTEM_ROOTS):
        raise _refuse(out, f"is under {resolved.parts[0]}{resolved.parts[1]}, not a place for results")
    try:
        cwd = Path.cwd().resolve()
    except OSError:
        cwd = Path("/")
    if resolved == cwd or resolved in cwd.parents:
        raise _refuse(out, "is the current folder or contains it; name a folder of its own")
    if out.is_symlink() and not out.exists():
        raise _refuse(out, "is a dangling symlink")
    if out.exists() and not out.is_dir():
        raise _refuse(out, "is a file, not a folder")
    if not out.exists():
        return "new"
    try:
        names = sorted(n for n in os.listdir(out) if not n.startswith(f"{MARKER}.tmp-"))
    except OSError as exc:
        raise _refuse(out, f"cannot be read ({exc.strerror})") from None
    if not names:
        return "empty"
    marked = _marked(out)
    # real entries are results of older versions only beside their real summary.json
    legacy = _legacy_entry(out / "summary.json", "summary.json")

    def acceptable(name: str) -> bool:
        if name in ENTRIES:
            return _our_link(out / name, name) or ((marked or legacy) and _legacy_entry(out / name, name))
        if legacy and name in LEGACY_EXTRAS:     # written beside results on request; never touched
            return (out / name).is_file() and not (out / name).is_symlink()
        return marked  # a marked folder may hold the user's own files too: never touched

    bad = [n for n in names if not acceptable(n)]
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise _refuse(out, f"holds files that synthesize did not write ({shown}); "
                           "choose a new or empty folder, or move them away")
    if marked:
        return "ours"
    if "summary.json" in names and "plan.json" in names:
        return "legacy"
    raise _refuse(out, "holds an incomplete set of results without the .topocoll-result marker; "
                       "choose a new or empty folder")


class ResultsFolder:
    """A run's hold on an output folder: ``with ResultsFolder(out) as rf: ...read earlier
    results...; v = rf.new_version(); ...write into v...; rf.publish(v)``.

    Entering checks the folder (:func:`classify`) and, where it is marked as ours, takes the lock
    and tidies it (:func:`synth.pipeline.publish.tidy`: finishes a killed run's publishing, removes
    what killed runs left).  :meth:`new_version` claims it: creates it and the marker if needed and
    takes the lock.  Leaving without :meth:`publish` deletes the new version (and the folder if
    this run made it).
    """

    def __init__(self, out: Path, warn=None) -> None:
        self.out = Path(out)
        self._warn = warn or (lambda line: print(f"synthesize: warning: {line}", file=sys.stderr))
        self._created: list[Path] = []
        self._lock_fd: int | None = None
        self._version: Path | None = None
        self._kind = ""

    def __enter__(self) -> "ResultsFolder":
        _recover_old_sibling(self.out)
        self._kind = classify(self.out)
        if self._kind == "ours":
            try:
                self._lock()
                tidy(self.out, self._warn)
            except BaseException:
                self._undo()
                raise
        return self

    def __exit__(self, *exc) -> None:
        self._undo()

    # -- claim -----------------------------------------------------------------------------

    def _create(self, kind: str) -> None:
        if kind == "new":
            missing = [p for p in [self.out, *self.out.parents] if not p.exists()]
            try:
                self.out.mkdir(parents=True)
            except OSError as exc:
                raise _refuse(self.out, f"cannot be created ({exc.strerror})") from None
            self._created = missing  # innermost first
        if kind in ("new", "empty", "legacy"):
            tmp = self.out / f"{MARKER}.tmp-{os.getpid()}"
            try:
                tmp.write_text(json.dumps(_MARKER_DOC, indent=1) + "\n")
                os.link(tmp, self.out / MARKER)  # complete or absent; never replaces a held one
            except FileExistsError:
                pass  # a run that started at the same moment made it; the lock decides
            except OSError as exc:
                raise _refuse(self.out, f"cannot be written ({exc.strerror})") from None
            finally:
                tmp.unlink(missing_ok=True)

    def _lock(self) -> None:
        fd = os.open(self.out / MARKER, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            self._created = []  # the other run owns what is there
            raise _refuse(self.out, "another synthesize run is writing into it") from None
        self._lock_fd = fd

    # -- a run -----------------------------------------------------------------------------

    def new_version(self) -> Path:
        """A fresh, empty ``.v-*`` folder for this run's results (the folder claimed first)."""
        if self._lock_fd is None:
            try:
                self._create(self._kind)
                self._lock()
            except BaseException:
                self._undo()
                raise
        stamp = f"{VERSION_PREFIX}{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        for k in range(1000):
            try:
                (self.out / f"{stamp}-{k}").mkdir()
            except FileExistsError:
                continue
            self._version = self.out / f"{stamp}-{k}"
            return self._version
        raise _refuse(self.out, f"cannot make a new {stamp}-* folder")

    def publish(self, version: Path) -> None:
        """Put ``version`` in place at the documented paths (:func:`synth.pipeline.publish.publish`)."""
        publish(self.out, version)

    def _undo(self) -> None:
        """Leave no trace of an unfinished run; release the lock."""
        try:
            if self._version is not None and self._version.exists():
                try:
                    if journal_target(self.out) == self._version.name:   # stopped while publishing: finish
                        put_in_place(self.out, self._version)
                        (self.out / JOURNAL).unlink()
                    _remove(self._version)
                except OSError:
                    pass                                 # the next run finishes putting it in place
            for p in self.out.glob(f".*.tmp-{os.getpid()}*"):
                _remove(p)
            results = (self.out / "summary.json").exists() or journal_target(self.out) is not None
            if self._created and not results:
                (self.out / MARKER).unlink(missing_ok=True)
                for folder in self._created:
                    try:
                        folder.rmdir()
                    except OSError:
                        break
        finally:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None


def _recover_old_sibling(out: Path) -> None:
    """Leftovers of versions that swapped a sibling folder in with two renames: an
    ``.<name>.old-<pid>`` is the previous results (renamed back if ``out`` is gone, else
    deleted); ``.<name>.partial-<pid>`` is an unfinished run (deleted).  Only for dead pids, and only
    folders that hold nothing but results as synthesize writes them (:func:`classify`): a folder of
    that name with anything else in it is the user's and is left alone."""
    parent = out.parent
    if not parent.is_dir() or not out.name:
        return
    for kind in ("old", "partial"):
        for p in sorted(parent.glob(f".{out.name}.{kind}-*")):
            pid = p.name.rsplit("-", 1)[1]
            if not pid.isascii() or not pid.isdigit() or _pid_alive(int(pid)) or not p.is_dir():
                continue
            if not _only_results(p):     # files synthesize did not write: not ours to move or delete
                continue
            if kind == "old" and not out.exists() and not out.is_symlink():
                os.rename(p, out)
            else:
                shutil.rmtree(p, ignore_errors=True)


def _only_results(folder: Path) -> bool:
    """``folder`` holds nothing but entries synthesize writes (the documented names, the marker),
    its ``schedules/`` and ``msccl/`` only our kinds of file: a leftover of ours, complete or not."""
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    for name in names:
        path = folder / name
        if path.is_symlink() or name not in (*ENTRIES, MARKER):
            return False
        if name in ("schedules", "msccl"):
            if not (path.is_dir() and _only_our_files(path, ".json" if name == "schedules" else ".xml",
                                                       subfolders=MSCCL_SUBFOLDERS if name == "msccl" else ())):
                return False
        elif not path.is_file():
            return False
    return True


class ResultsNotWritten(TopocollError):
    """A file of a run could not be written (a full disk, ...): the run's results are gone, the
    message names the file and says whether earlier results are still there."""


def not_written(exc: OSError, work: Path, out_dir: Path, had_results: bool) -> str:
    """``<file>: <why>; previous results kept`` (``nothing written`` where there were none), the
    file named by the documented path it was to have under ``out_dir``."""
    name = Path(exc.filename) if exc.filename is not None else None
    if name is not None and work in name.parents:
        name = out_dir / name.relative_to(work)
    shown = f"{name}: " if name is not None else f"writing into {out_dir}: "
    return f"{shown}{exc.strerror or exc}; " + ("previous results kept" if had_results else "nothing written")
