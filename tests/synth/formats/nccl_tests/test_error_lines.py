"""An error in a log of several runs names the line of the file, not of the run it sits in.

Reference: the real multi-run logs themselves; the line a cell is broken on is counted here from
the file's own lines (1-based), independently of the reader's run splitting.  Before, the reader
counted lines from the start of each run (plus the preamble lines it prepends to the first), so
run 2 of a file named a line near the top of the file.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _paths import FIXTURES
from synth.formats.nccl_tests.runs import parse_runs
from topo_probe.errors import NcclTestsLogError

LOGS = FIXTURES / "real_logs"
MULTI = ["h100_16gpu_2node_alltoall_sendrecv.txt", "h100_10gpu_10node_all_reduce_5tests_1gpn.txt",
         "h100_4gpu_1node_5tests_cnode2.txt"]
_ROW = re.compile(r"^(\s*\d+\s+\d+\s+\S+.*?\s)(\d+\.\d+)(\s.*)$")     # a table row: size, count, type, ..., a time


def row_lines(lines: list[str]) -> list[int]:
    """0-based indices of the table rows of ``lines`` that have a decimal cell to break."""
    return [i for i, x in enumerate(lines) if _ROW.match(x) and not x.lstrip().startswith("#")]


@pytest.mark.parametrize("name", MULTI)
@given(data=st.data())
@settings(max_examples=15, deadline=None, derandomize=True)
def test_a_broken_cell_in_any_run_names_its_file_line(name, data):
    lines = (LOGS / name).read_text().splitlines()
    rows = row_lines(lines)
    i = data.draw(st.sampled_from(rows))
    broken = lines[:i] + [_ROW.sub(r"\g<1>1.2.3\g<3>", lines[i])] + lines[i + 1:]
    with pytest.raises(NcclTestsLogError) as exc:
        parse_runs("\n".join(broken) + "\n", name)
    assert f": line {i + 1}:" in str(exc.value) and "1.2.3" in str(exc.value), str(exc.value)



def test_the_first_row_of_a_later_run_records_its_file_line():
    """Rows of run 2 lie below run 1's: their run-relative numbers would be smaller than the file's."""
    lines = (LOGS / MULTI[0]).read_text().splitlines()
    headers = [i for i, x in enumerate(lines) if re.match(r"#\s*size\s+count\s+type", x.strip())]
    runs = parse_runs("\n".join(lines), MULTI[0])
    first_of_run2 = min(i for i in row_lines(lines) if i > headers[1])
    assert len(headers) == 2 and runs[1].rows[0].line == first_of_run2 + 1 > headers[1] + 1


@pytest.mark.parametrize("odd", ["\x0c", "\u2028", "\x1c", "\x85", "\x0b"])
def test_a_character_python_breaks_lines_at_but_a_file_does_not_keeps_the_file_line(odd):
    """A form feed, U+2028 and the like in a comment line are white space inside that line (the file's lines end at
    \\n, \\r\\n or \\r only); before, str.splitlines broke there and every later line was named one too far."""
    lines = (LOGS / MULTI[0]).read_text().splitlines()
    rows = row_lines(lines)
    first_comment = next(i for i, x in enumerate(lines) if x.startswith("#") and i < rows[0])
    lines[first_comment] += odd + "note"
    i = rows[-1]
    lines[i] = _ROW.sub(r"\g<1>1.2.3\g<3>", lines[i])
    with pytest.raises(NcclTestsLogError) as exc:
        parse_runs("\r\n".join(lines) + "\r\n", MULTI[0])
    assert f": line {i + 1}: '1.2.3' is not a number" in str(exc.value), str(exc.value)
