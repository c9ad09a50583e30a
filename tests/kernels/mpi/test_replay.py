"""CallMemo (kernels.mpi.replay): which repeated calls of the MPI communicator are replayed.

No MPI needed: the memo only sees arguments and what a call launched.  The replayed calls
themselves run under mpirun in test_mpi_communicator.py (``persistent/...``: four calls on the same
buffers with new data each time, checked against NumPy) and test_agreement.py (``bound``:
a rank making another call after two identical ones)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from kernels.mpi.replay import MAX_CALL_BYTES, MAX_CALLS, CallMemo


def _traced(memo: CallMemo, key, args, kwargs, launched=("prepared",), result="out"):
    """One call as the collective wrapper makes it on a miss."""
    memo.trace = list(launched)
    memo.keep(key, args, kwargs, result)


def test_a_call_is_kept_the_second_time_its_arguments_are_met_and_then_replayed():
    memo = CallMemo()
    x, y = np.zeros(8, np.float32), np.zeros(8, np.float32)
    args, kwargs = (x, y), {"op": "sum"}
    key = memo.key("all_reduce", args, kwargs)
    _traced(memo, key, args, kwargs)
    assert memo.get(key, args, kwargs) is None           # met once: nothing kept
    _traced(memo, key, args, kwargs)
    assert memo.get(key, args, kwargs) == ("prepared", "out")
    assert memo.trace is None


@pytest.mark.parametrize("change", ["shape", "dtype", "strides"])
def test_an_array_changed_in_place_is_not_replayed(change):
    memo = CallMemo()
    x = np.zeros(16, np.float32)
    args = (x, x)
    key = memo.key("all_reduce", args, {})
    for _ in range(2):
        _traced(memo, key, args, {})
    assert memo.get(key, args, {}) is not None
    if change == "shape":
        x.shape = (4, 4)
    elif change == "dtype":
        x.dtype = np.int32
    else:
        with warnings.catch_warnings():       # setting strides is deprecated, still possible
            warnings.simplefilter("ignore")
            x.strides = (0,)
    assert memo.get(key, args, {}) is None
    x.shape = (16,)
    assert memo.get(key, args, {}) is None                # the entry is gone, not revived


def test_another_array_with_the_same_id_is_never_taken_for_the_kept_one():
    memo = CallMemo()
    x = np.zeros(4, np.float32)
    key = memo.key("broadcast", (x,), {"root": 0})
    for _ in range(2):
        _traced(memo, key, (x,), {"root": 0})
    other = np.zeros(4, np.float32)
    assert memo.get(key, (other,), {"root": 0}) is None   # same key by construction, not the same array


def test_calls_that_launch_nothing_or_several_schedules_or_odd_arguments_are_never_kept():
    memo = CallMemo()
    x = np.zeros(4, np.float32)
    key = memo.key("all_reduce", (x, x), {})
    for launched in ((), ("a", "b")):
        for _ in range(2):
            _traced(memo, key, (x, x), {}, launched=launched)
        assert memo.get(key, (x, x), {}) is None
    assert memo.key("all_reduce", ([1, 2], x), {}) is None           # a list
    assert memo.key("all_reduce", (x, x), {"stream": object()}) is None
    assert memo.key("all_reduce", (x, x), {"op": "sum"}) != memo.key("all_reduce", (x, x), {"op": "max"})
    assert memo.key("all_reduce", (x, x), {}) != memo.key("all_gather", (x, x), {})


def test_big_calls_are_not_kept_and_the_memo_is_bounded():
    memo = CallMemo()
    big = np.zeros(MAX_CALL_BYTES // 4 + 1, np.float32)
    key = memo.key("all_reduce", (big, big), {})
    for _ in range(2):
        _traced(memo, key, (big, big), {})
    assert memo.get(key, (big, big), {}) is None
    arrays = [np.zeros(2, np.float32) for _ in range(MAX_CALLS + 3)]
    keys = [memo.key("all_reduce", (a, a), {}) for a in arrays]
    for a, k in zip(arrays, keys):
        for _ in range(2):
            _traced(memo, k, (a, a), {})
    kept = [k for a, k in zip(arrays, keys) if memo.get(k, (a, a), {}) is not None]
    assert kept == keys[3:]                                # least recently used dropped first


def test_drop_and_clear_forget_calls():
    memo = CallMemo()
    x = np.zeros(4, np.float32)
    key = memo.key("all_reduce", (x, x), {})
    for _ in range(2):
        _traced(memo, key, (x, x), {})
    memo.drop(key)
    assert memo.get(key, (x, x), {}) is None
    for _ in range(2):
        _traced(memo, key, (x, x), {})
    memo.clear()
    assert memo.get(key, (x, x), {}) is None
