"""synthesize's same-bits check reads no transfer the verification already read: the verification (a builder's
check on the run's fabric) leaves its step columns with the run's KeptColumns and the pipeline hands them to
synth.ir.sum_order.inconsistent_chunks (synth.ir.step_columns)."""

from __future__ import annotations

import pytest

import synth.ir.step_replay as step_replay
import synth.ir.sum_order as sum_order
import synth.ir.verifier as verifier
from synth.ir.step_columns import read_columns
from synth.ir.sum_order import _expression_check
from synth.pipeline import synthesize as synth_mod
from topo_probe.load import load_topology


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    """A 4-GPU run of the three combining collectives, every step replayed in bulk, with every read of a step's
    transfers as columns recorded (the tuple itself: held, so no two are taken for one) and every check's schedule
    and handed columns."""
    reads, checks = [], []
    mp = pytest.MonkeyPatch()

    def spy(transfers):
        reads.append(transfers)
        return read_columns(transfers)
    real_check = synth_mod.inconsistent_chunks

    def check_spy(schedule, columns=None):
        checks.append((schedule, columns))
        return real_check(schedule, columns)
    mp.setattr(verifier, "CLEAN_STEP_TRANSFERS", 1)
    mp.setattr(step_replay, "read_columns", spy)
    mp.setattr(sum_order, "read_columns", spy)
    mp.setattr(synth_mod, "inconsistent_chunks", check_spy)
    out = tmp_path_factory.mktemp("columns") / "out"
    opts = synth_mod.SynthesisOptions(collectives=("allreduce", "reducescatter", "reduce"), time_limit_s=5,
                                      progress=False, log=lambda s: None)
    try:
        summary = synth_mod.run(load_topology("full:4"), out, opts, force=True)
    finally:
        mp.undo()
    return reads, checks, summary


def test_no_step_is_read_twice(counted):
    """Each step's transfers are read as columns once in the whole run: by the verification, never again by the
    same-bits check of the same schedule, which gets every step's columns handed over."""
    reads, checks, summary = counted
    ids = [id(t) for t in reads]
    assert len(set(ids)) == len(ids)
    once = set(ids)
    assert len(checks) == sum(len(c["same_bits"]) for c in summary["collectives"].values()) >= 9
    for schedule, columns in checks:
        assert columns is not None and len(columns) == len(schedule.steps)
        assert all(c is not None for c in columns)
        assert all(id(st.transfers) in once for st in schedule.steps)


def test_the_verdicts_are_those_of_the_expression_trees(counted):
    """summary.json's same_bits, schedule by schedule in the order they were saved, is what the expression trees
    (final_expressions, which read no columns) say of the schedule the check was handed."""
    _, checks, summary = counted
    same = [v for c in ("allreduce", "reducescatter", "reduce") for v in summary["collectives"][c]["same_bits"].values()]
    assert same == [_expression_check(schedule) == [] for schedule, _ in checks]
