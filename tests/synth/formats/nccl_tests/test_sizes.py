"""nccl-tests size syntax and size loop shared by `simulate`, `sweep` and the MPI benchmark."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.formats.nccl_tests.sizes import parse_size, size_sweep


@given(st.integers(0, 1 << 20), st.sampled_from(["", "K", "k", "M", "m", "G", "g"]))
@settings(derandomize=True, max_examples=100)
def test_suffixes_are_powers_of_1024(n, suffix):
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[suffix.lower()]
    assert parse_size(f"{n}{suffix}") == n * scale


@pytest.mark.parametrize("text", ["", "4X", "K", "1KB", "-8", "one"])
def test_bad_sizes_raise(text):
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(text)


def test_loop_matches_a_hand_count():
    assert size_sweep(8, 4 << 30, 0, 2) == [8 << k for k in range(30)]   # the A100 log's 30 rows
    assert size_sweep(1, 10, 3, 1) == [1, 4, 7, 10]
    with pytest.raises(ValueError, match="never"):
        size_sweep(0, 8, 0, 2)
