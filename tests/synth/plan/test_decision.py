"""The one decision (synth.plan.decision): ranges by modelled time plus the executor's fixed
cost against NCCL by the 5 % margin, hand-computed; which executor a plan counts."""

import pytest

from synth.ir.schedule import Schedule, Step, Transfer
from synth.plan.decision import (EXECUTOR_COSTS, busiest_rank_records, decide_ranges, executor_for,
                                 range_record)
from synth.plan.versus_nccl import MARGIN


def test_executor_cost_is_counted_per_candidate_and_nccl_needs_the_margin():
    """Sizes 8, 64, 512 B.  ``few`` (1 record: 5 us fixed) vs ``many`` (20 records: 24 us).
    8 B: few 1+5 = 6, many 0.5+24; NCCL 6.2 is not 5 % slower than 6 -> nccl (fallback few).
    64 B: few 2+5 = 7 vs NCCL 20 -> few.  512 B: few 90+5 = 95, many 40+24 = 64, NCCL 67.1:
    64 * 1.05 = 67.2 > 67.1 -> nccl (fallback many); NCCL 67.3 -> many."""
    times = {"few": [1.0, 2.0, 90.0], "many": [0.5, 30.0, 40.0]}
    records = {"few": 1, "many": 20}
    assert decide_ranges([8, 64, 512], times, [6.2, 20.0, 67.1], records, "native") == [
        ("nccl", "few", 0, 64), ("few", None, 64, 512), ("nccl", "many", 512, None)]
    assert decide_ranges([8, 64, 512], times, [6.2, 20.0, 67.3], records, "native")[-1] == ("many", None, 512, None)
    # without NCCL the same executor cost picks among ours: many's 0.5 us loses to few's 1 us at 8 B
    assert decide_ranges([8, 64, 512], times, None, records, "native") == [("few", None, 0, 512),
                                                                          ("many", None, 512, None)]


def test_mpi_counts_its_per_call_cost_and_clusters_use_it():
    # 1 + 15.3 = 16.3 us whatever the records; kept iff 16.3 * 1.05 = 17.115 <= NCCL
    assert decide_ranges([8], {"a": [1.0]}, [17.2], {"a": 99}, "mpi") == [("a", None, 0, None)]
    assert decide_ranges([8], {"a": [1.0]}, [17.0], {"a": 99}, "mpi") == [("nccl", "a", 0, None)]
    assert decide_ranges([8], {"a": [1.0]}, [16.0], {"a": 0}, "mpi") == [("nccl", "a", 0, None)]
    assert EXECUTOR_COSTS["mpi"].fixed_us(50) == EXECUTOR_COSTS["mpi"].call_us
    assert executor_for(type("F", (), {"hosts": [0, 0, 1, 1]})()) == "mpi"
    assert executor_for(type("F", (), {"hosts": [0, 0, 0, 0]})()) == "native"


def test_range_record_says_what_was_counted():
    rec = range_record("native", 3, 10.0, 21.0)
    assert rec == {"executor": "native", "executor_us": 7.0, "records": 3, "schedule_us": 10.0, "nccl_us": 21.0,
                   "margin": pytest.approx(21 / 17, abs=1e-4)}
    assert range_record("native", 0, 1.0, None)["margin"] is None
    assert MARGIN == 1.05


def test_busiest_rank_records_hand_counted():
    """Ring all_reduce on 3 ranks (4 steps, one transfer into each rank per step): 4; a first
    step of reduces from two peers into one rank is one chain record, a later one one per chunk;
    allgather adds the rank's own block copy."""
    ring = Schedule("allreduce", 3, 1, tuple(Step(1, tuple(Transfer((r - t) % 3, r, (r + 1) % 3,
                                                                    "reduce" if t < 2 else "copy")
                                                           for r in range(3))) for t in range(4)))
    assert busiest_rank_records(ring) == 4
    fan_in = Schedule("reduce", 3, 2, (Step(1, (Transfer(0, 1, 0, "reduce"), Transfer(0, 2, 0, "reduce"),
                                                Transfer(1, 1, 0, "reduce"), Transfer(1, 2, 0, "reduce"))),),
                      root=0)
    assert busiest_rank_records(fan_in) == 1
    later = Schedule("reduce", 3, 2, (Step(1, ()), Step(1, fan_in.steps[0].transfers)), root=0)
    assert busiest_rank_records(later) == 2
    gather = Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),))
    assert busiest_rank_records(gather) == 2
