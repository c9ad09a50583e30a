"""``init_process_group("topocoll")`` under ``mpirun`` (kernels/pytorch/launch.py): torch's env://
variables from the launcher's, rank 0's address sent by MPI; then a sum over the ranks; and the
mapping of each launcher's variables without MPI."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

from kernels.pytorch.launch import env_from_mpi  # noqa: E402

WORKER = """
import torch, torch.distributed as dist
import kernels.pytorch
dist.init_process_group("topocoll")
x = torch.full((5,), float(dist.get_rank() + 1))
dist.all_reduce(x)
print("rank", dist.get_rank(), "of", dist.get_world_size(), "sum", x.tolist())
"""


@pytest.mark.parametrize("names", [("PMI_RANK", "PMI_SIZE"), ("PMIX_RANK", "PMIX_SIZE")])
def test_other_launchers_variables_map_to_torchs(names):
    env = {names[0]: "2", names[1]: "3", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    assert env_from_mpi(env) and (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("2", "3", "0")


def test_nothing_changes_under_torchrun_or_without_a_launcher():
    torchrun = {"RANK": "0", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}
    assert not env_from_mpi(torchrun) and torchrun["RANK"] == "0"
    assert not env_from_mpi({})


@pytest.mark.slow
def test_mpirun_starts_a_topocoll_group(tmp_path):
    from _mpi import run_mpi
    res = run_mpi(2, ["-c", WORKER])
    assert res.returncode == 0, res.stderr[-3000:]
    lines = sorted(line for line in res.stdout.splitlines() if line.startswith("rank"))
    assert lines == ["rank 0 of 2 sum [3.0, 3.0, 3.0, 3.0, 3.0]", "rank 1 of 2 sum [3.0, 3.0, 3.0, 3.0, 3.0]"]
