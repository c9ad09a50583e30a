"""A console script that ends at once (``run_command(exiting=True)``: :func:`os._exit`) still
finalizes MPI where the command started it: mpirun fails a job whose rank ends without
``MPI_Finalize`` (exit 1 and a help message), which the first version of that exit did."""

from __future__ import annotations

from _mpi import run_mpi


def test_sweep_under_mpirun_ends_with_exit_0():
    code = ("import sys; from topo_probe.cli.entry import run_command; sys.argv = ['sweep']; "
            "run_command('sweep', 'kernels.sweep.cli', ['all_reduce', '-b', '8', '-e', '64', '--backend', 'mpi'], "
            "exiting=True)")
    res = run_mpi(2, ["-c", code])
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.count("# Avg bus bandwidth") == 1            # rank 0 prints the table
    assert "finalize" not in res.stderr.lower()
