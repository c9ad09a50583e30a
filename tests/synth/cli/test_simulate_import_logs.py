"""``simulate --import`` of logs as nccl-tests and rccl-tests leave them: in-place-only rows compared on their
in-place numbers, the reader's notes said, ``-N`` cycles picked with ``--cycle``, the log's iteration counts and
``nThread`` x ``nGpus`` ranks per process, sizes nccl-tests prints twice (whole 16-byte blocks per rank).  The logs
are typed in below in nccl-tests v2.19.6's layout (src/util.cu: rows lines 454 and 503-510, the null body 480-485)."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.cli.simulate import _machine, main
from synth.formats.nccl_tests.runs import parse_runs

PRE = ("# nThread {t} nGpus {g} minBytes {lo} maxBytes {hi} step: {step} warmup iters: 5 iters: 7 agg iters: 1 "
       "validation: 1 graph: 0 unalign: 0\n#\n")
BOTH = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
        "busbw #wrong\n")
# rccl-tests -O 0 (common.cu:1330-1333 at ae3e635): one group under an "in-place" banner
INPLACE = ("#                                                    in-place          \n"
           "#       size         count      type   redop    root     time   algbw   busbw #wrong\n")
FOOT = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1 \n#\n"


def _body(t: float, busbw: float) -> str:
    return "  %7.2f  %6.2f  %6.2f  %6g" % (t, busbw, busbw, 0)


def _head(size: int, count: int, typ: str = "float", op: str = "sum") -> str:
    return "%12d  %12d  %8s  %6s  %6d" % (size, count, typ, op, -1)


def _log(tmp_path, rows: list[str], header: str = BOTH, name: str = "all_reduce.txt", foot: str = FOOT,
         t: int = 1, g: int = 8, lo: int = 1 << 20, hi: int = 4 << 20, step: str = "2(factor)"):
    path = tmp_path / name
    path.write_text(PRE.format(t=t, g=g, lo=lo, hi=hi, step=step) + header + "".join(r + "\n" for r in rows) + foot)
    return str(path)


def _table(out: str) -> dict[int, list[str]]:
    return {int(ln.split()[0]): ln.split() for ln in out.splitlines() if ln.strip() and not ln.startswith("#")}


def test_an_in_place_only_log_is_compared_on_its_in_place_busbw(tmp_path, capsys):
    """rccl-tests -O 0 and nccl-tests' blank out-of-place body: the real busbw column is the in-place one (was '-':
    nothing compared), pred/real that over it."""
    sizes = (1 << 20, 2 << 20, 4 << 20)
    rccl = _log(tmp_path, [_head(s, s // 4) + _body(100.0, 20.0 + k) for k, s in enumerate(sizes)], INPLACE)
    null = _log(tmp_path, [_head(s, s // 4) + " " * 32 + _body(100.0, 20.0 + k) for k, s in enumerate(sizes)],
                name="null_all_reduce.txt")
    for log in (rccl, null):
        assert main(["--topology", "dgx-a100", "--import", log]) == 0
        table = _table(capsys.readouterr().out)
        assert list(table) == list(sizes)
        for k, s in enumerate(sizes):
            pred, real = float(table[s][7]), float(table[s][-2])
            assert real == 20.0 + k and float(table[s][-1]) == pytest.approx(pred / real, abs=6e-3)


def test_the_readers_notes_go_to_stderr(tmp_path, capsys):
    """A run killed mid-row: its cut last row is left out, and simulate says so (the reader's note, was silent)."""
    full = [_head(s, s // 4) + _body(100.0, 20.0) + _body(100.0, 20.0) for s in (1 << 20, 2 << 20, 4 << 20)]
    log = _log(tmp_path, full[:2] + [full[2][:70]], foot="")
    assert main(["--topology", "dgx-a100", "--import", log]) == 0
    captured = capsys.readouterr()
    assert list(_table(captured.out)) == [1 << 20, 2 << 20]
    notes = [ln for ln in captured.err.splitlines() if ln.startswith("# note: ")]
    assert len(notes) == 1 and log in notes[0] and "line" in notes[0]


def test_cycle_picks_one_cycle_of_an_N_log(tmp_path, capsys):
    """nccl-tests -N 3 prints the sweep three times (common.cu:934-943); --cycle K compares cycle K's busbw."""
    sizes = (1 << 20, 2 << 20, 4 << 20)
    log = _log(tmp_path, [_head(s, s // 4) + _body(100.0, 10.0 * c) * 2 for c in (1, 2, 3) for s in sizes])
    assert main(["--topology", "dgx-a100", "--import", log]) == 0
    captured = capsys.readouterr()
    assert {r[-2] for r in _table(captured.out).values()} == {"10.00"} and "3 cycles" in captured.err
    assert main(["--topology", "dgx-a100", "--import", log, "--cycle", "3"]) == 0
    assert {r[-2] for r in _table(capsys.readouterr().out).values()} == {"30.00"}
    for argv, says in ((["--import", log, "--cycle", "4"], "has no cycle 4: it holds 3 cycles"),
                       (["--import", log, "--cycle", "x"], "invalid cycle (--cycle): 'x'"),
                       (["--collective", "allreduce", "--cycle", "1"], "--cycle picks a cycle of an --import LOG")):
        assert main(["--topology", "dgx-a100", *argv]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1 and says in captured.err


def test_the_header_takes_the_logs_iteration_counts(tmp_path, capsys):
    """The log ran -w 5 -n 7: the header says so (was nccl-tests' defaults, 1 and 20), unless -w / -n are given."""
    log = _log(tmp_path, [_head(1 << 20, 1 << 18) + _body(100.0, 20.0) * 2])
    assert main(["--topology", "dgx-a100", "--import", log]) == 0
    assert " warmup iters: 5 iters: 7 " in capsys.readouterr().out
    assert main(["--topology", "dgx-a100", "--import", log, "-n", "3", "-w", "0"]) == 0
    assert " warmup iters: 0 iters: 3 " in capsys.readouterr().out


@pytest.mark.parametrize("threads, gpus", [(2, 1), (1, 2), (2, 4)])
def test_a_threaded_logs_ranks_are_one_process(threads, gpus):
    """-t T -g G: one process of T x G ranks (nccl-tests v2.19.6 common.cu:901 nranks = nProcs*nGpus*nThreads; the
    threads share the process, so NCCL's model gets T x G GPUs per process, was G)."""
    text = PRE.format(t=threads, g=gpus, lo=8, hi=8, step="2(factor)") + BOTH + _head(8, 2) + _body(1.0, 0.0) * 2
    (run,) = parse_runs(text)
    machine = _machine(argparse.Namespace(net=None, nic_dma_gbps=None), run)
    assert (machine["gpus_per_process"], machine["threads_per_process"]) == (threads * gpus, threads)


@pytest.mark.parametrize("threads, gpus", [(1, 8), (2, 4), (8, 1)])
def test_a_threaded_logs_host_time_is_one_threads(tmp_path, capsys, monkeypatch, threads, gpus):
    """Each of the T threads enqueues and launches its own G GPUs in parallel (nccl-tests v2.19.6 common.cu lines
    548-619 and 1725-1768; NVIDIA/nccl v2.28.9-1 src/group.cc line 22, a thread's own group): with 200 us of host per
    GPU and 3 per channel, an 8-byte all_reduce on one ring/LL channel takes G x 203 us (was 8 x 203 = 1624 for all
    three).  The model's parameters are swapped for these heavy ones where simulate builds it."""
    from dataclasses import replace

    import synth.model.nccl as nccl
    heavy = replace(nccl.DEFAULT_PARAMS, host_us=200.0, host_us_per_channel=3.0)

    class HeavyHost(nccl.NcclModel):
        def __init__(self, machine, params=None, env=None, version=None):
            super().__init__(machine, heavy, env, version)
    monkeypatch.setattr(nccl, "NcclModel", HeavyHost)
    log = _log(tmp_path, [_head(8, 2) + _body(50.0, 0.1) * 2], t=threads, g=gpus, lo=8, hi=8)
    assert main(["--topology", "dgx-a100", "--collective", "allreduce", "--baseline", "nccl", "--import", log]) == 0
    (row,) = _table(capsys.readouterr().out).values()
    assert row[-3] == "ring/LL/1" and float(row[5]) == pytest.approx(gpus * 203.0, abs=0.005)


@settings(max_examples=50, deadline=None, derandomize=True)
@given(threads=st.integers(0, 1 << 20), gpus=st.integers(0, 1 << 20))
def test_any_thread_and_gpu_counts_give_a_machine_of_one_threads_gpus(threads, gpus):
    """Whatever nThread / nGpus a log prints (0 read as 1, as the reader counts ranks), the model's machine is valid
    and each thread drives the log's nGpus: no traceback, no GPU count that does not split over the threads."""
    from synth.model.nccl import NcclMachine
    from topo_probe import get_preset
    text = PRE.format(t=threads, g=gpus, lo=8, hi=8, step="2(factor)") + BOTH + _head(8, 2) + _body(1.0, 0.0) * 2
    (run,) = parse_runs(text)
    m = NcclMachine.from_topology(get_preset("dgx-a100")).with_(
        **_machine(argparse.Namespace(net=None, nic_dma_gbps=None), run))
    assert (m.gpus_per_process, m.threads_per_process) == ((gpus or 1) * (threads or 1), threads or 1)


def test_sizes_nccl_tests_prints_twice_are_predicted_once(tmp_path, capsys):
    """all_gather -g 4 -b 64 -e 128 -i 16, float: per rank (size/4/4) & ~3 elements (v2.19.6 all_gather.cu line 11):
    4, 4, 4, 4, 8, so nccl-tests prints size 64 four times, then 128 (was refused as two runs in one table).  64 is
    predicted once and compared with its first row's busbw."""
    rows = [_head(size, 4 if size < 128 else 8, op="none") + _body(10.0 + k, 1.0 + k) * 2
            for k, size in enumerate((64, 64, 64, 64, 128))]
    log = _log(tmp_path, rows, name="all_gather.txt", g=4, lo=64, hi=128, step="16(bytes)")
    assert main(["--topology", "dgx-a100", "--gpus", "0-3", "--import", log]) == 0
    captured = capsys.readouterr()
    table = [ln.split() for ln in captured.out.splitlines() if ln.strip() and not ln.startswith("#")]
    assert [(r[0], r[-2]) for r in table] == [("64", "1.00"), ("128", "5.00")] and "cycles" not in captured.err


def test_two_all_reduce_runs_in_one_table_are_refused_in_one_line(tmp_path, capsys):
    """An all_reduce run ending at 16 and a second from -b 16 in one table (16 twice in a row, another time): an
    all_reduce prints every size once, so simulate and sweep --import refuse it, one line, exit 2 (was compared as one
    run, 16 on the first run's row)."""
    from kernels.sweep.cli import main as sweep
    rows = [_head(s, s // 4) + _body(10.0 + k, 1.0) * 2 for k, s in enumerate((8, 16, 16, 32, 64))]
    log = _log(tmp_path, rows, g=4, lo=8, hi=64)
    for run in (lambda: main(["--topology", "dgx-a100", "--gpus", "0-3", "--import", log]),
                lambda: sweep(["--import", log, "--plot", str(tmp_path / "p.png")])):
        assert run() == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "size 16 appears 2 times for float sum (two runs in one table" in err
