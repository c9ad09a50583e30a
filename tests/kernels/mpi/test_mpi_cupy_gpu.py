"""MPICommunicator with CuPy arrays under mpirun, on whatever GPUs the machine has (ranks share a
GPU where there are fewer GPUs than ranks): CUDA IPC (``ipc="auto"``) and MPI through device or
pinned buffers (``ipc="never"``), every result against NumPy on every rank.  GPU only: skipped
with a reason without CuPy, a GPU or mpirun.  (CI covers the same protocol over its CPU twin,
``test_mpi_communicator.py``'s ``ipc`` family.)"""

from __future__ import annotations

import textwrap

import pytest

from _mpi import require_cupy_gpu, run_mpi

SCRIPT = textwrap.dedent('''
    import numpy as np
    import cupy
    from kernels import MPICommunicator
    from kernels.mpi.ipc import IpcWire
    for ipc in ("auto", "never"):
        comm = MPICommunicator.from_mpi(ipc=ipc, native="never")   # the native path: test_native_cuda.py
        cupy.cuda.Device(comm.rank % cupy.cuda.runtime.getDeviceCount()).use()
        n, r = comm.size, comm.rank
        for count in (1, 1001, 1 << 20):
            x = cupy.arange(count, dtype=cupy.float32) % 97 * (r + 1)
            y = cupy.full(count, -1, cupy.float32)
            comm.all_reduce(x, y)
            want = (np.arange(count, dtype=np.float32) % 97) * sum(range(1, n + 1))
            assert np.array_equal(y.get(), want), (ipc, count, "all_reduce")
            g = cupy.full(count * n, -1, cupy.float32)
            comm.all_gather(x, g, count)
            assert np.array_equal(g.get(), np.concatenate([(np.arange(count, dtype=np.float32) % 97) * (q + 1)
                                                           for q in range(n)])), (ipc, count, "all_gather")
            comm.all_reduce(x, x, op="max")                      # in place
            assert np.array_equal(x.get(), (np.arange(count, dtype=np.float32) % 97) * n), (ipc, count, "max")
        wire = comm._wires.get("cupy")
        print("OK", r, ipc, type(wire).__name__, getattr(wire, "pulls", 0), flush=True)
''')


@pytest.mark.gpu
@pytest.mark.parametrize("n", [2, 3])
def test_mpi_communicator_with_cupy_arrays_matches_numpy(tmp_path, n):
    require_cupy_gpu()
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    res = run_mpi(n, [str(script)], timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("OK ")]
    assert sorted((int(r), ipc) for _, r, ipc, *_ in lines) == sorted(
        (r, ipc) for r in range(n) for ipc in ("auto", "never"))
    # on one node CUDA IPC carries the data (pulls out of peers' memory), unless it was refused
    # for every rank with one warning; "never" always goes through MPI
    assert all(w == "DeviceWire" for _, _, ipc, w, _ in lines if ipc == "never")
