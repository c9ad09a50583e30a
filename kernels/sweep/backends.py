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
    the cost model's prediction (:class:`synth.model.cost.CostModel`) for the schedule at the
    nccl-tests size, same for both placements.
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
from dataclasses import dataclass

import numpy as np

from kernels.sweep.table import Counts, Entry, count_wrong
from synth.ir.schedule import Schedule
from synth.model.nccl.constants import ALGOS, MAXCHANNELS, PROTOS
from topo_probe.errors import DeviceUnavailable, InvalidArgument, UnsupportedCollective

BACKENDS = ("host", "cupy", "sim")
#: the modelled NCCL choice per row (``algorithm/protocol/channels``), wide enough for the longest
#: label the model can give (``collnet_direct/Simple/32``), so no cell shifts the columns after it
NCCL_ALGO_COLUMN = (("nccl", "algo", max(map(len, ALGOS)) + max(map(len, PROTOS)) + len(str(MAXCHANNELS)) + 2),)


@dataclass(frozen=True)
class Case:
    """One measurement: collective entry, ranks, counts, type, op, root, placement, schedule
    and the nccl-tests loop parameters (iters, warmup, check iterations, average mode)."""

    entry: Entry
    nranks: int
    counts: Counts
    dtype: str
    op: str
    root: int | None
    inplace: bool
    schedule: Schedule | None
    iters: int = 20
    warmup: int = 5
    check: int = 1
    average: int = 1
    #: NCCL itself runs here (``--algo nccl`` or a plan entry ``nccl``); ``schedule`` is the fallback
    nccl: bool = False


@dataclass(frozen=True)
class Device:
    """One ``#  Rank r Group g Pid p on host device d [bus] info`` line."""

    rank: int
    pid: int
    hostname: str
    device: int
    bus: str
    info: str
    group: int = 0


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
    inputs = e.inputs(seed, c, case.dtype, case.op, n)
    want = e.expected(inputs, c, case.dtype, case.op, n, case.root) if expected else None
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


def _wrong(case: Case, recvs, want, to_host=np.asarray) -> int:
    total = 0
    for got, exp in zip(recvs, want):
        if exp is not None:
            total += count_wrong(to_host(got), exp, case.dtype, case.op, case.nranks)
    return total


class _Checker:
    """nccl-tests' validation loop: ``check`` iterations with fresh data, stop at the first wrong."""

    def __init__(self) -> None:
        self.rep = 0

    def validate(self, case: Case, run_once) -> int | None:
        if case.check <= 0:
            return None
        wrong = 0
        for _ in range(case.check):
            self.rep += 1
            wrong = run_once(self.rep)
            if wrong:
                break
        return wrong


class HostBackend:
    """Real execution of the schedule by the NumPy executor, timed with the wall clock."""

    name = "host"
    checks = True

    def __init__(self, executor_backend: str = "host") -> None:
        self.executor_backend = executor_backend
        self._checker = _Checker()

    def devices(self, n: int, topology) -> list[Device]:
        host, pid = socket.gethostname().split(".")[0], os.getpid()
        return [Device(r, pid, host, r, "cpu", f"NumPy {self.executor_backend} executor")
                for r in range(n)]

    def measure(self, case: Case) -> tuple[float, int | None]:
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

        def once(seed: int) -> int:
            s, d, want = make_buffers(case, seed)
            _run(case, s, d, self.executor_backend)
            return _wrong(case, d, want)
        return statistics.median(times) * 1e6, self._checker.validate(case, once)


def _bus(pci_bus_id) -> str:
    """``0000:07:00.0`` -> ``0x07`` (nccl-tests prints the PCI bus number)."""
    try:
        return f"0x{int(str(pci_bus_id).split(':')[-2], 16):02x}"
    except (ValueError, IndexError):
        return "sim"


class SimBackend:
    """The cost model's prediction; nothing runs, so nothing is validated (``N/A``).

    Schedules are timed by :class:`synth.model.cost.CostModel`; where NCCL itself runs
    (``--algo nccl``, a plan entry ``nccl``) by :class:`synth.model.nccl.NcclModel`, with the
    algorithm / protocol / channels NCCL would pick in a ``nccl`` column.  With ``bounds=True``
    each row also shows the pipelining the model chose (``slices``) and the lower bound of any
    schedule on the fabric (:func:`synth.model.bounds.lower_bounds`, same efficiencies) as a
    time and a busbw; with ``measured`` a real log's busbw and pred/real.
    """

    name = "sim"
    checks = False

    def __init__(self, source, *, bounds: bool = False, measured: dict[int, float] | None = None,
                 nccl_column: bool = False, nccl_env=None, nccl_machine: dict | None = None,
                 nccl_version: tuple[int, int] | None = None) -> None:
        self.source = source
        self.extra_columns = (("slices", ""), ("bound", "(us)"), ("bound", "busbw")) if bounds else ()
        if nccl_column:
            self.extra_columns += NCCL_ALGO_COLUMN
        #: a real log's out-of-place busbw (GB/s) per size: printed beside the prediction
        self.measured = measured
        if measured is not None:
            self.extra_columns += (("real", "busbw"), ("pred/", "real"))
        self._bounds: dict = {}
        self._nccl = None
        self._nccl_env = nccl_env
        #: what a real log says of the run (``arch``, ``gpus_per_process``), applied to the machine
        self._nccl_machine = nccl_machine or {}
        #: the NCCL (major, minor) a real log printed; None: the model's default (the newest it knows)
        self._nccl_version = nccl_version

    @property
    def nccl(self):
        """The NCCL model of the selector's topology (one process per GPU, this environment)."""
        if self._nccl is None:
            from synth.model.nccl import NcclEnv, NcclMachine, NcclModel
            env = self._nccl_env if self._nccl_env is not None else NcclEnv.from_environ()
            machine = NcclMachine.from_topology(self.source.topology).with_(**self._nccl_machine)
            extra = {"version": self._nccl_version} if self._nccl_version else {}
            self._nccl = NcclModel(machine, env=env, **extra)
        return self._nccl

    def time_us(self, case: Case) -> float:
        if case.nccl:
            return self.nccl.time_us(case.entry.name, case.counts.size)
        return float(self.source.cost.schedule_time_us(case.schedule, case.counts.size))

    def measure(self, case: Case) -> tuple[float, int | None]:
        if case.schedule is None:   # one rank: NCCL still makes the call; the model's fixed cost of a call
            from synth.model.physics import LAUNCH_US
            cost = getattr(self.source, "cost", None)
            return (cost.params.launch_us if cost is not None else LAUNCH_US), None
        return self.time_us(case), None

    def extras(self, case: Case) -> tuple[str, ...]:
        names = [column[0] for column in self.extra_columns]
        out = self._bound_cells(case) if "bound" in names else ()
        if "nccl" in names:
            out += (self.nccl.choose(case.entry.name, case.counts.size).label if case.nccl else "-",)
        if self.measured is not None:
            from synth.formats.nccl_tests.conventions import busbw_gbps
            real = self.measured.get(case.counts.size)
            pred = busbw_gbps(case.entry.name, case.nranks, case.counts.size, self.time_us(case))
            out += (f"{real:.2f}", f"{pred / real:.3f}") if real else ("-", "-")
        return out

    def _bound_cells(self, case: Case) -> tuple[str, ...]:
        from synth.formats.nccl_tests.conventions import busbw_gbps
        from synth.formats.nccl_tests.writer import fmt_time
        from synth.model.bounds import lower_bounds
        sched, size = case.schedule, case.counts.size
        key = (sched.collective, sched.root)
        if key not in self._bounds:
            self._bounds[key] = lower_bounds(self.source.fabric, sched.collective, sched.root)
        slices = "-" if case.nccl else str(self.source.cost.estimate(sched, size).slices)
        lb = self._bounds[key].time_us(size, self.source.cost.params)
        return (slices, fmt_time(lb).strip(), f"{busbw_gbps(sched.collective, case.nranks, size, lb):.2f}")

    def devices(self, n: int, topology) -> list[Device]:
        out = []
        for r in range(n):
            attrs = topology.graph.nodes[topology.gpu(r)] if topology is not None else {}
            name = attrs.get("name") or "GPU"
            where = topology.name if topology is not None else "model"
            out.append(Device(r, os.getpid(), "sim", r, _bus(attrs.get("pci_bus_id")),
                              f"{name} (cost model of {where})"))
        return out



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
        self._checker = _Checker()

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

    def measure(self, case: Case) -> tuple[float, int | None]:
        if case.dtype == "bfloat16":
            raise UnsupportedCollective("cupy backend: CuPy has no bfloat16 arrays; use -d half or float")
        sends, recvs, _ = make_buffers(case, 0, self.cp, self._dev, expected=False)
        for _ in range(case.warmup):
            _run(case, sends, recvs, "cupy")
        times = [self._time_once(case, sends, recvs) for _ in range(case.iters)]

        def once(seed: int) -> int:
            s, d, want = make_buffers(case, seed, self.cp, self._dev)
            _run(case, s, d, "cupy")
            for r in range(case.nranks):
                self._dev(r).synchronize()
            return _wrong(case, d, want, self.cp.asnumpy)
        return statistics.median(times), self._checker.validate(case, once)


def make_backend(name: str, source=None):
    """Backend by name; ``source`` (a :class:`~synth.plan.selector.ScheduleSelector`) is needed by ``sim``."""
    if name == "host":
        return HostBackend()
    if name == "sim":
        return SimBackend(source)
    if name == "cupy":
        return CupyBackend()
    raise InvalidArgument(f"backend {name!r} is not one of {', '.join(BACKENDS)}")
