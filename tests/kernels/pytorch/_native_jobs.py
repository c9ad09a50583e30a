"""Jobs of the native-path tests (run on spawned ranks by ``_torch_dist.run_job``).

``shm_job``: a ``topocoll`` group on CPU tensors whose native executor runs over the emulated
share backend of the MPI tests (``tests/kernels/mpi/_native_shares.py``: NumPy memory in
``multiprocessing.shared_memory`` standing for CUDA IPC, each launch interpreted in its process,
flags set across processes), driven through :class:`kernels.pytorch.native_comm.StoreComm`:
every result against gloo's on the same values, bit for bit, and each call counted as one native
launch.  Then the adapter alone: exchanges and all-gathers, and a peer that leaves.

``cuda_job``: the same collectives on CUDA tensors, 2 processes sharing one card, through the
real native path (the runner's launches and ``last_path`` say so; with
``TOPOCOLL_TORCH_NATIVE=never`` staged through the host, and no launch), against gloo on the
CPU; what a repeated native call costs the host (``_per_call_counts``); an async call on a side
stream; mismatched devices refused on every rank."""

from __future__ import annotations

import math
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

from _torch_jobs import DTYPES, Recorder, _calls, bits_equal, ints

_MPI_TESTS = str(Path(__file__).resolve().parents[1] / "mpi")


def _shm_tensor(be, values):
    """``values`` copied into the backend's shared memory (a tensor over it, no copy)."""
    import numpy as np
    import torch
    raw = be.empty(max(1, values.numel() * values.element_size()), np.uint8)
    t = torch.from_numpy(raw)[:values.numel() * values.element_size()].view(values.dtype).view(values.shape)
    t.copy_(values)
    return t


def shm_job(rank: int, n: int, init: str) -> dict:
    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _get_default_group

    import kernels.pytorch  # noqa: F401
    from kernels.pytorch.native_exec import NativeExecutor
    sys.path.insert(0, _MPI_TESTS)
    from _native_shares import ShmShareBackend
    dist.init_process_group("topocoll", init_method=init, rank=rank, world_size=n, timeout=timedelta(seconds=30))
    gloo = dist.new_group(backend="gloo")
    pg = _get_default_group()
    be = ShmShareBackend(seed=rank, run_now=True, timeout_s=20)
    pg.runner.native = native = NativeExecutor(pg._mesh, rank, n, backend=be)
    rec = Recorder()
    R = dist.ReduceOp
    for dtype in ("float32", "bfloat16", "int64", "uint8"):
        dt = getattr(torch, dtype)
        for size in (1, 7, 1000):
            x = ints(dtype, (n * size,), 31 * rank + size, 0, 8)
            calls = [("all_reduce:sum", [x], lambda g, t: dist.all_reduce(t[0], group=g)),
                     ("all_reduce:max", [x], lambda g, t: dist.all_reduce(t[0], op=R.MAX, group=g)),
                     ("broadcast", [x], lambda g, t: dist.broadcast(t[0], n - 1, group=g)),
                     ("reduce", [x], lambda g, t: dist.reduce(t[0], 0, group=g)),
                     ("all_gather_into_tensor", [torch.zeros(n * n * size, dtype=dt), x],
                      lambda g, t: dist.all_gather_into_tensor(t[0], t[1], group=g)),
                     ("reduce_scatter_tensor", [torch.zeros(size, dtype=dt), x],
                      lambda g, t: dist.reduce_scatter_tensor(t[0], t[1], group=g))]
            for name, values, call in calls:
                ours = [_shm_tensor(be, v) for v in values]
                ref = [v.clone() for v in values]
                before = native.launches
                call(None, ours)
                call(gloo, ref)
                same = rank != 0 and name == "reduce" or bits_equal(ours[0], ref[0])
                rec.check("shm:" + name, same and native.launches == before + 1 and pg.runner.last_path == "native",
                          f"{dtype} size {size}: equal {same}, launches {native.launches - before}, "
                          f"path {pg.runner.last_path}")
    _per_call_counts(rec, be, _shm_tensor(be, torch.ones(64)), pg, n)
    _ll_ranges(rec, be, native, pg, rank, n, gloo)
    _unshareable(rec, be, rank, n)
    pg.runner.native = None                   # the barrier's own tensor is not in shared memory
    _adapter_checks(rec, pg, rank, n)
    return rec.out


class _CountingStore:
    """A store that counts what is asked of it (the group must ask nothing per call)."""

    def __init__(self, store) -> None:
        self.store, self.asked = store, []

    def __getattr__(self, name):
        self.asked.append(name)
        return getattr(self.store, name)


def _per_call_counts(rec: Recorder, be, x, pg, n: int) -> None:
    """What one native all_reduce of ``x`` costs the host (``be``: the share backend the native
    runner wraps), counted over 5 repeated calls (the shares and mappings made): messages this rank sends (the agreement, the entry and
    the exit all-gathers: 3 per peer), stream synchronisations (before and after the launch: 2),
    buffer exports (one per distinct buffer: in place, 1), launches (1) and store accesses (0)."""
    import torch.distributed as dist
    counts = {"synchronize": 0, "export": 0, "launch": 0}
    plain = {k: getattr(be, k) for k in counts}

    def counted(name):
        def call(*a, **k):
            counts[name] += 1
            return plain[name](*a, **k)
        return call
    dist.all_reduce(x)                                        # the share and the mappings, once
    store, pg._store = pg._store, _CountingStore(pg._store)
    for name in counts:
        setattr(be, name, counted(name))
    before = pg._mesh.frames_sent
    try:
        for _ in range(5):
            dist.all_reduce(x)
    finally:
        for name in counts:
            setattr(be, name, plain[name])
        counting, pg._store = pg._store, store
    per = {k: v / 5 for k, v in counts.items()}
    per["messages"] = (pg._mesh.frames_sent - before) / 5
    want = {"synchronize": 2, "export": 1, "launch": 1, "messages": 3 * (n - 1)}
    rec.check("percall:native", per == want and pg.runner.last_path == "native" and not counting.asked,
              f"per call {per}, want {want}; store asked {counting.asked}")
    rec.out["__per_native_call__"] = per


def _ll_ranges(rec: Recorder, be, native, pg, rank: int, n: int, gloo) -> None:
    """Calls whose plan entry says LL (the route's protocol, as plan.json gives it) run LL shares:
    the backend's line stores land late and torn, the results still equal gloo's bit for bit;
    and the same call under Simple is another share (the digest names the protocol)."""
    import dataclasses

    import torch
    import torch.distributed as dist

    import kernels.pytorch.calls as calls
    plain = calls.choose
    for protocol in ("ll", "simple"):
        calls.choose = lambda *a, **k: dataclasses.replace(plain(*a, **k), protocol=protocol)
        try:
            for dtype in ("float32", "bfloat16"):
                x = ints(dtype, (n * 7,), 5 * rank + 3, 0, 8)
                for name, call in (("all_reduce", lambda g, t: dist.all_reduce(t, group=g)),
                                   ("broadcast", lambda g, t: dist.broadcast(t, 0, group=g))):
                    ours, ref = _shm_tensor(be, x), x.clone()
                    before = native.launches
                    call(None, ours)
                    call(gloo, ref)
                    used = {key[2] for key in native.runner.shares}
                    rec.check(f"shm:protocol:{protocol}", bits_equal(ours, ref) and native.launches == before + 1
                              and protocol in used, f"{name} {dtype}: equal {bits_equal(ours, ref)}, shares {used}")
        finally:
            calls.choose = plain


def _unshareable(rec: Recorder, be, rank: int, n: int) -> None:
    """Rank 1's tensor is not in memory its peers can map: every rank raises the same BadTensor
    (a RuntimeError) naming rank 1, and the next call runs natively."""
    import torch
    import torch.distributed as dist

    from kernels.pytorch.errors import BadTensor
    x = torch.ones(16) if rank == 1 else _shm_tensor(be, torch.ones(16))
    try:
        dist.all_reduce(x)
        error = ""
    except BadTensor as exc:
        error = str(exc) if isinstance(exc, RuntimeError) else "not a RuntimeError"
    rec.check("shm:unshareable", error.startswith("native path: native: rank 1: ") and "rank 0" not in error, error)
    y = _shm_tensor(be, torch.full((16,), float(rank)))
    dist.all_reduce(y)
    rec.check("shm:after", bool((y == sum(range(n))).all()), str(y.tolist()))


def _adapter_checks(rec: Recorder, pg, rank: int, n: int) -> None:
    """StoreComm alone: an exchange of objects and an all-gather of words equal what each rank
    sent; then rank n-1 leaves and the others' next exchange ends with PeerGone, at once."""
    import numpy as np

    from kernels.mpi.waiter import exchange_json
    from kernels.pytorch.errors import PeerGone
    from kernels.pytorch.native_comm import StoreComm
    comm = StoreComm(pg._mesh, rank, n)
    got = exchange_json(comm._ctrl, comm.waiter, {"rank": rank, "sq": rank * rank}, n, "test")
    rec.check("adapter:exchange", got == [{"rank": q, "sq": q * q} for q in range(n)], str(got))
    out = np.zeros((n, 3), np.int64)
    comm._data.Iallgather([np.array([rank, -rank, 7], np.int64), "int64"], [out, "int64"])
    rec.check("adapter:allgather", out.tolist() == [[q, -q, 7] for q in range(n)], str(out.tolist()))
    rec.check("adapter:hosts", len(comm.hosts) == n and len(set(comm.hosts)) == 1, str(comm.hosts))
    pg.barrier().wait()
    if rank == n - 1:
        pg._mesh.close()
        return
    start = time.monotonic()
    try:
        exchange_json(comm._ctrl, comm.waiter, rank, n, "after a peer left")
        error = None
    except PeerGone as exc:
        error = str(exc)
    rec.check("adapter:peer_gone", error is not None and "after a peer left" in error and
              time.monotonic() - start < 10, str(error))


def cuda_job(rank: int, n: int, init: str) -> dict:
    """Every collective of ``_torch_jobs._calls`` on CUDA tensors against gloo on the CPU, bit
    for bit, each run natively; async on a side stream; mismatched devices refused."""
    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _get_default_group

    import kernels.pytorch  # noqa: F401
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("topocoll", init_method=init, rank=rank, world_size=n, timeout=timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo")
    pg = _get_default_group()
    rec = Recorder()
    native = os.environ.get("TOPOCOLL_TORCH_NATIVE", "auto") != "never"
    for dtype in DTYPES:
        for size in (0, 7, 1 << 16):
            for name, make, call, ranks in _calls(rank, n, dtype, size):
                before = pg.runner.native.launches
                inputs = [t.cuda() for t in make()]
                with torch.device("cuda"):                # outputs the call makes itself: on the card too
                    ours = [t.cpu() for t in call(None, inputs)]
                ran = pg.runner.native.launches - before
                ref = call(gloo, make())
                if rank in ranks:
                    rec.check("cuda:" + name, all(bits_equal(a, b) for a, b in zip(ours, ref)), f"{dtype} size {size}")
                path_ok = ran >= 1 and pg.runner.last_path == "native" if native else (
                    ran == 0 and pg.runner.last_path == "host")
                rec.check("path:" + name, size == 0 or path_ok,
                          f"{dtype} size {size}: {ran} launches, path {pg.runner.last_path!r}, "
                          f"why not: {pg.runner.native.why_not!r}")
    if native:
        x = torch.ones(64, device="cuda")
        dist.all_reduce(x)
        _per_call_counts(rec, pg.runner.native.runner.backend._backend, x, pg, n)
    _side_stream(rec, rank, n)
    _mismatched_devices(rec, rank, n)
    dist.destroy_process_group()
    return rec.out


def _side_stream(rec: Recorder, rank: int, n: int) -> None:
    """An async all_reduce made on a side stream right after a kernel that writes its input:
    the call runs after that kernel (the side stream's order), and after ``wait()`` the current
    stream sees the result; ``get_future()`` completes with the tensor."""
    import torch
    import torch.distributed as dist
    side = torch.cuda.Stream()
    x = torch.zeros(1 << 22, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)             # the input is written late on this stream
        x.fill_(float(rank + 1))
        work = dist.all_reduce(x, async_op=True)
    work.wait()                                   # the current stream now waits for the call's
    y = x * 1                                     # a kernel on the current stream reads the result
    fut = work.get_future().wait()
    want = float(n * (n + 1) / 2)
    rec.check("stream:side", bool((y == want).all()), f"{y[:4].tolist()} != {want}")
    rec.check("stream:future", bool((fut[0] == want).all()))


def _mismatched_devices(rec: Recorder, rank: int, n: int) -> None:
    """Rank 0 passes a CUDA tensor, the others a CPU tensor: every rank raises the same line
    naming the device, and the group goes on."""
    import torch
    import torch.distributed as dist

    from kernels.pytorch.errors import CollectiveMismatch
    x = torch.ones(64, device="cuda" if rank == 0 else "cpu")
    try:
        dist.all_reduce(x)
        error = ""
    except CollectiveMismatch as exc:
        error = str(exc)
    rec.check("devices:refused", "ranks disagree on device: rank 0 has cuda, rank 1 has cpu" in error, error)
    y = torch.full((64,), float(rank), device="cuda")
    dist.all_reduce(y)
    rec.check("devices:after", bool((y == math.fsum(range(n))).all()))


def nccl_plan_job(rank: int, n: int, init: str) -> dict:
    """plan.json (``TOPOCOLL_PLAN``) says NCCL for every all_reduce; with the ranks sharing one
    card torch's NCCL group cannot run, so the entry's fallback schedule runs, natively, and the
    route says why.  On one rank: torch's NCCL group is made and runs an all_reduce."""
    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _get_default_group

    import kernels.pytorch  # noqa: F401
    torch.cuda.set_device(0)
    dist.init_process_group("topocoll", init_method=init, rank=rank, world_size=n, timeout=timedelta(seconds=60))
    pg = _get_default_group()
    rec = Recorder()
    x = torch.full((1 << 18,), float(rank + 1), device="cuda")
    if n == 1:
        group = pg._transport("nccl")
        y = x.clone()
        group.allreduce([x]).wait()
        rec.check("nccl:single", type(group).__name__ == "ProcessGroupNCCL" and torch.equal(x, y), type(group).__name__)
    else:
        dist.all_reduce(x)
        r = pg.runner.last_route
        rec.check("nccl:fallback", (r.planned, pg.runner.last_path) == ("nccl", "native") and r.ran != "nccl" and
                  "cannot run here" in r.reason and bool((x == n * (n + 1) / 2).all()),
                  f"{r.planned} -> {r.ran} ({r.reason}), path {pg.runner.last_path}")
    dist.destroy_process_group()
    return rec.out
