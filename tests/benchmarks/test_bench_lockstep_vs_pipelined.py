"""benchmarks/bench_lockstep_vs_pipelined.py: its two ratios against hand-computed cases.

On a 2-GPU pair every collective's schedule is one step, so lock-step and pipelined are the same;
on a 4-GPU ring a bandwidth-optimal allgather meets the cut bound (3 chunks over 2 links per GPU:
3/2 rounds per block) exactly, pipelined; lock-step is never below pipelined (each step alone can
only cost more than its share of the overlapped run)."""

from __future__ import annotations

import sys
from fractions import Fraction

from _paths import ROOT

from synth.ir.fabric import build_fabric
from synth.model.bounds import lower_bounds

from topo_probe.machines.generators import line, ring

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_lockstep_vs_pipelined as bench  # noqa: E402


def test_a_pair_is_one_step_and_both_ratios_are_one():
    for coll in ("allgather", "allreduce", "broadcast"):
        piped, lock, _ = bench.measure(line(2), coll)
        assert piped == lock == 1.0, coll


def test_a_ring_meets_the_bound_pipelined_and_lockstep_is_never_lower():
    assert lower_bounds(build_fabric(ring(4)), "allgather").bandwidth_rounds_per_block == Fraction(3, 2)
    for coll in ("allgather", "reducescatter", "broadcast"):
        piped, lock, steps = bench.measure(ring(4), coll)
        assert piped == 1.0 and lock >= piped and steps >= 2, coll


def test_the_cases_are_the_readmes():
    labels = [label for label, _ in bench.cases()]
    assert labels[0].startswith("mesh 8 GPUs") and "dgx1-v100" in labels
    assert any("8-GPU ring" in label for label in labels) and any("gpu0-gpu4" in label for label in labels)
