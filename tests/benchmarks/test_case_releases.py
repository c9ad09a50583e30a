"""A Case carries the exact NCCL release its log prints (the ``NCCL version 2.28.9+cuda..`` INFO line, nccl-tests'
``nccl-library=22809``): (major, minor, patch), so rules NCCL changed at a patch release
(synth/model/nccl/versions_patch.py) follow the log."""

from __future__ import annotations

import sys

from _paths import FIXTURES, ROOT

from synth.formats.nccl_tests.version import version_of

sys.path.insert(0, str(ROOT / "benchmarks"))
import nccl_log_cases as cases  # noqa: E402


def _printed(name: str) -> set:
    lines = (FIXTURES / "real_logs" / name).read_text(encoding="utf-8").splitlines()
    return {v for v in map(version_of, lines) if v}


def test_every_case_whose_log_prints_a_release_carries_it():
    for case in cases.ALL_CASES:
        printed = _printed(case.file)
        assert len(printed) <= 1, case.file
        if printed:
            assert tuple(case.version) == printed.pop(), case.file


def test_a_case_version_is_major_minor_or_major_minor_patch():
    assert all(len(c.version) in (2, 3) for c in cases.ALL_CASES)
    carried = {(c.file, tuple(c.version)) for c in cases.ALL_CASES}
    assert ("gb300_8gpu_2node_all_gather_gcp_a4xmax_roce.txt", (2, 28, 9)) in carried
    assert ("mi308x_16gpu_2node_all_reduce_bnxt_roce.txt", (2, 27, 7)) in carried   # rccl-tests' "RCCL version : 2.27.7-HEAD"
