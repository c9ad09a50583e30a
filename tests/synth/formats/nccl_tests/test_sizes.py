"""nccl-tests size syntax and size loop shared by `simulate`, `sweep` and the MPI benchmark."""

import ctypes
import ctypes.util
import platform
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


@pytest.mark.parametrize("text", ["", "4X", "K", "8B", "1 b", "-8", "one", "0x", "1p4", "0xK", "inf", "nan"])
def test_bad_sizes_raise(text):
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(text)


@pytest.mark.parametrize("text, nbytes", [("1KB", 1024), ("1 KB", 1024), ("2GiB", 2 << 30), ("4 megabytes", 4 << 20),
                                          ("0x100", 256), ("0x100K", 256 << 10), ("1e3", 1000), ("1e3k", 1024000),
                                          ("1e", 1), ("1eK", 1024), (" +8", 8), ("0x1p4", 16), ("1.9", 1)])
def test_sizes_read_as_nccl_tests_parsesize(text, nbytes):
    """nccl-tests v2.19.6 src/common.cu lines 227-261: ``sscanf(value, "%lf %1s")`` then K/M/G by the first
    character after the number, the rest ignored; glibc's %lf reads hex and drops a bare exponent mark."""
    assert parse_size(text) == nbytes


def _glibc_parsesize(text: str) -> float:
    """nccl-tests' parsesize, run through this machine's own C library (the independent reference)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    value, letter = ctypes.c_double(), ctypes.create_string_buffer(8)
    got = libc.sscanf(text.encode(), b"%lf %1s", ctypes.byref(value), letter)
    units = {"g": 1 << 30, "m": 1 << 20, "k": 1 << 10}
    if got == 2:
        unit = units.get(letter.value.decode("latin-1").lower())
        return -1.0 if unit is None or letter.value.decode("latin-1") not in "GgMmKk" else value.value * unit
    return value.value if got == 1 else -1.0


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the reference is glibc's sscanf (nccl-tests' Linux)")
@given(st.text(alphabet="0123456789.eEpPxXaf+-kKmMgGbB \t", max_size=9))
@settings(derandomize=True, max_examples=500)
def test_every_text_reads_as_glibc_sscanf_does(text):
    """Any text: the bytes nccl-tests gets (``(size_t)parsed``), or a refusal where it prints ``invalid size``
    (or where its size is not a finite number of bytes up to 1 PiB)."""
    ref = _glibc_parsesize(text)
    if ref != ref or not 0 <= ref <= (1 << 50):
        with pytest.raises(ValueError):
            parse_size(text)
    else:
        assert parse_size(text) == int(ref)


def test_loop_matches_a_hand_count():
    assert size_sweep(8, 4 << 30, 0, 2) == [8 << k for k in range(30)]   # the A100 log's 30 rows
    assert size_sweep(1, 10, 3, 1) == [1, 4, 7, 10]
    with pytest.raises(ValueError, match="never"):
        size_sweep(0, 8, 0, 2)


# ---------------------------------------------------------------- size_label: the one formatter for people
@pytest.mark.parametrize("nbytes, text", [(0, "0 B"), (1023, "1023 B"), (1024, "1 KiB"), (1536, "1.5 KiB"),
                                          (2 << 20, "2 MiB"), (3 << 29, "1.5 GiB"), (4 << 30, "4 GiB"),
                                          (5 << 40, "5 TiB"), (1048524, "1023.9 KiB"), (1048535, "1.0 MiB"),
                                          (171776, "167.8 KiB"), (4, "4 B"), (16 << 10, "16 KiB"), (4 << 20, "4 MiB")])
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


@pytest.mark.parametrize("nbytes, text", [(2**64 - 1, "18446744073709551615 B"), (2**60 + 1, "1152921504606846977 B"),
                                          (3 << 40, "3 TiB"), (2**60, "1048576 TiB"), ((5 << 20) + 1024, "5243904 B"),
                                          (1023, "1023 B"), (0, "0 B")])
def test_exact_size_label_by_hand(nbytes, text):
    """Exact labels past 2**53 bytes: a float rule read 2**64 - 1 as '16777216 TiB'.  A whole
    number of the largest unit that fits, else plain bytes (5 MiB + 1 KiB is not '5121 KiB')."""
    assert size_label(nbytes, exact=True) == text


@settings(max_examples=300)
@given(n=st.integers(0, 1 << 80))
def test_exact_size_label_reads_back_to_the_same_byte_count(n):
    number, unit = size_label(n, exact=True).split()
    assert int(number) << {"B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[unit] == n
