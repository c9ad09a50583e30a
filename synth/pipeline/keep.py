"""A run over a folder that already holds results: what it leaves as it is.

The timings in ``summary.json`` and ``report.md`` describe the run that made the results beside
them.  So when a run's new results equal those in place apart from wall-clock times
(:mod:`synth.pipeline.wall_clock`): the same files, every one byte for byte the same but
``summary.json`` and ``report.md``, and those two differing only in wall-clock times, nothing
is written and the folder stays exactly as it was (:func:`unchanged`).  Otherwise the new
results are put in place, and before that every file of the new version whose bytes equal the
one in place becomes a hard link to it (:func:`link_identical`), so that it keeps its inode and
modification time; ``summary.json`` and ``report.md`` then carry this run's times.
"""

from __future__ import annotations

import filecmp
import os
from pathlib import Path

from synth.pipeline.publish import ENTRIES
from synth.pipeline.wall_clock import same_json, same_text

#: the files that hold wall-clock times
TIMED = ("summary.json", "report.md")


def _files(root: Path) -> dict[str, Path] | None:
    """Relative path -> file, of every plain file under ``root``'s documented paths (hidden
    names left out); None where one of them is a link."""
    found: dict[str, Path] = {}
    for name in ENTRIES:
        top = root / name
        if top.is_symlink():
            return None
        if top.is_file():
            found[name] = top
        elif top.is_dir():
            for dirpath, dirnames, files in os.walk(top):
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]
                for f in files:
                    p = Path(dirpath) / f
                    if f.startswith("."):
                        continue
                    if p.is_symlink() or not p.is_file():
                        return None
                    found[p.relative_to(root).as_posix()] = p
    return found


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False


def _same(rel: str, old: Path, new: Path, report_marked: str | None) -> bool:
    """``old`` (in place) equals ``new`` (this run's) apart from wall-clock times."""
    if _same_bytes(old, new):
        return True
    if rel not in TIMED:
        return False
    try:
        old_text = old.read_text()
        new_text = new.read_text()
    except (OSError, UnicodeDecodeError):
        return False
    if rel == "summary.json":
        return same_json(old_text, new_text)
    return report_marked is not None and same_text(old_text, report_marked)


def unchanged(out: Path, version: Path, report_marked: str | None) -> int | None:
    """The number of files in ``out`` when ``version`` holds the same results apart from
    wall-clock times; None when they differ (or ``out`` holds none).  ``report_marked``: the new
    ``report.md`` with its wall-clock spans marked (None: compared byte for byte)."""
    old, new = _files(out), _files(version)
    if not old or new is None or old.keys() != new.keys():
        return None
    if all(_same(rel, old[rel], new[rel], report_marked) for rel in sorted(new, key=lambda r: r in TIMED)):
        return len(old)
    return None


def link_identical(out: Path, version: Path) -> int:
    """Every file of ``version`` (but the timed ones) whose bytes equal ``out``'s at the same
    path becomes a hard link to it; returns how many did.  Where a link cannot be made the new
    file stays (it has the same bytes)."""
    old, new = _files(out) or {}, _files(version) or {}
    linked = 0
    for rel, path in new.items():
        if rel in TIMED or rel not in old or not _same_bytes(old[rel], path):
            continue
        tmp = path.with_name(f".{path.name}.keep-{os.getpid()}")
        try:
            os.link(old[rel], tmp)
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            continue
        linked += 1
    return linked
