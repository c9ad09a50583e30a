"""Sweep backends: ``host`` (NumPy executor, wall clock), ``cupy`` (CUDA events), ``sim`` (cost model).

Every backend has ``name``, ``checks`` (whether results can be validated),
``devices(n, topology)`` for the ``# Using devices`` lines and ``measure(case)`` returning
``(time_us, wrong)``; ``wrong`` is the number of wrong elements of the last validation
iteration (None when not validated: ``-c 0`` or the sim backend, printed ``N/A``).

Timing
------
host
    ``warmup`` untimed runs, then ``iters`` runs each timed with ``time.perf_counter``; the
    reported time is their median.  One call runs every rank, so ``-a`` has nothing to
    aggregate.
cupy
    the same loop, each run bracketed by CUDA events on every rank's device; per run the
    rank times are combined by ``-a`` (0 rank 0, 1 mean, 2 min, 3 max) and the median run
    is reported.  Without CuPy or a GPU the backend raises DeviceUnavailable.
sim
    the cost model's prediction (:class:`synth.sweep.sim_backend.SimBackend`) of what cupy would measure: a
    schedule's modelled time under its plan entry's protocol plus our executor's measured fixed cost, as the
    plan's decision counts it (NCCL's rows: the NCCL model's), same for both placements.
one rank
    no schedule runs, but the call does, as NCCL runs a one-rank call: host and cupy time the
    call's argument checks and the copy where the buffers differ (in place: the checks alone),
    sim charges the cost model's fixed cost of a call (``launch_us``).  busbw follows nccl-tests'
    factors at n = 1 (0 for all_reduce, all_gather, reduce_scatter, gather, scatter, alltoall).

Buffers follow NCCL's in-place aliasing (:mod:`synth.ir.collectives`): allgather/gather send
from block r of rank r's receive buffer, reducescatter/scatter receive into block r of the
send buffer, the others use one buffer.
"""

from __future__ import annotations

import os
import socket
import statistics
import time

import numpy as np

from kernels.sweep.table import count_wrong
from kernels.sweep.table import expected as expected_results
from kernels.sweep.table import inputs as seeded_inputs
from synth.sweep.driver import Case, Device
from synth.sweep.sim_backend import SimBackend
from topo_probe.errors import DeviceUnavailable, InvalidArgument, UnsupportedCollective

BACKENDS = ("host", "cupy", "sim")


def _executor():
    """``kernels.backends.executor.run_schedule``, looked up at call time (tests may replace it)."""
    import kernels.backends.executor as ex
    return ex.run_schedule


def make_buffers(case: Case, seed: int, xp=np, device_of=None, *, expected: bool = True):
    """``(sends, recvs, expected)`` for one run; ``expected`` is None per rank without output
    (and None altogether when not asked for: timing runs need no reference).

    ``xp`` is numpy or cupy; ``device_of(r)`` is a context manager placing rank r's arrays.
    NumPy runs use the generated inputs as send buffers (no copy), so a host sweep holds the
    send and receive buffers and one copy of the expected result, nothing more.
    """
    e, n, c = case.entry, case.nranks, case.counts.count
    kin, kout = e.blocks(n)
    inputs = seeded_inputs(e, seed, c, case.dtype, case.op, n)
    want = expected_results(e, inputs, c, case.dtype, case.op, n, case.root) if expected else None
    sends, recvs = [], []
    for r in range(n):
        ctx = device_of(r) if device_of is not None else _Null()
        with ctx:
            if not case.inplace:
                s = inputs[r] if xp is np else xp.array(inputs[r])
                d = xp.zeros(kout * c, dtype=inputs[r].dtype)
            elif kin == kout:
                s = d = inputs[r] if xp is np else xp.array(inputs[r])
            elif kout > kin:  # allgather, gather: input is block r of the output
                d = xp.zeros(kout * c, dtype=inputs[r].dtype)
                s = d[r * c:(r + 1) * c]
                s[...] = xp.array(inputs[r])
            else:  # reducescatter, scatter: output is block r of the input
                s = inputs[r] if xp is np else xp.array(inputs[r])
                d = s[r * c:(r + 1) * c]
        sends.append(s)
        recvs.append(d)
        if xp is not np:
            inputs[r] = None                  # the device has its copy
    return sends, recvs, want


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _run(case: Case, sends, recvs, executor_backend: str) -> None:
    if case.schedule is None:
        _one_rank(case, sends, recvs)
        return
    _executor()(case.schedule, sends, recvs, op=case.op, backend=executor_backend)


def _one_rank(case: Case, sends, recvs) -> None:
    """One rank, run as a user's call runs (``Communicator(1)``): the call's argument checks and
    NCCL's in-place layout, then a copy where the two buffers are not the same memory.  In place
    nothing moves, but the call is still made and timed, as nccl-tests times NCCL's one-rank call
    (NCCL still launches it): the time is the call's cost, never a no-op's."""
    from kernels.comm.communicator import _single_rank
    from kernels.comm.validation import prepare
    name = case.entry.name
    kout = case.entry.blocks(1)[1]
    s, d = prepare(name, name, sends, recvs, recvs[0].size // kout, case.root, size=1)
    _single_rank(name, s, d, case.op)


def _wrong(case: Case, recvs, want, to_host=np.asarray) -> list[int]:
    """Wrong elements per rank."""
    return [0 if exp is None else count_wrong(to_host(got), exp, case.dtype, case.op, case.nranks)
            for got, exp in zip(recvs, want)]


class Checker:
    """nccl-tests' validation loop: ``check`` iterations with fresh data, stop at the first wrong."""

    def __init__(self) -> None:
        self.rep = 0

    def validate(self, case: Case, run_once) -> tuple[int | None, int]:
        """(wrong elements of the last check or None unchecked, threads (``--backend mpi``: processes) whose ranks
        hold them)."""
        if case.check <= 0:
            return None, 0
        per_rank = []
        for _ in range(case.check):
            self.rep += 1
            per_rank = run_once(self.rep)
            if any(per_rank):
                break
        return sum(per_rank), len({r // case.gpus_per_thread for r, w in enumerate(per_rank) if w})


class HostBackend:
    """Real execution of the schedule by the NumPy executor, timed with the wall clock."""

    name = "host"
    checks = True

    def __init__(self, executor_backend: str = "host") -> None:
        self.executor_backend = executor_backend
        self._checker = Checker()

    def devices(self, n: int, topology) -> list[Device]:
        host, pid = socket.gethostname().split(".")[0], os.getpid()
        return [Device(r, pid, host, r, "cpu", f"NumPy {self.executor_backend} executor")
                for r in range(n)]

    def measure(self, case: Case) -> tuple[float, int | None, int]:
        sends, recvs, _ = make_buffers(case, 0, expected=False)
        with np.errstate(all="ignore"):
            for _ in range(case.warmup):
                _run(case, sends, recvs, self.executor_backend)
            times = []
            for _ in range(case.iters):
                t0 = time.perf_counter()
                _run(case, sends, recvs, self.executor_backend)
                times.append(time.perf_counter() - t0)
        del sends, recvs                          # the check iterations get fresh buffers

        def once(seed: int) -> list[int]:
            s, d, want = make_buffers(case, seed)
            _run(case, s, d, self.executor_backend)
            return _wrong(case, d, want)
        return statistics.median(times) * 1e6, *self._checker.validate(case, once)


class CupyBackend:
    """CuPy arrays on the GPUs (rank r on device r mod GPU count), timed with CUDA events."""

    name = "cupy"
    checks = True

    def __init__(self) -> None:
        try:
            import cupy
            ndev = cupy.cuda.runtime.getDeviceCount()
        except ImportError:
            raise DeviceUnavailable("cupy backend: CuPy is not installed (pip install 'topocoll[cuda12]'); "
                                    "use --backend host or sim") from None
        except Exception as exc:  # CUDA driver/runtime missing or broken
            raise DeviceUnavailable(f"cupy backend: no usable CUDA GPU ({type(exc).__name__}: {exc}); "
                                    f"use --backend host or sim") from None
        if ndev < 1:
            raise DeviceUnavailable("cupy backend: no CUDA GPU found; use --backend host or sim")
        self.cp, self.ndev = cupy, ndev
        self._checker = Checker()

    def _dev(self, r: int):
        return self.cp.cuda.Device(r % self.ndev)

    def devices(self, n: int, topology) -> list[Device]:
        host, pid = socket.gethostname().split(".")[0], os.getpid()
        out = []
        for r in range(n):
            props = self.cp.cuda.runtime.getDeviceProperties(r % self.ndev)
            name = props.get("name", b"GPU")
            name = name.decode() if isinstance(name, bytes) else str(name)
            out.append(Device(r, pid, host, r % self.ndev, f"0x{int(props.get('pciBusID', 0)):02x}", name))
        return out

    def _time_once(self, case: Case, sends, recvs) -> float:
        cp = self.cp
        starts, ends = [], []
        for r in range(case.nranks):
            with self._dev(r):
                ev = cp.cuda.Event()
                ev.record()
                starts.append(ev)
        _run(case, sends, recvs, "cupy")
        for r in range(case.nranks):
            with self._dev(r):
                ev = cp.cuda.Event()
                ev.record()
                ends.append(ev)
        per_rank = []
        for r, (a, b) in enumerate(zip(starts, ends)):
            with self._dev(r):
                b.synchronize()
                per_rank.append(cp.cuda.get_elapsed_time(a, b) * 1e3)
        mode = case.average
        return (per_rank[0] if mode == 0 else min(per_rank) if mode == 2 else max(per_rank) if mode == 3
                else sum(per_rank) / len(per_rank))

    def measure(self, case: Case) -> tuple[float, int | None, int]:
        if case.dtype == "bfloat16":
            raise UnsupportedCollective("cupy backend: CuPy has no bfloat16 arrays; use -d half or float")
        sends, recvs, _ = make_buffers(case, 0, self.cp, self._dev, expected=False)
        for _ in range(case.warmup):
            _run(case, sends, recvs, "cupy")
        times = [self._time_once(case, sends, recvs) for _ in range(case.iters)]

        def once(seed: int) -> list[int]:
            s, d, want = make_buffers(case, seed, self.cp, self._dev)
            _run(case, s, d, "cupy")
            for r in range(case.nranks):
                self._dev(r).synchronize()
            return _wrong(case, d, want, self.cp.asnumpy)
        return statistics.median(times), *self._checker.validate(case, once)


def make_backend(name: str, source=None):
    """Backend by name; ``source`` (a :class:`~synth.plan.selector.ScheduleSelector`) is needed by ``sim``."""
    if name == "host":
        return HostBackend()
    if name == "sim":
        return SimBackend(source)
    if name == "cupy":
        return CupyBackend()
    raise InvalidArgument(f"backend {name!r} is not one of {', '.join(BACKENDS)}")
