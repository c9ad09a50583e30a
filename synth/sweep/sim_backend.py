"""The sweep's ``sim`` backend: the cost model's prediction of each row, nothing runs.

It has the interface of every sweep backend (:func:`synth.sweep.driver.run_sweep`): ``name``,
``checks``, ``devices(n, topology)`` for the ``# Using devices`` lines and ``measure(case)``
returning ``(time_us, None)``: what ``sweep --backend cupy`` would measure, as the plan's decision predicts it
(:mod:`synth.plan.decision`): the cost model's time (:class:`synth.model.cost.CostModel`) of the schedule at the
nccl-tests size, under the protocol its plan entry records (LL where it says LL; Simple otherwise), plus the
measured fixed cost of our executor that runs it (:func:`SimBackend.executor_us`), same for both placements, never
validated (``N/A``): a ``--algo plan`` row is ``report.md``'s *plan µs* at that size.  Where NCCL runs, the NCCL
model's time alone.
One rank: no schedule runs, but NCCL still makes the call, so the row is the cost model's fixed
cost of a call (``launch_us``).  A call of 0 elements costs 0 µs (:meth:`SimBackend.empty_call_free`)
from NCCL 2.20 (:data:`EMPTY_CALL_DISCARDED_FROM`): NCCL discards an empty collective before it enqueues or
launches anything (``taskAppend``: NVIDIA/nccl v2.20.3-1 src/enqueue.cc line 1865, v2.28.9-1 lines 2554-2555,
``if (info->count == 0) return ncclSuccess;``, ahead of the one-rank launch too; RCCL the same), our communicators
return before any schedule runs, and the model has no cost for a call that does nothing (real logs' 0-byte rows:
0.06-1.65 µs of host time).  Before 2.20 (up to v2.19.4-1 ``taskAppend`` and ``ncclEnqueueCheck`` test no count:
a one-rank call goes to ``ncclLaunchOneRank``, src/enqueue.cc line 1565, the others are enqueued and launched) an
empty NCCL call keeps its modelled time, as does the one-rank call's launch cost.  The backends that run live in
:mod:`kernels.sweep.backends`.
"""

from __future__ import annotations

import os

from synth.formats.nccl_tests.device_line import Device
from synth.model.nccl.constants import ALGOS, MAXCHANNELS, NCCL_VERSION, PROTOS
from synth.plan.decision import EXECUTOR_COSTS, counted_executor_us, counted_records, executor_for
from synth.plan.protocol import SIMPLE
from synth.sweep.driver import Case

#: the modelled NCCL choice per row (``algorithm/protocol/channels``), wide enough for the longest
#: label the model can give (``collnet_direct/Simple/32``), so no cell shifts the columns after it
NCCL_ALGO_COLUMN = (("nccl", "algo", max(map(len, ALGOS)) + max(map(len, PROTOS)) + len(str(MAXCHANNELS)) + 2),)

#: the first NCCL (major, minor) that discards a collective of 0 elements before any launch: ``taskAppend``'s
#: ``if (info->count == 0 && info->coll != ncclFuncSend && info->coll != ncclFuncRecv) return ncclSuccess;``
#: (NVIDIA/nccl v2.20.3-1 src/enqueue.cc line 1865, the first 2.20 release); no count test in v2.19.4-1 or before
#: (``git grep "count == 0"`` / ``nBytes == 0`` over src/ of every tag v2.3.7-1 .. v2.19.4-1)
EMPTY_CALL_DISCARDED_FROM = (2, 20)


def _bus(pci_bus_id) -> str:
    """``0000:07:00.0`` -> ``0x07`` (nccl-tests prints the PCI bus number)."""
    try:
        return f"0x{int(str(pci_bus_id).split(':')[-2], 16):02x}"
    except (ValueError, IndexError):
        return "sim"


class SimBackend:
    """The cost model's prediction; nothing runs, so nothing is validated (``N/A``).

    Schedules are timed by :class:`synth.model.cost.CostModel` plus our executor's fixed cost; where NCCL itself runs
    (``--algo nccl``, a plan entry ``nccl``) by :class:`synth.model.nccl.NcclModel`, with the
    algorithm / protocol / channels NCCL would pick in a ``nccl`` column.  With ``bounds=True``
    each row also shows the pipelining the model chose (``slices``) and the lower bound of any
    schedule on the fabric (:func:`synth.model.bounds.lower_bounds`, same efficiencies) as a
    time and a busbw; with ``measured`` a real log's busbw and pred/real.
    """

    name = "sim"
    checks = False
    #: what a row's time counts, for the ``#`` notes of every sim sweep (``report.md``'s *plan µs* for a plan row)
    counts_note = ("sim: a schedule's time is the cost model's under the protocol its plan entry records (LL where "
                   "it says LL, else Simple) plus our executor's measured fixed cost as the plan's decision counts "
                   "it (a plan row is report.md's plan us); nccl: the NCCL model's alone")

    def __init__(self, source, *, bounds: bool = False, measured: dict[int, float] | None = None,
                 nccl_column: bool = False, nccl_env=None, nccl_machine: dict | None = None,
                 nccl_version: tuple[int, ...] | None = None) -> None:
        self.source = source
        self.extra_columns = (("slices", ""), ("bound", "(us)"), ("bound", "busbw")) if bounds else ()
        if nccl_column:
            self.extra_columns += NCCL_ALGO_COLUMN
        #: a real log's out-of-place busbw (GB/s) per size: printed beside the prediction
        self.measured = measured
        if measured is not None:
            self.extra_columns += (("real", "busbw"), ("pred/", "real"))
        self._bounds: dict = {}
        #: our executor's fixed cost (µs) per schedule not from a plan entry, by ``id``
        self._fixed: dict = {}
        self._nccl = None
        self._nccl_env = nccl_env
        #: what a real log says of the run (``arch``, ``gpus_per_process``), applied to the machine
        self._nccl_machine = nccl_machine or {}
        #: the NCCL version followed ((major, minor) or with its patch: named, or printed by a real log); None: the
        #: model's default
        self._nccl_version = nccl_version

    @property
    def nccl(self):
        """The NCCL model of the selector's topology (one process per GPU, this environment)."""
        if self._nccl is None:
            from synth.model.nccl import NcclEnv, NcclMachine, NcclModel
            env = self._nccl_env if self._nccl_env is not None else NcclEnv.from_environ()
            machine = NcclMachine.from_topology(self.source.topology).with_(**self._nccl_machine)
            self._nccl = NcclModel(machine, env=env, version=self._nccl_version)
        return self._nccl

    def time_us(self, case: Case) -> float:
        """The row's time (µs): NCCL's by the NCCL model, or our schedule's modelled time under its protocol
        (:meth:`protocol`) plus :meth:`executor_us`."""
        if case.nccl:
            return self.nccl.time_us(case.entry.name, case.counts.size)
        sched_us = self.source.cost.schedule_time_us(case.schedule, case.counts.size, self.protocol(case))
        return float(sched_us + self.executor_us(case))

    @staticmethod
    def protocol(case: Case) -> str:
        """The protocol our executor moves ``case``'s schedule with: the plan entry's (``ll`` or ``simple``,
        :mod:`synth.plan.protocol`); Simple for a schedule not from a plan (``--algo ring``, a file)."""
        if case.nccl or case.plan_entry is None:
            return SIMPLE
        return getattr(case.plan_entry, "protocol", None) or SIMPLE

    def executor_us(self, case: Case) -> float:
        """The fixed cost (µs) of our executor running ``case``'s schedule, as the plan's decision counts it
        (:func:`synth.plan.decision.counted_executor_us`): the plan entry's recorded executor and records, or for a
        schedule not from a plan (or a plan entry without a decision) the executor the decision would count on this
        fabric (:func:`synth.plan.decision.executor_for`) for the schedule's busiest rank's records
        (:func:`synth.plan.decision.counted_records`, as the decision counts them)."""
        decision = getattr(case.plan_entry, "decision", None)
        if isinstance(decision, dict) and decision.get("executor") in EXECUTOR_COSTS:
            return counted_executor_us(decision, f"plan entry {case.entry.name} from {case.plan_entry.min_bytes} bytes")
        key = id(case.schedule)
        if key not in self._fixed:
            executor = executor_for(self.source.fabric)
            fixed = EXECUTOR_COSTS[executor].fixed_us(counted_records(case.schedule, executor))
            self._fixed[key] = (case.schedule, fixed)     # the schedule kept: its id stays its own
        return self._fixed[key][1]

    def empty_call_free(self, case: Case) -> bool:
        """Whether ``case`` moves 0 elements and so launches nothing: our schedules
        (:meth:`kernels.comm.communicator.Communicator` returns at ``count == 0``) and, from NCCL 2.20
        (:data:`EMPTY_CALL_DISCARDED_FROM`, the version followed), every collective NCCL runs as one and the one-rank
        call; not the all-to-all, gather and scatter nccl-tests runs as groups of ``ncclSend``/``ncclRecv`` before
        NCCL 2.28 (src/alltoall.cu lines 317-331 at nccl-tests v2.19.6), which NCCL never discards (enqueue.cc
        ``taskAppend`` hands Send/Recv to ``p2pTaskAppend`` before the count test)."""
        if case.counts.count != 0:
            return False
        if not case.nccl and case.schedule is not None:
            return True
        version = tuple(self.nccl.table.version if case.nccl else self._nccl_version or NCCL_VERSION)[:2]
        if version < EMPTY_CALL_DISCARDED_FROM:
            return False
        from synth.model.nccl.tuner import P2P_COLLECTIVES
        return not case.nccl or case.entry.name not in P2P_COLLECTIVES or version >= (2, 28)

    def measure(self, case: Case) -> tuple[float, int | None]:
        if self.empty_call_free(case):      # NCCL returns before any launch (module docstring)
            return 0.0, None
        if case.schedule is None:   # one rank: NCCL still makes the call; the model's fixed cost of a call
            from synth.model.physics import LAUNCH_US
            cost = getattr(self.source, "cost", None)
            return (cost.params.launch_us if cost is not None else LAUNCH_US), None
        return self.time_us(case), None

    def extras(self, case: Case) -> tuple[str, ...]:
        names = [column[0] for column in self.extra_columns]
        free = self.empty_call_free(case)           # nothing runs: no bound, no NCCL choice
        out = (("-", "0.00", "0.00") if free else self._bound_cells(case)) if "bound" in names else ()
        if "nccl" in names:
            out += (self.nccl.choose(case.entry.name, case.counts.size).label if case.nccl and not free else "-",)
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
        slices = "-" if case.nccl else str(self.source.cost.estimate(sched, size, self.protocol(case)).slices)
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


__all__ = ["EMPTY_CALL_DISCARDED_FROM", "NCCL_ALGO_COLUMN", "SimBackend"]
