"""nccl-tests log parser: the real 8 x A100 log exactly, older layouts (no root column, ``error``
column, no Group in device lines), N/A cells, chatter lines, errors, and a seeded round-trip."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.nccl_tests_log import Measurement, load_nccl_tests, parse_nccl_tests
from topo_probe.errors import NcclTestsLogError

OLD_LOG = """\
# nThread 1 nGpus 4 minBytes 8 maxBytes 128 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  12345 on     node01 device  0 [0x1a] Tesla V100-SXM2-16GB
#   Rank  1 Pid  12345 on     node01 device  1 [0x1b] Tesla V100-SXM2-16GB
#   Rank  2 Pid  12345 on     node01 device  2 [0x3d] Tesla V100-SXM2-16GB
#   Rank  3 Pid  12345 on     node01 device  3 [0x3e] Tesla V100-SXM2-16GB
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
node01:12345:12345 [0] NCCL INFO Launch mode Parallel
           8             2   float     sum    12.34    0.00    0.00  0e+00    12.10    0.00    0.00  0e+00
          16             4   float     sum    12.50    0.00    0.00  1e-06    12.21    0.00    0.00    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.00125
"""

BCAST_LOG = """\
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float    none       3    20.50   51.15   51.15      0    20.10   52.17   52.17    N/A
"""


def test_real_a100_log_is_parsed_exactly(fixtures_dir):
    log = load_nccl_tests(fixtures_dir / "nccl_tests_allreduce_a100x8_single_process.txt")
    assert len(log.rows) == 30 and log.has_root and log.wrong_column == "#wrong"
    first, last = log.rows[0], log.rows[-1]
    assert (first.size, first.count, first.type, first.redop, first.root) == (8, 2, "float", "sum", None)
    assert first.out_of_place == Measurement(40.12, 0.0, 0.0, 0)
    assert first.in_place == Measurement(38.85, 0.0, 0.0, 0)
    assert (last.size, last.count) == (4294967296, 1073741824)
    assert last.out_of_place == Measurement(32336.0, 132.82, 232.44, 0)
    assert last.in_place == Measurement(32455.0, 132.34, 231.59, 0)
    assert log.avg_busbw_gbps == 66.2058 and log.out_of_bounds == 0
    # nccl-tests' average is the mean of every out-of-place and in-place busbw cell
    cells = log.busbw_values()
    assert len(cells) == 60 and sum(cells) / len(cells) == pytest.approx(66.2058, abs=1e-3)
    assert (log.n_threads, log.n_gpus, log.min_bytes, log.max_bytes) == (1, 8, 8, 4294967296)
    assert (log.step, log.step_kind, log.warmup_iters, log.iters, log.agg_iters) == (2, "factor", 5, 20, 1)
    assert (log.validation, log.graph) == (1, 0)
    assert log.num_ranks == 8 and [d.rank for d in log.devices] == list(range(8))
    d = log.devices[2]
    assert (d.group, d.pid, d.host, d.device, d.bus_id, d.name) == (0, 54740, "thanos", 2, "0x45", "NVIDIA A100-SXM4-80GB")
    sizes = [r.size for r in log.rows]
    assert sizes == [8 << k for k in range(30)] and all(r.count * 4 == r.size for r in log.rows)


def test_old_layout_without_root_and_with_error_column():
    log = parse_nccl_tests(OLD_LOG)
    assert not log.has_root and log.wrong_column == "error"
    assert [r.size for r in log.rows] == [8, 16]
    r0, r1 = log.rows
    assert r0.root is None and r0.out_of_place == Measurement(12.34, 0.0, 0.0, 0.0)
    assert r1.out_of_place.wrong == pytest.approx(1e-6) and r1.in_place.wrong is None
    assert log.avg_busbw_gbps == 0.00125 and log.n_gpus == 4 and log.iters == 20 and log.agg_iters is None
    assert len(log.devices) == 4 and log.devices[3].group is None and log.devices[3].name == "Tesla V100-SXM2-16GB"


def test_rooted_collective_keeps_its_root_and_na_cells():
    log = parse_nccl_tests(BCAST_LOG)
    r = log.rows[0]
    assert r.root == 3 and r.redop == "none" and r.in_place.wrong is None and r.out_of_place.wrong == 0


def test_errors_name_the_line():
    with pytest.raises(NcclTestsLogError, match="no nccl-tests column header"):
        parse_nccl_tests("hello\nworld\n")
    broken = BCAST_LOG + "     2097152        524288     float    none       3    20.50\n"
    with pytest.raises(NcclTestsLogError, match=r"line 5: 6 cells, the header has 13"):
        parse_nccl_tests(broken, "b.txt")
    bad = BCAST_LOG.replace("20.50", "2x.50")
    with pytest.raises(NcclTestsLogError, match="'2x.50' is not a number"):
        parse_nccl_tests(bad)


def _fmt_time(t: float) -> str:
    return f"{t:7.0f}" if t >= 10000 else f"{t:7.1f}" if t >= 100 else f"{t:7.2f}"


@settings(derandomize=True, max_examples=60)
@given(has_root=st.booleans(), old=st.booleans(), in_place=st.booleans(),
       rows=st.lists(st.tuples(st.integers(0, 40), st.floats(0.5, 99999, allow_nan=False),
                               st.integers(0, 3), st.integers(-1, 7)), min_size=1, max_size=8))
def test_round_trip_of_generated_logs(has_root, old, in_place, rows):
    wrong = "error" if old else "#wrong"
    groups = 2 if in_place else 1
    header = "#       size         count      type   redop" + ("    root" if has_root else "")
    header += f"     time   algbw   busbw {wrong:>6s}" * groups
    lines = ["# nThread 1 nGpus 2 minBytes 1 maxBytes 2 step: 2(factor) warmup iters: 1 iters: 2", header]
    expect = []
    for e, t, w, root in rows:
        size = 1 << e
        alg = round(size / t / 1e3, 2)
        cells = [f"{size:12d}", f"{size // 4:12d}", f"{'float':>8s}", f"{'sum':>6s}"]
        if has_root:
            cells.append(f"{root:6d}")
        wtxt = f"{w}e-07" if old else f"{w}"
        group = [_fmt_time(t), f"{alg:6.2f}", f"{alg:6.2f}", f"{wtxt:>6s}"]
        cells += group * groups
        lines.append("  ".join(cells))
        expect.append((size, root if has_root and root >= 0 else None, float(_fmt_time(t)), alg,
                       w * 1e-7 if old else w))
    log = parse_nccl_tests("\n".join(lines) + "\n")
    assert log.has_root == has_root and log.wrong_column == wrong and log.n_gpus == 2
    got = [(r.size, r.root, r.out_of_place.time_us, r.out_of_place.busbw_gbps, r.out_of_place.wrong) for r in log.rows]
    assert [g[:4] for g in got] == [e[:4] for e in expect]
    assert [g[4] for g in got] == pytest.approx([e[4] for e in expect])
    assert all((r.in_place is not None) == in_place for r in log.rows)
