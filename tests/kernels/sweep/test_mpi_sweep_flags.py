"""``mpirun -n N sweep ... --backend mpi`` read as nccl-tests under ``mpirun`` reads the same flags.

nccl-tests (NVIDIA/nccl-tests v2.19.6, commit a0b82b2):

- ``-g G`` is GPUs per process: ``nranks = nProcs*nGpus*nThreads`` (src/common.cu line 901), so
  ``mpirun -n 2 all_reduce_perf -g 4`` is 8 ranks.  Here each process is one rank: ``-g`` other than 1 (the
  process count too: ``-g 2`` under 2 processes is 4 ranks there) cannot be honoured and must not be dropped silently.
- ``-J FILE``: rank 0 alone opens the file (src/util.cu lines 324-330), prints ``# Writing JSON output to FILE``
  (line 349) before the preamble, and writes every ``argv[0..argc)`` into ``args`` (lines 365-370), the program
  name first.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from _mpi import run_mpi

SWEEP = ["-c", "from kernels.entry import sweep; raise SystemExit(sweep())"]


def test_a_gpu_count_per_process_is_refused_not_dropped():
    """-g 4 under 2 processes: nccl-tests would run 2 x 4 = 8 ranks; it ran 2 ranks, status 0, no word of -g."""
    proc = run_mpi(2, SWEEP + ["all_reduce", "-b", "8", "-e", "8", "-n", "1", "--backend", "mpi", "-g", "4"],
                   timeout=120)
    assert proc.returncode != 0, proc.stdout
    assert "nGpus" not in proc.stdout                   # refused before the table
    lines = {ln for ln in proc.stderr.splitlines() if ln.startswith("sweep:")}
    assert len(lines) == 1, proc.stderr                 # the same one line from every rank
    (line,) = lines
    assert "-g 4" in line and "mpirun -n 8" in line


def test_gpu_count_of_one_per_process_runs():
    """-g 1 is nccl-tests' own default under mpirun: 2 processes, 2 ranks."""
    proc = run_mpi(2, SWEEP + ["all_reduce", "-b", "8", "-e", "8", "-n", "1", "--backend", "mpi", "-g", "1"],
                   timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("#  Rank ") == 2 and "# nThread 1 nGpus 1 " in proc.stdout


def test_a_gpu_count_equal_to_the_process_count_is_refused():
    """-g 2 under 2 processes: nccl-tests runs 2 x 2 = 4 ranks (nProcs*nGpus*nThreads, src/common.cu line 901 at
    v2.19.6); it ran 2 ranks, status 0, read as our "ranks" meaning."""
    proc = run_mpi(2, SWEEP + ["all_reduce", "-b", "8", "-e", "8", "-n", "1", "--backend", "mpi", "-g", "2"],
                   timeout=120)
    lines = {ln for ln in proc.stderr.splitlines() if ln.startswith("sweep:")}
    assert proc.returncode == 2 and "nGpus" not in proc.stdout, proc.stdout
    assert len(lines) == 1 and "-g 2 would be 2 x 2 = 4 ranks" in next(iter(lines)), proc.stderr


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="mpi4py not installed")
@pytest.mark.parametrize("g, says", [("0", "-g 0 (must be >= 1)"), ("4x", "'4x' is not an integer"),
                                     ("0x2", "1 process and 2 ranks")])
def test_a_bad_or_hex_gpu_count_reads_as_on_the_host_path_in_one_process(g, says):
    """``-g`` is read as the host path reads it (``parse_int``: 0x2 is 2, as nccl-tests' ``strtol(optarg, NULL, 0)``,
    src/common.cu at v2.19.6), not by ``str.isdigit``: one process ran alone, status 0, for -g 0, -g 4x and -g 0x2."""
    res = subprocess.run([sys.executable, *SWEEP, "all_reduce", "--backend", "mpi", "-b", "8", "-e", "8", "-n", "1",
                          "-g", g], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stdout == "", res.stdout
    assert res.stderr.count("\n") == 1 and says in res.stderr, res.stderr


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="mpi4py not installed")
def test_gpu_count_one_beside_a_topology_is_one_rank_in_one_process():
    """-g 1 --topology dgx-a100 is one rank on the host path (the topology cut to its first GPU) and in nccl-tests
    (one GPU per process); one process of --backend mpi said "8 ranks were asked for" and refused it."""
    res = subprocess.run([sys.executable, *SWEEP, "all_reduce", "--backend", "mpi", "-b", "8", "-e", "8", "-n", "1",
                          "--topology", "dgx-a100", "-g", "1"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("#  Rank ") == 1 and "backend: mpi (1 processes)" in res.stdout


def test_a_bad_gpu_count_under_mpirun_is_the_host_paths_one_line():
    """-g 0 under 2 processes said "2 x 0 = 0 ranks ... start them with mpirun -n 0"."""
    proc = run_mpi(2, SWEEP + ["all_reduce", "-b", "8", "-e", "8", "-n", "1", "--backend", "mpi", "-g", "0"],
                   timeout=120)
    lines = {ln for ln in proc.stderr.splitlines() if ln.startswith("sweep:")}
    assert proc.returncode != 0 and lines == {"sweep: error: invalid number of GPUs: -g 0 (must be >= 1)"}, proc.stderr


def test_json_is_announced_and_its_args_start_with_the_program(tmp_path):
    out = tmp_path / "mpi.json"
    argv = ["all_reduce", "-b", "8", "-e", "8", "-n", "1", "--backend", "mpi", "-J", str(out)]
    proc = run_mpi(2, SWEEP + argv, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(f"# Writing JSON output to {out}\n# Collective test starting: all_reduce_perf\n")
    assert proc.stdout.count("# Writing JSON output") == 1          # rank 0 only
    assert json.loads(out.read_text())["args"] == ["sweep", *argv]


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="mpi4py not installed")
@pytest.mark.parametrize("extra", [["--plot", "{tmp}/p.png"], ["--csv", "{tmp}/c.csv"], ["--compare", "ring,direct"],
                                   ["--import", "tests/fixtures/real_logs/a100_8gpu_1node_all_reduce.txt"]])
def test_options_the_mpi_path_has_no_use_for_are_refused(tmp_path, extra):
    """The mpi path printed its table, status 0, and left --plot / --csv unwritten, --compare and --import unused."""
    extra = [x.format(tmp=tmp_path) for x in extra]
    res = subprocess.run([sys.executable, *SWEEP, "all_reduce", "--backend", "mpi", "-b", "8", "-e", "8", "-n", "1",
                          *extra], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stdout == "", res.stdout
    assert res.stderr.count("\n") == 1 and extra[0] in res.stderr and "--backend mpi" in res.stderr
    assert list(tmp_path.iterdir()) == []


def _corrupt_worker() -> None:
    """``run_sweep_mpi`` as the CLI calls it, every rank's reductions off by one (so every rank's check fails)."""
    import warnings

    from kernels.mpi import transport as mt
    from kernels.mpi.communicator import MPICommunicator
    from kernels.sweep.cli import build_parser
    from kernels.sweep.mpi_backend import run_sweep_mpi
    from synth.cli.nccl_options import make_config
    warnings.simplefilter("ignore")

    class Corrupt(mt.HostWire):
        def combine(self, dst, acc, src, op):
            super().combine(dst, acc, src, op)
            dst += 1

    comm = MPICommunicator.from_mpi(plan=False, wire=Corrupt(), timeout_s=30)
    argv = ["all_reduce", "-b", "8", "-e", "64", "-f", "2", "-n", "1", "-w", "0", "--backend", "mpi", "--algo", "ring"]
    args = build_parser().parse_args(argv)
    run_sweep_mpi(lambda n: make_config(args, n), None, "ring", argv=["sweep", *argv], comm=comm)


def test_out_of_bounds_counts_each_failing_process_as_nccl_tests():
    """nccl-tests counts a failed check once per thread whose own GPUs hold wrong elements (CheckData,
    src/common.cu line 478 at v2.19.6: ``if (args->reportErrors && *wrongElts) args->errors[0]++`` before the sum
    over ranks), summed over processes (MPI_Allreduce of errors, line 1786): 4 sizes x 2 placements failing on both
    processes is 16.  It printed 8 (one per failing measurement)."""
    proc = run_mpi(2, [__file__, "corrupt"], timeout=120)
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(rows) == 4 and all(int(r[8]) > int(r[1]) and int(r[12]) > int(r[1]) for r in rows), proc.stdout
    assert "# Out of bounds values : 16 FAILED" in proc.stdout, proc.stdout[-1500:] + proc.stderr[-1500:]


if __name__ == "__main__" and sys.argv[1:] == ["corrupt"]:       # pragma: no cover  (under mpirun)
    _corrupt_worker()
