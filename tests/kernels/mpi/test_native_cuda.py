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
from _mpi import require_cupy_gpu, run_mpi

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
    require_cupy_gpu()
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    res = run_mpi(2, [str(script)], timeout=230)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("OK ")]
    assert sorted(int(ln[1]) for ln in lines) == [0, 1]
    # every call ran natively (one launch each), unless the ranks refused CUDA IPC (then a warning)
    assert all(ln[2] == "True" and ln[3] == ln[4] for ln in lines), lines


# ---------------------------------------------------------------------- without a GPU
def test_cuda_backend_drives_the_kernel_abi_per_process(monkeypatch):
    """CuPy replaced by tests/kernels/native/_fake_cupy.py (its kernel interprets exactly the
    arguments the real one gets: resolved records, block offset, flag pointers, epochs, status
    words): three ranks' shares of a chained broadcast, each launched by its own backend, a
    graph captured on the second call and replayed on the third, against NumPy; a launch whose
    peer has not run reports its wait in the status words; every opened handle is closed."""
    import sys
    from pathlib import Path

    import numpy as np
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))
    from _fake_cupy import FakeCupy
    from test_native import attach_all, make_shares

    import kernels.native.launcher as launcher
    from kernels.backends.executor import program_for
    from kernels.mpi.ipc import CudaIpc
    from kernels.mpi.native_cuda import CudaShareBackend
    from synth.ir.schedule import Schedule, Step, Transfer
    cp = FakeCupy(seed=3, sms=8)
    monkeypatch.setattr(launcher, "_cupy", lambda: cp)
    monkeypatch.setattr(launcher, "_KERNELS", {})

    def address_range(ptr):
        return next((a.ctypes.data, a.nbytes) for a in cp.allocations
                    if a.ctypes.data <= ptr < a.ctypes.data + a.nbytes)
    opened, closed = [], []
    ipc = CudaIpc(cp, get_handle=lambda b: b.to_bytes(8, "little"), address_range=address_range)
    backends = [CudaShareBackend(ipc=ipc, open_handle=lambda h: opened.append(h) or int.from_bytes(h, "little"),
                                 close_handle=closed.append) for _ in range(3)]
    sched = Schedule("broadcast", 3, 1, (Step(1, (Transfer(0, 0, 1),)), Step(1, (Transfer(0, 1, 2),))), root=0)
    prog = program_for(sched, 1000, np.dtype("float32"))
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    user = [(cp.asarray(x) if r == 0 else None, cp.zeros(1000, np.float32)) for r in range(3)]
    shares = make_shares(prog, 3, backends, channels=2)
    bs = attach_all(shares, prog, user)
    for call in range(3):
        for _, out in user:
            out[...] = 0
        before = cp.launches
        for share, b in zip(shares, bs):
            share.launch(b)
        assert all(np.array_equal(out, x) for _, out in user), f"call {call}"
        assert cp.launches - before == sum(1 for s in shares if s.blocks) == 3, "one launch per process"
        assert all(CudaShareBackend.status(s) == [0] * 5 for s in shares)
    assert all("graph" in b for b in bs)
    assert {key[3] for key in launcher._KERNELS} == {True}, "ranks in other processes need system-scope flags"
    shares[2].launch(bs[2])                  # rank 2 before rank 1 in this call: its wait cannot be met
    err, blk, _, awaited, _ = CudaShareBackend.status(shares[2])
    assert err == 1 and int(shares[2].dp.block_rank[blk]) == 2 and int(shares[2].dp.block_rank[awaited]) == 1
    for s in shares:
        s.close()
    assert len(opened) == len(closed) > 0
