"""A size printed again in the next row: accepted only where nccl-tests itself prints it (a 16-byte-blocked
collective whose parameter line's loop rounds neighbouring sizes to one, v2.19.6 all_gather.cu line 11 and
common.cu lines 934-936), else refused as two runs in one table.  The expected sizes are computed here from
nccl-tests' formula, ``n * ((S / itemsize / n) & ~(16 / itemsize - 1)) * itemsize``, not from the code tested."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kernels.sweep.importer import read_log
from synth.formats.nccl_tests.runs import check_sizes_once, parse_runs, pick_rows, printed_sizes
from synth.formats.nccl_tests.writer import footer_lines, header_lines, preamble_lines, row_line
from synth.formats.nccl_tests.device_line import Device
from synth.sweep.driver import Result, Row, SweepConfig, run_sweep
from topo_probe.errors import NcclTestsLogError

HEAD = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
        "busbw #wrong\n")
PARAMS = ("# nThread 1 nGpus {g} minBytes {lo} maxBytes {hi} step: {step} warmup iters: 1 iters: 20 agg iters: 1 "
          "validation: 1 graph: 0 unalign: 0\n#\n")


def _text(test: str | None, params: str, rows: list[tuple[int, int, float]], op: str) -> str:
    start = f"# Collective test starting: {test}\n" if test else ""
    body = "".join("%12d  %12d  %8s  %6s  %6d" % (s, c, "float", op, -1) + "  %7.2f  %6.2f  %6.2f  %6g" % (t, 1, 1, 0) * 2
                   + "\n" for s, c, t in rows)
    return start + params + HEAD + body + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1 \n#\n"


# all_reduce -g 4 -b 8 -e 16 -f 2 (ends at 16), then a second run from -b 16 -e 64: 16 printed again, another time
CONCAT = [(8, 2, 10.0), (16, 4, 11.0), (16, 4, 13.5), (32, 8, 12.0), (64, 16, 13.0)]
# all_gather -g 4 -b 64 -e 128 -i 16, float: (S/4/4) & ~3 floats per rank = 4, 4, 4, 4, 8: 64 four times, then 128
GATHER = [(64, 4, 10.0), (64, 4, 10.1), (64, 4, 10.2), (64, 4, 10.3), (128, 8, 11.0)]


@pytest.mark.parametrize("test, name", [("all_reduce_perf", "log.txt"), (None, "a.txt"), (None, "x_all_reduce.txt")])
def test_two_all_reduce_runs_in_one_table_are_refused(tmp_path, test, name):
    """The all_reduce log whose parameter line loops 8 -> 64 once holds 16 twice in a row: an all_reduce never rounds
    (nor, its collective unknown, does the all_gather rounding of 8..64 on 4 ranks give 16 twice: 0, 0, 0, 64), so it is
    refused (was read as one table: 16 compared on the first run's row)."""
    path = tmp_path / name
    path.write_text(_text(test, PARAMS.format(g=4, lo=8, hi=64, step="2(factor)"), CONCAT, "sum"))
    (run,) = parse_runs(path.read_text(), str(path))
    with pytest.raises(NcclTestsLogError, match=r"size 16 appears 2 times for float sum \(two runs in one table"):
        pick_rows(run, str(path))
    with pytest.raises(NcclTestsLogError, match="size 16 appears 2 times"):
        read_log(path)


def test_a_real_shaped_all_gather_log_is_accepted_and_a_fifth_64_is_not(tmp_path):
    params = PARAMS.format(g=4, lo=64, hi=128, step="16(bytes)")
    (run,) = parse_runs(_text("all_gather_perf", params, GATHER, "none"))
    assert [r.size for r in pick_rows(run, "ag.txt")] == [64, 64, 64, 64, 128]
    assert printed_sizes(run, "allgather", "float") == [4 * ((s // 4 // 4) & ~3) * 4 for s in (64, 80, 96, 112, 128)]
    (five,) = parse_runs(_text("all_gather_perf", params, GATHER[:1] + GATHER[:4] + GATHER[4:], "none"))
    with pytest.raises(NcclTestsLogError, match="size 64 appears 5 times .*the parameter line prints it 4 times"):
        pick_rows(five, "ag.txt")
    (reduce,) = parse_runs(_text("all_reduce_perf", params, GATHER, "sum"))       # the same rows of an all_reduce
    with pytest.raises(NcclTestsLogError, match="size 64 appears 4 times"):
        pick_rows(reduce, "ar.txt")
    (bare,) = parse_runs(HEAD + _text(None, "", GATHER, "none").split(HEAD)[1])   # no parameter line: cannot tell
    with pytest.raises(NcclTestsLogError, match="only a 16-byte-blocked collective's log with its parameter line"):
        check_sizes_once(bare.rows, "bare.txt", log=bare, collective="allgather")


class _Stub:
    """A sweep backend that times every call 10 µs (the sizes are what is tested)."""

    name, checks = "stub", False

    def measure(self, case):
        return 10.0, 0


def _reference_sizes(loop: list[int], itemsize: int, n: int) -> list[int]:
    """nccl-tests' printed size of a 16-byte-blocked collective (v2.19.6 all_gather.cu line 11), by hand."""
    return [n * (((s // itemsize) // n) & ~(max(1, 16 // itemsize) - 1)) * itemsize for s in loop]


@settings(derandomize=True, max_examples=60, deadline=None)
@given(coll=st.sampled_from(["allgather", "reducescatter", "alltoall", "gather", "scatter"]),
       n=st.integers(2, 16), dtype=st.sampled_from([("int8", 1), ("half", 2), ("float", 4), ("double", 8)]),
       lo=st.integers(1, 512), span=st.integers(1, 4096), step=st.integers(1, 128), factor=st.sampled_from([1, 2, 3]),
       data=st.data())
def test_our_sweeps_rounded_repeats_are_accepted_and_a_foreign_one_is_not(coll, n, dtype, lo, span, step, factor,
                                                                          data):
    """Our writer's output of an nccl-tests-shaped sweep of a rounded collective reads back whole, its sizes nccl-tests'
    own (the reference formula above); one row printed once more is refused."""
    cfg = SweepConfig(coll, n, minbytes=lo, maxbytes=lo + span, stepbytes=step, stepfactor=factor,
                      dtypes=(dtype[0],), ops=("sum",), iters=1, warmup=0, check=0)
    assume(2 <= len(cfg.sizes()) <= 60)
    summary = run_sweep(cfg, _Stub(), None)
    rows = summary.rows
    # sizes all rounded to one value, printed once more, read as nccl-tests -N cycles of one size: left out
    assume(any(r.size for r in rows) and len({r.size for r in rows}) > 1)
    devices = [Device(r, 1, "h", r, "0x07", "GPU") for r in range(n)]
    lines = [row_line(r) for r in rows]
    text = "\n".join(preamble_lines(cfg, devices) + header_lines() + lines + footer_lines(summary))
    (run,) = parse_runs(text)
    assert [r.size for r in pick_rows(run, "ours.txt")] == _reference_sizes(cfg.sizes(), dtype[1], n)
    k = data.draw(st.sampled_from([i for i, r in enumerate(rows) if r.size]))
    extra = Row(rows[k].size, rows[k].count, rows[k].type, rows[k].redop, rows[k].root, Result(99.0, 1, 1, 0),
                Result(99.0, 1, 1, 0), "x")
    foreign = text.replace(lines[k], lines[k] + "\n" + row_line(extra), 1)
    (bad,) = parse_runs(foreign)
    with pytest.raises(NcclTestsLogError, match=f"size {rows[k].size} appears"):
        pick_rows(bad, "foreign.txt")
    with pytest.raises(NcclTestsLogError, match=f"size {rows[k].size} appears"):
        check_sizes_once(bad.rows, "foreign.txt", bad.cycles, bad, None)        # unknown collective: refused too
