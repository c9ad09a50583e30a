"""An error in nvidia-smi text names its place in the user's file: the line of the file and the column in the text
as shown (tabs to 8-column stops), and says so on a line whose colour sequences take no column on a terminal.

Reference: the coloured DGX A100 fixture is the plain one plus colour sequences (test_nvsmi.py checks that), so the
place of a cell is counted here in the plain fixture's line (str.split positions, no parser code); the coloured line
is changed at the same visible character, found by walking it past the fixture's four known sequences.  Before, the
column was the visible one but nothing said so, and a reader counting characters in the file (colour codes
included) looked elsewhere.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _paths import FIXTURES
from topo_probe.errors import TopologyError
from topo_probe.parsers.nvsmi import parse_nvsmi_p2p, parse_nvsmi_topo

COLOURS = ("\x1b[4m", "\x1b[1m", "\x1b[1;32m", "\x1b[0m")        # the fixture's sequences (test_nvsmi.py)
SAID = " (in the text as shown, colour codes not counted)"
PLAIN = (FIXTURES / "nvsmi_topo_dgx_a100.txt").read_text().split("\n")
COLOURED = (FIXTURES / "nvsmi_topo_dgx_a100_colour.txt").read_text().split("\n")


def raw_index(line: str, visible: int) -> int:
    """The index in ``line`` of its ``visible``-th character as shown (0-based), skipping the known sequences."""
    k = seen = 0
    while True:
        seq = next((c for c in COLOURS if line.startswith(c, k)), None)
        if seq:
            k += len(seq)
            continue
        if seen == visible:
            return k
        k, seen = k + 1, seen + 1


def cells() -> list[tuple[int, int, str]]:
    """(0-based line, 1-based column, token) of every matrix cell of the plain fixture, but row GPU0's (a GPU0 line
    whose first cell is not a cell reads as a second header, its own error)."""
    out = []
    for i, line in enumerate(PLAIN):
        if re.match(r"(GPU|NIC|mlx)\S*\s+(X|NV|P|S|N)", line) and not line.startswith("GPU0"):
            spans = [(m.start() + 1, m.group()) for m in re.finditer(r"\S+", line)]
            out += [(i, col, tok) for col, tok in spans[1:] if re.fullmatch(r"X|NV\d+|PIX|PXB|PHB|NODE|SYS", tok)]
    return out


CELLS = cells()


def test_the_reference_sees_the_whole_matrix_and_every_row_is_coloured():
    assert len(CELLS) >= 7 * 8 and all(COLOURED[i] != PLAIN[i] for i, _, _ in CELLS)


@given(st.sampled_from(CELLS))
@settings(max_examples=60, deadline=None, derandomize=True)
def test_a_broken_cell_names_the_file_line_and_the_shown_column_saying_so(cell):
    i, col, tok = cell
    k = raw_index(COLOURED[i], col - 1)
    assert COLOURED[i][k] == tok[0]
    lines = COLOURED[:i] + [COLOURED[i][:k] + "Z" + COLOURED[i][k + 1:]] + COLOURED[i + 1:]
    with pytest.raises(TopologyError) as e:
        parse_nvsmi_topo("\n".join(lines), source="topo.txt")
    assert str(e.value).startswith(f"topo.txt:line {i + 1} column {col}{SAID}: unknown cell 'Z{tok[1:]}' in row ")
    assert k + 1 != col                       # the file's character offset is another column


@given(st.sampled_from(CELLS))
@settings(max_examples=30, deadline=None, derandomize=True)
def test_on_a_plain_line_the_column_is_the_file_column_and_nothing_is_added(cell):
    i, col, tok = cell
    lines = PLAIN[:i] + [PLAIN[i][:col - 1] + "Z" + PLAIN[i][col:]] + PLAIN[i + 1:]
    with pytest.raises(TopologyError) as e:
        parse_nvsmi_topo("\n".join(lines), source="topo.txt")
    assert str(e.value).startswith(f"topo.txt:line {i + 1} column {col}: unknown cell 'Z{tok[1:]}' in row ")


def test_a_p2p_table_in_colour_names_its_places_the_same_way():
    text = "\x1b[4m \tGPU0\tGPU1\x1b[0m\n\x1b[1mGPU0\x1b[0m\tX\tOK\n\x1b[1mGPU1\x1b[0m\tQQ\tX\n"
    with pytest.raises(TopologyError) as e:
        parse_nvsmi_p2p(text, source="p2p.txt")
    # "GPU1" then a tab: QQ is the 6th character but a terminal shows it at column 9 (tab stops every 8 columns)
    assert str(e.value).startswith(f"p2p.txt:line 3 column 9{SAID}: unknown cell 'QQ' in row GPU1")


def test_a_header_error_on_the_real_tabbed_underlined_header_names_the_column_a_terminal_shows():
    """Driver 590 writes the header tab-separated and underlined (the real H200 fixture): a second GPU0 put into it
    is named at the column a terminal shows, tabs to 8-column stops (Python's str.expandtabs as the reference),
    not at its character offset (17 shown, 10 in the text without colour codes, 14 in the file)."""
    lines = (FIXTURES / "nvsmi_topo_h200_590_underlined.txt").read_text().split("\n")
    lines[0] = lines[0].replace("GPU0\t", "GPU0\tGPU0\t", 1)
    with pytest.raises(TopologyError) as e:
        parse_nvsmi_topo("\n".join(lines), source="t.txt")
    shown = "".join(re.split(r"\x1b\[[0-9;]*m", lines[0])).expandtabs(8)
    col = shown.index("GPU0", shown.index("GPU0") + 1) + 1
    assert col == 17 and str(e.value).startswith(f"t.txt:line 1 column {col}{SAID}: "), str(e.value)
    assert "GPU0" in str(e.value)


def test_a_note_on_a_coloured_row_names_the_shown_column_saying_so():
    """The readings the parser notes (an X off the diagonal, two cells of a pair that differ) name their places as
    errors do: on the coloured fixture every row held colour codes, so each column is the shown one, said so.
    Reference: the cells' places counted in the plain fixture (GPU3/GPU0 and its mirror GPU0/GPU3)."""
    row3 = next(i for i, x in enumerate(PLAIN) if x.startswith("GPU3"))
    row0 = next(i for i, x in enumerate(PLAIN) if x.startswith("GPU0") and i > 0 and PLAIN[i].split()[1] == "X")
    col3 = [m.start() + 1 for m in re.finditer(r"\S+", PLAIN[row3])][1]            # row GPU3, column GPU0
    col0 = [m.start() + 1 for m in re.finditer(r"\S+", PLAIN[row0])][4]            # row GPU0, column GPU3
    k = raw_index(COLOURED[row3], col3 - 1)
    lines = list(COLOURED)
    lines[row3] = COLOURED[row3][:k] + "X" + COLOURED[row3][k + len(PLAIN[row3].split()[1]):]
    notes = [a for a in parse_nvsmi_topo("\n".join(lines), source="topo.txt").assumptions if " column " in a]
    assert f"cell GPU3/GPU0 is X (line {row3 + 1} column {col3}{SAID}): X off the diagonal, read as unknown" in notes
    pair = (f"cell GPU0/GPU3 is {PLAIN[row0].split()[4]} (line {row0 + 1} column {col0}{SAID}) but GPU3/GPU0 is "
            f"unknown (line {row3 + 1} column {col3}{SAID}): read as ")
    assert any(a.startswith(pair) for a in notes), notes


@pytest.mark.parametrize("row,k,cell", [(1, 2, "SYS"), (4, 1, "X"), (4, 1, "PIX")])
def test_a_pair_whose_cells_differ_is_noted_once(row, k, cell):
    """Reference: one changed cell of the plain fixture makes one pair disagree, so one note names the pair.  Before,
    the pair was noted twice (once from each side) when the cell earlier in the file gave the reading kept."""
    lines = list(PLAIN)
    at = list(re.finditer(r"\S+", lines[row]))[k]                           # the row's k-th matrix cell, off the X
    assert PLAIN[0].split()[k - 1] != lines[row].split()[0]
    lines[row] = lines[row][:at.start()] + cell + lines[row][at.end():]
    notes = [a for a in parse_nvsmi_topo("\n".join(lines)).assumptions if ") but " in a]
    assert len(notes) == 1, notes


def test_the_nic_nvlink_note_on_a_coloured_row_names_the_shown_column_saying_so():
    """The 'NVLink to a NIC is not possible' note places its cell as every other note does.  Reference: row GPU0's
    NIC0 cell (its 10th word) and row NIC0's GPU0 cell (its 2nd) counted in the plain fixture (str.split positions);
    both are made NV4 in the coloured fixture, and the note names row GPU0's cell."""
    lines, at = list(COLOURED), {}
    for name, word in (("GPU0", 9), ("NIC0", 1)):
        i = next(k for k, x in enumerate(PLAIN) if x.startswith(name + " "))
        cell = list(re.finditer(r"\S+", PLAIN[i]))[word]
        k = raw_index(COLOURED[i], cell.start())
        assert COLOURED[i][k:k + 3] == "PXB"
        lines[i] = COLOURED[i][:k] + "NV4" + COLOURED[i][k + 3:]
        at[name] = (i + 1, cell.start() + 1)
    topo = parse_nvsmi_topo("\n".join(lines), source="c.txt")
    notes = [n for n in topo.assumptions if "NVLink to a NIC is not possible" in n]
    ln, col = at["GPU0"]
    assert notes == [f"cell GPU0/NIC0 is NV4 (line {ln} column {col}{SAID}): NVLink to a NIC is not possible, "
                     "read as unknown"], notes
