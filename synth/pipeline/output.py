"""The ``synthesize`` output folder: which folders it may write into, and an update that leaves
complete results at the documented paths whatever instant the run is killed at.

It writes only into a folder that is new, empty, or marked as holding ``synthesize`` results
(:data:`MARKER`, written first, held under an exclusive ``flock`` while a run writes); results of
earlier versions without the marker are recognised by their exact layout and adopted.  Anything
else is refused with one line: a file, a folder with other files, the current folder or one of
its parents, anything under ``/proc``, ``/sys`` or ``/dev``.  Inside a marked folder only these
names are ever created, replaced or deleted; other files there are never touched::

    .topocoll-result          the marker
    .v-<time>-<pid>/          one complete set of results per run
    .current                  symlink to the .v-* folder being served
    plan.json summary.json topology.json report.md busbw.png schedules msccl
                              symlinks to .current/<same name> (the documented paths)
    .<name>.tmp-<pid>         a symlink or an adopted old entry, for an instant

A run writes a new ``.v-*`` folder, then replaces ``.current`` with one ``rename`` (atomic),
then deletes the older ``.v-*``.  Every documented path resolves through ``.current``, so at
every instant it shows the old results or the new ones, each complete.  A run that is stopped
removes its unfinished ``.v-*`` (and the folder itself if the run created it); a run that was
killed leaves it, and the next run deletes it.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import shutil
import time
from pathlib import Path

from topo_probe.errors import InvalidArgument

MARKER = ".topocoll-result"
CURRENT = ".current"
VERSION_PREFIX = ".v-"
#: the documented paths, each a symlink to ``.current/<name>``, made in this order (summary.json
#: last: where it is, the rest is)
ENTRIES = ("schedules", "msccl", "topology.json", "report.md", "busbw.png", "plan.json", "summary.json")
#: files that may sit beside results of versions before the marker (``synthesize --nccl-tuner-conf
#: results/<name>/nccl_tuner.conf``); accepted there and left as they are
LEGACY_EXTRAS = ("nccl_tuner.conf",)
_MARKER_DOC = {"written_by": "topocoll synthesize", "layout": 1,
               "note": "synthesize writes only the names listed in its README section; other files here are left alone"}
_SYSTEM_ROOTS = ("/proc", "/sys", "/dev")


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
    """``path`` is a real (not linked) entry as topocoll versions before the marker wrote it."""
    if path.is_symlink():
        return False
    if name in ("schedules", "msccl"):
        return path.is_dir() and _only_our_files(path, ".json" if name == "schedules" else ".xml",
                                                 subfolders=("candidates",) if name == "msccl" else ())
    if not path.is_file():
        return False
    if name != "summary.json":
        return True
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and "fingerprint" in doc and "collectives" in doc


def _only_our_files(folder: Path, suffix: str, subfolders: tuple[str, ...] = ()) -> bool:
    """Every entry of ``folder`` is a ``*suffix`` or ``*suffix.gz`` file, a hidden temporary file,
    or one of ``subfolders`` holding only such files."""
    for p in folder.iterdir():
        if p.is_symlink():
            return False
        if p.is_dir() and p.name in subfolders:
            if not _only_our_files(p, suffix):
                return False
        elif not (p.is_file() and (p.name.endswith((suffix, suffix + ".gz")) or p.name.startswith("."))):
            return False
    return True


def _ours_by_name(name: str) -> bool:
    return (name in (MARKER, CURRENT) or name.startswith(VERSION_PREFIX)
            or (name.startswith(".") and ".tmp-" in name))


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
            return _our_link(out / name, name) or (legacy and _legacy_entry(out / name, name))
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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(path: Path) -> None:
    """Delete a file, symlink or folder tree of ours (missing is fine)."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if fn is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _link(out: Path, name: str, target: str) -> None:
    """Make ``out/name`` a symlink to ``target`` in one rename (replacing a file or an old link)."""
    tmp = out / f".{name.lstrip('.')}.tmp-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    dest = out / name
    if dest.is_dir() and not dest.is_symlink():  # an adopted real folder: swap, then delete it
        if not _exchange(tmp, dest):
            os.rename(dest, tmp.with_name(tmp.name + "-old"))  # no renameat2: a moment without it
            os.rename(tmp, dest)
            tmp = tmp.with_name(tmp.name + "-old")
        _remove(tmp)
        return
    os.replace(tmp, dest)


class ResultsFolder:
    """Claim an output folder for one run: ``with ResultsFolder(out) as rf: v = rf.new_version();
    ...write into v...; rf.publish(v)``.

    Entering checks the folder (:func:`classify`), creates it and the marker if needed, takes the
    lock, deletes what killed runs left (unpublished ``.v-*`` folders, temporary links, the
    ``.<name>.partial-<pid>`` and ``.<name>.old-<pid>`` siblings of older versions, whose old
    results come back if the folder itself is gone) and adopts results of older versions.
    Leaving without :meth:`publish` deletes the new version (and the folder if this run made it).
    """

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self._created: list[Path] = []
        self._lock_fd: int | None = None
        self._version: Path | None = None

    def __enter__(self) -> "ResultsFolder":
        _recover_old_sibling(self.out)
        kind = classify(self.out)
        try:
            self._create(kind)
            self._lock()
            self._clean()
            if kind == "legacy" or any(not (self.out / n).is_symlink() and (self.out / n).exists()
                                       for n in ENTRIES):
                self._adopt()
            self._link_entries()
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

    def _clean(self) -> None:
        """Delete what killed runs left: every ``.v-*`` but the current one, temporary names."""
        current = self.current_version()
        for p in self.out.iterdir():
            if (p.name.startswith(VERSION_PREFIX) and p.name != current) or \
                    (p.name.startswith(".") and ".tmp-" in p.name):
                _remove(p)

    def _adopt(self) -> None:
        """Results of versions before the marker (real files, no links): copy them into a
        version, serve it, then put links in place of the real entries, one rename each (the
        content behind every documented path stays the same throughout)."""
        if self.current_version() is None:
            version = self.out / f"{VERSION_PREFIX}adopted-{os.getpid()}"
            version.mkdir()
            for name in ENTRIES:
                src = self.out / name
                if src.is_dir() and not src.is_symlink():
                    shutil.copytree(src, version / name)
                elif src.is_file() and not src.is_symlink():
                    shutil.copy2(src, version / name)
            _link(self.out, CURRENT, version.name)
        for name in sorted(ENTRIES, key=lambda n: n == "summary.json"):  # summary.json last: while
            if (self.out / name).exists() and not (self.out / name).is_symlink():  # real, so are others
                _link(self.out, name, f"{CURRENT}/{name}")

    # -- a run -----------------------------------------------------------------------------

    def current_version(self) -> str | None:
        """Name of the ``.v-*`` folder ``.current`` points to (None before the first publish)."""
        try:
            return os.readlink(self.out / CURRENT)
        except OSError:
            return None

    def new_version(self) -> Path:
        """A fresh, empty ``.v-*`` folder for this run's results."""
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
        """Serve ``version``: one atomic rename of ``.current``, the links, then older versions go."""
        _link(self.out, CURRENT, version.name)
        self._link_entries()
        for p in self.out.iterdir():
            if p.name.startswith(VERSION_PREFIX) and p.name != version.name:
                _remove(p)

    def _link_entries(self) -> None:
        """Every documented path a link through ``.current`` (once results exist)."""
        if self.current_version() is None:
            return
        for name in ENTRIES:
            if not _our_link(self.out / name, name):
                _link(self.out, name, f"{CURRENT}/{name}")

    def _undo(self) -> None:
        """Leave no trace of an unfinished run; release the lock."""
        try:
            current = self.current_version() if self.out.is_dir() else None
            if self._version is not None and self._version.name != current:
                _remove(self._version)
            elif self._version is not None:  # stopped just after the switch: finish it
                self._link_entries()
            for p in self.out.glob(f".*.tmp-{os.getpid()}*"):
                _remove(p)
            if current is None and self._created:
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
    deleted); ``.<name>.partial-<pid>`` is an unfinished run (deleted).  Only for dead pids."""
    parent = out.parent
    if not parent.is_dir() or not out.name:
        return
    for kind in ("old", "partial"):
        for p in sorted(parent.glob(f".{out.name}.{kind}-*")):
            pid = p.name.rsplit("-", 1)[1]
            if not pid.isascii() or not pid.isdigit() or _pid_alive(int(pid)) or not p.is_dir():
                continue
            if kind == "old" and not out.exists() and not out.is_symlink():
                os.rename(p, out)
            else:
                shutil.rmtree(p, ignore_errors=True)
