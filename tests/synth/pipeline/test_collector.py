"""A ``synthesize`` run pauses Python's cyclic collector and checkpoints it once per collective
(:mod:`synth.pipeline.collector`): the results are those of a run with the collector on as
usual, and afterwards the collector is as it was (on or off, nothing left frozen)."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

import synth.pipeline.synthesize as pipeline
from synth.cli.synthesize import main
from synth.pipeline.collector import PausedCollector

ARGS = ["--topology", "dgx-h100", "--nodes", "2", "--collectives", "allgather,alltoall", "--no-progress", "--force"]


def _files(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name not in ("summary.json", "report.md")}


class _Usual:
    """The collector left alone (the reference run)."""

    def __enter__(self):
        return self

    def checkpoint(self) -> int:
        return 0

    def __exit__(self, *exc) -> None:
        return None


@pytest.fixture(scope="module")
def usual(tmp_path_factory) -> Path:
    """The reference run's folder, with the collector left alone (one for both settings below)."""
    out = tmp_path_factory.mktemp("collector") / "usual"
    with pytest.MonkeyPatch.context() as m:
        m.setattr(pipeline, "PausedCollector", _Usual)
        assert main(ARGS + ["--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("enabled", [True, False])
def test_a_run_leaves_the_collector_as_it_was_and_the_results_unchanged(tmp_path, monkeypatch, enabled, usual):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    checkpoints = []
    real = PausedCollector.checkpoint
    monkeypatch.setattr(PausedCollector, "checkpoint", lambda self: (checkpoints.append(gc.isenabled()), real(self))[1])
    try:
        assert main(ARGS + ["--out", str(tmp_path / "paused")]) == 0
        assert gc.isenabled() == enabled and gc.get_freeze_count() == 0
    finally:
        (gc.enable if was else gc.disable)()
    assert checkpoints == [False, False]                   # one per collective, collector off
    assert _files(tmp_path / "paused") == _files(usual)
    a, b = (json.loads((d / "summary.json").read_text()) for d in (tmp_path / "paused", usual))
    assert a["collectives"].keys() == b["collectives"].keys()
    for c in a["collectives"]:
        assert a["collectives"][c]["simulated_us"] == b["collectives"][c]["simulated_us"]


def test_checkpoint_frees_cycles_made_while_paused():
    class Node:
        pass
    with PausedCollector() as pc:
        a, b = Node(), Node()
        a.other, b.other = b, a
        del a, b
        assert pc.checkpoint() >= 2
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
