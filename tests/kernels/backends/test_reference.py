"""kernels.backends.reference: the ground truth against NumPy, and its schedule checks."""

import numpy as np
import pytest
from _schedules import DTYPES, OPS, direct, draw_schedule, ring, run_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.backends.reference import run_reference
from synth.ir.schedule import Schedule, Step, Transfer
from synth.ir.verifier import verify
from topo_probe.errors import ScheduleInvalid

SETTINGS = settings(derandomize=True, deadline=None, database=None, max_examples=600,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(st.data())
def test_reference_matches_numpy(data):
    sched, _ = draw_schedule(data)
    count = data.draw(st.integers(0, 17), label="count")
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    op = data.draw(st.sampled_from(OPS), label="op")
    inplace = data.draw(st.booleans(), label="inplace")
    run_case(sched, count, dtype, op, inplace, ["reference"], data.draw(st.integers(0, 2**20), label="seed"))


def test_hand_example_allreduce_avg_integer_truncates_toward_zero():
    s = direct("allreduce", 2)
    send = [np.array([3, -3, 7], np.int32), np.array([0, -2, 0], np.int32)]
    recv = [np.zeros(3, np.int32), np.zeros(3, np.int32)]
    run_reference(s, send, recv, op="avg")
    assert recv[0].tolist() == recv[1].tolist() == [1, -2, 3]      # 3/2, -5/2, 7/2 truncated


def test_hand_example_float_avg_and_prod():
    """Floating avg is NCCL's PreMulSum: each input times fl(1/3), then summed (in some order)."""
    import itertools
    s = ring("allreduce", 3)
    send = [np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 2.0]), np.array([3.0, 0.5, -1.0])]
    recv = [np.empty(3) for _ in range(3)]
    got = run_reference(s, send, recv, op="avg")[2]
    third = 1.0 / 3.0
    for i in range(3):
        terms = [x[i] * third for x in send]
        assert got[i] in {(a + b) + c for a, b, c in itertools.permutations(terms)}
    assert np.allclose(got, [2.0, 1.5, 4.0 / 3.0], rtol=1e-15, atol=0)
    assert run_reference(s, send, recv, op="prod")[0].tolist() == [6.0, 2.0, -6.0]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_avg_does_not_overflow(dtype):
    """4 ranks x 60000 in float16 (max 65504): summing first gives inf; NCCL pre-multiplies."""
    import ml_dtypes
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    big = 60000.0 if dtype == "float16" else 3.0e38
    s = ring("allreduce", 4)
    send = [np.full(8, big, dt) for _ in range(4)]
    recv = [np.empty(8, dt) for _ in range(4)]
    run_reference(s, send, recv, op="avg")
    assert all(np.array_equal(r.astype(np.float64), np.full(8, float(np.asarray(big, dt)))) for r in recv)


@pytest.mark.parametrize("schedule,rule", [
    (Schedule("allgather", 2, 1, (Step(1, (Transfer(1, 0, 1),)),)), "not-held"),
    (Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1),)),)), "postcondition"),
    (Schedule("reduce", 2, 1, (Step(1, (Transfer(0, 1, 0, "reduce"),)), Step(1, (Transfer(0, 1, 0, "reduce"),))),
              root=0), "double-count"),
    (Schedule("broadcast", 2, 1, (Step(1, (Transfer(0, 1, 0, "reduce"),)),), root=1), "reduce-into-empty"),
    (Schedule("reduce", 3, 1, (Step(1, (Transfer(0, 1, 0, "reduce"),)),), root=0), "postcondition"),
])
def test_invalid_schedules_raise_with_the_verifiers_rule(schedule, rule):
    n, spec = schedule.ranks, schedule.spec
    send = [np.zeros(spec.input_blocks() * 2) for _ in range(n)]
    recv = [np.zeros(spec.output_blocks() * 2) for _ in range(n)]
    with pytest.raises(ScheduleInvalid) as e:
        run_reference(schedule, send, recv)
    assert e.value.rule == rule
    report = verify(schedule)
    assert not report.ok and rule in {v.rule for v in report.violations} | {"reduce-into-empty"}
