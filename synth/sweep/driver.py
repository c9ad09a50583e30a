"""The shared sweep driver: sizes, schedule choice per size, timing and rows.

Like nccl-tests' ``common.cu``: for every data type, reduction and root it walks the sizes
``minbytes, minbytes*f, ...`` (or ``+ stepbytes``) up to ``maxbytes`` and for each size runs
the collective out of place and in place, reporting one :class:`Row`.  What "running" means
is the backend's business (:mod:`synth.sweep.sim_backend`, :mod:`kernels.sweep.backends`);
which schedule runs at a size is the :class:`~synth.plan.selector.ScheduleSelector`'s (``--algo``).

>>> sweep_sizes(8, 64, 1, 2)
[8, 16, 32, 64]
>>> sweep_sizes(100, 400, 100, 1)
[100, 200, 300, 400]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from synth.formats.nccl_tests.conventions import DTYPE_BYTES, Counts, nccl_dtype
from synth.formats.nccl_tests.device_line import Device   # the backends' devices(): named here for kernels.sweep
from synth.formats.nccl_tests.sizes import size_sweep
from synth.ir.collectives import ROOTED, canonical, check_reduce_op
from synth.ir.schedule import Schedule
from synth.sweep.entries import Entry, entry
from topo_probe.errors import ScheduleInvalid
from topo_probe.topology.model import Topology


def sweep_sizes(minbytes: int, maxbytes: int, stepbytes: int, stepfactor: int) -> list[int]:
    """nccl-tests' size loop (:func:`synth.formats.nccl_tests.sizes.size_sweep`): multiply by ``stepfactor`` when
    > 1, else add ``stepbytes``; ValueError for sizes that cannot make a sweep."""
    return size_sweep(minbytes, maxbytes, stepbytes, stepfactor)


@dataclass
class SweepConfig:
    """What to sweep (defaults are nccl-tests' defaults; sizes in bytes)."""

    collective: str
    nranks: int = 1
    minbytes: int = 32 << 20
    maxbytes: int = 32 << 20
    stepbytes: int = 1 << 20
    stepfactor: int = 1
    iters: int = 20
    warmup: int = 1
    check: int = 1
    ops: tuple[str, ...] = ("sum",)
    dtypes: tuple[str, ...] = ("float",)
    root: int = 0
    average: int = 1
    #: exact sizes to run instead of the -b/-e/-f loop (e.g. a real log's sizes)
    size_list: tuple[int, ...] | None = None
    #: nccl-tests ``-t``: threads per process; ``nranks`` is ``nprocs x nthreads x`` GPUs per thread, as nccl-tests'
    #: ``nranks = nProcs*nGpus*nThreads`` (NVIDIA/nccl-tests v2.19.6 src/common.cu line 901)
    nthreads: int = 1
    #: processes (``--backend mpi``: one per rank)
    nprocs: int = 1

    def __post_init__(self) -> None:
        self.collective = canonical(self.collective)

    @property
    def gpus_per_thread(self) -> int:
        """nccl-tests' ``nGpus`` (``-g``): GPUs each thread of each process drives, ``nranks / (nprocs x nthreads)``.

        >>> SweepConfig("allreduce", 8, nthreads=2).gpus_per_thread
        4
        >>> SweepConfig("allreduce", 8, nprocs=8).gpus_per_thread
        1
        """
        return max(1, self.nranks // (self.nprocs * self.nthreads))

    @property
    def entry(self) -> Entry:
        return entry(self.collective)

    def sizes(self) -> list[int]:
        if self.size_list is not None:
            return list(self.size_list)
        return sweep_sizes(self.minbytes, self.maxbytes, self.stepbytes, self.stepfactor)

    def roots(self) -> list[int]:
        """Roots swept: -1 for unrooted collectives; every rank when root is -1."""
        if self.collective not in ROOTED:
            return [-1]
        return list(range(self.nranks)) if self.root == -1 else [self.root]

    def op_list(self) -> list[str]:
        """Reductions swept; non-reducing collectives run once with redop ``none``."""
        return list(self.ops) if self.entry.reducing else ["none"]


@dataclass(frozen=True)
class Result:
    """One measurement: time (µs), algbw and busbw (GB/s), wrong elements (None = not checked) and the threads
    (``-t``; under ``--backend mpi`` the processes) whose own check found them (None: one).  nccl-tests counts a
    failed check once per thread of each process whose GPUs hold wrong elements (NVIDIA/nccl-tests v2.19.6
    src/common.cu line 478, summed over threads at line 1776 and processes at line 1786): its "Out of bounds
    values"."""

    time_us: float
    algbw: float
    busbw: float
    wrong: int | None
    failed: int | None = None


@dataclass(frozen=True)
class Row:
    """One printed row: nccl-tests size (bytes), count (elements), type, redop, root, results (None: not measured,
    an imported row of an in-place-only log; printed blank)."""

    size: int
    count: int
    type: str
    redop: str
    root: int
    out_of_place: Result | None
    in_place: Result | None
    algorithm: str = ""
    #: extra columns after the nccl-tests ones, formatted (the backend's ``extra_columns``)
    extras: tuple[str, ...] = ()


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
    warmup: int = 1
    check: int = 1
    average: int = 1
    #: NCCL itself runs here (``--algo nccl`` or a plan entry ``nccl``); ``schedule`` is the fallback
    nccl: bool = False
    #: nccl-tests' ``nGpus``: ranks ``t*g .. t*g+g-1`` are thread ``t``'s (a failed check counts once per thread)
    gpus_per_thread: int = 1
    #: the plan entry the schedule came from (:class:`synth.plan.size_plan.PlanEntry`: its protocol and the
    #: executor cost its decision counted); None: not from a plan (``--algo`` ring, a file, the fastest baseline)
    plan_entry: object | None = None


@dataclass
class SweepSummary:
    """All rows, the number of failed checks (nccl-tests' "Out of bounds values", :attr:`Result.failed`) and the
    average bus bandwidth over both placements of every row."""

    rows: list[Row] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(res.failed or 1 for r in self.rows for res in (r.out_of_place, r.in_place)
                   if res is not None and res.wrong)

    @property
    def avg_busbw(self) -> float:
        """Mean busbw (GB/s) of every measurement; a row's missing one (None: an imported in-place-only row) is not
        counted, as nccl-tests averages only the bodies it timed (v2.19.6 src/common.cu lines 895-896, 1831)."""
        vals = [res.busbw for r in self.rows for res in (r.out_of_place, r.in_place) if res is not None]
        return sum(vals) / len(vals) if vals else 0.0


def make_selector(collective: str, topology: Topology | None, algo: str = "plan", plan="auto"):
    """The :class:`~synth.plan.selector.ScheduleSelector` of a sweep (None for a single rank,
    which runs locally); ``algo`` is ``--algo``: ``plan``, a baseline name or a schedule file."""
    if topology is None:
        return None
    from synth.plan.selector import ScheduleSelector
    sel = ScheduleSelector(topology, plan=plan, algo=algo, warn_fallback=False, owner="sweep")
    if sel.file_schedule is not None and sel.file_schedule.collective != canonical(collective):
        raise ScheduleInvalid(f"{algo}: schedule is {sel.file_schedule.collective} on {sel.file_schedule.ranks} ranks, the sweep "
                              f"runs {canonical(collective)} on {topology.num_gpus} ranks", rule="bad-collective")
    return sel


def schedule_at(selector, collective: str, root: int, nbytes: int) -> tuple[Schedule | None, str]:
    """``(schedule, label)`` run for ``root`` (-1: unrooted) at nccl-tests size ``nbytes``."""
    c = choice_at(selector, collective, root, nbytes)
    return (None, "local") if c is None else (c.schedule, c.label)


def choice_at(selector, collective: str, root: int, nbytes: int):
    """The selector's :class:`~synth.plan.selector.Choice` (None for a single local rank)."""
    if selector is None:
        return None
    return selector.select(collective, nbytes, None if root < 0 else root)


RowCallback = Callable[[Row], None]


def run_sweep(cfg: SweepConfig, backend, selector, on_row: RowCallback | None = None) -> SweepSummary:
    """Run the sweep: one :class:`Row` per (type, op, root, size), streamed to ``on_row``.

    ``backend`` implements ``measure(case) -> (time_us, wrong or None, failing threads or processes)`` for a
    :class:`Case`
    and ``devices(n, topology) -> [Device]`` (see :mod:`synth.sweep.sim_backend`,
    :mod:`kernels.sweep.backends`); ``selector`` (:func:`make_selector`) picks the schedule per size.
    """
    summary = SweepSummary()
    ent = cfg.entry
    sizes = cfg.sizes()
    ops = cfg.op_list()
    for op in ops if ent.reducing else ():    # before any case runs; "none" only as op_list gives it
        check_reduce_op(op, "sweep")          # the communicators' one op check and wording
    for dtype_name in cfg.dtypes:
        itemsize = DTYPE_BYTES[nccl_dtype(dtype_name)]
        for op in ops:
            for root in cfg.roots():
                for size in sizes:
                    counts = ent.counts(size, itemsize, cfg.nranks)
                    choice = choice_at(selector, cfg.collective, root, counts.size)
                    sched, label = (None, "local") if choice is None else (choice.schedule, choice.label)
                    results = []
                    for inplace in (False, True):
                        case = Case(ent, cfg.nranks, counts, dtype_name, "sum" if op == "none" else op,
                                    None if root < 0 else root, inplace, sched, cfg.iters, cfg.warmup,
                                    cfg.check, cfg.average, nccl=bool(choice and choice.nccl),
                                    gpus_per_thread=cfg.gpus_per_thread, plan_entry=choice and choice.entry)
                        t, wrong, *failed = backend.measure(case)      # (time, wrong[, failing threads or processes])
                        algbw, busbw = ent.bandwidths(counts.size, t, cfg.nranks)
                        results.append(Result(t, algbw, busbw, wrong, *failed))
                    extras = tuple(backend.extras(case)) if getattr(backend, "extra_columns", ()) else ()
                    row = Row(counts.size, counts.count, dtype_name, op, root, results[0], results[1], label, extras)
                    summary.rows.append(row)
                    if on_row is not None:
                        on_row(row)
    return summary


__all__ = ["Case", "Device", "Result", "Row", "RowCallback", "SweepConfig", "SweepSummary", "choice_at", "make_selector",
           "run_sweep", "schedule_at", "sweep_sizes"]
