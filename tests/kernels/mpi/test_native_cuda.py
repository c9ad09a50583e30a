"""One process per GPU, natively, on a real GPU (marked ``gpu``; skipped without CuPy, a device or
mpirun): MPICommunicator with CuPy arrays under ``mpirun -n 2`` runs each call as one launch of
each process's share of the device program, peers' buffers and flags mapped through CUDA IPC,
system-scope flags; every result against NumPy on every rank, repeated calls (graph replay) and
in place included.  With one card the two processes share it (time-sliced: slow, still
correct); with two or more each process takes its own.  CI covers the same protocol over its CPU
twin (``test_native_call.py``, ``test_native.py``)."""

from __future__ import annotations

import textwrap

import pytest
from _mpi import run_mpi

SCRIPT = textwrap.dedent('''
    import numpy as np
    import cupy
    from kernels.mpi.communicator import MPICommunicator
    comm = MPICommunicator.from_mpi(native="auto", timeout_s=120)
    cupy.cuda.Device(comm.local_rank % cupy.cuda.runtime.getDeviceCount()).use()
    n, r = comm.size, comm.rank
    calls = 0
    for count in (1, 1001, 1 << 20):
        base = np.arange(count, dtype=np.float32) % 97
        x = cupy.asarray(base * (r + 1))
        y = cupy.full(count, -1, cupy.float32)
        for _ in range(3):                                   # the second call captures a graph
            y.fill(-1)
            comm.all_reduce(x, y)
            calls += 1
            assert np.array_equal(y.get(), base * sum(range(1, n + 1))), ("all_reduce", count)
        g = cupy.full(count * n, -1, cupy.float32)
        comm.all_gather(x, g, count)
        calls += 1
        assert np.array_equal(g.get(), np.concatenate([base * (q + 1) for q in range(n)])), ("all_gather", count)
        rs = cupy.asarray(np.tile(base, n) * (r + 1))
        comm.reduce_scatter(rs, rs)                           # in place
        calls += 1
        assert np.array_equal(rs[r * count:(r + 1) * count].get(), base * sum(range(1, n + 1))), ("rs", count)
        b = cupy.asarray(base + r)
        comm.broadcast(b, root=n - 1)
        calls += 1
        assert np.array_equal(b.get(), base + n - 1), ("broadcast", count)
        comm.all_reduce(x, x, op="max")                       # in place
        calls += 1
        assert np.array_equal(x.get(), base * n), ("max", count)
    print("OK", r, comm._native.enabled, comm._native.launches, calls, flush=True)
''')


@pytest.mark.gpu
def test_mpi_communicator_runs_cupy_calls_natively_one_launch_per_process(tmp_path):
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no device")
    except Exception as exc:  # noqa: BLE001 - any failure means no usable GPU here
        pytest.skip(f"no GPU with CuPy here ({type(exc).__name__})")
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    res = run_mpi(2, [str(script)], timeout=230)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("OK ")]
    assert sorted(int(ln[1]) for ln in lines) == [0, 1]
    # every call ran natively (one launch each), unless the ranks refused CUDA IPC (then a warning)
    assert all(ln[2] == "True" and ln[3] == ln[4] for ln in lines), lines
