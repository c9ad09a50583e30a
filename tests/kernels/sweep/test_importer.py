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


def _nccl_tests_log(sizes_counts, pre: str, groups: int = 2, avg: bool = True) -> str:
    """A log as nccl-tests v2.19.6 prints it (util.cu rows lines 454 and 503-508), typed in here."""
    head = ("#       size         count      type   redop    root     time   algbw   busbw #wrong" +
            "     time   algbw   busbw #wrong" * (groups - 1) + "\n")
    rows = "".join("%12d  %12d  %8s  %6s  %6d" % (s, c, "float", "none", -1) +
                   "  %7.2f  %6.2f  %6.2f  %6g" % (10.0 + k, 1.0 + k, 2.0 + k, 0) * groups + "\n"
                   for k, (s, c) in enumerate(sizes_counts))
    return pre + head + rows + "# Out of bounds values : 0 OK\n" + ("# Avg bus bandwidth    : 1.5 \n" if avg else "")


AG4 = ("# nThread 1 nGpus 4 minBytes {lo} maxBytes {hi} step: {step} warmup iters: 1 iters: 20 agg iters: 1 "
       "validation: 1 graph: 0 unalign: 0\n#\n")


@pytest.mark.parametrize("lo, hi, step, rows, cycles", [
    # -b 64 -e 128 -i 16: per rank (size/4/4) & ~3 floats (v2.19.6 all_gather.cu line 11) = 4, 4, 4, 4, 8
    (64, 128, "16(bytes)", [(64, 4)] * 4 + [(128, 8)], 1),
    # -b 8 -e 128 -f 2 -N 2: 2, 4, 8 floats / 4 ranks round to 0; 16, 32 floats to 4 and 8 per rank
    (8, 128, "2(factor)", ([(0, 0)] * 3 + [(64, 4), (128, 8)]) * 2, 2),
    # -N 3 of nccl-tests' default range, -b 32M -e 32M: the parameter line says one size per cycle
    (1 << 25, 1 << 25, "1048576(bytes)", [(1 << 25, 1 << 21)] * 3, 3),
])
def test_sizes_nccl_tests_rounds_to_one_are_accepted(tmp_path, capsys, lo, hi, step, rows, cycles):
    """A log nccl-tests really prints for all_gather on 4 ranks repeats sizes where its 16-byte blocks per rank round
    neighbouring sizes to one; sweep --import re-prints and plots it (was refused: 'appears 4 times'), and so does a
    sweep that overlays it; the parameter line's loop tells -N cycles from those repeats."""
    from kernels.sweep.cli import main
    log = tmp_path / "all_gather.txt"
    log.write_text(_nccl_tests_log(rows, AG4.format(lo=lo, hi=hi, step=step)))
    assert read_log(log).log.cycles == cycles
    assert main(["--import", str(log), "--plot", str(tmp_path / "p.png")]) == 0
    printed = [ln.split()[:2] for ln in capsys.readouterr().out.splitlines() if ln.strip() and not ln.startswith("#")]
    assert printed == [[str(s), str(c)] for s, c in rows]
    per_cycle = len(rows) // cycles
    measured = [ln.split(",")[2] for ln in (tmp_path / "p.csv").read_text().splitlines()[1:]]
    assert measured == [str(s) for s, _ in rows[:per_cycle]]          # the first cycle, each row
    sweep = ["all_gather", "--backend", "sim", "--topology", "dgx-a100", "-g", "4", "-b", "64", "-e", "128", "-i",
             "16", "--import", str(log), "--plot", str(tmp_path / "q.png")]
    assert main(sweep) == 0 and "NCCL measured (4 ranks)" in (tmp_path / "q.csv").read_text()


def test_a_missing_body_reprints_blank_and_leaves_the_average(tmp_path, capsys):
    """nccl-tests' blank out-of-place body is 32 blanks (util.cu lines 480-485), re-printed so (was 33: a %6g body's
    width); an out-of-place-only log (one group, no banner) re-prints no made-up in-place zeros, and without an
    'Avg bus bandwidth' line its average is its out-of-place cells' (2.0, 3.0: 2.5; was 1.25, zeros counted)."""
    pre = AG4.format(lo=64, hi=128, step="2(factor)")
    null = tmp_path / "null_all_gather.txt"
    null.write_text(pre + "#       size         count      type   redop    root     time   algbw   busbw #wrong     "
                    "time   algbw   busbw #wrong\n" + "%12d  %12d  %8s  %6s  %6d" % (64, 4, "float", "none", -1) +
                    " " * 32 + "  %7.2f  %6.2f  %6.2f  %6g\n" % (10.0, 1.0, 2.0, 0))
    assert import_only(null) == 0
    (row,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("64 ")]
    assert row == ("          64             4     float    none      -1" + " " * 32
                   + "    10.00    1.00    2.00       0")
    one = tmp_path / "one_all_gather.txt"
    one.write_text(_nccl_tests_log([(64, 4), (128, 8)], pre, groups=1, avg=False))
    assert import_only(one, plot_path=str(tmp_path / "p.png")) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("#")]
    assert [ln.split() for ln in rows] == [["64", "4", "float", "none", "-1", "10.00", "1.00", "2.00", "0"],
                                           ["128", "8", "float", "none", "-1", "11.00", "2.00", "3.00", "0"]]
    assert "# Avg bus bandwidth    : 2.5 " in out
    assert (tmp_path / "p.csv").read_text().splitlines()[1].endswith(",64,4,float,none,-1,10,1,2,,,")
