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


LL_SCRIPT = textwrap.dedent('''
    import sys
    import numpy as np
    import cupy
    from kernels.mpi.communicator import MPICommunicator
    comm = MPICommunicator.from_mpi(native="auto", plan=sys.argv[1], timeout_s=120)
    cupy.cuda.Device(comm.local_rank % cupy.cuda.runtime.getDeviceCount()).use()
    n, r, runner = comm.size, comm.rank, comm._native
    for count in (1, 255, 4096):                               # the plan's LL ranges (up to 1 MiB)
        base = np.arange(count, dtype=np.float32) % 97
        x = cupy.asarray(base * (r + 1))
        for call in range(3):                                  # graph replay from the second call
            y = cupy.full(count, -1, cupy.float32)
            comm.all_reduce(x, y)
            assert np.array_equal(y.get(), base * sum(range(1, n + 1))), ("all_reduce", count, call)
        g = cupy.full(count * n, -1, cupy.float32)
        comm.all_gather(x, g, count)
        assert np.array_equal(g.get(), np.concatenate([base * (q + 1) for q in range(n)])), ("all_gather", count)
        assert comm.last_route.protocol == "ll", comm.last_route
    shares = list(runner.shares.values())
    protocols = sorted({s.dp.protocol for s in shares})
    regions = any(any(s.dp.ll_bytes) for s in shares) and all(   # every peer's LL region mapped here
        sorted(s.peer_ll) == [q for q, nb in enumerate(s.dp.ll_bytes) if nb and q != r] for s in shares)
    print("OK", r, runner.enabled, protocols, regions, flush=True)
''')


@pytest.mark.gpu
def test_mpi_communicator_runs_a_plans_ll_ranges_natively_across_processes(tmp_path):
    """The LL protocol across processes on a GPU: a plan whose all_reduce and all_gather ranges
    say ``ll``; each process's LL region is exported through CUDA IPC with its flags, and the
    peers' lines land in it through their mappings (the same kernel as one process, with
    system-scope flags); every result against NumPy, graph replays included."""
    require_cupy_gpu()
    from _schedules import direct, ring

    from synth.formats.schedule_file import save_schedule
    from synth.plan.size_plan import Plan, PlanEntry
    from topo_probe.machines.generators import fully_connected
    topo = fully_connected(2)
    save_schedule(ring("allreduce", 2), tmp_path / "ring.json")
    save_schedule(direct("allgather", 2), tmp_path / "direct.json")
    Plan(topo.name, topo.fingerprint(), [PlanEntry("allreduce", 0, 1 << 20, "ring.json", protocol="ll"),
                                         PlanEntry("allgather", 0, 1 << 20, "direct.json", protocol="ll")]
         ).save(tmp_path / "plan.json")
    script = tmp_path / "run_ll.py"
    script.write_text(LL_SCRIPT)
    res = run_mpi(2, [str(script), str(tmp_path / "plan.json")], timeout=230)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = [ln.split(maxsplit=2) for ln in res.stdout.splitlines() if ln.startswith("OK ")]
    assert sorted(int(ln[1]) for ln in lines) == [0, 1]
    assert all(ln[2] == "True ['ll'] True" for ln in lines), lines


# ---------------------------------------------------------------------- without a GPU
def _stand_in_backends(monkeypatch, seed: int, opened: list, closed: list):
    """(CuPy stand-in, three ranks' CUDA share backends over it, a chained broadcast 0 -> 1 -> 2):
    the launcher's CuPy replaced by tests/kernels/native/_fake_cupy.py, CUDA IPC by handles that
    are the allocation's address (``opened``/``closed`` collect what the backends open and close)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))
    from _fake_cupy import FakeCupy

    import kernels.native.launcher as launcher
    from kernels.mpi.ipc import CudaIpc
    from kernels.mpi.native_cuda import CudaShareBackend
    from synth.ir.schedule import Schedule, Step, Transfer
    cp = FakeCupy(seed=seed, sms=8)
    monkeypatch.setattr(launcher, "_cupy", lambda: cp)
    monkeypatch.setattr(launcher, "_KERNELS", {})

    def address_range(ptr):
        return next((a.ctypes.data, a.nbytes) for a in cp.allocations
                    if a.ctypes.data <= ptr < a.ctypes.data + a.nbytes)
    ipc = CudaIpc(cp, get_handle=lambda b: b.to_bytes(8, "little"), address_range=address_range)
    backends = [CudaShareBackend(ipc=ipc, open_handle=lambda h: opened.append(h) or int.from_bytes(h, "little"),
                                 close_handle=closed.append) for _ in range(3)]
    sched = Schedule("broadcast", 3, 1, (Step(1, (Transfer(0, 0, 1),)), Step(1, (Transfer(0, 1, 2),))), root=0)
    return cp, backends, sched


def test_cuda_backend_drives_the_kernel_abi_per_process(monkeypatch):
    """CuPy replaced by tests/kernels/native/_fake_cupy.py (its kernel interprets exactly the
    arguments the real one gets: resolved records, block offset, flag pointers, epochs, status
    words): three ranks' shares of a chained broadcast, each launched by its own backend, a
    graph captured on the second call and replayed on the third, against NumPy; a launch whose
    peer has not run reports its wait in the status words; every opened handle is closed."""
    import numpy as np
    from test_native import attach_all, make_shares

    import kernels.native.launcher as launcher
    from kernels.backends.executor import program_for
    from kernels.mpi.native_cuda import CudaShareBackend
    opened, closed = [], []
    cp, backends, sched = _stand_in_backends(monkeypatch, 3, opened, closed)
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


def test_cuda_backend_runs_ll_shares_through_the_kernel_abi(monkeypatch):
    """The LL protocol through the CUDA backend, CuPy replaced by the stand-in (whose kernel
    reads LL inputs from their lines and lands LL stores as torn 8-byte halves): a 3-rank chained
    broadcast whose second hop is an LL edge, each rank launched by its own backend in
    dependency order; every rank's LL region is allocated zeroed by its backend, exported with
    its flags and mapped by the peers; three calls (a graph captured on the second) against
    NumPy; a consumer launched before its producer reports an LL wait in the status words."""
    import numpy as np
    from test_native import attach_all, make_shares

    from kernels.backends.executor import program_for
    from kernels.mpi.native_cuda import CudaShareBackend
    from kernels.native.record_format import LL_WAIT
    cp, backends, sched = _stand_in_backends(monkeypatch, 5, [], [])
    prog = program_for(sched, 301, np.dtype("float32"))
    x = np.random.default_rng(1).standard_normal(301).astype(np.float32)
    user = [(cp.asarray(x) if r == 0 else None, cp.zeros(301, np.float32)) for r in range(3)]
    shares = make_shares(prog, 3, backends, channels=2, protocol="ll")
    assert [s.ll_lines is not None for s in shares] == [False, False, True], "rank 2 reads rank 1's lines"
    assert sorted(shares[1].peer_ll) == [2]
    bs = attach_all(shares, prog, user)
    for call in range(3):
        for _, out in user:
            out[...] = 0
        for share, b in zip(shares, bs):
            share.launch(b)
        assert all(np.array_equal(out, x) for _, out in user), f"call {call}"
        assert all(CudaShareBackend.status(s) == [0] * 5 for s in shares)
        lines = shares[2].ll_lines.view(np.uint32).reshape(-1, 4)
        assert (lines[:, 1] == call + 1).all() and (lines[:, 3] == call + 1).all(), "flags: the call's epoch"
    shares[2].launch(bs[2])                  # rank 2 before rank 1 in this call: its lines are stale
    err, _, _, awaited, _ = CudaShareBackend.status(shares[2])
    assert err == 1 and awaited == LL_WAIT
    for s in shares:
        s.close()
