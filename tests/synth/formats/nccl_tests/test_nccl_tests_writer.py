"""synth.formats.nccl_tests.writer: the text layout, checked character for character against a real
nccl-tests v2.19.4 log (the layout of v2.19.6 src/util.cu), and the -J document against nccl-tests' JSON keys."""

import json

import pytest
from _paths import FIXTURES

from synth.formats.nccl_tests.writer import (
    below_min_bw,
    float_str,
    fmt_time,
    footer_lines,
    free_json_path,
    header_lines,
    is_json_name,
    json_document,
    min_bw_gbps,
    preamble_lines,
    row_line,
    write_json,
)
from synth.formats.nccl_tests.device_line import Device
from synth.sweep.driver import Result, Row, SweepConfig, SweepSummary
from topo_probe.errors import InvalidArgument

FIXTURE = FIXTURES / "real_logs" / "a100_8gpu_1node_all_reduce_dkh.txt"     # nccl-tests 2.19.4, NCCL 2.19.3
LINES = [ln for ln in FIXTURE.read_text().splitlines() if not ln.startswith("# SOURCE")]


def _row_from_text(line: str) -> Row:
    t = line.split()
    res = [Result(float(t[k]), float(t[k + 1]), float(t[k + 2]), int(t[k + 3])) for k in (5, 9)]
    return Row(int(t[0]), int(t[1]), t[2], t[3], int(t[4]), res[0], res[1])


def test_header_lines_are_the_logs():
    start = LINES.index("# Using devices") + 9
    assert header_lines() == LINES[start:start + 4]          # blank "#", banner, names, units (trailing blank too)


def test_every_row_of_the_log_reprints_identically():
    rows = [ln for ln in LINES if ln and not ln.startswith("#")]
    assert len(rows) == 25
    for ln in rows:
        assert row_line(_row_from_text(ln)) == ln


def test_footer_like_the_log():
    s = SweepSummary()
    assert footer_lines(s, 0, 34.9024, program="all_reduce_perf") == LINES[-5:-1]
    bad = Result(1.0, 2.0, 3.0, 5)
    s = SweepSummary([Row(8, 2, "float", "sum", -1, bad, Result(1.0, 2.0, 5.0, 0))])
    assert footer_lines(s) == ["# Out of bounds values : 1 FAILED", "# Avg bus bandwidth    : 4 ", "#"]


def test_preamble_like_the_log():
    """``# Collective test starting`` and the parameter line with ``unalign:`` (util.cu lines 624-628); the log's
    ``# nccl-tests version`` line is left out (no nccl-tests or NCCL library runs here)."""
    cfg = SweepConfig("all_reduce", 8, minbytes=8, maxbytes=134217728, stepfactor=2, warmup=1)
    devs = [Device(r, 584419, "dkh", r, "0x14", "NVIDIA A100-SXM4-80GB") for r in range(8)]
    out = preamble_lines(cfg, devs)
    assert out[:2] == LINES[1:3] and out[2:4] == LINES[3:5]
    assert preamble_lines(cfg, devs, ["sweep: x"])[2] == "# sweep: x"


@pytest.mark.parametrize("value, width, text", [
    (38.854, 7, "  38.85"), (103.8, 7, " 103.80"), (1295.41, 7, "1295.41"), (9999.994, 7, "9999.99"),
    (9999.996, 7, "10000.0"), (16330.4, 7, "16330.4"), (123456.7, 7, " 123457"), (12345678.0, 7, "1.2e+07"),
    (999.99, 6, "999.99"), (1234.5, 6, "1234.5"), (12345.6, 6, " 12346"), (123456.0, 6, "123456"),
    (1234567.0, 6, " 1e+06")])
def test_numbers_print_as_get_float_str(value, width, text):
    """nccl-tests v2.19.6 src/util.cu lines 487-492: %.2f, else %.1f, else %.0f where it fits ``width``, else
    %.1e (width >= 7) or %.0e; worked by hand (a busbw of 1234.5 GB/s no longer pushes the row out of line)."""
    assert float_str(value, width) == text


def test_a_wide_busbw_keeps_its_columns():
    big = Result(16330.4, 1030.44, 1803.27, 0)
    line = row_line(Row(16 << 30, 4 << 30, "float", "sum", -1, big, big))
    names = header_lines()[2]
    assert len(line) == len(names) - 1         # the names line ends in a blank
    assert line.split()[5:9] == ["16330.4", "1030.4", "1803.3", "0"]


def test_min_bw_verdict_as_nccl_tests():
    """NCCL_TESTS_MIN_BW (common.cu lines 1829-1830, util.cu line 778): OK at or above 0.9 x the value, FAILED
    below, nothing when unset or -1; a value that is no number is refused (nccl-tests' atof reads 0)."""
    s = SweepSummary([Row(8, 2, "float", "sum", -1, Result(1.0, 2.0, 90.0, 0), Result(1.0, 2.0, 90.0, 0))])
    assert footer_lines(s, min_bw=100.0)[1] == "# Avg bus bandwidth    : 90 OK"       # 90 >= 0.9 x 100
    assert footer_lines(s, min_bw=100.1)[1] == "# Avg bus bandwidth    : 90 FAILED"
    assert below_min_bw(90.0, 100.1) and not below_min_bw(90.0, None)
    assert min_bw_gbps({}) is None and min_bw_gbps({"NCCL_TESTS_MIN_BW": "-1"}) is None
    assert min_bw_gbps({"NCCL_TESTS_MIN_BW": " 250.5 "}) == 250.5
    for bad in ("fast", "nan", "inf"):
        with pytest.raises(InvalidArgument, match="NCCL_TESTS_MIN_BW"):
            min_bw_gbps({"NCCL_TESTS_MIN_BW": bad})


@pytest.mark.parametrize("path, written", [("out.json", True), ("out.JSON", True), ("dir/x.Json", True),
                                           (".json", True), ("out.txt", False), ("out", False),
                                           ("a.json/out", False), ("out.", False), ("out.json.txt", False)])
def test_only_a_json_name_is_written(path, written):
    """nccl-tests v2.19.6 src/common.cu lines 135-173: the extension after the last '.' past the last '/', compared
    with strcasecmp to "json"; any other -J name writes nothing."""
    assert is_json_name(path) is written


def test_time_and_na_formats():
    # getFloatStr: two decimals wherever they fit 7 characters (util.cu lines 487-492)
    assert [fmt_time(x) for x in (0.004, 99.994, 99.996, 100.0, 9999.94, 10000.0)] == \
        ["   0.00", "  99.99", " 100.00", " 100.00", "9999.94", "10000.0"]
    na = Result(27.79, 0.0, 0.0, None)
    line = row_line(Row(8, 2, "float", "sum", 3, na, na))        # util.cu line 510: "  %7s  %6s  %6s    N/A"
    assert line == "           8             2     float     sum       3    27.79    0.00    0.00    N/A" \
                   "    27.79    0.00    0.00    N/A"


def test_json_layout_is_that_of_nccl_tests_v2_19_6():
    """NVIDIA/nccl-tests v2.19.6 (a0b82b2) writes JSON version 3 (src/util.cu line 52: 2 from v2.19.2, commit
    0fdb00a, 3 from e1dc979), its config keys in the order of util.cu lines 645-664 (per_iter_timing as a "true" /
    "false" string, jsonBool lines 272-275, and per_iter_skip; -I / -K are not applied here: "false", 0), and every
    result's experiment_name as "" (common.cu line 941, ``writeBenchmarkLineTerminator(iters, "")``, since the
    first JSON build 00f5281, v2.17.3).  Was version 1 without the two keys, and experiment_name "AllReduce"."""
    cfg = SweepConfig("allreduce", 2, minbytes=8, maxbytes=8, iters=3)
    ok = Result(2.0, 4.0, 4.0, 0)
    doc = json_document(cfg, [Device(0, 1, "h", 0, "cpu", "NumPy")], SweepSummary([Row(8, 2, "float", "sum", -1, ok,
                        ok, "ring")]), argv=["sweep", "all_reduce"], start_time="2025-01-01 00:00:00")
    assert doc["version"] == 3
    assert list(doc["config"]) == ["nthreads", "ngpus", "minimum_bytes", "maximum_bytes", "step_bytes", "warmup_iters",
                                   "iterations", "aggregated_iterations", "validation", "graph",
                                   "blocking_collectives", "per_iter_timing", "per_iter_skip", "parallel_init",
                                   "devices"]
    assert (doc["config"]["per_iter_timing"], doc["config"]["per_iter_skip"]) == ("false", 0)
    assert doc["results"][0]["experiment_name"] == ""


def test_json_document_mirrors_nccl_tests(tmp_path):
    cfg = SweepConfig("reduce", 2, minbytes=8, maxbytes=16, stepfactor=2, iters=3)
    ok, na = Result(2.0, 4.0, 4.0, 0), Result(2.0, 4.0, 4.0, None)
    s = SweepSummary([Row(8, 2, "float", "sum", 1, ok, na, "ring")])
    devs = [Device(r, 1, "h", r, "cpu", "NumPy") for r in range(2)]
    doc = json_document(cfg, devs, s, argv=["sweep", "reduce"], start_time="2025-01-01 00:00:00",
                        extra={"backend": "host"})
    assert list(doc)[:10] == ["version", "start_time", "args", "env", "nccl_version", "config", "results",
                              "out_of_bounds", "average_bus_bandwidth", "errors"]
    assert doc["config"]["step_factor"] == 2 and "step_bytes" not in doc["config"]
    assert doc["config"]["devices"][1] == {"rank": 1, "group": 0, "pid": 1, "hostname": "h", "device": 1,
                                           "device_hex": "cpu", "device_info": "NumPy"}
    r = doc["results"][0]
    assert r["root"] == "     1" and r["actual_iterations"] == 3
    assert doc["topocoll"] == {"collective": "Reduce", "backend": "host"}   # nccl-tests' testColl name, reduce.cu
    assert r["out_of_place"] == {"time": 2.0, "alg_bw": 4.0, "bus_bw": 4.0, "nwrong": 0.0}
    assert r["in_place"]["nwrong"] is None
    assert doc["out_of_bounds"] == {"count": 0, "okay": "true"}
    assert doc["average_bus_bandwidth"] == {"bandwidth": 4.0, "okay": "unchecked"}
    checked = json_document(cfg, devs, s, argv=[], start_time="", min_bw=5.0)      # util.cu line 791
    assert checked["average_bus_bandwidth"]["okay"] == "false"
    assert json_document(cfg, devs, s, argv=[], start_time="", min_bw=4.0)["average_bus_bandwidth"]["okay"] == "true"
    p = free_json_path(tmp_path / "out.json")
    write_json(p, doc)
    assert json.loads(p.read_text()) == doc
    assert free_json_path(tmp_path / "out.json") == tmp_path / "out.json.0"   # never overwrites


def test_the_nccl_algo_column_is_as_wide_as_its_longest_label():
    """Every extra cell ends where its header word ends, for the longest label the NCCL model can
    give (reference: the longest algorithm, protocol and channel count of its constants, by hand)."""
    from synth.sweep.sim_backend import NCCL_ALGO_COLUMN
    columns = (("bound", "(us)"),) + NCCL_ALGO_COLUMN
    head, units = header_lines(columns)[2:]
    ok = Result(27.79, 0.0, 0.0, None)
    for label in ("ring/LL/1", "collnet_direct/Simple/32"):
        line = row_line(Row(8, 2, "float", "sum", -1, ok, ok, extras=("12.5", label)), columns)
        assert len(line) == len(head) == len(units)
        assert line.endswith(label) and head.endswith("nccl") and units.endswith("algo")
        assert line.rfind("12.5") + 4 == head.rfind("bound") + 5 == units.rfind("(us)") + 4


def test_a_missing_measurement_prints_as_nccl_tests_null_body():
    """A row without an out-of-place measurement (None) prints nccl-tests' writeBenchMarkLineNullBody: 32 blanks
    (v2.19.6 util.cu lines 480-485, counted there), then the in-place body; JSON ``"out_of_place": null`` (lines
    482-484); the summary averages the bodies there are (common.cu lines 895-896: only timed bodies add to bw)."""
    inplace = Result(20.5, 0.25, 0.5, 0)
    row = Row(16, 4, "float", "sum", -1, None, inplace)
    head = "          16             4     float     sum      -1"
    assert row_line(row) == head + " " * 32 + "    20.50    0.25    0.50       0"
    assert len(row_line(row)) == len(row_line(Row(16, 4, "float", "sum", -1, inplace, inplace))) - 1
    s = SweepSummary([row, Row(8, 2, "float", "sum", -1, Result(1.0, 1.0, 1.5, 0), Result(1.0, 1.0, 2.5, 0))])
    assert s.avg_busbw == pytest.approx((0.5 + 1.5 + 2.5) / 3) and s.errors == 0
    cfg = SweepConfig("all_reduce", 2, minbytes=8, maxbytes=16, stepfactor=2)
    doc = json_document(cfg, [], s, argv=[], start_time="")
    assert doc["results"][0]["out_of_place"] is None and doc["results"][0]["in_place"]["time"] == 20.5


@pytest.mark.parametrize("nranks, threads, procs, want", [(8, 1, 1, (1, 8)), (4, 2, 1, (2, 2)), (8, 8, 1, (8, 1)),
                                                         (4, 1, 4, (1, 1))])
def test_the_parameter_line_says_threads_and_gpus_per_thread(nranks, threads, procs, want):
    """nccl-tests prints ``nThread %d nGpus %d`` of its -t and -g (v2.19.6 util.cu lines 626-628; JSON nthreads and
    ngpus, lines 645-646), its ranks nProcs*nGpus*nThreads (common.cu line 901): -t 2 -g 2 is 'nThread 2 nGpus 2'
    on 4 ranks, one process per rank under mpirun 'nThread 1 nGpus 1'."""
    cfg = SweepConfig("all_reduce", nranks, minbytes=8, maxbytes=8, nthreads=threads, nprocs=procs)
    assert preamble_lines(cfg, [])[1].startswith("# nThread %d nGpus %d minBytes 8 " % want)
    config = json_document(cfg, [], SweepSummary(), argv=[], start_time="")["config"]
    assert (config["nthreads"], config["ngpus"]) == want
