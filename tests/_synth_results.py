"""Test helpers for the ``synthesize`` output tests: a quick run (3 fully connected GPUs) and
checks that the documented paths hold one complete result set and that only our names are left.
Not a test module (no ``test_`` prefix)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from synth.pipeline import synthesize as synth_mod
from synth.plan.size_plan import Plan
from synth.plan.versus_nccl import NCCL
from topo_probe.machines.generators import fully_connected

#: the documented paths (synth.pipeline.output.ENTRIES), spelled out independently
ENTRIES = ("schedules", "msccl", "topology.json", "report.md", "busbw.png", "plan.json", "summary.json")
OLD = ("allgather",)
NEW = ("allgather", "broadcast")


def _opts(collectives):
    return synth_mod.SynthesisOptions(collectives=collectives, time_limit_s=5, progress=False,
                                      max_sat_ranks=0, log=lambda s: None)


def _run(out, collectives=OLD, force=True):
    return synth_mod.run(fully_connected(3), out, _opts(collectives), force=force)


def _results_at_documented_paths(out: Path) -> tuple[str, ...]:
    """The collectives of the complete result set readable at out/<entry>; fails if incomplete."""
    summary = json.loads((out / "summary.json").read_text())
    plan = Plan.load(out / "plan.json")
    colls = tuple(summary["collectives"])
    assert sorted({e.collective for e in plan.entries}) == sorted(colls)
    for e in plan.entries:
        if e.schedule == NCCL:                     # NCCL itself runs there: no file
            continue
        assert (out / e.schedule).is_file(), e.schedule
        assert json.loads((out / e.schedule).read_text())["collective"] == e.collective
    for name in ("topology.json", "report.md", "busbw.png"):
        assert (out / name).is_file(), name
    assert all(f"{c}" in (out / "report.md").read_text() for c in colls)
    return colls


def _only_ours_left(out: Path, extra=()) -> None:
    """``out`` holds the marker, the documented paths as plain files and folders (no links
    anywhere in them) and ``extra``: no version folder, link or temporary name is left."""
    names = sorted(os.listdir(out))
    assert sorted(names) == sorted({".topocoll-result", *ENTRIES, *extra}), names
    for name in ENTRIES:
        p = out / name
        assert not p.is_symlink() and (p.is_dir() if name in ("schedules", "msccl") else p.is_file()), name
        assert not any(q.is_symlink() for q in p.rglob("*")), name
