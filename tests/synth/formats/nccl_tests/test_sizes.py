"""nccl-tests size syntax and size loop shared by `simulate`, `sweep` and the MPI benchmark."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.formats.nccl_tests.sizes import parse_size, size_label, size_sweep


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


# ---------------------------------------------------------------- size_label: the one formatter for people
@pytest.mark.parametrize("nbytes, text", [(0, "0 B"), (1023, "1023 B"), (1024, "1 KiB"), (1536, "1.5 KiB"),
                                          (2 << 20, "2 MiB"), (3 << 29, "1.5 GiB"), (4 << 30, "4 GiB"),
                                          (5 << 40, "5 TiB"), (1048524, "1023.9 KiB"), (1048535, "1.0 MiB"),
                                          (171776, "167.8 KiB")])
def test_size_label_by_hand(nbytes, text):
    assert size_label(nbytes) == text


@given(st.integers(1, 1023), st.sampled_from([("KiB", 10), ("MiB", 20), ("GiB", 30)]))
def test_size_label_of_whole_units_is_the_number_and_binary_unit(k, unit):
    name, shift = unit
    assert size_label(k << shift) == f"{k} {name}"


@given(st.integers(1024, 1 << 45))
def test_size_label_reads_back_within_half_a_tenth_of_its_unit(n):
    number, unit = size_label(n).split()
    shift = {"KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[unit]
    assert abs(Fraction(number) * (1 << shift) - n) <= Fraction(1 << shift, 20)   # exact: 167.75 KiB reads 167.8
    assert float(number) >= 1                    # never "0.9 MiB": a unit is only chosen from 1 of it
    if unit != "TiB":                            # the largest unit has no next one to move to
        assert float(number) < 1024, size_label(n)   # 1023.96 KiB reads 1.0 MiB, never 1024.0 KiB
