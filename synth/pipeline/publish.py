"""Putting a complete result set in place as plain files, and removing what killed runs left.

A run's results are written complete into a hidden ``.v-*`` folder first.  :func:`publish` then
names that folder in the ``.publishing`` link (one rename), deletes ``summary.json``, puts every
other documented path in place as a hard link (a copy where the filesystem has none) of the new
one with one rename each (a folder: one atomic exchange where Linux's ``renameat2`` is there),
``summary.json`` last, and removes the link and the ``.v-*`` folder.  So at every instant the
documented paths hold the old complete results, the new complete ones, or, while ``summary.json``
is missing and ``.publishing`` is there, part of the way between; a run killed then is finished
by the next run (:func:`tidy`), also one that reuses the results.

Files a user put inside ``schedules/`` or ``msccl/`` (names that do not start with a collective's
name and ``-``, as every file synthesize writes there does) are carried into the new version
(:func:`keep_user_files`): replacing the folder never deletes them.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
from pathlib import Path

from synth.ir.collectives import COLLECTIVES

MARKER = ".topocoll-result"
#: the layout before plain files: a link to the .v-* folder served, the documented paths links through it
CURRENT = ".current"
JOURNAL = ".publishing"
VERSION_PREFIX = ".v-"
#: the documented paths, put in place in this order (summary.json last: where it is, the rest is)
ENTRIES = ("schedules", "msccl", "topology.json", "report.md", "busbw.png", "plan.json", "summary.json")
#: subfolders of ``msccl/`` synthesize writes (skipped by the MSCCL runtimes): other candidates, and plan
#: algorithms too big to write uncompressed (:mod:`synth.pipeline.msccl_export`)
MSCCL_SUBFOLDERS = ("candidates", "compressed")
_VERSION = re.compile(r"\.v-(\d{8}T\d{6}-\d+-\d+|adopted-\d+)\Z")
_TEMP = re.compile(r"\.(?P<name>schedules|msccl|topology\.json|report\.md|busbw\.png|plan\.json|summary\.json|"
                   r"current|publishing|topocoll-result)\.(tmp|old)-(?P<pid>\d+)(-old)?\Z")


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


def _link_or_copy(src, dst) -> None:
    """A hard link of ``src`` at ``dst``; a copy where the filesystem cannot link."""
    try:
        os.link(src, dst)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
        shutil.copy2(src, dst)


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


def _put(out: Path, name: str, src: Path) -> None:
    """``out/name`` becomes a plain copy (hard links) of ``src`` in one rename, or gone without ``src``."""
    dest, tmp = out / name, out / f".{name}.tmp-{os.getpid()}"
    _remove(tmp)
    if not src.exists():
        _remove(dest)
        return
    if src.is_file() and dest.is_file() and not dest.is_symlink() and os.path.samefile(src, dest):
        return                                     # kept as it was (synth.pipeline.keep)
    if src.is_dir():
        shutil.copytree(src, tmp, copy_function=_link_or_copy)
    else:
        _link_or_copy(src, tmp)
    if src.is_dir() or (dest.is_dir() and not dest.is_symlink()):
        if dest.exists() or dest.is_symlink():
            if not _exchange(tmp, dest):           # no renameat2: a moment without it (summary.json is gone)
                old = out / f".{name}.old-{os.getpid()}"
                os.rename(dest, old)
                os.rename(tmp, dest)
                tmp = old
            _remove(tmp)
            return
    os.replace(tmp, dest)


def put_in_place(out: Path, version: Path) -> None:
    """The documented paths of ``out`` become plain copies of ``version``'s, ``summary.json``
    deleted first and put back last.  Calling it again after a kill finishes the job."""
    done = out / "summary.json"
    if not done.is_symlink() and done.is_file() and (version / "summary.json").is_file() and \
            os.path.samefile(done, version / "summary.json"):
        return
    _remove(done)
    for name in ENTRIES:
        _put(out, name, version / name)


def _set_journal(out: Path, version: str) -> None:
    tmp = out / f".publishing.tmp-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    os.symlink(version, tmp)
    os.replace(tmp, out / JOURNAL)


def journal_target(out: Path) -> str | None:
    """The ``.v-*`` folder a run was putting in place (None when none was)."""
    try:
        target = os.readlink(out / JOURNAL)
    except OSError:
        return None
    return target if _VERSION.match(target) else None


def ours_by_name(name: str) -> bool:
    """``name`` is one synthesize writes into ``schedules/`` or ``msccl/``: ``<collective>-...``.

    >>> ours_by_name("allreduce-ring.json"), ours_by_name("my-schedule.json"), ours_by_name("alltoall.json")
    (True, False, False)
    """
    return any(name.startswith(f"{c}-") for c in COLLECTIVES)


def keep_user_files(out: Path, version: Path) -> list[str]:
    """Hard-link (or copy) into ``version`` every file of ``out/schedules``, ``out/msccl`` and
    ``out/msccl/candidates`` (``compressed``) that synthesize did not write (:func:`ours_by_name`) and that the new
    version has no file of that name for; returns their paths relative to ``out``."""
    kept = []
    for sub in ("schedules", "msccl", *(f"msccl/{s}" for s in MSCCL_SUBFOLDERS)):
        old = out / sub
        if not old.is_dir() or old.is_symlink():
            continue
        for p in sorted(old.iterdir()):
            if p.is_symlink() or not p.is_file() or p.name.startswith(".") or ours_by_name(p.name):
                continue
            dest = version / sub / p.name
            if dest.exists():
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            _link_or_copy(p, dest)
            kept.append(f"{sub}/{p.name}")
    return kept


def publish(out: Path, version: Path) -> None:
    """Put the complete results in ``version`` in place at ``out``'s documented paths (files a
    user put in ``schedules/`` and ``msccl/`` carried along: :func:`keep_user_files`)."""
    keep_user_files(out, version)
    _set_journal(out, version.name)
    put_in_place(out, version)
    (out / JOURNAL).unlink()
    _remove(version)


def _linked_version(out: Path) -> str | None:
    """The ``.v-*`` folder that ``.current`` names in the layout before plain files (None: no such link)."""
    cur = out / CURRENT
    if not cur.is_symlink():
        return None                     # absent, or a real file or folder: the user's, never touched
    target = os.readlink(cur)
    return target if _VERSION.match(target) else None


def tidy(out: Path, warn) -> None:
    """Under the folder's lock: finish what a killed run was putting in place (or turn results of
    the linked layout into plain files), then remove what killed runs left (:func:`remove_leftovers`)."""
    target, linked = journal_target(out), _linked_version(out)
    if target is None and linked is not None and (out / linked).is_dir():
        _set_journal(out, linked)
        target = linked
    if target is not None and (out / target).is_dir():
        put_in_place(out, out / target)
    if linked is not None:
        (out / CURRENT).unlink()
    if (out / JOURNAL).is_symlink() and journal_target(out) is not None:
        (out / JOURNAL).unlink()
    remove_leftovers(out, warn)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _our_version_folder(p: Path) -> bool:
    """``p`` holds only what a run writes into its ``.v-*`` folder."""
    for q in p.iterdir():
        if q.is_symlink():
            return False
        if q.name == "schedules" and q.is_dir():
            ok = _only_our_files(q, ".json")
        elif q.name == "msccl" and q.is_dir():
            ok = _only_our_files(q, ".xml", subfolders=MSCCL_SUBFOLDERS)
        else:
            ok = q.is_file() and (q.name in ENTRIES or q.name.startswith("."))
        if not ok:
            return False
    return True


def remove_leftovers(out: Path, warn) -> None:
    """Delete what killed runs left in ``out`` (the caller holds the lock): ``.v-*`` folders and
    temporary names, each only where it is recognisably ours and belongs to this user; the others
    are named in one ``warn`` line and left."""
    left = []
    for p in sorted(out.iterdir()):
        temp = _TEMP.match(p.name)
        if not (_VERSION.match(p.name) or temp) or p.name == journal_target(out):
            continue
        if temp and temp["name"] == "topocoll-result" and _pid_alive(int(temp["pid"])):
            continue                    # a run starting this moment makes the marker
        if p.lstat().st_uid != os.geteuid():
            left.append(f"{p.name} (owned by user {p.lstat().st_uid})")
        elif _VERSION.match(p.name) and not (p.is_dir() and not p.is_symlink() and _our_version_folder(p)):
            left.append(f"{p.name} (holds files synthesize does not write)")
        else:
            _remove(p)
    if left:
        warn(f"left in {out} what earlier runs seem to have left but is not ours to delete: {', '.join(left)}")
