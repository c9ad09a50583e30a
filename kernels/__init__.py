"""kernels: executors (host, CuPy, Numba, reference), the Communicator, MPI ranks and sweeps.

>>> import numpy as np
>>> from kernels import Communicator
>>> comm = Communicator(4, plan=False)
>>> xs = [np.full(3, r, np.float32) for r in range(4)]
>>> comm.all_reduce(xs, [np.empty(3, np.float32) for _ in range(4)])[0].tolist()
[6.0, 6.0, 6.0]
"""

from __future__ import annotations

from topo_probe.lazy import lazy_exports

_EXPORTS = {
    "Communicator": "kernels.comm.communicator",
    "MPICommunicator": "kernels.mpi.communicator",
    "run_schedule": "kernels.backends.executor",
    "SweepConfig": "synth.sweep.driver", "run_sweep": "synth.sweep.driver",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports("kernels", _EXPORTS, globals())
