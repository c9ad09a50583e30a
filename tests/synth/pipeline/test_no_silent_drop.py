"""A run never drops earlier results silently: results of another topology, or of collectives and
roots the run does not redo, are replaced only with ``--force``; files a user put inside
``schedules/`` or ``msccl/`` survive even ``--force``; a sibling ``.<out>.old-<pid>`` or
``.<out>.partial-<pid>`` folder holding anything synthesize does not write is left alone."""

from __future__ import annotations

import json
import os

import pytest

from synth.cli.synthesize import main
from synth.pipeline import synthesize as synth_mod
from _synth_results import NEW, OLD, _opts, _results_at_documented_paths, _run
from topo_probe.errors import InvalidArgument
from topo_probe.machines.generators import fully_connected, ring

DEAD = 2**22 + 12345  # above pid_max's default range: never alive


def _tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_fewer_collectives_reuse_or_refuse_without_force(tmp_path, synthesized):
    out = tmp_path / "res"
    synthesized(out, NEW)
    before = _tree(out)
    assert _run(out, OLD, force=False).get("reused")   # the same results serve a subset: nothing dropped
    assert _tree(out) == before
    opts = _opts(OLD)
    opts.max_sat_steps += 1                            # not reusable: a new run would drop broadcast
    with pytest.raises(InvalidArgument, match=r"holds results for broadcast root 0 that this run \(allgather\) "
                                              r"would drop; add --force"):
        synth_mod.run(fully_connected(3), out, opts, force=False)
    assert _tree(out) == before
    _run(out, OLD, force=True)                         # asked for: replaced
    assert _results_at_documented_paths(out) == OLD


def test_another_root_refused_without_force(tmp_path, synthesized):
    out = tmp_path / "res"
    synthesized(out, NEW)
    opts = _opts(NEW)
    opts.root = 2
    with pytest.raises(InvalidArgument, match="broadcast root 0 that this run"):
        synth_mod.run(fully_connected(3), out, opts, force=False)
    assert json.loads((out / "summary.json").read_text())["collectives"]["broadcast"]["root"] == 0


def test_more_collectives_extend_without_force(tmp_path, synthesized):
    out = tmp_path / "res"
    synthesized(out, OLD)
    _run(out, NEW, force=False)                      # nothing of the old results is dropped
    assert _results_at_documented_paths(out) == NEW


def test_another_topology_refused_without_force(tmp_path, capsys, synthesized):
    out = tmp_path / "res"
    synthesized(out, OLD)
    before = _tree(out)
    with pytest.raises(InvalidArgument, match="holds results of another topology"):
        synth_mod.run(ring(4), out, _opts(OLD), force=False)
    assert _tree(out) == before
    rc = main(["--topology", "ring:4", "--collectives", "allgather", "--time-limit", "5", "--no-progress",
               "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "another topology" in err and "--force" in err, err
    assert _tree(out) == before


def test_user_files_in_schedules_and_msccl_survive_force(tmp_path, synthesized):
    out = tmp_path / "res"
    synthesized(out, NEW)
    (out / "schedules" / "mine.json").write_text('{"my": 1}')
    (out / "msccl" / "tuned.xml").write_text("<algo/>")
    (out / "msccl" / "candidates").mkdir(exist_ok=True)
    (out / "msccl" / "candidates" / "keep.xml").write_text("<algo name='k'/>")
    _run(out, OLD, force=True)
    assert (out / "schedules" / "mine.json").read_text() == '{"my": 1}'
    assert (out / "msccl" / "tuned.xml").read_text() == "<algo/>"
    assert (out / "msccl" / "candidates" / "keep.xml").read_text() == "<algo name='k'/>"
    assert _results_at_documented_paths(out) == OLD
    assert not any(p.name.startswith("broadcast-") for p in (out / "schedules").iterdir())   # ours: replaced


@pytest.mark.parametrize("kind", ["old", "partial"])
def test_sibling_leftover_with_user_files_left_alone(tmp_path, kind):
    sibling = tmp_path / f".res.{kind}-{DEAD}"
    sibling.mkdir()
    (sibling / "thesis.tex").write_text("mine")
    _run(tmp_path / "res", OLD)
    assert (sibling / "thesis.tex").read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == sorted([".res." + f"{kind}-{DEAD}", "res"])


def test_sibling_old_with_user_files_not_renamed_into_place(tmp_path):
    sibling = tmp_path / f".res.old-{DEAD}"
    (sibling / "schedules").mkdir(parents=True)
    (sibling / "notes.txt").write_text("mine")
    _run(tmp_path / "res", OLD)                      # --out did not exist: the sibling is not it
    assert (sibling / "notes.txt").read_text() == "mine"
    assert _results_at_documented_paths(tmp_path / "res") == OLD


def test_sibling_old_with_user_files_survives_force_over_existing_results(tmp_path, synthesized):
    """Issue 38's case: --out exists and --force redoes it; a sibling ``.OUT.old-PID`` holding a
    user's file (not one of our result sets) is neither deleted nor swapped in."""
    out = synthesized(tmp_path / "res", NEW)
    sibling = tmp_path / f".res.old-{DEAD}"
    sibling.mkdir()
    (sibling / "user.txt").write_text("mine")
    _run(out, OLD, force=True)
    assert (sibling / "user.txt").read_text() == "mine" and sorted(os.listdir(sibling)) == ["user.txt"]
    assert _results_at_documented_paths(out) == OLD
