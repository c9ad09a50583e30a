"""``init_process_group("topocoll")`` under ``mpirun`` as under ``torchrun``: torch's env://
rendezvous reads ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``; ``mpirun`` sets
its own variables instead.  :func:`env_from_mpi` fills torch's from them (Open MPI's
``OMPI_COMM_WORLD_*``, MPICH / Intel MPI's ``PMI_*``), and, where no ``MASTER_ADDR`` is given,
rank 0's host name and a free port, sent to every rank with one MPI broadcast (mpi4py).  The
data never moves over MPI: after the rendezvous the group's transport is the same as under
torchrun.  :mod:`kernels.pytorch` calls it on import; under torchrun (``RANK`` set) or outside
any launcher it does nothing.

>>> env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
...        "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
>>> env_from_mpi(env); env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]
True
('1', '4', '1')
"""

from __future__ import annotations

import os
import socket

#: (rank, size, local rank) variables of each MPI launcher, first match wins
_LAUNCHERS = (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
              ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
              ("PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK"))


def env_from_mpi(environ=None) -> bool:
    """Set torch's rendezvous variables from an MPI launcher's (module docstring); True when
    it did."""
    env = os.environ if environ is None else environ
    if "RANK" in env:
        return False
    found = next((names for names in _LAUNCHERS if names[0] in env and names[1] in env), None)
    if found is None:
        return False
    env["RANK"], env["WORLD_SIZE"] = env[found[0]], env[found[1]]
    env.setdefault("LOCAL_RANK", env.get(found[2], "0"))
    if "MASTER_ADDR" not in env or "MASTER_PORT" not in env:
        from mpi4py import MPI
        addr = None
        if MPI.COMM_WORLD.Get_rank() == 0:
            with socket.socket() as s:
                s.bind(("", 0))
                addr = (socket.gethostname() if int(env["WORLD_SIZE"]) > 1 else "127.0.0.1", s.getsockname()[1])
        host, port = MPI.COMM_WORLD.bcast(addr, root=0)
        env.setdefault("MASTER_ADDR", host)
        env.setdefault("MASTER_PORT", str(port))
    return True


__all__ = ["env_from_mpi"]
