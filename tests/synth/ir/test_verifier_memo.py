"""``check`` replays a schedule once: the same steps on the same fabric (a copy with new ``meta``
included) pass without a second replay; anything else that could change the verdict is replayed."""

import pytest

import synth.ir.verifier as verifier
from synth.ir.fabric import build_fabric
from synth.ir.schedule import Schedule, Step, Transfer
from synth.ir.verifier import check
from topo_probe.errors import ScheduleInvalid
from topo_probe.machines.generators import ring


def ring3_allgather() -> Schedule:
    """Hand-made: each rank passes what it got on to the next, two steps."""
    return Schedule("allgather", 3, 1, (Step(1, tuple(Transfer(r, r, (r + 1) % 3) for r in range(3))),
                                        Step(1, tuple(Transfer(r, (r + 1) % 3, (r + 2) % 3) for r in range(3)))))


@pytest.fixture
def counted(monkeypatch):
    calls = []
    real = verifier.verify

    def spy(schedule, fabric=None, **kwargs):
        calls.append(schedule)
        return real(schedule, fabric, **kwargs)
    monkeypatch.setattr(verifier, "verify", spy)
    return calls


def test_the_same_steps_on_the_same_fabric_are_replayed_once(counted):
    fabric = build_fabric(ring(3))
    s = ring3_allgather()
    check(s, fabric)
    check(s, fabric)
    check(s.with_(meta={"note": "x"}, name="renamed"), fabric)
    assert len(counted) == 1


def test_another_fabric_or_other_fields_are_replayed(counted):
    fabric = build_fabric(ring(3))
    s = ring3_allgather()
    check(s, fabric)
    check(s, build_fabric(ring(3)))               # an equal but different fabric object
    check(s)                                      # without a fabric
    assert len(counted) == 3
    wrong = s.with_(chunks_per_rank=s.chunks_per_rank + 1)     # same steps, a different collective instance
    with pytest.raises(ScheduleInvalid):
        check(wrong, fabric)
    with pytest.raises(ScheduleInvalid):                       # a failure is never remembered
        check(wrong, fabric)
    assert len(counted) == 5


def test_a_forgotten_schedule_leaves_no_entry():
    fabric = build_fabric(ring(3))
    s = ring3_allgather()
    check(s, fabric)
    key = id(s.steps)
    assert key in verifier._PASSED
    del s
    import gc
    gc.collect()
    assert key not in verifier._PASSED
