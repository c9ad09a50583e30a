"""The shared sweep driver: sizes, schedule choice per size, timing and rows.

Like nccl-tests' ``common.cu``: for every data type, reduction and root it walks the sizes
``minbytes, minbytes*f, ...`` (or ``+ stepbytes``) up to ``maxbytes`` and for each size runs
the collective out of place and in place, reporting one :class:`Row`.  What "running" means
is the backend's business (:mod:`kernels.sweep.backends`); which schedule runs at a size is
the :class:`ScheduleSource`'s (``--algo``).

>>> sweep_sizes(8, 64, 1, 2)
[8, 16, 32, 64]
>>> sweep_sizes(100, 400, 100, 1)
[100, 200, 300, 400]
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kernels.sweep.table import OP_NAMES, Entry, entry, numpy_dtype
from synth.collectives import ROOTED, canonical
from synth.schedule import Schedule
from synth.sizes import MAX_SIZES, size_sweep  # noqa: F401  (MAX_SIZES re-exported)
from topo_probe.errors import ScheduleInvalid, TopocollError, UnsupportedCollective
from topo_probe.model import Topology


def sweep_sizes(minbytes: int, maxbytes: int, stepbytes: int, stepfactor: int) -> list[int]:
    """nccl-tests' size loop (:func:`synth.sizes.size_sweep`): multiply by ``stepfactor`` when
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
    warmup: int = 5
    check: int = 1
    ops: tuple[str, ...] = ("sum",)
    dtypes: tuple[str, ...] = ("float",)
    root: int = 0
    average: int = 1

    def __post_init__(self) -> None:
        self.collective = canonical(self.collective)

    @property
    def entry(self) -> Entry:
        return entry(self.collective)

    def sizes(self) -> list[int]:
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
    """One measurement: time (µs), algbw and busbw (GB/s), wrong elements (None = not checked)."""

    time_us: float
    algbw: float
    busbw: float
    wrong: int | None


@dataclass(frozen=True)
class Row:
    """One printed row: nccl-tests size (bytes), count (elements), type, redop, root, results."""

    size: int
    count: int
    type: str
    redop: str
    root: int
    out_of_place: Result
    in_place: Result
    algorithm: str = ""


@dataclass
class SweepSummary:
    """All rows, the number of failing results (nccl-tests' "Out of bounds values") and the
    average bus bandwidth over both placements of every row."""

    rows: list[Row] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(1 for r in self.rows for res in (r.out_of_place, r.in_place) if res.wrong)

    @property
    def avg_busbw(self) -> float:
        vals = [res.busbw for r in self.rows for res in (r.out_of_place, r.in_place)]
        return sum(vals) / len(vals) if vals else 0.0


class ScheduleSource:
    """Which schedule runs at each size (``--algo``).

    Parameters
    ----------
    collective : str
        Collective name.
    topology : Topology or None
        The machine (None only for a single rank).
    algo : str
        ``plan``, a baseline name (:data:`synth.baselines.BASELINES`) or a schedule JSON file.
    results_dir : path, optional
        Where ``<topology>/plan.json`` lives (default ``$TOPOCOLL_RESULTS`` or ``results``).
    """

    def __init__(self, collective: str, topology: Topology | None, algo: str = "plan",
                 results_dir: str | os.PathLike | None = None) -> None:
        self.collective = canonical(collective)
        self.topology, self.algo = topology, algo
        self.results_dir = Path(results_dir if results_dir is not None
                                else os.environ.get("TOPOCOLL_RESULTS", "results"))
        self.notes: list[str] = []
        #: whether ``--algo plan`` found a plan.json matching the topology
        self.plan_found = False
        self._fabric = self._cost = self._plan = self._file = self._chooser = None
        if topology is None:
            return
        from synth.baselines import BASELINES
        if algo == "plan":
            self._plan = self._load_plan()
        elif algo not in BASELINES:
            if not Path(algo).is_file():
                raise UnsupportedCollective(f"--algo {algo!r}: not 'plan', a baseline "
                                            f"({', '.join(BASELINES)}) or an existing schedule file")
            self._file = self._load_file(Path(algo))

    # ------------------------------------------------------------------ lazily built
    @property
    def fabric(self):
        if self._fabric is None:
            from synth.fabric import build_fabric
            self._fabric = build_fabric(self.topology)
        return self._fabric

    @property
    def cost(self):
        if self._cost is None:
            from synth.cost import CostModel
            self._cost = CostModel(self.fabric)
        return self._cost

    def _load_plan(self):
        from synth.plan import Plan
        path = self.results_dir / self.topology.name / "plan.json"
        fallback = "using the best baseline per size by cost model"
        if not path.is_file():
            self.notes.append(f"plan: {path} not found; {fallback}")
            return None
        plan = Plan.load(path)
        fp = self.topology.fingerprint()
        if plan.topology_fingerprint and plan.topology_fingerprint != fp:
            self.notes.append(f"plan: {path} was made for another topology (fingerprint "
                              f"{plan.topology_fingerprint} != {fp}); {fallback}")
            return None
        self.notes.append(f"plan: {path} (sizes it does not cover: best baseline by cost model)")
        self.plan_found = True
        return plan

    def _load_file(self, path: Path) -> Schedule:
        from synth.verifier import check
        sched = Schedule.load(path)
        n = self.topology.num_gpus
        if sched.collective != self.collective or sched.ranks != n:
            raise ScheduleInvalid(f"{path}: schedule is {sched.collective} on {sched.ranks} ranks, the sweep "
                                  f"runs {self.collective} on {n} ranks", rule="bad-collective")
        check(sched, self.fabric)
        self.notes.append(f"schedule: {path} ({sched.name or 'unnamed'}, verified)")
        return sched

    # ------------------------------------------------------------------ choice
    @property
    def chooser(self):
        """Baselines of this topology, built once; the fastest per size by the cost model."""
        if self._chooser is None:
            from synth.baselines.choice import BaselineChooser
            self._chooser = BaselineChooser(self.fabric, self.cost)
        return self._chooser

    def _baseline(self, name: str, root: int | None) -> Schedule | None:
        return self.chooser.get(name, self.collective, root)

    def best_baseline(self, root: int | None, nbytes: int) -> tuple[Schedule, str]:
        """The baseline with the smallest cost-model time at ``nbytes``."""
        return self.chooser.best(self.collective, root, nbytes)

    def schedule(self, root: int, nbytes: int) -> tuple[Schedule | None, str]:
        """``(schedule, label)`` run for ``root`` (-1: unrooted) at nccl-tests size ``nbytes``."""
        if self.topology is None:
            return None, "local"
        r = root if self.collective in ROOTED else None
        if self._file is not None:
            if r is not None and self._file.root != r:
                raise UnsupportedCollective(f"--algo {self.algo}: schedule has root {self._file.root}, "
                                            f"the sweep asks for root {r} (use -r {self._file.root})")
            return self._file, self._file.name or Path(self.algo).name
        if self.algo != "plan":
            s = self._baseline(self.algo, r)
            if s is None:
                from synth.baselines import baseline
                baseline(self.algo, self.fabric, self.collective, root=r)  # raises with the reason
            return s, self.algo
        if self._plan is not None:
            e = self._plan.select(self.collective, nbytes, r)
            if e is not None:
                return self._plan.load_schedule(e), f"plan:{e.schedule}"
        s, name = self.best_baseline(r, nbytes)
        return s, f"best:{name}"


RowCallback = Callable[[Row], None]


def run_sweep(cfg: SweepConfig, backend, source: ScheduleSource,
              on_row: RowCallback | None = None) -> SweepSummary:
    """Run the sweep: one :class:`Row` per (type, op, root, size), streamed to ``on_row``.

    ``backend`` implements ``measure(case) -> (time_us, wrong or None)`` (see
    :mod:`kernels.sweep.backends`).
    """
    from kernels.sweep.backends import Case

    summary = SweepSummary()
    ent = cfg.entry
    sizes = cfg.sizes()
    for dtype_name in cfg.dtypes:
        itemsize = numpy_dtype(dtype_name).itemsize
        for op in cfg.op_list():
            if op != "none" and op not in OP_NAMES:
                raise UnsupportedCollective(f"op {op!r} is not one of {', '.join(OP_NAMES)}")
            for root in cfg.roots():
                for size in sizes:
                    counts = ent.counts(size, itemsize, cfg.nranks)
                    sched, label = source.schedule(root, counts.size)
                    results = []
                    for inplace in (False, True):
                        case = Case(ent, cfg.nranks, counts, dtype_name, "sum" if op == "none" else op,
                                    None if root < 0 else root, inplace, sched, cfg.iters, cfg.warmup,
                                    cfg.check, cfg.average)
                        t, wrong = backend.measure(case)
                        algbw, busbw = ent.bandwidths(counts.size, t, cfg.nranks)
                        results.append(Result(t, algbw, busbw, wrong))
                    row = Row(counts.size, counts.count, dtype_name, op, root, results[0], results[1], label)
                    summary.rows.append(row)
                    if on_row is not None:
                        on_row(row)
    return summary
