"""Logs as real runs leave them: rccl-tests ``-O 0`` (in-place only), ``nThread`` x ``nGpus`` ranks,
``-N`` repeated cycles, byte-order marks, nccl-tests' blank out-of-place body and a run killed
mid-row.  The layouts are nccl-tests v2.19.6 (a0b82b2) util.cu:746-764 and rccl-tests ae3e635
common.cu:1323-1334, copied from the fixtures; the expected rows are the hand-written ones."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.sweep.importer import import_only, measured_series
from synth.formats.nccl_tests.runs import check_sizes_once, load_runs, parse_runs, pick_rows
from topo_probe.errors import NcclTestsLogError

PRE = ("# nThread 1 nGpus 1 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 1 iters: 7 agg iters: 1 "
       "validation: 1 graph: 0\n#\n# Using devices\n"
       "#  Rank  0 Group  0 Pid   7085 on      node0 device  0 [0000:05:00] AMD Instinct MI300X\n"
       "#  Rank  1 Group  0 Pid   7086 on      node0 device  1 [0000:25:00] AMD Instinct MI300X\n#\n")
BOTH = ("#                                                              out-of-place                       in-place\n"
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
        "busbw #wrong\n"
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  "
        "(GB/s)\n")
# rccl-tests -O 0: common.cu:1330-1333 at ae3e635 (the banner says "in-place", one group)
INPLACE = ("#                                                    in-place          \n"
           "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
           "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       \n")
FOOT = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.5 \n#\n"


def _row(size: int, t: float, t2: float | None = 11.0) -> str:
    """A row as writeBenchmarkLinePreamble / writeBenchmarkLineBody print it (util.cu:454, 503-508)."""
    head = "%12d  %12d  %8s  %6s  %6s" % (size, size // 4, "float", "sum", "-1")
    body = "  %7.2f  %6.2f  %6.2f  %6g" % (t, size / t / 1e3, size / t / 1e3, 0)
    return head + body + ("" if t2 is None else "  %7.2f  %6.2f  %6.2f  %6g" % (t2, size / t2 / 1e3, 0.5, 0))


def _null_body_row(size: int, t2: float) -> str:
    """writeBenchMarkLineNullBody (util.cu:480-485): 32 blanks for the out-of-place body."""
    return "%12d  %12d  %8s  %6s  %6s" % (size, size // 4, "float", "sum", "-1") + " " * 32 + \
        "  %7.2f  %6.2f  %6.2f  %6g" % (t2, 1.0, 1.5, 0)


def _log(rows: list[str], header: str = BOTH, pre: str = PRE, foot: str = FOOT) -> str:
    return pre + header + "".join(r + "\n" for r in rows) + foot


def test_in_place_only_log_fills_in_place(tmp_path, capsys):
    text = _log(["%12d  %12d  %8s  %6s  %6s  %7.2f  %6.2f  %6.2f  %6g" % (s, s // 4, "float", "sum", "-1", 20.5,
                                                                          0.25, 0.5, 0) for s in (8, 16)], INPLACE)
    (run,) = parse_runs(text)
    assert [(r.size, r.out_of_place, r.in_place.time_us, r.in_place.busbw_gbps) for r in run.rows] == \
        [(8, None, 20.5, 0.5), (16, None, 20.5, 0.5)]
    f = tmp_path / "rccl_inplace.txt"
    f.write_text(text)
    assert import_only(f) == 0
    rows = [x for x in capsys.readouterr().out.splitlines() if x.strip().startswith(("8 ", "16 "))]
    # nothing made up: the out-of-place cells are blank (as writeBenchMarkLineNullBody), the log's in-place cells kept
    assert len(rows) == 2 and "0.00    0.00" not in rows[0] and rows[0].split()[5:] == ["20.50", "0.25", "0.50", "0"]
    assert rows[0][52:84].strip() == ""
    (series,) = measured_series(f)
    assert series.sizes == [8, 16] and series.busbw == [0.5, 0.5]


def test_null_body_row_is_in_place_only():
    (run,) = parse_runs(_log([_row(8, 10.0), _null_body_row(16, 12.5)]))
    assert run.rows[1].out_of_place is None and (run.rows[1].in_place.time_us, run.rows[1].in_place.busbw_gbps) == (
        12.5, 1.5)
    assert run.rows[0].out_of_place.time_us == 10.0


def test_threads_times_gpus_ranks_without_device_lines():
    pre = "# nThread 2 nGpus 4 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 1 iters: 7 agg iters: 1\n#\n"
    (run,) = parse_runs(_log([_row(8, 10.0)], pre=pre))
    assert (run.n_threads, run.n_gpus, run.num_ranks) == (2, 4, 8)      # common.cu:901 nProcs*nGpus*nThreads
    (run,) = parse_runs(_log([_row(8, 10.0)]))
    assert run.num_ranks == 2                                           # device lines win (they list every rank)


def test_repeated_cycles_give_one_cycle_with_a_note():
    sizes = [8, 16, 32]
    text = _log([_row(s, 10.0 + c) for c in range(3) for s in sizes])   # -N 3: the sizes three times
    (run,) = parse_runs(text, "n3.txt")
    assert run.cycles == 3 and any("3 cycles" in n for n in run.notes)
    rows = pick_rows(run, "n3.txt")
    assert [(r.size, r.out_of_place.time_us) for r in rows] == [(8, 10.0), (16, 10.0), (32, 10.0)]
    assert [r.out_of_place.time_us for r in pick_rows(run, "n3.txt", cycle=3)] == [12.0] * 3
    with pytest.raises(NcclTestsLogError, match="cycle 4.*3 cycles"):
        pick_rows(run, "n3.txt", cycle=4)
    check_sizes_once(run.rows, "n3.txt", run.cycles)
    with pytest.raises(NcclTestsLogError, match="size 8 appears 3 times"):
        check_sizes_once(run.rows, "n3.txt")                            # not told of cycles: refused as before
    (after_footer,) = parse_runs(_log([_row(s, 10.0) for s in sizes]) + "".join(_row(s, 10.0) + "\n" for s in sizes))
    assert after_footer.cycles == 1         # rows below the footer are another run's, not -N (footer after all cycles)


def test_cycles_log_imports_and_plots(tmp_path, capsys):
    f = tmp_path / "n2_all_reduce.txt"
    f.write_text(_log([_row(s, 10.0 + c) for c in range(2) for s in (8, 16)]))
    assert import_only(f, plot_path=str(tmp_path / "p.png")) == 0
    out = capsys.readouterr().out
    assert "# note: " in out and "2 cycles" in out and len([x for x in out.splitlines() if "float" in x]) == 4
    (series,) = measured_series(f)
    assert series.sizes == [8, 16] and series.time_us == [10.0, 10.0]


def test_a_repeat_that_is_not_a_whole_cycle_stays_an_error():
    (run,) = parse_runs(_log([_row(s, 10.0) for s in (8, 16, 32, 8, 16)]), "bad.txt")
    assert run.cycles == 1
    with pytest.raises(NcclTestsLogError, match="bad.txt: size 8 appears 2 times"):
        pick_rows(run, "bad.txt")


@pytest.mark.parametrize("codec, bom", [("utf-8", b"\xef\xbb\xbf"), ("utf-16-le", b"\xff\xfe"),
                                        ("utf-16-be", b"\xfe\xff")])
def test_byte_order_marks(tmp_path, codec, bom):
    text = _log([_row(8, 10.0), _row(16, 11.0)]).replace("nThread 1", "nThread 2")
    f = tmp_path / "log.txt"
    f.write_bytes(bom + text.replace("\n", "\r\n").encode(codec))
    (run,) = load_runs(f)
    assert run.n_threads == 2 and [r.size for r in run.rows] == [8, 16] and run.rows[1].out_of_place.time_us == 11.0


def test_cut_final_row_is_dropped_with_a_note_but_not_in_the_middle(tmp_path):
    full = [_row(8, 10.0), _row(16, 11.0), _row(32, 12.0)]
    (run,) = parse_runs(_log(full[:2] + [full[2][:70]], foot=""), "cut.txt")
    assert [r.size for r in run.rows] == [8, 16] and any("cut.txt" in n and "line 12" in n for n in run.notes)
    with pytest.raises(NcclTestsLogError, match=r"^mid.txt: line 11: 7 cells, the header has 13$"):
        parse_runs(_log([full[0], full[1][:70], full[2]]), "mid.txt")
    with pytest.raises(NcclTestsLogError, match="line 12"):       # the footer says the run ended: not cut off
        parse_runs(_log(full[:2] + [full[2][:70]]), "foot.txt")
    with pytest.raises(NcclTestsLogError, match=r"two.txt \(run 1\): line 12: 7 cells"):   # another run follows
        parse_runs(_log(full[:2] + [full[2][:70]], foot="") + _log(full), "two.txt")


def test_multi_run_import_names_runs_without_none(tmp_path, capsys):
    f = tmp_path / "two.txt"
    f.write_text(_log([_row(8, 10.0)]) + _log([_row(8, 12.0)]))
    assert import_only(f) == 0
    out = capsys.readouterr().out
    assert "(None)" not in out and "(run 2)" in out


ENCODINGS = {"utf-8": b"", "utf-8-sig": b"", "utf-16-le": b"\xff\xfe", "utf-16-be": b"\xfe\xff"}


@settings(derandomize=True, max_examples=40, deadline=None)
@given(codec=st.sampled_from(sorted(ENCODINGS)), crlf=st.booleans(), n=st.integers(1, 6))
def test_any_encoding_reads_the_same_rows(tmp_path_factory, codec, crlf, n):
    text = _log([_row(8 << k, 10.0 + k) for k in range(n)])
    f = tmp_path_factory.mktemp("enc") / "log.txt"
    f.write_bytes(ENCODINGS[codec] + (text.replace("\n", "\r\n") if crlf else text).encode(codec))
    (run,) = load_runs(f)
    assert [(r.size, r.out_of_place.time_us) for r in run.rows] == [(8 << k, 10.0 + k) for k in range(n)]
    assert (run.n_threads, run.iters, run.num_ranks) == (1, 7, 2)


@settings(derandomize=True, max_examples=120, deadline=None)
@given(n=st.integers(1, 5), cut=st.integers(0, 200), trail=st.sampled_from(["", "\n", "\nsrun: error: killed\n"]))
def test_any_cut_point_of_the_last_row(n, cut, trail):
    rows = [_row(8 << k, 10.0 + k) for k in range(n + 1)]
    last = rows[-1][:cut]
    (run,) = parse_runs(_log(rows[:-1], foot="") + last + trail, "cut.txt")
    kept = [(r.size, r.out_of_place.time_us) for r in run.rows]
    whole = len(last.split()) == 13
    assert kept == [(8 << k, 10.0 + k) for k in range(n + int(whole))]
    assert bool(run.notes) == (0 < len(last.split()) < 13)


@settings(derandomize=True, max_examples=80, deadline=None)
@given(sizes=st.lists(st.integers(1, 1 << 30), min_size=1, max_size=6, unique=True), cycles=st.integers(1, 5),
       extra=st.integers(0, 5), types=st.sampled_from([["float"], ["float", "half"]]))
def test_any_number_of_cycles(sizes, cycles, extra, types):
    """-N cycles per datatype section (-d all: types outside, cycles inside, common.cu:934-943); a part of one
    more cycle is not a whole repetition and stays an error."""
    sizes, extra = sorted(sizes), min(extra, len(sizes) - 1)
    seq = sizes * cycles + sizes[:extra]
    rows = [_row(s, 10.0 + i).replace("   float", "%8s" % t) for t in types for i, s in enumerate(seq)]
    (run,) = parse_runs(_log(rows), "n.txt")
    if extra:
        assert run.cycles == 1 and not run.notes
        with pytest.raises(NcclTestsLogError, match=f"n.txt: size {sizes[0]} appears {cycles + 1} times"):
            pick_rows(run, "n.txt", datatype=types[-1])
        return
    assert run.cycles == cycles and bool(run.notes) == (cycles > 1)
    for t in types:
        last = pick_rows(run, "n.txt", datatype=t, cycle=cycles)
        assert [r.size for r in pick_rows(run, "n.txt", datatype=t)] == [r.size for r in last] == sizes
        assert [r.out_of_place.time_us for r in last] == [10.0 + (cycles - 1) * len(sizes) + i for i in range(len(sizes))]
        assert {r.type for r in last} == {t}
