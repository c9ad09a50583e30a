"""benchmarks/validate_cost_model.py: a log's GPUs per process are its nThread x nGpus (as ``simulate --import``
and the log reader count them), and only the out-of-place rows are scored, as its output says."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
from _paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import validate_cost_model as v  # noqa: E402

#: (size B, out-of-place us, in-place us): hand-made; the in-place times are 10x off so that reading them shows
ROWS = ((1 << 20, 40.0, 400.0), (16 << 20, 200.0, 2000.0), (256 << 20, 1900.0, 19000.0))


def _log(threads: int, gpus: int) -> str:
    """An all_reduce_perf log of one process: ``threads`` threads of ``gpus`` GPUs each."""
    lines = ["# nThread %d nGpus %d minBytes 1048576 maxBytes 268435456 step: 16(factor) warmup iters: 5 iters: 20 "
             "agg iters: 1 validation: 1 graph: 0" % (threads, gpus), "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid  4242 on      host device {r:2d} [0000:{r:02x}:00] NVIDIA H100 80GB HBM3"
              for r in range(threads * gpus)]
    lines += ["#", "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
              "algbw   busbw #wrong"]
    for size, oop, inp in ROWS:
        alg_oop, alg_inp = size / oop / 1e3, size / inp / 1e3
        lines.append(f"{size:12d} {size // 4:13d}     float     sum      -1 {oop:8.1f} {alg_oop:7.2f} "
                     f"{alg_oop * 1.75:7.2f}      0 {inp:8.1f} {alg_inp:7.2f} {alg_inp * 1.75:7.2f}      0")
    return "\n".join(lines) + "\n"


@pytest.fixture
def logs(tmp_path, monkeypatch):
    monkeypatch.setattr(v, "LOGS", tmp_path)

    def write(threads: int, gpus: int):
        name = f"h100_{threads}x{gpus}_all_reduce_{tmp_path.name}.txt"
        (tmp_path / name).write_text(_log(threads, gpus))
        return v.Case(name, "dgx-h100", collective="allreduce")
    return write


@pytest.mark.parametrize("threads, gpus, per_process", [(2, 4, 8), (8, 1, 8), (1, 8, 8), (2, 2, 4)])
def test_gpus_per_process_are_threads_times_gpus(logs, threads, gpus, per_process):
    """nccl-tests -t T -g G: one process drives T x G GPUs (v2.19.6 common.cu:901, nranks = nProcs*nGpus*nThreads)."""
    case = logs(threads, gpus)
    log, _, machine = v._log_and_machine(v._Keyed(case))
    assert (log.n_threads, log.n_gpus, log.num_ranks) == (threads, gpus, threads * gpus)
    assert (machine.gpus_per_process, machine.threads_per_process) == (per_process, threads)


@pytest.mark.parametrize("threads, gpus", [(2, 4), (8, 1)])
def test_a_threaded_log_charges_one_threads_host_time(logs, threads, gpus):
    """Each of a process's T threads enqueues its own G GPUs in parallel (nccl-tests v2.19.6 common.cu lines 548-619,
    1725-1768): with 50 us of host per GPU and 1 per channel, the host-bound 1 MiB row takes G x (50 + ch) (was
    T x G); the 256 MiB row, device-bound, is the one-thread process's time (the same process of 8 GPUs)."""
    heavy = replace(v.DEFAULT_PARAMS, host_us=50.0, host_us_per_channel=1.0)
    threaded, plain = v.evaluate(logs(threads, gpus), heavy), v.evaluate(logs(1, 8), heavy)
    small, one = threaded["rows"][0], plain["rows"][0]
    channels = int(small["choice"].rsplit("/", 1)[1])
    assert small["pred_us"] == pytest.approx(gpus * (50.0 + channels), rel=1e-12)
    assert one["pred_us"] == pytest.approx(8 * (50.0 + channels), rel=1e-12)
    big = threaded["rows"][2]
    assert big["pred_us"] == plain["rows"][2]["pred_us"] > 8 * (50.0 + int(big["choice"].rsplit("/", 1)[1]))


def test_only_out_of_place_rows_are_scored_and_the_output_says_so(logs):
    res = v.evaluate(logs(1, 8))
    assert [(r["size"], r["real_us"]) for r in res["rows"]] == [(s, oop) for s, oop, _ in ROWS]
    lines = v.console_lines([res])
    assert lines[0].startswith("rows compared: out-of-place") and "in-place columns are not read" in lines[0]
    assert len(lines) == 2 and lines[1].startswith(res["case"].file)


@pytest.mark.parametrize("threads, gpus", [(2, 4), (4, 2)])
def test_simulate_and_validation_take_the_same_machine_fields_from_a_threaded_log(logs, threads, gpus):
    """``simulate --import`` and this validation read one log's machine the same way (NcclTestsLog.machine_fields):
    T x G GPUs per process, T threads, and the first device's architecture (an H100 is sm90), by hand."""
    import argparse

    from synth.cli.simulate import _machine
    log, _, machine = v._log_and_machine(v._Keyed(logs(threads, gpus)))
    fields = _machine(argparse.Namespace(net=None, nic_dma_gbps=None), log)
    assert {k: fields[k] for k in ("gpus_per_process", "threads_per_process", "arch")} == {
        "gpus_per_process": threads * gpus, "threads_per_process": threads, "arch": "sm90"}
    assert (machine.gpus_per_process, machine.threads_per_process, machine.arch) == (threads * gpus, threads, "sm90")
