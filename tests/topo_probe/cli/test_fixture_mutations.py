"""Every real topology fixture, mutated as a hand-edited or cut-off copy would be (a line deleted,
duplicated or swapped, two cells swapped, a cell inserted, the text truncated, a byte dropped, CRLF,
a UTF-8 BOM, tabs for spaces), run through ``topo-probe --topology FILE`` in-process: each ends in
exit 0, or exit 2 with exactly one line on stderr; never a traceback, never another status. Mutations
that change nothing a parser reads (CRLF, a BOM) give the fixture's own topology (same fingerprint)."""

import contextlib
import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topo_probe.cli.main import main
from topo_probe.load import load_topology

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FILES = sorted([*FIXTURES.glob("nvsmi_topo_*.txt"), *FIXTURES.glob("nvsmi_cloud/*.txt"),
                *FIXTURES.glob("nccl_topo_dump_*.xml"), *FIXTURES.glob("family/*.xml"),
                *FIXTURES.glob("family/nvsmi_*.txt"), *FIXTURES.glob("rccl_topo/*.xml"),
                *FIXTURES.glob("link_matrix_*.json")])
FILES = [f for f in FILES if "_p2p_" not in f.name]     # `nvidia-smi topo -p2p` tables are read by --p2p, not here
INSERTS = ["NV2", "X", "SYS", "GPU9", "0-15", "N/A", "", '"', "<", "&", "\x00", "1e999", "-1", "NaN", "NV99", "é"]


def _mutate(text: str, kind: int, i: int, j: int, pick: int) -> str:
    lines = text.splitlines(keepends=True)
    i, j = i % len(lines), j % len(lines)
    if kind == 0:
        del lines[i]
    elif kind == 1:
        lines.insert(i, lines[i])
    elif kind == 2:
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == 3:
        cells = lines[i].split()
        if len(cells) > 2:
            a, b = i % len(cells), j % len(cells)
            cells[a], cells[b] = cells[b], cells[a]
            lines[i] = "\t".join(cells) + "\n"
    elif kind == 4:
        cells = lines[i].split("\t") if "\t" in lines[i] else lines[i].split(" ")
        cells.insert(j % (len(cells) + 1), INSERTS[pick % len(INSERTS)])
        lines[i] = ("\t" if "\t" in lines[i] else " ").join(cells)
    elif kind == 5:
        return text[: (i * 7919 + j) % (len(text) + 1)]
    elif kind == 6:
        k = (i * 7919 + j) % len(text)
        return text[:k] + INSERTS[pick % len(INSERTS)] + text[k + 1:]
    elif kind == 7:
        return text.replace("\t", "  ")
    return "".join(lines)


def _run(path: Path) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["--topology", str(path)])
    return rc, err.getvalue()


def test_the_fixture_list_is_the_real_one():
    assert len(FILES) >= 15 and all(f.stat().st_size > 0 for f in FILES)


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.sampled_from(FILES), st.lists(st.tuples(st.integers(0, 7), st.integers(0, 10**6), st.integers(0, 10**6),
                                                  st.integers(0, 100)), min_size=1, max_size=3))
def test_mutated_fixtures_end_in_0_or_one_line_exit_2(tmp_path_factory, path, edits):
    text = path.read_text(encoding="utf-8")
    for kind, i, j, pick in edits:
        text = _mutate(text, kind, i, j, pick) or " "
    case = tmp_path_factory.mktemp("m") / "case"
    case.write_text(text, encoding="utf-8", newline="")
    rc, err = _run(case)
    assert rc in (0, 2)
    assert (rc == 0 and err == "") or (rc == 2 and err.count("\n") == 1 and err.startswith("topo-probe: error: ")), err


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_crlf_and_bom_keep_the_topology(path, tmp_path):
    want = load_topology(str(path)).fingerprint()
    case = tmp_path / "case"
    case.write_text("\ufeff" + path.read_text(encoding="utf-8").replace("\n", "\r\n"), encoding="utf-8", newline="")
    assert load_topology(str(case)).fingerprint() == want
