"""nccl-tests log parser: the real 8 x A100 log exactly, older layouts (no root column, ``error``
column, no Group in device lines), N/A cells, chatter lines, errors, and a seeded round-trip."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.formats.nccl_tests.reader import IterStats, Measurement, parse_nccl_tests
from synth.formats.nccl_tests.runs import load_nccl_tests
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
    broken = BCAST_LOG + "     2097152        524288     float    none       3    20.50\n# Avg bus bandwidth : 51.6\n"
    with pytest.raises(NcclTestsLogError, match=r"line 5: 6 cells, the header has 13"):
        parse_nccl_tests(broken, "b.txt")       # the footer follows: a short row, not a cut-off last one
    with pytest.raises(NcclTestsLogError, match=r"line 5: 6 cells, the header has 13"):
        parse_nccl_tests(broken.split("# Avg")[0], "b.txt", cut_ok=False)
    bad = BCAST_LOG.replace("20.50", "2x.50")
    with pytest.raises(NcclTestsLogError, match="'2x.50' is not a number"):
        parse_nccl_tests(bad)


def test_a_negative_size_is_refused_not_skipped():
    """A row whose size cell is negative is a table row gone wrong, not chatter: dropping it would
    leave a table one size short with no word said."""
    negative = BCAST_LOG.replace("     1048576", "    -1048576")
    with pytest.raises(NcclTestsLogError, match=r"^n.txt: line 4: size must be an integer >= 0, got -1048576$"):
        parse_nccl_tests(negative, "n.txt")
    chatter = BCAST_LOG + "-1 ranks answered NCCL INFO\n"
    assert len(parse_nccl_tests(chatter).rows) == 1


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


# ---- historic and current layouts, as the builds printed them --------------------------------

# early per-collective header (all_gather, 2018 builds): no redop column, `error` column
ALL_GATHER_NO_REDOP = """\
# nThread 1 nGpus 4 minBytes 1048576 maxBytes 4194304 step: 4(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  20210 on       dgx1 device  0 [0x06] Tesla V100-SXM2-16GB
#   Rank  1 Pid  20210 on       dgx1 device  1 [0x07] Tesla V100-SXM2-16GB
#   Rank  2 Pid  20210 on       dgx1 device  2 [0x0a] Tesla V100-SXM2-16GB
#   Rank  3 Pid  20210 on       dgx1 device  3 [0x0b] Tesla V100-SXM2-16GB
#
#                                             out-of-place                       in-place          
#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
     1048576         65536   float    25.61   40.94   30.71  0e+00    25.40   41.28   30.96  0e+00
     4194304        262144   float    71.30   58.83   44.12  0e+00    70.90   59.16   44.37  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 37.54 
"""

# early broadcast header: root but no redop
BCAST_NO_REDOP = """\
#       size         count      type    root     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                       (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float       0    20.50   51.15   51.15  0e+00    20.10   52.17   52.17  0e+00
"""

# alltoall of builds that passed "" as the op name: the redop cell is blank
ALLTOALL_BLANK_REDOP = """\
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
     1048576         32768     float              -1    45.31   23.14   20.25      0    44.98   23.31   20.40      0
    33554432       1048576     float              -1    402.7   83.32   72.91      0    401.9   83.49   73.05      0
"""

# current builds: MPI run with -g 1 (nGpus 1 per process), PCI domain:bus:device in brackets,
# `-S 1` timestamp column last, version / test-name lines and an NCCL banner in the preamble
MPI_TIMESTAMP_LAST = """\
# nccl-tests version 2.17.6 nccl-headers=22803 nccl-library=22803
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 4(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid  54455 on  gb200-n01 device  0 [0008:06:00] NVIDIA GB200
#  Rank  1 Group  0 Pid  54456 on  gb200-n01 device  1 [0009:06:00] NVIDIA GB200
#  Rank  2 Group  0 Pid  61210 on  gb200-n02 device  0 [0008:06:00] NVIDIA GB200
#  Rank  3 Group  0 Pid  61211 on  gb200-n02 device  1 [0009:06:00] NVIDIA GB200
NCCL version 2.28.3+cuda13.0
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong           timestamp
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)           %Y-%m-%d %H:%M:%S
     1048576        262144     float     sum      -1    30.12   34.81   52.22       0    29.87   35.10   52.66       0  2025-10-14 09:15:02
     4194304       1048576     float     sum      -1    61.40   68.31  102.47       0    60.95   68.82  103.22       0  2025-10-14 09:15:03
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 77.6425 
#
# Collective test concluded: all_reduce_perf
"""

# the timestamp column first (the first -S patch), alltoall of 16 GiB on 4 ranks
TIMESTAMP_FIRST = """\
#                                                                                    out-of-place                       in-place
#           timestamp        size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#                             (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)        
  2025-10-14 10:02:11 17179869184    1073741824     float    none      -1  33250.0  516.69  387.52       0  33410.0  514.21  385.66       0
  2025-10-14 10:02:13 17179869184    1073741824     float    none      -1  33180.0  517.78  388.33       0  33377.0  514.72  386.04       0
"""

# per-iteration timing columns after each #wrong
PER_ITER = """\
#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv% 
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)     (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%) 
     8388608       2097152     float     sum      -1   162.60   51.59   90.28       0   158.20   171.90   171.00     1.93   161.50   51.94   90.90       0   157.80   169.40   168.80     1.71
"""

# the first nccl-tests: `bytes N type op ... res`, times in ms, no Pid, summary lines without '#'
FIRST_BUILDS = """\
# Using devices
#   Rank  0 on     node01 device  0 [0x04] Tesla P100-SXM2-16GB
#   Rank  1 on     node01 device  1 [0x06] Tesla P100-SXM2-16GB
#   Rank  2 on     node01 device  2 [0x07] Tesla P100-SXM2-16GB
#   Rank  3 on     node01 device  3 [0x08] Tesla P100-SXM2-16GB

#                                                 out-of-place                    in-place
#      bytes             N    type      op     time  algbw  busbw      res     time  algbw  busbw      res
    10000000       2500000   float     sum    0.286  34.97  52.45    4e-07    0.303  33.00  49.50    4e-07
    40000000      10000000   float     sum    0.955  41.88  62.83    4e-07    0.961  41.62  62.43    4e-07
 Out of bounds values : 0 OK
 Avg bus bandwidth    : 56.8025 
"""


def test_header_without_redop_column():
    log = parse_nccl_tests(ALL_GATHER_NO_REDOP, "ag.txt")
    assert not log.has_redop and not log.has_root and log.wrong_column == "error"
    assert [(r.size, r.count, r.type, r.redop, r.root) for r in log.rows] == \
        [(1048576, 65536, "float", "", None), (4194304, 262144, "float", "", None)]
    assert log.rows[1].out_of_place == Measurement(71.30, 58.83, 44.12, 0.0)
    assert log.rows[1].in_place == Measurement(70.90, 59.16, 44.37, 0.0)
    # all_gather: algbw = size / time, busbw = algbw * (n-1)/n with n = 4 device lines
    assert log.num_ranks == 4 and log.devices[0].pid == 20210 and log.devices[0].group is None
    for r in log.rows:
        assert r.out_of_place.algbw_gbps == pytest.approx(r.size / r.out_of_place.time_us / 1e3, abs=0.01)
        assert r.out_of_place.busbw_gbps == pytest.approx(r.out_of_place.algbw_gbps * 3 / 4, abs=0.01)
    assert log.avg_busbw_gbps == 37.54 and sum(log.busbw_values()) / 4 == pytest.approx(37.54, abs=1e-3)


def test_header_with_root_but_no_redop():
    log = parse_nccl_tests(BCAST_NO_REDOP)
    assert log.has_root and not log.has_redop
    r = log.rows[0]
    assert (r.redop, r.root, r.out_of_place.time_us, r.in_place.busbw_gbps) == ("", 0, 20.50, 52.17)


def test_blank_redop_cells():
    log = parse_nccl_tests(ALLTOALL_BLANK_REDOP, "a2a.txt")
    assert [(r.size, r.count, r.type, r.redop, r.root) for r in log.rows] == \
        [(1048576, 32768, "float", "", None), (33554432, 1048576, "float", "", None)]
    assert log.rows[1].out_of_place == Measurement(402.7, 83.32, 72.91, 0)
    assert log.rows[1].in_place == Measurement(401.9, 83.49, 73.05, 0)
    # a row missing a cell that is not the redop is still an error naming the line
    bad = ALLTOALL_BLANK_REDOP.replace("    45.31   23.14", "   23.14")
    with pytest.raises(NcclTestsLogError, match=r"^a2a.txt: line 4: 11 cells, the header has 13$"):
        parse_nccl_tests(bad, "a2a.txt")


def test_mpi_run_with_new_bus_ids_timestamps_and_one_gpu_per_process():
    log = parse_nccl_tests(MPI_TIMESTAMP_LAST)
    assert log.n_gpus == 1 and log.num_ranks == 4          # nGpus is per process
    assert [d.bus_id for d in log.devices] == ["0008:06:00", "0009:06:00", "0008:06:00", "0009:06:00"]
    assert (log.devices[2].host, log.devices[2].pid, log.devices[2].device) == ("gb200-n02", 61210, 0)
    assert log.devices[3].name == "NVIDIA GB200"
    assert [r.timestamp for r in log.rows] == ["2025-10-14 09:15:02", "2025-10-14 09:15:03"]
    assert log.rows[1].out_of_place == Measurement(61.40, 68.31, 102.47, 0)
    assert log.rows[1].in_place == Measurement(60.95, 68.82, 103.22, 0)
    assert (log.iters, log.agg_iters, log.graph, log.out_of_bounds, log.avg_busbw_gbps) == (20, 1, 0, 0, 77.6425)
    # all_reduce busbw = algbw * 2(n-1)/n with n = 4 ranks (not nGpus = 1)
    n = log.num_ranks
    for r in log.rows:
        assert r.in_place.busbw_gbps == pytest.approx(r.in_place.algbw_gbps * 2 * (n - 1) / n, abs=0.01)


def test_timestamp_column_first():
    log = parse_nccl_tests(TIMESTAMP_FIRST)
    assert [r.timestamp for r in log.rows] == ["2025-10-14 10:02:11", "2025-10-14 10:02:13"]
    r = log.rows[0]
    assert (r.size, r.count, r.type, r.redop, r.root) == (17179869184, 1073741824, "float", "none", None)
    assert r.out_of_place == Measurement(33250.0, 516.69, 387.52, 0)
    assert r.in_place == Measurement(33410.0, 514.21, 385.66, 0)


def test_per_iteration_columns():
    log = parse_nccl_tests(PER_ITER)
    m, ip = log.rows[0].out_of_place, log.rows[0].in_place
    assert (m.time_us, m.algbw_gbps, m.busbw_gbps, m.wrong) == (162.60, 51.59, 90.28, 0)
    assert m.per_iter == IterStats(158.20, 171.90, 171.00, 1.93)
    assert ip.per_iter == IterStats(157.80, 169.40, 168.80, 1.71) and ip.time_us == 161.50


def test_cputime_header():
    log = parse_nccl_tests(BCAST_LOG.replace("     time", "  cputime"))
    assert log.rows[0].root == 3 and log.rows[0].out_of_place.time_us == 20.50


def test_first_builds_bytes_n_op_res_in_milliseconds():
    log = parse_nccl_tests(FIRST_BUILDS)
    assert log.time_unit == "ms" and log.wrong_column == "error" and log.has_redop and not log.has_root
    r0, r1 = log.rows
    assert (r0.size, r0.count, r0.type, r0.redop) == (10000000, 2500000, "float", "sum")
    # 0.286 ms printed -> 286 µs; 10 MB / 286 µs = 34.97 GB/s as printed
    assert r0.out_of_place == Measurement(286.0, 34.97, 52.45, 4e-07)
    assert r1.in_place == Measurement(961.0, 41.62, 62.43, 4e-07)
    assert r0.out_of_place.algbw_gbps == pytest.approx(r0.size / r0.out_of_place.time_us / 1e3, abs=0.01)
    assert [(d.rank, d.group, d.pid, d.host, d.bus_id) for d in log.devices[:2]] == \
        [(0, None, None, "node01", "0x04"), (1, None, None, "node01", "0x06")]
    assert log.num_ranks == 4 and log.out_of_bounds == 0 and log.avg_busbw_gbps == 56.8025


def test_units_line_decides_the_time_unit():
    # a units line under the header wins over the era's default (ms for ``bytes N`` headers)
    text = FIRST_BUILDS.replace("    10000000", "#        (B)    (elements)                     (us)\n    10000000", 1)
    assert parse_nccl_tests(text).rows[0].out_of_place.time_us == 0.286


def test_wrong_counts_printed_with_g():
    text = BCAST_LOG.replace("51.15      0", "51.15  1.07374e+09") + "# Out of bounds values : 1 FAILED\n"
    log = parse_nccl_tests(text)
    assert log.rows[0].out_of_place.wrong == 1073740000 and log.out_of_bounds == 1
    with pytest.raises(NcclTestsLogError, match=r"line 4: '2.5' is not a count of wrong elements"):
        parse_nccl_tests(BCAST_LOG.replace("51.15      0", "51.15    2.5"))


def test_our_own_sweep_device_lines_count_as_ranks():
    text = ("# nThread 1 nGpus 3 minBytes 64 maxBytes 64 step: 2(factor) warmup iters: 1 iters: 2 agg iters: 1 "
            "validation: 1 graph: 0\n#\n# Using devices\n"
            + "".join("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s\n"
                      % (r, 0, 4242, "laptop", r, "cpu", "NumPy reference executor") for r in range(3))
            + BCAST_LOG)
    log = parse_nccl_tests(text)
    assert log.num_ranks == 3 and [d.bus_id for d in log.devices] == ["cpu"] * 3
    assert log.devices[1].name == "NumPy reference executor"


def test_colon_preamble_spelling():
    log = parse_nccl_tests("# nThread: 2 nGpus: 4 minBytes: 8 maxBytes: 128 step: 2(factor) warmupIters: 5 iters: 20 "
                           "validation: 1\n" + BCAST_LOG)
    assert (log.n_threads, log.n_gpus, log.min_bytes, log.max_bytes, log.warmup_iters, log.iters) == (2, 4, 8, 128, 5, 20)


def test_a_second_different_header_is_an_error_naming_the_line():
    with pytest.raises(NcclTestsLogError, match=r"^two.txt: line 6: a second column header with other columns"):
        parse_nccl_tests(BCAST_LOG + "#\n" + BCAST_NO_REDOP, "two.txt")
    # the same header again (one header per process in some MPI builds) is fine
    assert len(parse_nccl_tests(BCAST_LOG + BCAST_LOG).rows) == 2


_DATES = st.builds(lambda s: "2025-%02d-%02d %02d:%02d:%02d" % (1 + s % 12, 1 + s % 28, s % 24, s % 60, (s // 7) % 60),
                   st.integers(0, 10 ** 6))


def _cells(size, redop_txt, root, groups, wrong_kind, per_iter, ts_pos, ts):
    """One row as the builds print it (see the fixtures above for the widths)."""
    cells = [f"{size:12d}", f"{size // 4:12d}", f"{'float':>8s}"]
    if redop_txt is not None:
        cells.append(f"{redop_txt:>6s}")
    if root is not None:
        cells.append(f"{root:6d}")
    for t, w, it in groups:
        cells += [_fmt_time(t), f"{1.5:6.2f}", f"{2.25:6.2f}"]
        if wrong_kind == "#wrong":
            cells.append(f"{w:6g}")
        elif wrong_kind == "error":
            cells.append(f"{w * 1e-7:5.0e}")
        if per_iter:
            cells += [f"{x:7.2f}" for x in it]
    line = "  ".join(cells)
    return (f"{ts:>21s}" + line) if ts_pos == "first" else (line + f"{ts:>21s}") if ts_pos == "last" else line


@settings(derandomize=True, max_examples=80, deadline=None)
@given(redop=st.sampled_from(["sum", "", None]), has_root=st.booleans(), two=st.booleans(),
       wrong_kind=st.sampled_from(["#wrong", "error"]), per_iter=st.booleans(),
       ts_pos=st.sampled_from([None, "first", "last"]), cputime=st.booleans(),
       rows=st.lists(st.tuples(st.integers(0, 40), st.floats(0.5, 99999, allow_nan=False),
                               st.integers(0, 2 ** 31), st.integers(-1, 7), _DATES,
                               st.tuples(*[st.floats(0, 9999, allow_nan=False)] * 4)),
                     min_size=1, max_size=6))
def test_round_trip_over_every_layout(redop, has_root, two, wrong_kind, per_iter, ts_pos, cputime, rows):
    tname = "cputime" if cputime else "time"
    head = ["size", "count", "type"] + (["redop"] if redop is not None else []) + (["root"] if has_root else [])
    group = [tname, "algbw", "busbw", wrong_kind] + (list(("i_min", "i_max", "i_p99", "i_cv%")) if per_iter else [])
    head += group * (2 if two else 1)
    head = (["timestamp"] if ts_pos == "first" else []) + head + (["timestamp"] if ts_pos == "last" else [])
    lines = ["#  " + "  ".join(head), "#        (B)    (elements)     (us)"]
    for e, t, w, root, ts, it in rows:
        w = w if wrong_kind == "#wrong" else w % 10
        g = [(t, w, it)] * (2 if two else 1)
        lines.append(_cells(1 << e, redop, root if has_root else None, g, wrong_kind, per_iter, ts_pos, ts))
    log = parse_nccl_tests("\n".join(lines) + "\n")
    assert len(log.rows) == len(rows)
    for r, (e, t, w, root, ts, it) in zip(log.rows, rows):
        assert (r.size, r.count, r.type, r.redop) == (1 << e, (1 << e) // 4, "float", redop or "")
        assert r.root == (root if has_root and root >= 0 else None)
        assert r.timestamp == (ts if ts_pos else None)
        m = r.out_of_place
        assert (m.time_us, m.algbw_gbps, m.busbw_gbps) == (float(_fmt_time(t)), 1.5, 2.25)
        if wrong_kind == "#wrong":      # %g keeps 6 significant digits
            assert m.wrong == int(float(f"{w:g}")) and isinstance(m.wrong, int)
        else:
            assert m.wrong == float(f"{(w % 10) * 1e-7:5.0e}")
        assert m.per_iter == (IterStats(*(round(x, 2) for x in it)) if per_iter else None)
        assert (r.in_place == m) if two else (r.in_place is None)
