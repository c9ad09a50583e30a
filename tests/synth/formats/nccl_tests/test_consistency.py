"""A row of an imported nccl-tests log whose numbers disagree (a digit flipped in a copy) is said, never read
silently; every real log under tests/fixtures/real_logs reads clean.

The reference is nccl-tests' own rule (NVIDIA/nccl-tests v2.19.6): ``algbw = size / 1e9 / sec``
(``src/all_reduce.cu`` AllReduceGetBw), ``busbw = algbw x 2 (n - 1) / n`` for all_reduce, each printed rounded to the
decimals the log shows (``src/util.cu`` lines 487-505).  A row can have been printed by it when one true time within
the printed time's rounding gives the printed algbw and busbw, each within theirs: intervals, computed here from
the row's text (its decimals) and the log's rank count, not by the checker's own rounding or constants."""

from __future__ import annotations

import re
import shutil

import pytest
from _paths import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.formats.nccl_tests.consistency import inconsistent_rows
from synth.formats.nccl_tests.runs import load_runs, parse_runs

LOGS = FIXTURES / "real_logs"
#: nccl-tests 2.x, 16 ranks (2 nodes x 8 A100, one process each): size count type redop, then time algbw busbw error
#: out of place and in place; times printed with 1 or 2 decimals, bandwidths with 2
LOG = LOGS / "a100_16gpu_2node_all_reduce_abci_hdr.txt"
RANKS = 16
#: the columns of the three numbers of each placement
PLACES = {"out-of-place": (4, 5, 6), "in-place": (8, 9, 10)}


@pytest.mark.parametrize("path", sorted(p for p in LOGS.rglob("*") if p.is_file()), ids=lambda p: p.name)
def test_every_real_log_reads_clean(path):
    try:
        runs = load_runs(path)
    except Exception:               # noqa: BLE001 - a log the reader refuses is test_runs' business, not this one's
        pytest.skip("not read")
    assert [inconsistent_rows(log) for log in runs] == [[] for _ in runs]


def _rows() -> tuple[list[str], list[int]]:
    lines = LOG.read_text().splitlines()
    return lines, [k for k, ln in enumerate(lines) if re.match(r"\s+\d+\s+\d+\s+float\s+sum\s", ln)]


def _half(tok: str) -> float:
    return 0.5 * 10.0 ** -len(tok.partition(".")[2])


def _could_print(size: int, time: str, algbw: str, busbw: str, widen: float = 0.0) -> bool:
    """One true algbw fits the printed time, algbw and busbw within their rounding (each widened by ``widen``)."""
    t, a, b, f = float(time), float(algbw), float(busbw), 2 * (RANKS - 1) / RANKS
    dt, da, db = _half(time), _half(algbw), _half(busbw)
    lo = max(size / 1e3 / (t + dt) * (1 - widen), (a - da) * (1 - widen), (b - db) / f * (1 - widen))
    hi = min(size / 1e3 / (t - dt) * (1 + widen), (a + da) * (1 + widen), (b + db) / f * (1 + widen))
    return lo <= hi


def test_the_log_is_16_ranks_and_every_row_could_have_been_printed():
    lines, rows = _rows()
    assert parse_runs(LOG.read_text())[0].num_ranks == RANKS and len(rows) >= 20
    for k in rows:
        toks = lines[k].split()
        assert all(_could_print(int(toks[0]), *(toks[c] for c in cols)) for cols in PLACES.values()), lines[k]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_flipped_digit_is_said_where_no_true_time_prints_the_row(data):
    lines, rows = _rows()
    k = data.draw(st.sampled_from(rows))
    place = data.draw(st.sampled_from(sorted(PLACES)))
    col = data.draw(st.sampled_from(PLACES[place]))
    toks = lines[k].split()
    digits = [i for i, ch in enumerate(toks[col]) if ch.isdigit()]
    i = data.draw(st.sampled_from(digits))
    new = toks[col][:i] + str((int(toks[col][i]) + data.draw(st.integers(1, 9))) % 10) + toks[col][i + 1:]
    toks[col] = new
    mangled = lines[:k] + ["  " + "  ".join(toks)] + lines[k + 1:]
    log = parse_runs("\n".join(mangled))[0]
    said = [(r, p) for r, p, *_ in inconsistent_rows(log)]
    row = [r for r, _ in enumerate(log.rows) if log.rows[r].size == int(toks[0])][0]
    nums = (toks[c] for c in PLACES[place])
    if said:                                            # never a false alarm: only this row, which nccl-tests
        assert said == [(row, place)] and not _could_print(int(toks[0]), *nums)      # could not have printed
    else:                                               # a row not said could have been printed, or nearly
        assert _could_print(int(toks[0]), *nums, widen=0.01), (lines[k], toks)


def test_a_flip_to_a_trailing_zero_is_said():
    """1.24 -> 1.20 in a 32 KiB row's busbw (3 % off its algbw 0.66): the float 1.2 must not be read as printed
    with one decimal (+- 0.05, which would hide it); nccl-tests prints every number below 1,000 with 2."""
    lines, rows = _rows()
    k = next(k for k in rows if lines[k].split()[0] == "32768")
    toks = lines[k].split()
    assert toks[6] == "1.24" and not _could_print(32768, toks[4], toks[5], "1.20")
    toks[6] = "1.20"
    log = parse_runs("\n".join(lines[:k] + ["  " + "  ".join(toks)] + lines[k + 1:]))[0]
    row = [r for r, x in enumerate(log.rows) if x.size == 32768][0]
    assert [(r, p, c) for r, p, c, *_ in inconsistent_rows(log)] == [(row, "out-of-place", "busbw")]


def test_sweep_and_simulate_import_say_the_file_line_and_column(tmp_path, capsys):
    """0.36 -> 0.46 in a 16 KiB row's out-of-place algbw: imported silently before."""
    from kernels.sweep.cli import main as sweep
    from synth.cli.simulate import main as simulate
    lines, rows = _rows()
    k = next(k for k in rows if lines[k].split()[0] == "16384")
    assert lines[k].split()[5] == "0.36"
    mangled = tmp_path / LOG.name
    shutil.copy(LOG, mangled)
    mangled.write_text("\n".join(lines[:k] + [lines[k].replace(" 0.36 ", " 0.46 ", 1)] + lines[k + 1:]) + "\n")
    where = f"{mangled}:{k + 1}: out-of-place algbw 0.46 disagrees with its row (size 16384)"
    assert sweep(["--import", str(LOG)]) == 0 and "disagrees" not in capsys.readouterr().out
    assert sweep(["--import", str(mangled)]) == 0
    assert f"# note: warning: {where}" in capsys.readouterr().out
    assert simulate(["--topology", "dgx-a100", "--nodes", "2", "--import", str(mangled)]) == 0
    assert f"simulate: warning: {where}" in capsys.readouterr().err


def test_a_cputime_log_is_not_held_to_its_time_but_still_to_busbw():
    """``-C 1`` (``--report_cputime``) prints the host's launch time in the ``cputime`` column while algbw and
    busbw still come from the GPU time (NVIDIA/nccl-tests v2.19.6 src/common.cu lines 767-772, 796 and 858; header
    util.cu line 743): a non-blocking launch takes a fraction of the collective, so its time says nothing of its
    algbw.  Here every time is a launch's few µs whatever the size (as ``-C 1`` prints a non-blocking run's); a
    flipped busbw is still said."""
    lines, rows = _rows()
    head = next(k for k, ln in enumerate(lines) if ln.lstrip().startswith("#") and " time " in ln)
    out = lines[:head] + [lines[head].replace("     time ", "  cputime ")] + lines[head + 1:]
    for j, k in enumerate(rows):
        toks = out[k].split()
        for t in (4, 8):
            toks[t] = f"{5 + j % 3 / 10:.2f}"
        out[k] = "  " + "  ".join(toks)
    log = parse_runs("\n".join(out))[0]
    assert "cputime" in log.columns and inconsistent_rows(log) == []
    k = next(k for k in rows if float(out[k].split()[6]) > 10)          # a busbw printed with 4 or more digits
    toks = out[k].split()
    toks[6] = str(round(float(toks[6]) * 1.5, 2))
    flipped = parse_runs("\n".join(out[:k] + ["  " + "  ".join(toks)] + out[k + 1:]))[0]
    assert [(place, col) for _, place, col, *_ in inconsistent_rows(flipped)] == [("out-of-place", "busbw")]


def test_a_first_build_log_in_ms_is_held_to_the_ms_it_printed():
    """The first nccl-tests builds print time in ms with 3 decimals (``bytes N type op time algbw busbw res``,
    read as µs; NVIDIA/nccl-tests b188a15 src/common.cu line 573): a printed ``0.125`` is 125 µs +- 0.5, not
    +- 0.005.  Rows made here from true times by nccl-tests' rule (algbw = bytes / s / 1e9, busbw = algbw x
    2 (n - 1) / n for 8 ranks), printed as those builds print them."""
    lines = ["#  bytes  N  type  op  time  algbw  busbw  res"]
    for size, sec in ((1 << 20, 125.4e-6), (2 << 20, 244.6e-6), (4 << 20, 480.4e-6), (8 << 20, 951.45e-6),
                      (16 << 20, 1.8904e-3)):
        algbw = size / sec / 1e9
        lines.append(f"  {size}  {size // 4}  float  sum  {sec * 1e3:.3f}  {algbw:.2f}  {algbw * 14 / 8:.2f}  0e+00")
    log = parse_runs("\n".join(lines) + "\n")[0]
    assert log.time_unit == "ms" and len(log.rows) == 5 and inconsistent_rows(log) == []


def _float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr (v2.19.6 src/util.cu lines 487-492): 2 decimals where they fit the width, 1, 0,
    then exponent form."""
    for fmt in ("%*.2f", "%*.1f", "%*.0f"):
        text = fmt % (width, value)
        if len(text) <= width:
            return text
    return ("%*.1e" if width >= 7 else "%*.0e") % (width, value)


@settings(max_examples=300, deadline=None)
@given(ranks=st.sampled_from([2, 8, 16, 64]), latency_us=st.floats(2, 60),
       gbps=st.sampled_from([0.8, 1, 2, 5, 25, 400]), first=st.sampled_from([8, 1024, 65536]), steps=st.integers(3, 17),
       noise=st.lists(st.floats(0.97, 1.03), min_size=36, max_size=36))
def test_a_log_printed_by_nccl_tests_from_true_times_reads_clean(ranks, latency_us, gbps, first, steps, noise):
    """Any all_reduce log nccl-tests could print (each time a true one, algbw = bytes / 1e3 / µs, busbw = algbw x
    2 (n - 1) / n, printed by getFloatStr): no row is said.  Before, a log whose precise rows were mostly near
    1 GB/s (algbw 1.00 +- 0.5 %) read its constant 0.5 % off and warned about its sharper rows."""
    lines = ["#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong"]
    for j in range(steps + 1):
        size, row = first << j, ""
        for r in noise[2 * j:2 * j + 2]:
            t = (latency_us + size / gbps / 1e3) * r
            a = size / 1e3 / t
            row += f"  {_float_str(t, 7)}  {_float_str(a, 6)}  {_float_str(a * 2 * (ranks - 1) / ranks, 6)}  0"
        lines.append(f"  {size}  {size // 4}  float  sum  -1{row}")
    assert inconsistent_rows(parse_runs("\n".join(lines) + "\n")[0]) == []


def test_times_are_known_to_what_each_nccl_tests_build_printed():
    """First builds: ms with 3 decimals (+-0.5 us); before getFloatStr: 2 decimals below 100 us, 1 below 10,000
    (NVIDIA/nccl-tests 2b00b4b src/common.cu 596-602: a printed 172.0 is +-0.05); v2.19.6: 2 below 10,000."""
    from synth.formats.nccl_tests.consistency import _time_around
    assert _time_around(120.0, "ms") == (119.5, 120.5)
    assert _time_around(172.0, "us") == pytest.approx((171.95, 172.05))
    assert _time_around(49.5, "us") == pytest.approx((49.495, 49.505))
    assert _time_around(1234.56, "us") == pytest.approx((1234.555, 1234.565))


@pytest.mark.parametrize("path", sorted(p for p in LOGS.rglob("*") if p.is_file()), ids=lambda p: p.name)
def test_each_row_records_the_file_line_it_was_read_from(path):
    """Every row of every run of a real log (launcher prefixes, several runs, preambles): the file's line at
    ``row.line``, read here from the decoded text, prints the row's size and count, and lines go down the file."""
    from synth.formats.nccl_tests.textio import read_log_text
    try:
        runs = load_runs(path)
    except Exception:               # noqa: BLE001 - a log the reader refuses is test_runs' business, not this one's
        pytest.skip("not read")
    lines = read_log_text(path).splitlines()
    for log in runs:
        at = [row.line for row in log.rows]
        assert at == sorted(set(at)) and all(1 <= k <= len(lines) for k in at)
        for row in log.rows:
            toks = re.split(r"[\s:>]+", lines[row.line - 1])
            assert str(row.size) in toks and str(row.count) in toks, (row.line, lines[row.line - 1])


def test_a_utf16_log_names_the_mangled_rows_line():
    """The same mangled 16 KiB row in a log saved as UTF-16 (Windows PowerShell 5's ``>``, which the reader
    decodes): the note names its line, read when the row was (before: the file was read again as UTF-8: '?')."""
    import tempfile
    from pathlib import Path

    from synth.formats.nccl_tests.consistency import inconsistent_notes
    lines, rows = _rows()
    k = next(k for k in rows if lines[k].split()[0] == "16384")
    with tempfile.TemporaryDirectory() as tmp:
        mangled = Path(tmp) / LOG.name
        text = "\n".join(lines[:k] + [lines[k].replace(" 0.36 ", " 0.46 ", 1)] + lines[k + 1:]) + "\n"
        mangled.write_bytes(text.encode("utf-16"))
        notes = [n for log in load_runs(mangled) for n in inconsistent_notes(log, mangled)]
    assert [n.split(" disagrees")[0] for n in notes] == [f"{mangled}:{k + 1}: out-of-place algbw 0.46"]
