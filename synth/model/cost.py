"""Alpha-beta cost model of a :class:`~synth.ir.schedule.Schedule` on a :class:`~synth.ir.fabric.Fabric`.

Units: bytes, µs, GB/s (1e9 bytes/s, per direction).  ``nbytes`` is always the nccl-tests
"size": ``max(send, recv)`` bytes of one rank (for allgather the whole output).

One step
--------
A step moves each of its transfers' chunks over the channel's route at the same time::

    step_time = step_overhead_us + max channel latency of its transfers
                + t + 2 * sqrt(slice_overhead_us * t)
    t         = max over resources r of load_r(chunks) * chunk_bytes / (bandwidth_gbps(r) * eff(kind(r)) * 1e3)

``t`` is the plain alpha-beta bandwidth term (1 GB/s = 1e3 bytes/µs).  The square-root term
models how runtimes such as NCCL stream a step through a two-stage buffer pipeline (sender
writes a slice into the receiver's FIFO, the receiver consumes it): ``q`` slices cost
``(q + 1) * (x + t / q)``, minimal at ``q = sqrt(t / x)`` where it equals ``x + t + 2 sqrt(x t)``
(the constant ``x`` is part of ``step_overhead_us``).  ``slice_overhead_us=0`` gives plain
alpha-beta, which is what a machine's parameters hold (:func:`synth.model.physics.cost_params_for`):
the NCCL model meets real logs' mid sizes without the term.

Latency: the critical path
--------------------------
The fixed part is not one overhead per step: a schedule runs as a dataflow (each transfer waits
for its chunk to reach its sender, not for the whole previous step), so it costs
``launch_us`` plus the longest chain of hops, each ``step_overhead_us`` plus its channel's latency
(plus ``network_latency_us`` where it crosses the network); see :class:`_CriticalPath`.  A ring of
``S`` steps is one chain of ``S`` hops, and on several hosts only its network hops pay the
network's latency, as NCCL's latency model counts a ring.

Pipelining over slices of the message
-------------------------------------
A schedule may also run over ``k`` slices of the message: each slice runs the whole schedule on
``nbytes / k`` and slice ``s`` executes step ``t`` in *wavefront* ``s + t``.  A wavefront costs one
step time whose load is the **sum** of the loads of all steps active in it (they share the
links), so the bandwidth part is the sum over the ``S + k - 1`` wavefronts; the fixed part is the
launch, the critical path of one slice and, per further slice, one more overhead and latency of
the slowest step.  Schedules whose every
step loads the same links (rings) gain nothing and keep ``k = 1``.  ``k`` is the best of
``CostParams.pipeline_slices`` (default 1, 2, 4, ..., 64), so pipelining is never slower than
running unpipelined.  Reductions are assumed to run at link speed (no compute term).

Protocols
---------
``estimate(schedule, nbytes, protocol="ll")`` times the schedule as our executor runs it under LL
(:mod:`synth.model.physics`): Simple's launch and first hop, NCCL's ring/LL hops after, twice the
bytes on the wire (8 payload bytes per 16-byte line); ``simple`` (the default) as above.

Examples
--------
>>> from topo_probe.topology.model import Topology
>>> from synth.ir.fabric import build_fabric
>>> from synth.ir.schedule import Schedule, Step, Transfer
>>> t = Topology("pair"); t.add_gpu(0); t.add_gpu(1)
'gpu0'
'gpu1'
>>> t.add_link("gpu0", "gpu1", kind="nvlink", bandwidth_gbps=25.0, latency_us=1.0)
>>> s = Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),))
>>> plain = CostParams(launch_us=0.0, step_overhead_us=2.0, slice_overhead_us=0.0)
>>> CostModel(build_fabric(t), plain).schedule_time_us(s, 2_000_000)  # 2 + 1 + 1e6 B / 20e3 B/µs
53.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from synth.formats.nccl_tests.conventions import BUSBW_FACTOR
from synth.ir.collectives import canonical
from synth.ir.fabric import Fabric
from synth.ir.route_table import route_table
from synth.ir.schedule import Schedule, Step
from synth.model.physics import WIRE_BYTES_PER_BYTE, CostParams, check_protocol, cost_params_for, \
    table_protocol_params
from synth.model.routes import ChannelRoutes, StepRoutes
from topo_probe.errors import InvalidArgument, ScheduleInvalid

#: wavefronts x loaded resources above which the wavefronts' peaks are taken one wavefront at a time
WINDOW_CELLS = 1 << 22
#: steps of at least this many transfers read their routes as arrays (a cluster's RouteArrays, else StepRoutes)
ARRAY_TRANSFERS = 64


@dataclass(frozen=True)
class Estimate:
    """A schedule's modelled time: ``time_us`` in all, over ``slices`` slices in ``wavefronts``
    wavefronts; ``bandwidth_us`` its plain bandwidth part, ``fixed_us`` launch, overheads and
    latencies, the rest the in-step pipelining term; ``protocol`` ``simple`` or ``ll``."""

    time_us: float
    slices: int
    wavefronts: int
    bandwidth_us: float
    fixed_us: float
    protocol: str = "simple"


def algbw_gbps(nbytes: float, time_us: float) -> float:
    """nccl-tests algorithm bandwidth: ``nbytes / time`` in GB/s (1e9 bytes/s).

    >>> round(algbw_gbps(4294967296, 32336.0), 2)
    132.82
    """
    return float(nbytes) / (float(time_us) * 1e3) if time_us > 0 else 0.0


def busbw_gbps(collective: str, n: int, nbytes: float, time_us: float) -> float:
    """nccl-tests bus bandwidth: algbw times the collective's factor (allreduce 2(n-1)/n, ...).

    >>> round(busbw_gbps("allreduce", 8, 4294967296, 32336.0), 2)
    232.44
    """
    return algbw_gbps(nbytes, time_us) * BUSBW_FACTOR[canonical(collective)](n)


def chunk_bytes(schedule: Schedule, nbytes: float) -> float:
    """Bytes of one chunk when the collective moves ``nbytes`` (nccl-tests size).

    ``block = nbytes / max(input blocks, output blocks)``, ``chunk = block / pieces per block``.
    """
    spec = schedule.spec
    return float(nbytes) / max(spec.input_blocks(), spec.output_blocks()) / spec.pieces_per_block


@dataclass(frozen=True)
class _Wavefronts:
    """A schedule run over ``slices`` message slices, apart from the size: ``count`` wavefronts,
    ``peak`` the busiest resource's chunks over its rate in each (µs per chunk byte, before
    dividing the chunk by ``slices``), ``fixed_us`` launch, step overheads and latencies (µs)."""

    slices: int
    count: int
    peak: np.ndarray
    fixed_us: float


class _CriticalPath:
    """The latency part of a schedule run as a dataflow, one step after another (µs).

    A transfer starts when its chunk has arrived at its sender (every earlier transfer of that
    chunk to that rank), costs ``overhead_us`` to issue and arrives its channel's latency later;
    transfers that do not wait on each other overlap, as the channels of NCCL's rings and the
    blocks of our executor run on their own.  :meth:`end_us` is the last arrival: a ring of ``S``
    steps costs ``S`` hops, of which only those crossing the network pay the network's latency,
    as NCCL's latency model counts a ring's hops.  The bytes are charged apart (the wavefronts'
    bandwidth terms).
    """

    def __init__(self, chunks: int, overhead_us: float) -> None:
        self.chunks, self.overhead = max(1, chunks), overhead_us
        self.steps: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, step: Step, lat_each: np.ndarray) -> None:
        """Keep one step's ``(sender key, receiver key, latency)`` per transfer (key: rank, chunk)."""
        n = len(step.transfers)
        if n == 0:
            return
        src = np.fromiter((t.src for t in step.transfers), dtype=np.int64, count=n)
        dst = np.fromiter((t.dst for t in step.transfers), dtype=np.int64, count=n)
        chunk = np.fromiter((t.chunk for t in step.transfers), dtype=np.int64, count=n)
        self.steps.append((src * self.chunks + chunk, dst * self.chunks + chunk, lat_each))

    def end_us(self) -> float:
        """The last arrival (µs after the launch).  Arrival times are kept only for the (rank, chunk)
        pairs some transfer delivers to (a sorted key array), so memory grows with the transfers,
        not with ranks x chunks."""
        if not self.steps:
            return 0.0
        keys = np.unique(np.concatenate([d for _, d, _ in self.steps]))
        ready = np.zeros(len(keys))
        end = 0.0
        for src_key, dst_key, lat in self.steps:
            at = np.minimum(np.searchsorted(keys, src_key), len(keys) - 1)
            start = np.where(keys[at] == src_key, ready[at], 0.0)
            arrive = start + self.overhead + lat
            np.maximum.at(ready, np.searchsorted(keys, dst_key), arrive)
            end = max(end, float(np.max(arrive)))
        return end


class CostModel:
    """Alpha-beta time of schedules on ``fabric`` (see the module docstring).

    Parameters
    ----------
    fabric : Fabric
        Channels, routes and resources (:func:`synth.ir.fabric.build_fabric`).
    params : CostParams, optional
        Efficiencies and overheads (default: :func:`synth.model.physics.cost_params_for` of the
        fabric, the link efficiencies the NCCL model uses for the same GPUs and network).
    ll_params : CostParams, optional
        The same under LL (default: ``cost_params_for(fabric, protocol="ll")`` where ``params`` is
        defaulted too, else ``params`` moved by NCCL's LL/Simple table ratios).
    """

    #: schedules whose wavefronts are kept (the baseline chooser times six at every size)
    KEEP = 8

    def __init__(self, fabric: Fabric, params: CostParams | None = None, ll_params: CostParams | None = None) -> None:
        self.fabric = fabric
        self._ll_given, self._ll_shared, self._ll = ll_params, params is None, None  # LL model: on first use
        if params is None:     # the shared link constants of the fabric's GPUs and network
            params = cost_params_for(fabric)
        self.params = params
        self._res = {r: k for k, r in enumerate(fabric.resources)}
        #: effective bytes per µs of each resource
        self.rate = np.array([info.bandwidth_gbps * self.params.efficiency(info.kind) * 1e3
                              for info in fabric.resources.values()], dtype=float)
        self._network = np.array([info.kind == "network" for info in fabric.resources.values()], dtype=bool)
        self._routes = ChannelRoutes(fabric, self._res, self._network, self.params.network_latency_us)
        self._arrays = None                  # a cluster's routes for whole steps (RouteArrays), made on first use
        self._table: StepRoutes | None = None    # any other fabric's (StepRoutes), made on its first big step
        #: id(schedule) -> (schedule, its :class:`_Wavefronts` per slice count), the last few timed
        self._timed: dict[int, tuple] = {}

    # ---------------------------------------------------------------- loads
    def step_loads(self, step: Step, step_index: int = 0) -> tuple[np.ndarray, float]:
        """``(load per resource in chunks, max channel latency in µs)`` of one step.

        Raises
        ------
        ScheduleInvalid
            A transfer whose src -> dst is not a channel (rule ``no-channel``).
        """
        load, lat = self._step_detail(step, step_index)
        return load, (float(np.max(lat)) if len(lat) else 0.0)

    def _step_detail(self, step: Step, step_index: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``(load per resource in chunks, latency of each transfer in µs)`` of one step."""
        idx, frac, lats = self._step_entries(step, step_index)
        # bincount adds the fractions in transfer order, as a loop of load[r] += f would
        load = np.bincount(idx, weights=frac, minlength=len(self.rate)) if len(idx) else np.zeros(len(self.rate))
        return load.astype(float, copy=False), lats

    def _step_entries(self, step: Step, step_index: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(resource index, fraction of a chunk, in transfer order; latency of each transfer in
        µs)`` of one step: its loads before they are summed per resource."""
        if len(step.transfers) >= ARRAY_TRANSFERS:
            src, dst = [t.src for t in step.transfers], [t.dst for t in step.transfers]
            if self._route_arrays() is not None:
                got = self._arrays.entries(src, dst)
                if got is not None:           # else: some pair is no channel, reported below
                    starts, idx, frac, tmpl, _ = got
                    return idx, frac, self._arrays.transfer_latencies(idx, starts, tmpl)
            elif type(self.fabric.channels) is dict:      # a cluster's lazy channels are never listed
                if self._table is None:
                    self._table = StepRoutes(route_table(self.fabric), self.fabric, self._network,
                                             self.params.network_latency_us)
                got = self._table.entries(src, dst)
                if got is not None:
                    return got
        idx, frac, lats = [], [], []
        for ti, t in enumerate(step.transfers):
            hit = self._routes.get((t.src, t.dst))
            if hit is None:
                raise ScheduleInvalid(
                    f"step {step_index}, transfer {ti} (chunk {t.chunk}, rank {t.src} -> {t.dst}): "
                    f"not a channel of fabric {self.fabric.topology_name!r} (rule: no-channel)",
                    rule="no-channel", step=step_index, transfer=ti, rank=t.src, chunk=t.chunk)
            idx.append(hit[0])
            frac.append(hit[1])
            lats.append(hit[2])
        if not idx:
            return np.zeros(0, dtype=np.intp), np.zeros(0), np.zeros(0)
        return np.concatenate(idx), np.concatenate(frac), np.asarray(lats, dtype=float)

    def _route_arrays(self):
        """The cluster fabric's :class:`synth.ir.cluster_routes.RouteArrays` (None: not a cluster)."""
        if self._arrays is None:
            from synth.ir.cluster_fabric import ClusterChannels, ClusterLatencies
            ch, lat = self.fabric.channels, self.fabric.path_latency_us
            if not (isinstance(ch, ClusterChannels) and isinstance(lat, ClusterLatencies)):
                self._arrays = False
            else:
                from synth.ir.cluster_routes import RouteArrays
                self._arrays = RouteArrays(ch, lat, self._res, self._network, self.params.network_latency_us)
        return self._arrays or None

    def _wave_time(self, load: np.ndarray, lat: float, nbytes_chunk: float) -> tuple[float, float]:
        t = float(np.max(load / self.rate)) * nbytes_chunk if len(load) else 0.0
        fixed = self.params.step_overhead_us + lat
        return fixed + t + 2.0 * math.sqrt(self.params.slice_overhead_us * t), t

    def step_time_us(self, step: Step, chunk_bytes: float) -> float:
        """Time of one step whose chunks are ``chunk_bytes`` bytes (µs, no launch cost)."""
        load, lat = self.step_loads(step)
        return self._wave_time(load, lat, float(chunk_bytes))[0]

    # ---------------------------------------------------------------- schedules
    def _matrix(self, schedule: Schedule) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
        """``(loads per step and used resource, max latency per step, critical path in µs, rate of
        each used resource)``.  Only resources some step loads get a column (a ring on 1,024 fully
        connected GPUs loads 1,024 of its 1,047,552 links: 16 MiB instead of 16 GiB); the others
        are 0 in every step and never the busiest."""
        if schedule.ranks != self.fabric.num_ranks:
            raise ScheduleInvalid(f"schedule has {schedule.ranks} ranks, fabric {self.fabric.topology_name!r} "
                                  f"has {self.fabric.num_ranks} (rule: wrong-topology)", rule="wrong-topology")
        lats = np.zeros(schedule.num_steps)
        path = _CriticalPath(schedule.spec.num_chunks, self.params.step_overhead_us)
        entries = []
        for si, step in enumerate(schedule.steps):
            idx, frac, each = self._step_entries(step, si)
            entries.append((idx, frac))
            lats[si] = float(np.max(each)) if len(each) else 0.0
            path.add(step, each)
        used = np.unique(np.concatenate([e[0] for e in entries])) if entries else np.zeros(0, dtype=np.intp)
        loads = np.zeros((schedule.num_steps, len(used)))
        for si, (idx, frac) in enumerate(entries):
            if len(idx):         # bincount adds in transfer order, per column as before
                loads[si] = np.bincount(np.searchsorted(used, idx), weights=frac, minlength=len(used))
        return loads, lats, path.end_us(), self.rate[used]

    def _wavefronts(self, loads: np.ndarray, lats: np.ndarray, k: int, path_us: float,
                    rate: np.ndarray) -> "_Wavefronts":
        """What :meth:`estimate` needs of a schedule run over ``k`` slices, whatever the size: the
        fixed part is the launch, the critical path of one slice (``path_us``) and, for each
        further slice, one more of the slowest step's overhead and latency (``rate``: of
        ``loads``' columns)."""
        S, p = len(lats), self.params
        if S == 0:
            return _Wavefronts(k, 0, np.zeros(0), p.launch_us)
        csum = np.vstack([np.zeros((1, loads.shape[1])), np.cumsum(loads, axis=0)])
        w = np.arange(S + k - 1)
        lo, hi = np.maximum(0, w - k + 1), np.minimum(S - 1, w)
        if not loads.shape[1]:
            peak = np.zeros(len(w))
        elif len(w) * loads.shape[1] <= WINDOW_CELLS:          # (W, R) chunks per wavefront at once
            peak = np.max((csum[hi + 1] - csum[lo]) / rate, axis=1)
        else:             # a million links: one wavefront at a time, the same arithmetic in one row's memory
            peak = np.array([np.max((csum[b + 1] - csum[a]) / rate) for a, b in zip(lo.tolist(), hi.tolist())])
        fixed = p.launch_us + path_us + (k - 1) * (p.step_overhead_us + float(np.max(lats)))
        return _Wavefronts(k, len(w), peak, fixed)

    def _pipelined(self, wave: "_Wavefronts", cb: float) -> Estimate:
        if wave.count == 0:
            return Estimate(wave.fixed_us, wave.slices, 0, 0.0, wave.fixed_us)
        t = wave.peak * (cb / wave.slices)                     # bandwidth term of each wavefront (µs)
        pipe = float(np.sum(2.0 * np.sqrt(self.params.slice_overhead_us * t)))
        bw = float(np.sum(t))
        return Estimate(wave.fixed_us + bw + pipe, wave.slices, wave.count, bw, wave.fixed_us)

    def _ll_model(self) -> "CostModel":
        if self._ll is None:
            ll = self._ll_given or (cost_params_for(self.fabric, protocol="ll") if self._ll_shared else
                                    table_protocol_params(self.params, "ll"))
            self._ll = CostModel(self.fabric, ll, ll)
        return self._ll

    def estimate(self, schedule: Schedule, nbytes: float, protocol: str = "simple") -> Estimate:
        """The best :class:`Estimate` over the pipelining choices for ``nbytes`` (nccl-tests size),
        the steps moved under ``protocol`` (``ll``: LL's latencies, twice the bytes on the wire).

        The wavefronts of the last :attr:`KEEP` schedules asked about are kept, so timing a few
        schedules at many sizes (the baseline chooser) costs their transfers once.

        Raises
        ------
        ScheduleInvalid
            The schedule has another rank count than the fabric, or uses a non-channel.
        """
        if nbytes < 0:
            raise InvalidArgument(f"nbytes must be >= 0, got {nbytes!r}")
        if check_protocol(protocol) != "simple":
            llm = self._ll_model()
            wire, ll = llm.estimate(schedule, nbytes * WIRE_BYTES_PER_BYTE[protocol]), llm.params
            # LL changes only how a step waits for an earlier one: launch and first step as Simple
            same = (self.params.launch_us - ll.launch_us + self.params.step_overhead_us - ll.step_overhead_us
                    if schedule.steps else 0.0)
            return replace(wire, protocol=protocol, time_us=wire.time_us + same, fixed_us=wire.fixed_us + same)
        hit = self._timed.get(id(schedule))
        if hit is None or hit[0] is not schedule:
            loads, lats, path_us, rate = self._matrix(schedule)
            if len(self._timed) >= self.KEEP:
                del self._timed[next(iter(self._timed))]
            hit = self._timed[id(schedule)] = (schedule, [self._wavefronts(loads, lats, k, path_us, rate)
                                                          for k in sorted(set(self.params.pipeline_slices))])
        cb = chunk_bytes(schedule, nbytes)
        ests = [self._pipelined(wave, cb) for wave in hit[1]]
        return min(ests, key=lambda e: (e.time_us, e.slices))

    def schedule_time_us(self, schedule: Schedule, nbytes: float, protocol: str = "simple") -> float:
        """Modelled time (µs) of ``schedule`` moving ``nbytes`` (nccl-tests size) under
        ``protocol``, best slicing."""
        return self.estimate(schedule, nbytes, protocol).time_us

    def schedule_busbw_gbps(self, schedule: Schedule, nbytes: float) -> float:
        """nccl-tests bus bandwidth (GB/s) the model predicts for ``schedule`` at ``nbytes``."""
        return busbw_gbps(schedule.collective, schedule.ranks, nbytes, self.schedule_time_us(schedule, nbytes))

    algbw_gbps = staticmethod(algbw_gbps)
    busbw_gbps = staticmethod(busbw_gbps)
