"""kernels.comm.repeat: an identical repeated Communicator call replays its bound launch (host
path here; the GPU path in tests/kernels/native/test_native_gpu.py) and gives what NumPy gives
for the arrays' new contents; anything that could change the answer takes the full path."""

import re
import warnings

import numpy as np
import pytest

import kernels.comm.communicator as communicator_module
import kernels.comm.validation as validation
from kernels.comm.communicator import Communicator


@pytest.fixture
def comm():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield Communicator(4, plan=False)


def _counting(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@pytest.mark.parametrize("op", ["sum", "max", "avg"])
def test_repeat_replays_without_validation_and_reads_new_contents(comm, monkeypatch, op):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(33).astype(np.float32) for _ in range(4)]
    ys = [np.empty(33, np.float32) for _ in range(4)]
    prepares = _counting(monkeypatch, communicator_module, "bind_lists")
    comm.all_reduce(xs, ys, op=op)
    assert len(prepares) == 1 and len(comm._bound) == 1
    for k in range(3):
        for x in xs:
            x[...] = rng.standard_normal(33)
        comm.all_reduce(xs, ys, op=op)
        want = {"sum": np.sum, "max": np.max, "avg": np.mean}[op](np.stack(xs).astype(np.float64), axis=0)
        assert all(np.allclose(y, want, rtol=1e-5, atol=1e-5) for y in ys), f"repeat {k}"
    assert len(prepares) == 1, "a repeated identical call validated again"


def test_a_changed_array_layout_or_argument_takes_the_full_path(comm, monkeypatch):
    xs = [np.arange(8, dtype=np.float32) + r for r in range(4)]
    ys = [np.empty(8, np.float32) for _ in range(4)]
    prepares = _counting(monkeypatch, communicator_module, "bind_lists")
    comm.all_reduce(xs, ys)
    comm.all_reduce(xs, ys, op="max")          # another argument
    for y in ys:
        y.shape = (2, 4)                        # the same objects, another shape
    comm.all_reduce(xs, ys)
    assert len(prepares) == 3
    assert all(np.array_equal(y.reshape(-1), sum(xs)) for y in ys)
    ys[1].flags.writeable = False               # the same object, now read-only: refused as before
    with pytest.raises(Exception, match="read-only"):
        comm.all_reduce(xs, ys)


def test_inputs_copied_for_an_overlap_are_not_replayed_stale(comm):
    """An input overlapping its output other than in place is copied by prepare; the repeat must
    read the caller's new contents, not that copy."""
    bufs = [np.arange(16, dtype=np.float32) + 100 * r for r in range(4)]
    xs, ys = [b[4:12] for b in bufs], [b[:8] for b in bufs]
    for k in range(3):
        for r, b in enumerate(bufs):
            b[...] = np.arange(16) + 100 * r + k
        want = sum(x.copy() for x in xs)
        comm.all_reduce(xs, ys)
        assert all(np.array_equal(y, want) for y in ys), f"call {k}"


def test_route_is_decided_once_per_call_shape(comm, monkeypatch):
    routes = _counting(monkeypatch, communicator_module, "plan_route")
    for size in (8, 8, 16, 8, 16):
        xs = [np.ones(size, np.float32) for _ in range(4)]     # new arrays: no replay, same shape
        ys = [np.empty(size, np.float32) for _ in range(4)]
        comm.all_reduce(xs, ys)
        assert np.array_equal(ys[0], np.full(size, 4, np.float32))
    assert len(routes) == 2
    assert comm.last_route.ran.startswith("best:")


def test_validation_module_is_not_consulted_on_replay(comm, monkeypatch):
    xs = [np.ones(5, np.int32) for _ in range(4)]
    ys = [np.empty(5, np.int32) for _ in range(4)]
    comm.all_gather(xs, [np.empty(20, np.int32) for _ in range(4)])
    comm.all_reduce(xs, ys)
    checks = _counting(monkeypatch, validation, "check_array")
    comm.all_reduce(xs, ys)
    assert checks == [] and ys[3].tolist() == [4] * 5


@pytest.mark.parametrize("call", ["all_reduce", "broadcast", "reduce"])
def test_a_repeat_returns_its_own_list_not_the_first_calls(comm, call):
    """A replayed call returns the list it was given, as the full path does.  Old: it returned the
    first call's list object, so after ``first[0] = other`` the repeat's answer for rank 0 was an
    array no collective had written (silently wrong)."""
    xs = [np.full(5, r + 1, np.float32) for r in range(4)]
    ys = [np.zeros(5, np.float32) for _ in range(4)]
    run = {"all_reduce": lambda i, o: comm.all_reduce(i, o), "broadcast": lambda i, o: comm.broadcast(i, root=1),
           "reduce": lambda i, o: comm.reduce(i, o, root=0)}[call]
    first = ys if call != "broadcast" else xs
    arrays = list(first)
    assert run(xs, ys) is first and len(comm._bound) == 1
    first[0] = np.full(5, -7, np.float32)                  # the caller reuses its first list
    again = list(arrays)
    got = run(xs if call != "broadcast" else again, again)
    assert got is again and len(comm._bound) == 1
    want = {"all_reduce": 10.0, "broadcast": 2.0, "reduce": 10.0}[call]    # 1+2+3+4, rank 1's value
    np.testing.assert_array_equal(got[0], np.full(5, want, np.float32))



@pytest.mark.parametrize("cut", ["5 and 3", "one list"])
def test_a_repeat_with_the_same_arrays_split_otherwise_fails_as_a_fresh_call(comm, cut):
    """The first call's eight arrays, in the same order, passed as lists of 5 and 3
    (``all_reduce(xs + ys[:1], ys[1:])``) or as one list (``all_reduce(xs + ys)``).  Old: the
    replay key listed the arrays but not where each list ends, so the first replayed the first
    call and returned a 3-array list, and the second raised IndexError from the replay (on main:
    replayed it).  Now each raises what the same call raises on a fresh communicator."""
    xs = [np.full(5, r + 1, np.float32) for r in range(4)]
    ys = [np.zeros(5, np.float32) for _ in range(4)]
    args = (xs + ys[:1], ys[1:]) if cut == "5 and 3" else (xs + ys,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fresh = Communicator(4, plan=False)
    with pytest.raises(Exception) as want:
        fresh.all_reduce(*args)
    comm.all_reduce(xs, ys)
    assert len(comm._bound) == 1
    with pytest.raises(type(want.value), match=f"^{re.escape(str(want.value))}$"):
        comm.all_reduce(*args)
