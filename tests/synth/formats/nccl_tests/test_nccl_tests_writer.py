"""synth.formats.nccl_tests.writer: the text layout, checked character for character against a real
nccl-tests log, and the -J document against nccl-tests' JSON keys."""

import json

from _paths import FIXTURES

from synth.formats.nccl_tests.writer import (
    fmt_time,
    footer_lines,
    free_json_path,
    header_lines,
    json_document,
    preamble_lines,
    row_line,
    write_json,
)
from synth.sweep.driver import Device, Result, Row, SweepConfig, SweepSummary

FIXTURE = FIXTURES / "nccl_tests_allreduce_a100x8_single_process.txt"
LINES = FIXTURE.read_text().splitlines()


def _row_from_text(line: str) -> Row:
    t = line.split()
    res = [Result(float(t[k]), float(t[k + 1]), float(t[k + 2]), int(t[k + 3])) for k in (5, 9)]
    return Row(int(t[0]), int(t[1]), t[2], t[3], int(t[4]), res[0], res[1])


def test_header_lines_are_the_logs():
    start = LINES.index("# Using devices") + 9
    assert header_lines() == LINES[start:start + 4]


def test_every_row_of_the_log_reprints_identically():
    rows = [ln for ln in LINES if ln and not ln.startswith("#")]
    assert len(rows) == 30
    for ln in rows:
        assert row_line(_row_from_text(ln)) == ln


def test_footer_like_the_log():
    s = SweepSummary()
    assert footer_lines(s, 0, 66.2058) == LINES[-3:]
    bad = Result(1.0, 2.0, 3.0, 5)
    s = SweepSummary([Row(8, 2, "float", "sum", -1, bad, Result(1.0, 2.0, 5.0, 0))])
    assert footer_lines(s) == ["# Out of bounds values : 1 FAILED", "# Avg bus bandwidth    : 4 ", "#"]


def test_preamble_like_the_log():
    cfg = SweepConfig("all_reduce", 8, minbytes=8, maxbytes=4294967296, stepfactor=2)
    devs = [Device(r, 54740, "thanos", r, "0x%02x" % b, "NVIDIA A100-SXM4-80GB")
            for r, b in enumerate((0x07, 0x0a, 0x45, 0x4b, 0x84, 0x8a, 0xc0, 0xc3))]
    assert preamble_lines(cfg, devs) == LINES[:11]
    assert preamble_lines(cfg, devs, ["sweep: x"])[1] == "# sweep: x"


def test_time_and_na_formats():
    # thresholds apply to the unrounded value, as in nccl-tests (99.996 prints " 100.00")
    assert [fmt_time(x) for x in (0.004, 99.994, 99.996, 100.0, 9999.94, 10000.0)] == \
        ["   0.00", "  99.99", " 100.00", "  100.0", " 9999.9", "  10000"]
    na = Result(27.79, 0.0, 0.0, None)
    line = row_line(Row(8, 2, "float", "sum", 3, na, na))
    assert line == "           8             2     float     sum       3    27.79    0.00    0.00    N/A" \
                   "    27.79    0.00    0.00    N/A"


def test_json_document_mirrors_nccl_tests(tmp_path):
    cfg = SweepConfig("reduce", 2, minbytes=8, maxbytes=16, stepfactor=2, iters=3)
    ok, na = Result(2.0, 4.0, 4.0, 0), Result(2.0, 4.0, 4.0, None)
    s = SweepSummary([Row(8, 2, "float", "sum", 1, ok, na, "ring")])
    devs = [Device(r, 1, "h", r, "cpu", "NumPy") for r in range(2)]
    doc = json_document(cfg, devs, s, argv=["sweep", "reduce"], start_time="2025-01-01 00:00:00",
                        extra={"backend": "host"})
    assert list(doc)[:10] == ["version", "start_time", "args", "env", "nccl_version", "config", "results",
                              "out_of_bounds", "average_bus_bandwidth", "errors"]
    assert doc["version"] == 1 and doc["config"]["step_factor"] == 2 and "step_bytes" not in doc["config"]
    assert doc["config"]["devices"][1] == {"rank": 1, "group": 0, "pid": 1, "hostname": "h", "device": 1,
                                           "device_hex": "cpu", "device_info": "NumPy"}
    r = doc["results"][0]
    assert r["root"] == "     1" and r["experiment_name"] == "Reduce" and r["actual_iterations"] == 3
    assert r["out_of_place"] == {"time": 2.0, "alg_bw": 4.0, "bus_bw": 4.0, "nwrong": 0.0}
    assert r["in_place"]["nwrong"] is None
    assert doc["out_of_bounds"] == {"count": 0, "okay": "true"}
    assert doc["average_bus_bandwidth"]["bandwidth"] == 4.0
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
