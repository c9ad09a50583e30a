"""simulate --schedule FILE (the command that loads and verifies a schedule file): a one-line warning, status
unchanged, where the file's ranks can end an all-reduce with different float bits; none where they cannot."""

from __future__ import annotations

import warnings

import _sum_order_cases as cases
import pytest
from _paths import ROOT

from synth.baselines import baseline
from synth.cli.simulate import main
from synth.formats.schedule_file import load_schedule
from synth.ir.fabric import build_fabric
from synth.ir.sum_order import same_bits_warning
from synth.plan.selector import ScheduleSelector
from topo_probe.load import load_topology
from topo_probe.machines.generators import fully_connected

TAIL = "(float sums in different orders); integers, min and max are exact"


def _simulate(path, topology: str, capsys) -> tuple[int, list[str]]:
    status = main(["--topology", topology, "--collective", "allreduce", "--schedule", str(path), "-b", "1K", "-e", "1K"])
    return status, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("make, chunks", [(cases.two_trees, "chunks 0, 1, 2 and 3"),
                                          (cases.three_ranks, "chunks 0, 1 and 2")])
def test_a_schedule_whose_ranks_sum_in_other_orders_gets_one_warning_line(make, chunks, tmp_path, capsys):
    """Hand-derived (the cases' docstrings; tests/synth/ir/test_sum_order.py shows the float32 bits differ): rank 1
    sums every chunk in another order than rank 0.  The run still ends 0 with its table."""
    s = make()
    path = tmp_path / f"{s.name}.json"
    s.save(path)
    status, err = _simulate(path, f"full:{s.ranks}", capsys)
    assert status == 0
    assert err == [f"simulate: warning: {s.name}.json: ranks 0 and 1 may differ in the last bits of {chunks} {TAIL}"]


@pytest.mark.parametrize("name", ["ring", "oneshot"])
def test_a_ring_or_one_shot_file_gets_no_warning(name, tmp_path, capsys):
    path = tmp_path / f"{name}.json"
    baseline(name, build_fabric(load_topology("full:5")), "allreduce").save(path)
    assert _simulate(path, "full:5", capsys) == (0, [])


def test_a_committed_preset_schedule_gets_no_warning(capsys):
    assert _simulate(ROOT / "results/dgx-a100/schedules/allreduce-bwopt.json", "dgx-a100", capsys) == (0, [])


def test_no_committed_combining_schedule_warns():
    """Every all-reduce, reduce-scatter and reduce under results/*/schedules/ (presets, solvers, clusters)."""
    paths = [p for p in sorted(ROOT.glob("results/*/schedules/*.json*"))
             if any(c in p.name for c in ("allreduce", "reducescatter", "-reduce"))]
    assert len(paths) >= 90
    warned = {str(p.relative_to(ROOT)): same_bits_warning(s, p.name) for p in paths for s in [load_schedule(p)] if s.spec.combining}
    assert len(warned) >= 90 and {k: v for k, v in warned.items() if v} == {}


def test_a_library_caller_gets_the_warning_as_a_python_warning(tmp_path):
    """The Communicator's selector (``warn_fallback``, the default) warns once; the command lines' (False) only
    keep it in ``notes`` and ``same_bits_warning``, which they print."""
    path = tmp_path / "two_trees.json"
    cases.two_trees().save(path)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        sel = ScheduleSelector(fully_connected(4), algo=str(path), plan=False)
    assert [str(w.message) for w in got] == [f"topocoll: {sel.same_bits_warning}"]
    assert sel.same_bits_warning.startswith("two_trees.json: ranks 0 and 1 ")
    quiet = ScheduleSelector(fully_connected(4), algo=str(path), plan=False, warn_fallback=False)
    assert f"warning: {quiet.same_bits_warning}" in quiet.notes
