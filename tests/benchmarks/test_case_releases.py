"""A Case carries the exact NCCL release its log prints (the ``NCCL version 2.28.9+cuda..`` INFO line, nccl-tests'
``nccl-library=22809``): (major, minor, patch), so rules NCCL changed at a patch release
(synth/model/nccl/versions_patch.py) follow the log; a release the log does not print is kept only where the fixture's
SOURCE header names it for that run, and then marked (``release_source="header"``)."""

from __future__ import annotations

import sys

from _paths import FIXTURES, ROOT

from synth.formats.nccl_tests.version import version_of

sys.path.insert(0, str(ROOT / "benchmarks"))
import nccl_log_cases as cases  # noqa: E402


def _lines(name: str) -> list[str]:
    return (FIXTURES / "real_logs" / name).read_text(encoding="utf-8").splitlines()


def _printed(name: str) -> set:
    """The releases the log prints (its ``# SOURCE`` header, written from the source, left out)."""
    return {v for line in _lines(name) if not line.startswith("# SOURCE") and (v := version_of(line))}


def test_every_case_whose_log_prints_a_release_carries_it():
    for case in cases.ALL_CASES:
        printed = _printed(case.file)
        assert len(printed) <= 1, case.file
        if printed:
            assert tuple(case.version) == printed.pop(), case.file
            assert case.release_source == "", case.file


def test_a_full_release_is_printed_or_marked_as_the_headers():
    """A (major, minor, patch) the log does not print is kept only where the fixture's SOURCE header names that
    release for the run (``release_source="header"``); a release taken from another run, or assumed, stays a bare
    (major, minor)."""
    for case in cases.ALL_CASES:
        if len(case.version) == 2:
            assert case.release_source == "", case.file
            continue
        if _printed(case.file):
            continue
        assert case.release_source == "header", case.file
        header = " ".join(line for line in _lines(case.file) if line.startswith("# SOURCE"))
        assert "%d.%d.%d" % tuple(case.version) in header, case.file


def test_the_release_counts():
    """Of the Cases with a full release: printed by the log, or named by the header (marked)."""
    full = [c for c in cases.ALL_CASES if len(c.version) == 3]
    marked = [c for c in full if c.release_source == "header"]
    assert (len(full) - len(marked), len(marked)) == (135, 25)


def test_a_case_version_is_major_minor_or_major_minor_patch():
    assert all(len(c.version) in (2, 3) for c in cases.ALL_CASES)
    carried = {(c.file, tuple(c.version)) for c in cases.ALL_CASES}
    assert ("gb300_8gpu_2node_all_gather_gcp_a4xmax_roce.txt", (2, 28, 9)) in carried
    assert ("mi308x_16gpu_2node_all_reduce_bnxt_roce.txt", (2, 27, 7)) in carried   # rccl-tests' "RCCL version : 2.27.7-HEAD"
