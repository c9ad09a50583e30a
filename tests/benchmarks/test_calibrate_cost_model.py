"""benchmarks/calibrate_cost_model.py fits the cost model to a user's log: a row whose numbers disagree (a digit
flipped in a copy) would move the fit, so it is said, with the file and line, before the fit runs."""

from __future__ import annotations

import sys

from _paths import FIXTURES

sys.path.insert(0, str(FIXTURES.parent.parent / "benchmarks"))
import calibrate_cost_model as calibrate  # noqa: E402

LOG = FIXTURES / "nccl_tests_allreduce_a100x8_single_process.txt"


def test_a_mangled_row_of_the_log_is_said_with_its_line(tmp_path, capsys):
    """The 8 MiB row's out-of-place busbw 90.27 (= 51.58 GB/s algbw x 2 x 7/8, nccl-tests' all_reduce factor, as
    printed) written 99.27: the one warning names the file, line 36 and the value; the log as committed: none."""
    lines = LOG.read_text().split("\n")
    assert lines[35].split()[:7] == ["8388608", "2097152", "float", "sum", "-1", "162.6", "51.58"]
    assert lines[35].split()[7] == "90.27" and round(51.58 * 2 * 7 / 8, 2) == 90.27
    mangled = tmp_path / LOG.name
    mangled.write_text("\n".join(lines[:35] + [lines[35].replace(" 90.27 ", " 99.27 ", 1)] + lines[36:]))
    calibrate.main(["--log", str(mangled), "--out", str(tmp_path / "out")])
    warned = [x for x in capsys.readouterr().err.splitlines() if x.startswith("warning:")]
    assert [x.split(" disagrees")[0] for x in warned] == [f"warning: {mangled}:36: out-of-place busbw 99.27"]
    calibrate.main(["--log", str(LOG), "--out", str(tmp_path / "plain")])
    assert "warning:" not in capsys.readouterr().err
