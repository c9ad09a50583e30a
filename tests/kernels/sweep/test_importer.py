"""kernels.sweep.importer: the real A100 log read exactly, and our own output read back."""

import contextlib
import io

import pytest
from _paths import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.sweep.backends import HostBackend
from kernels.sweep.importer import import_only, log_lines, parse_text, read_log
from synth.formats.nccl_tests.writer import footer_lines, header_lines, preamble_lines, row_line
from synth.sweep.driver import Result, Row, SweepConfig, make_selector, run_sweep
from topo_probe.machines.generators import fully_connected

FIXTURE = FIXTURES / "nccl_tests_allreduce_a100x8_single_process.txt"


def test_reference_log_values_exactly():
    imp = read_log(FIXTURE)
    table = [ln.split() for ln in FIXTURE.read_text().splitlines() if ln and not ln.startswith("#")]
    assert len(imp.rows) == len(table) == 30
    for r, t in zip(imp.rows, table):
        assert (r.size, r.count, r.type, r.redop, r.root) == (int(t[0]), int(t[1]), t[2], t[3], int(t[4]))
        for res, k in ((r.out_of_place, 5), (r.in_place, 9)):
            assert (res.time_us, res.algbw, res.busbw, res.wrong) == \
                (float(t[k]), float(t[k + 1]), float(t[k + 2]), int(t[k + 3]))
    assert imp.log.num_ranks == 8 and imp.log.avg_busbw_gbps == 66.2058
    # nccl-tests' average is over both columns of every row
    assert imp.summary.avg_busbw == pytest.approx(66.2058, abs=1e-3)


def test_reference_log_reprints_line_for_line():
    """The log (an older nccl-tests) re-printed in today's layout (nccl-tests v2.19.6 src/util.cu: header lines
    756-760, getFloatStr numbers): every other line as the log's, every row's cells the log's numbers."""
    lines = log_lines(read_log(FIXTURE), "x")
    assert lines[1].startswith("# sweep --import x: 30 rows, 8 ranks, root column yes, #wrong column")
    lines = lines[:1] + lines[2:]
    log = FIXTURE.read_text().splitlines()
    start = log.index("# Using devices") + 9
    assert lines[start:start + 4] == header_lines() and len(lines) == len(log)
    for ours, theirs in zip(lines[:start] + lines[start + 4:], log[:start] + log[start + 4:]):
        if ours.startswith("#"):
            assert ours == theirs
        else:
            assert [float(x) if x[0].isdigit() else x for x in ours.split()] == \
                [float(x) if x[0].isdigit() else x for x in theirs.split()]


def test_import_only_prints_and_plots(tmp_path, capsys):
    assert import_only(FIXTURE, plot_path=str(tmp_path / "nccl.png")) == 0
    out = capsys.readouterr().out
    assert "232.44" in out and (tmp_path / "nccl.png").is_file()
    assert (tmp_path / "nccl.csv").read_text().count("NCCL measured") == 30


def _print_sweep(cfg, topo) -> tuple[str, list[Row]]:
    src = make_selector(cfg.collective, topo, "ring")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print("\n".join(preamble_lines(cfg, HostBackend().devices(cfg.nranks, topo)) + header_lines()))
        s = run_sweep(cfg, HostBackend(), src, on_row=lambda r: print(row_line(r)))
        print("\n".join(footer_lines(s)))
    return buf.getvalue(), s.rows


def _close(parsed: Result, orig: Result) -> None:
    assert parsed.time_us == pytest.approx(orig.time_us, rel=5e-3, abs=0.006)
    assert parsed.algbw == pytest.approx(orig.algbw, abs=0.006)
    assert parsed.busbw == pytest.approx(orig.busbw, abs=0.006)
    assert parsed.wrong == orig.wrong


def test_our_output_parses_back():
    cfg = SweepConfig("scatter", 4, minbytes=64, maxbytes=4096, stepfactor=4, iters=2, warmup=1, root=-1,
                      dtypes=("int32", "half"))
    text, rows = _print_sweep(cfg, fully_connected(4))
    imp = parse_text(text)
    assert imp.log.n_gpus == 4 and imp.log.has_root and len(imp.rows) == len(rows) == 2 * 4 * 4
    assert imp.log.num_ranks == 4 and [d.bus_id for d in imp.log.devices] == ["cpu"] * 4  # host backend lines
    for p, o in zip(imp.rows, rows):
        assert (p.size, p.count, p.type, p.redop, p.root) == (o.size, o.count, o.type, o.redop, o.root)
        _close(p.out_of_place, o.out_of_place)
        _close(p.in_place, o.in_place)


_results = st.builds(Result, st.floats(0.01, 1e6), st.floats(0, 999), st.floats(0, 999),
                     st.one_of(st.none(), st.integers(0, 99999)))


@settings(derandomize=True, max_examples=60, deadline=None)
@given(rows=st.lists(st.builds(Row, st.integers(0, 1 << 40), st.integers(0, 1 << 38),
                               st.sampled_from(["float", "bfloat16", "int8"]),
                               st.sampled_from(["sum", "avg", "none"]), st.integers(-1, 63), _results, _results),
                     min_size=1, max_size=5))
def test_row_lines_round_trip(rows):
    text = "\n".join(header_lines() + [row_line(r) for r in rows])
    for p, o in zip(parse_text(text).rows, rows):
        assert (p.size, p.count, p.type, p.redop, p.root) == (o.size, o.count, o.type, o.redop, o.root)
        _close(p.out_of_place, o.out_of_place)
        _close(p.in_place, o.in_place)


def test_import_of_another_collective_is_refused_not_dropped(tmp_path, capsys):
    """An all_reduce log given to an all_gather sweep is an error (exit 2), never silently unused."""
    from kernels.sweep.cli import main
    log = str(FIXTURES / "real_logs" / "h100_8gpu_1node_all_reduce_ring.txt")
    base = ["all_gather", "--backend", "sim", "--topology", "dgx-a100", "-b", "1M", "-e", "1M"]
    assert main(base + ["--import", log, "--plot", str(tmp_path / "p.png")]) == 2
    assert "holds no allgather test (it holds allreduce)" in capsys.readouterr().err
    assert main(base + ["--import", log]) == 2               # no --plot: nothing to overlay on
    assert "--import with a COLLECTIVE" in capsys.readouterr().err
    assert not (tmp_path / "p.png").exists()


def test_import_only_prints_each_test_of_a_two_test_file(capsys):
    from kernels.sweep.cli import main
    log = str(FIXTURES / "real_logs" / "h100_16gpu_2node_alltoall_sendrecv.txt")
    assert main(["--import", log]) == 0
    out = capsys.readouterr().out
    assert out.count("# Avg bus bandwidth") == 2 and "72.4265" in out and "28.6299" in out


def test_a_log_with_a_size_twice_in_one_series_is_refused_before_the_sweep(tmp_path, capsys):
    """Audit 65: a log holding two runs' rows in one table (every size twice for float sum) was
    plotted as one zig-zag series; it is refused, naming the file and the size, before any row.
    Sections of other types (nccl-tests ``-d all``) stay series of their own."""
    from kernels.sweep.cli import main
    text = FIXTURE.read_text()
    rows = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    twice = tmp_path / "twice_all_reduce.txt"
    twice.write_text(text + "\n".join(rows) + "\n")
    base = ["all_reduce", "--backend", "sim", "--topology", "dgx-a100", "-b", "8", "-e", "64", "-f", "2"]
    for argv in (base + ["--import", str(twice), "--plot", str(tmp_path / "p.png")],
                 ["--import", str(twice), "--plot", str(tmp_path / "p.png")]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert captured.out == ""                       # no sweep row, no re-printed log row
        assert captured.err.count("\n") == 1 and str(twice) in captured.err and "size 8 appears 2 times" in captured.err
        assert not (tmp_path / "p.png").exists()
    dall = tmp_path / "dall_all_reduce.txt"
    dall.write_text(text + "\n".join(ln.replace(" float ", " double ") for ln in rows) + "\n")
    assert main(base + ["--import", str(dall), "--plot", str(tmp_path / "p.png")]) == 0
    csv = (tmp_path / "p.csv").read_text()
    assert csv.count("NCCL measured (8 ranks) float sum root -1,") == csv.count("(8 ranks) double sum root -1,") == 30


def test_a_log_of_two_tests_is_refused_by_plot_before_any_row(tmp_path, capsys):
    """As a repeated size: ``sweep --import LOG --plot`` of a file of two tests printed both logs, then
    exited 2; it exits 2 before any row, with no picture (the re-print alone still shows both)."""
    from kernels.sweep.cli import main
    two = tmp_path / "two.txt"
    two.write_text(FIXTURE.read_text() + FIXTURE.read_text())
    assert main(["--import", str(two), "--plot", str(tmp_path / "p.png")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "holds 2 tests" in captured.err
    assert not (tmp_path / "p.png").exists() and not (tmp_path / "p.csv").exists()
    assert main(["--import", str(two)]) == 0
    assert capsys.readouterr().out.count("# sweep --import") == 2
