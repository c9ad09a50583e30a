"""An nccl-tests command line runs as it is: ``sweep`` and ``simulate`` take every flag of nccl-tests'
``src/common.cu`` (``longopts`` at NVIDIA/nccl-tests a0b82b2, typed in below from that source, not from
our table), fold ``-t`` threads into the ranks as nccl-tests counts them (threads x GPUs per thread),
and name the flags they take but do not apply in a ``# not applied:`` line instead of refusing them or
silently ignoring them; the numbers are those of the same run without those flags."""

from __future__ import annotations

import json

import pytest

from kernels.sweep.cli import build_parser as sweep_parser
from kernels.sweep.cli import main as sweep_main
from synth.cli.simulate import build_parser as simulate_parser
from synth.cli.simulate import main as simulate_main

#: every (short, long) option of nccl-tests' getopt_long table except -h, from its source
NCCL_TESTS_FLAGS = {
    "-t": "--nthreads", "-g": "--ngpus", "-b": "--minbytes", "-e": "--maxbytes", "-i": "--stepbytes",
    "-f": "--stepfactor", "-n": "--iters", "-m": "--agg_iters", "-w": "--warmup_iters", "-N": "--run_cycles",
    "-p": "--parallel_init", "-c": "--check", "-o": "--op", "-d": "--datatype", "-r": "--root", "-z": "--blocking",
    "-y": "--stream_null", "-T": "--timeout", "-G": "--cudagraph", "-C": "--report_cputime",
    "-S": "--report_timestamps", "-J": "--output_file", "-a": "--average", "-R": "--local_register",
    "-x": "--cta_policy", "-D": "--device_implementation", "-V": "--device_cta_count", "-M": "--memory",
    "-u": "--unalign", "-I": "--per_iter_timing", "-K": "--per_iter_skip",
}


@pytest.mark.parametrize("parser", [sweep_parser, simulate_parser], ids=["sweep", "simulate"])
def test_every_nccl_tests_flag_is_taken_by_its_short_and_long_name(parser):
    options = {s for a in parser()._actions for s in a.option_strings}
    missing = {f"{s}/{long}" for s, long in NCCL_TESTS_FLAGS.items() if not {s, long} <= options}
    assert not missing


def _rows(lines: list[str]) -> list[str]:
    return [line for line in lines if line and not line.startswith("#")]


def _simulate(capsys, argv):
    assert simulate_main(argv) == 0
    return capsys.readouterr().out.splitlines()


BASE = ["--topology", "dgx-a100", "--collective", "allreduce", "-b", "8", "-e", "1M", "-f", "4"]


def test_simulate_runs_a_pasted_command_line_and_names_what_it_does_not_apply(capsys):
    plain = _simulate(capsys, BASE + ["-g", "8"])
    pasted = _simulate(capsys, BASE + ["-t", "1", "-g", "8", "-G", "1", "-m", "2", "-z", "0", "-N", "1", "-I", "0"])
    assert _rows(pasted) == _rows(plain)
    notes = [line for line in pasted if "not applied" in line]
    assert notes == ["# not applied: -m 2 (agg_iters), -G 1 (cudagraph); every call is timed as one plain launch"]
    assert not [line for line in plain if "not applied" in line]


def test_threads_times_gpus_per_thread_are_the_ranks(capsys):
    """nccl-tests -t 2 -g 4 runs 8 ranks, -t 4 alone 4 (one GPU per thread), and says so in its own words: nThread and
    nGpus as given (v2.19.6 util.cu:626-628 prints nThreads, nGpus; common.cu:901 nranks = nProcs*nGpus*nThreads)."""
    eight = _simulate(capsys, BASE + ["-t", "2", "-g", "4"])
    assert eight[1].startswith("# nThread 2 nGpus 4 ") and _rows(eight) == _rows(_simulate(capsys, BASE))
    assert len([line for line in eight if line.startswith("#  Rank")]) == 8
    four = _simulate(capsys, BASE + ["-t", "4"])
    assert four[1].startswith("# nThread 4 nGpus 1 ") and _rows(four) == _rows(_simulate(capsys, BASE + ["-g", "4"]))


def test_the_host_sweep_folds_threads_and_notes_the_rest(capsys, tmp_path):
    argv = ["all_reduce", "-b", "8", "-e", "64", "-f", "2"]
    assert sweep_main(argv + ["-g", "4"]) == 0
    plain = capsys.readouterr().out.splitlines()
    assert sweep_main(argv + ["-t", "2", "-g", "2", "-R", "1", "-J", str(tmp_path / "t.json")]) == 0
    folded = capsys.readouterr().out.splitlines()
    assert folded[1] == "# Collective test starting: all_reduce_perf" and folded[2].startswith("# nThread 2 nGpus 2 ")
    assert len([line for line in folded if line.startswith("#  Rank")]) == 4        # 2 threads x 2 GPUs: 4 ranks run
    config = json.loads((tmp_path / "t.json").read_text())["config"]                 # util.cu:645-646
    assert (config["nthreads"], config["ngpus"], len(config["devices"])) == (2, 2, 4)
    # the same sizes and element counts as -g 4 (times are measured, so they differ run to run), all right
    assert [line.split()[:2] for line in _rows(folded)] == [line.split()[:2] for line in _rows(plain)]
    assert all(line.split()[8] == "0" for line in _rows(folded))                 # #wrong, out of place
    assert [line for line in folded if "not applied" in line] == [
        "# not applied: -R 1 (local_register); every call is timed as one plain launch"]


def test_sweep_and_simulate_print_the_same_flag_notes_for_the_same_flags(capsys):
    """One builder (synth.cli.nccl_options.flag_notes) for both commands: the same nccl-tests flags give the same
    ``#`` lines, typed in here from nccl-tests' behaviour (-r of all_reduce ignored, v2.19.6 all_reduce.cu:574;
    -o all's sixth op mulsum, common.cu:57-65), not from the builder."""
    flags = ["-b", "8", "-e", "16", "-f", "2", "-g", "2", "-r", "3", "-o", "all", "-G", "1", "-R", "1"]
    want = ["# not applied: -G 1 (cudagraph), -R 1 (local_register); every call is timed as one plain launch",
            "# -r 3 ignored: allreduce has no root (nccl-tests runs it with root -1, as here)",
            "# -o all: sum, prod, max, min, avg; not mulsum (nccl-tests' sixth op with NCCL >= 2.11, a pre-multiplied "
            "sum no executor here runs)"]
    said = {}
    simulate_argv = ["--topology", "dgx-a100", "--collective", "allreduce", *flags]
    for name, tool, argv in (("sweep", sweep_main, ["all_reduce", *flags]), ("simulate", simulate_main, simulate_argv)):
        assert tool(argv) == 0, name
        said[name] = [line for line in capsys.readouterr().out.splitlines() if line in want]
    assert said["sweep"] == said["simulate"] == want


@pytest.mark.parametrize("tool, argv, says", [
    (simulate_main, BASE + ["-G", "x"], "invalid cudagraph: 'x' is not an integer"),
    (simulate_main, BASE + ["-t", "0"], "invalid number of threads: -t 0"),
    (sweep_main, ["all_reduce", "-b", "8", "-e", "8", "-m", "two"], "invalid agg_iters: 'two' is not an integer"),
    (sweep_main, ["all_reduce", "--backend", "mpi", "-t", "2"], "--backend mpi runs one rank per process"),
])
def test_bad_values_end_in_one_line_and_exit_2(capsys, tool, argv, says):
    assert tool(argv) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1 and says in out.err


def test_an_imported_log_launched_as_a_graph_or_aggregated_is_said_so(capsys, tmp_path):
    """The log's own parameter line (``graph: G``, ``agg iters: M``) names launches the model does not
    time; the same log as printed says nothing (graph: 0, agg iters: 1)."""
    from _paths import ROOT
    real = ROOT / "tests" / "fixtures" / "real_logs" / "h100_8gpu_1node_all_reduce_ring.txt"
    text = real.read_text()
    assert "agg iters: 1 validation: 1 graph: 0" in text
    changed = tmp_path / "graph.txt"
    changed.write_text(text.replace("agg iters: 1 validation: 1 graph: 0", "agg iters: 4 validation: 1 graph: 1"))
    argv = ["--topology", "dgx-h100", "--baseline", "nccl", "--import"]
    plain = _simulate(capsys, argv + [str(real)])
    graphed = _simulate(capsys, argv + [str(changed)])
    assert not [line for line in plain if "the log ran with" in line]
    said = [line for line in graphed if "the log ran with" in line]
    assert said == ["# the log ran with graph: 1 (-G, CUDA graph launches), agg iters: 4 (-m, operations per launch); "
                    "the model times one plain launch per call, so its small sizes may read slower than the log's"]
    assert _rows(graphed) == _rows(plain)
