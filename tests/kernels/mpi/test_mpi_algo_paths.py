"""The algorithm argument on the MPI paths: ``sweep --backend mpi --algo`` is checked as on every other backend
(one ``sweep: error:`` line, exit 2, on one rank too), and ``MPICommunicator(algo=Path)`` runs the schedule file
as the selector does (the start-up record carries the path as text)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _mpi import run_mpi

ALGO_LINE = ("sweep: error: algorithm 'foo': not 'plan', 'nccl', a baseline (ring, tree, direct, rhd, bruck, "
             "oneshot) or an existing schedule file")
SWEEP = ["-c", "import sys; from kernels.sweep.cli import main; sys.exit(main(sys.argv[1:]))"]


@pytest.mark.parametrize("n", [1, 2])
def test_sweep_backend_mpi_refuses_an_unknown_algorithm_like_every_other_backend(n):
    """Reference: the host backend's line and status (test_cli_outputs.py, an unknown algorithm: one line, 2).
    Before: one rank ran the whole sweep and exited 0 (the name was never checked); two ranks aborted with
    status 1 from inside the selector."""
    got = run_mpi(n, [*SWEEP, "all_reduce", "-b", "8", "-e", "64", "--backend", "mpi", "--algo", "foo"],
                  timeout=180)
    assert got.returncode == 2, (got.returncode, got.stdout[-300:], got.stderr[-600:])
    assert ALGO_LINE in got.stderr.splitlines(), got.stderr[-600:]


def _worker(folder: Path) -> None:
    import numpy as np
    from mpi4py import MPI

    from kernels.mpi.communicator import MPICommunicator
    from synth.baselines import baseline
    from synth.ir.fabric import build_fabric
    from topo_probe.machines.generators import fully_connected
    ring = folder / "ring2.json"
    if MPI.COMM_WORLD.rank == 0:
        baseline("ring", build_fabric(fully_connected(2)), "allreduce").save(ring)
    MPI.COMM_WORLD.Barrier()
    try:
        comm = MPICommunicator(MPI.COMM_WORLD, topology=fully_connected(2), algo=ring, abort_on_error=False)
        x = np.arange(4, dtype=np.float32) + comm.rank
        y = np.empty_like(x)
        comm.all_reduce(x, y)
        print(f"rank {comm.rank} result {y.tolist()}")
    except Exception as e:  # noqa: BLE001 - the test reads what each rank met
        print(f"rank {MPI.COMM_WORLD.rank} {type(e).__name__}: {e}")


def test_mpi_communicator_takes_a_path_algorithm_as_the_selector_does(tmp_path):
    """A pathlib.Path to an existing schedule file runs it.  Reference by hand: [0,1,2,3] + [1,2,3,4].
    Before: 'TypeError: Object of type PosixPath is not JSON serializable' on both ranks (the raw value went
    into the start-up record)."""
    got = run_mpi(2, [str(Path(__file__).resolve()), "worker", str(tmp_path)], timeout=120)
    lines = sorted(line for line in got.stdout.splitlines() if line.startswith("rank "))
    assert lines == [f"rank {r} result [1.0, 3.0, 5.0, 7.0]" for r in (0, 1)], (lines, got.stderr[-400:])


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "worker":
    _worker(Path(sys.argv[2]))
