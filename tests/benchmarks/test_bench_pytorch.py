"""benchmarks/bench_pytorch.py's report: the command at the top, busbw and ratios computed from
the measured times as nccl-tests defines them, a call's time split into the socket round, the
runner's own work and torch's dispatch by subtraction, and the GPU section saying why it is empty."""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

from _paths import ROOT  # noqa: E402


def _bench():
    spec = importlib.util.spec_from_file_location("bench_pytorch", ROOT / "benchmarks" / "bench_pytorch.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_report_shows_the_command_the_rows_and_the_overhead():
    bench = _bench()
    mib = 1 << 20
    res = {2: {"allreduce": [{"bytes": mib, "topocoll_us": 2000.0, "gloo_us": 1000.0,
                              "topocoll_busbw": mib / 2000e-6 / 1e9, "gloo_busbw": mib / 1000e-6 / 1e9,
                              "topocoll_cpu_us": 1500.0, "gloo_cpu_us": 700.0}],
               "overhead": {"call": 900.0, "runner": 650.0, "round": 400.0, "schedule": 300.0, "agreement": 250.0,
                            "gloo": 200.0, "schedule_name": "oneshot", "messages_per_call": 1.0,
                            "cpu": {"call": 120.0, "runner": 80.0, "round": 40.0, "gloo": 60.0}},
               "ddp_ms": {"topocoll": 6.0, "gloo": 4.0}}}
    text = bench.report(res, "python benchmarks/bench_pytorch.py --ranks 2", {"rounds": 3, "calls": 10, "steps": 10})
    lines = text.splitlines()
    assert lines[2] == "    python benchmarks/bench_pytorch.py --ranks 2"
    # 1 MiB / 2 ms x 2(n-1)/n; then the CPU columns as measured
    assert "| 1 MiB | 2,000 | 1,000 | 0.524 | 1.049 | 2.00x | 1,500 | 700 |" in text
    # sockets = the round; checks, plan lookup and reduction = runner - round; dispatch and Work = call - runner
    assert "So: sockets 400, checks, plan lookup and the reduction 250, torch's dispatch and the Work 250;" in text
    assert "1.0 messages sent per call by each rank" in text and "the schedule alone (`oneshot`" in text
    assert "CPU per call (every thread of the process): the whole call 120, the runner 80, the round 40" in text
    assert "DDP step (MLP 64-256-256-1, batch 32, median of 10): topocoll 6.00 ms, gloo 4.00 ms." in text
    assert ("no GPU rows" in text) != torch.cuda.is_available()


def test_the_gpu_report_shows_busbw_and_the_overhead_over_the_native_executor_alone():
    bench = _bench()
    mib = 1 << 20
    row = {"bytes": 16 * mib, "native_path": True, "schedule": "ring", "topocoll_us": 500.0, "native_us": 420.0,
           "gloo_us": 8000.0, "topocoll_busbw": 16 * mib / 500e-6 / 1e9, "gloo_busbw": 16 * mib / 8000e-6 / 1e9}
    res = {"allreduce": [row, {**row, "bytes": 1024, "native_path": False}], "device": "GPU X", "why_not": ""}
    text = bench.gpu_report(res, "python benchmarks/bench_pytorch.py --gpu", {"rounds": 3, "calls": 10})
    assert text.splitlines()[2] == "    python benchmarks/bench_pytorch.py --gpu"
    assert "| 16 MiB | ring | yes | 500 | 420 | 8,000 | 33.55 | 2.10 | 80 |" in text    # 16 MiB / 500 µs x 2(n-1)/n
    assert "| 1 KiB | ring | NO |" in text and "was off" not in text
    assert "One rank" not in text                     # no one-rank job in these results


def test_the_one_rank_rows_subtract_nccl_and_the_native_executor_from_the_whole_call():
    bench = _bench()
    row = {"bytes": 64 << 10, "native_path": True, "schedule": "copy", "topocoll_us": 61.25, "native_us": 40.5,
           "nccl_us": 9.75, "gloo_us": 70.0, "topocoll_busbw": 0.0, "gloo_busbw": 0.0}
    two = {"allreduce": [], "device": "GPU X", "why_not": "",
           "one_rank": {"allreduce": [row], "why_not": "CuPy is not installed"}}
    text = bench.gpu_report(two, "python benchmarks/bench_pytorch.py --gpu", {"rounds": 3, "calls": 10})
    # 61.25 - 9.75 = 51.5 over NCCL; 61.25 - 40.5 = 20.75 -> 20.8 of the backend's own
    assert "| 64 KiB | yes | 61.2 | 40.5 | 9.8 | 70.0 | 51.5 | 20.8 |" in text
    assert text.index("## One rank") > text.index("Where a native call's time goes")
    assert "The native path was off: CuPy is not installed" in text


def test_gpu_rows_without_a_gpu_end_in_one_line_and_exit_2(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --gpu would measure")
    assert _bench().main(["--gpu", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "bench_pytorch.py --gpu: torch sees no CUDA GPU here\n"
    assert not (tmp_path / "gpu_report.md").exists()
