"""Which verified schedule a collective call runs: the one selector of the Communicator, the MPI communicator and
the sweep; its arguments' one check, naming the caller, is :mod:`synth.plan.arguments`.

Order of choice for ``(collective, nbytes, root)`` (``nbytes`` is the nccl-tests size):

1. a forced algorithm (``algo``): a baseline name (:data:`synth.baselines.BASELINES`) or a schedule file (JSON),
   the same for every size;
2. the plan entry covering ``nbytes`` (:class:`~synth.plan.size_plan.Plan`; a bisect, the decision was made when
   the plan was built: :mod:`synth.plan.decision`);
3. the fastest applicable baseline at ``nbytes`` by the cost model (:class:`~synth.baselines.choice.BaselineChooser`).

Every schedule is verified on the topology's fabric before it is returned.

Plan discovery (:func:`find_plan`) is explicit and said once: a :class:`Plan` or a ``plan.json`` path passed as
``plan`` is used (it must match the topology); a results folder passed as ``plan``, or for ``plan="auto"`` the
folder named by the ``TOPOCOLL_RESULTS`` environment variable, else ``results`` (where ``synthesize`` writes), is
searched for the plan whose topology fingerprint is the topology's (a ``plan.json`` in the folder itself, as
``synthesize --out`` writes it, is that plan; else ``<dir>/<name>/plan.json`` first, then every
``<dir>/*/plan.json``).  The chosen path is logged once on the ``topocoll`` logger and kept in
:attr:`ScheduleSelector.notes`.  A plan recording models other than the installed ones (``model``,
:mod:`synth.plan.model_identity`) still runs; a warning naming the file, both identities and the fix says so once
per plan file per process.

>>> from topo_probe.machines.generators import fully_connected
>>> sel = ScheduleSelector(fully_connected(4), plan=False)
>>> c = sel.select("allreduce", 1 << 20)
>>> c.source, c.label, c.schedule.meta["baseline"]
('baseline', 'best:direct', 'direct')
>>> ScheduleSelector(fully_connected(4), plan=False, algo="ring").select("allgather", 8).label
'ring'
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from synth.formats.schedule_file import load_schedule
from synth.ir.collectives import ROOTED, canonical
from synth.ir.schedule import Schedule
from synth.plan.arguments import NCCL, check_algo_arg, check_plan_arg
from synth.plan.model_identity import stale_plan_note
from synth.plan.size_plan import Plan, PlanEntry
from synth.plan.user_warning import warn_user
from topo_probe.errors import InvalidArgument, ScheduleFormatError, ScheduleInvalid, TopocollError, TopologyError
from topo_probe.topology.model import Topology

logger = logging.getLogger("topocoll")

#: the folder ``synthesize`` writes to by default, searched when ``TOPOCOLL_RESULTS`` is not set
DEFAULT_RESULTS = "results"


@dataclass(frozen=True)
class Choice:
    """A selected schedule: ``source`` is ``file``, ``algo``, ``plan`` or ``baseline``; ``label`` names it as the
    sweep prints it (``ring``, ``plan:<file>``, ``best:<baseline>``).  ``nccl`` is True where NCCL itself should run
    (``algo="nccl"`` or a plan entry ``nccl``): ``schedule`` is then what runs where NCCL cannot, named by
    ``fallback``: the entry's ``fallback`` file (``plan:<file>``), or for plans made before that field and
    ``algo="nccl"`` the fastest baseline at the size by the cost model (``best:<baseline>``).  ``entry`` is the plan
    entry the choice came from (None: not from a plan)."""

    schedule: Schedule
    source: str
    label: str
    nccl: bool = False
    entry: PlanEntry | None = None
    fallback: str = ""


def _loadable(path: Path, strict: bool = False) -> Plan | None:
    """The plan in ``path``, or None where it does not load; ``strict``: its TopocollError."""
    try:
        return Plan.load(path)
    except TopocollError:
        if strict:
            raise
        return None


def results_dir() -> Path:
    """The results folder plans are discovered in: ``$TOPOCOLL_RESULTS`` or ``results``."""
    return Path(os.environ.get("TOPOCOLL_RESULTS") or DEFAULT_RESULTS)


def _mine(found: Plan | None, topology: Topology, fp: str, own: bool) -> bool:
    """Whether a discovered plan is this topology's: its fingerprint, or (a plan made without one) the topology's own
    ``<dir>/<name>/plan.json`` or a plan naming the topology."""
    if found is None:
        return False
    if found.topology_fingerprint:
        return found.topology_fingerprint == fp
    return own or found.topology_name == topology.name


def _discover(topology: Topology, base: Path, explicit: bool = False) -> tuple[Plan | None, str]:
    if os.path.lexists(base / "plan.json"):        # the folder synthesize --out wrote: that plan
        if explicit:                               # named by the caller: it must be the topology's
            return _given(topology, base / "plan.json")
        return _own(topology, base / "plan.json", own=False)   # not named by the topology: a fingerprint or its name
    named = base / topology.name / "plan.json"
    others = sorted(p for p in base.glob("*/plan.json") if p != named and p.is_file())
    candidates = ([named] if os.path.lexists(named) else []) + others   # the own one there but unreadable: refused
    if not candidates:          # no plan to compare with: skip the fingerprint (seconds at 2,000 GPUs)
        return None, f"plan: none for {topology.name!r} in {base}/"
    fp, named_plan = topology.fingerprint(), None
    for path in candidates:
        found = _loadable(path, strict=path == named)   # the topology's own plan: loads or is refused
        if _mine(found, topology, fp, path == named):
            return found, f"plan: {path}"
        if path == named:                               # the topology's own folder holds another machine's plan
            named_plan = found
    if named_plan is not None:
        return _own(topology, named, loaded=(named_plan, fp))
    return None, f"plan: none for {topology.name!r} (fingerprint {fp}) in {base}/"


def _own(topology: Topology, path: Path, own: bool = True, loaded=None) -> tuple[Plan | None, str]:
    """A discovered plan in the place the topology's own would be (``own``: ``<dir>/<name>/``, whose folder names the
    topology; else a results folder's own ``plan.json``): it loads or is refused; one made for another topology is
    skipped with a warning.  ``loaded``: (plan, fingerprint) already read."""
    found, fp = loaded or (_loadable(path, strict=True), topology.fingerprint())
    if _mine(found, topology, fp, own):
        return found, f"plan: {path}"
    made = (f"fingerprint {found.topology_fingerprint} != {fp}" if found.topology_fingerprint
            else f"{found.topology_name!r}, no fingerprint")
    note = f"{path}: plan made for another topology ({made}); not used"
    warn_user(note)
    return None, "plan: " + note


def _given(topology: Topology, plan) -> tuple[Plan, str]:
    """A plan the caller named (a :class:`Plan` or a file): it must be the topology's."""
    if isinstance(plan, Plan):
        found, where = plan, "plan: given"
    else:
        if Path(plan).is_dir():
            raise ScheduleFormatError(f"{plan}: is a directory, not a plan file (plan.json)")
        found, where = Plan.load(plan), f"plan: {plan}"
    fp = topology.fingerprint()
    if found.topology_fingerprint and found.topology_fingerprint != fp:
        raise TopologyError(f"{found.path or 'plan'}: topology.fingerprint {found.topology_fingerprint} "
                            f"({found.topology_name!r}) does not match {topology.name!r} (fingerprint {fp}, "
                            f"{topology.num_gpus} GPUs): a plan made for another machine")
    return found, where


def find_plan(topology: Topology, plan="auto") -> tuple[Plan | None, str]:
    """``(plan or None, one line saying what was found)`` for ``topology``.

    ``plan`` (else InvalidArgument, :func:`check_plan_arg`): a :class:`Plan` or a ``plan.json`` path (must match the
    topology's fingerprint, else :class:`TopologyError`); a results folder, ``"auto"`` or None: discovery there or in
    :func:`results_dir` (a folder holding a ``plan.json``, as ``synthesize --out`` writes it, is that plan: a folder
    passed as ``plan`` must match, one found by ``"auto"`` is skipped with a warning where it does not; else
    ``<dir>/<name>/plan.json``, then every ``<dir>/*/plan.json`` of the topology's fingerprint (one without a
    fingerprint: the own one, or one naming the topology); a plan for another topology is skipped with a warning;
    the topology's own ``<dir>/<name>/plan.json`` that does not load is refused with its error); False: no plan."""
    check_plan_arg(plan, "find_plan")
    if plan is False:
        return None, "plan: none asked for"
    if plan is None or plan == "auto":
        return _discover(topology, results_dir())
    if not isinstance(plan, Plan) and Path(plan).is_dir() and Path(plan).suffix != ".json":
        return _discover(topology, Path(plan), explicit=True)
    return _given(topology, plan)


#: the plan files said to be stale in this process: said once each (a plan in memory keeps its own flag)
_SAID_STALE: set = set()


def _check_roots(plan: Plan | None, topology: Topology) -> None:
    """Refuse a plan whose rooted entry names a root the topology has no rank for (one line naming the file and
    entry), before any call: else a call of that root fails later without naming the plan."""
    for k, entry in enumerate(plan.entries if plan is not None else ()):
        if entry.root is not None and entry.root >= topology.num_gpus:
            raise ScheduleFormatError(f"{plan.path or 'plan'}: entries[{k}].root: {entry.root} is not a rank of "
                                      f"{topology.name!r} ({topology.num_gpus} GPUs)")


def _say_if_stale(plan: Plan | None, notes: list[str]) -> None:
    """Warn once per plan file per process where ``plan`` records models other than the installed ones
    (:func:`synth.plan.model_identity.stale_plan_note`): it still runs, every schedule verified."""
    note = stale_plan_note(plan) if plan is not None else None     # None too where the plan records no models
    if note is None:
        return
    notes.append(note)
    if plan.path is None:           # in memory: a flag on the plan itself (an id() is reused once the plan is freed)
        said, plan.__dict__["_said_stale"] = plan.__dict__.get("_said_stale", False), True
    else:
        key = os.path.realpath(plan.path)
        said = key in _SAID_STALE
        _SAID_STALE.add(key)
    if not said:
        warn_user(note)


class ScheduleSelector:
    """Selects, verifies and caches the schedule of each call on one topology (see the module docstring).

    Parameters
    ----------
    topology : Topology
    plan : Plan, path, "auto", None or False
        Where the plan comes from (:func:`find_plan`); ignored when ``algo`` is given.
    algo : str, optional
        A baseline name or a schedule JSON file run for every size (``"plan"`` or None: choose).
    fabric, cost : optional
        Prebuilt :class:`~synth.ir.fabric.Fabric` / :class:`~synth.model.cost.CostModel`.
    warn_fallback : bool
        Warn once per (collective, baseline) when no plan entry covers a call.
    owner : str, optional
        Who selects (e.g. ``Communicator``), named at the start of that warning (default ``topocoll``) and of
        the one refusal of a ``plan`` not as above (default ``ScheduleSelector``; checked with ``algo`` too).
    typed : str, optional
        The topology as the user gave it (preset, spec or file), named by the "no plan" warning's command.
    """

    def __init__(self, topology: Topology, *, plan="auto", algo: str | None = None, fabric=None, cost=None,
                 warn_fallback: bool = True, owner: str | None = None, typed: str | None = None) -> None:
        check_plan_arg(plan, owner or "ScheduleSelector")
        self.topology, self.typed = topology, typed
        name = None if algo is None else check_algo_arg(algo, owner or "ScheduleSelector")    # refused now, named
        self.algo = None if name in (None, "plan") else name
        self.warn_fallback, self.owner = warn_fallback, owner or "topocoll"
        self._fabric, self._cost, self._chooser = fabric, cost, None
        self._cache: dict[tuple, Schedule] = {}
        self._chosen: dict[tuple, Schedule] = {}    # (collective, nbytes, root) -> schedule_for
        self._warned: set[tuple[str, str]] = set()
        self.notes: list[str] = []
        self.file_schedule: Schedule | None = None
        #: a schedule file's one-line warning where its ranks can end with different bits (sum_order), else None
        self.same_bits_warning: str | None = None
        self.plan: Plan | None = None
        if self.algo is None:
            self.plan, note = find_plan(topology, plan)
            self.notes.append(note)
            logger.info("%s", note)
            _check_roots(self.plan, topology)
            _say_if_stale(self.plan, self.notes)
        else:
            self._check_algo_file()

    # ------------------------------------------------------------------ lazily built
    @property
    def fabric(self):
        if self._fabric is None:
            from synth.ir.fabric import build_fabric
            self._fabric = build_fabric(self.topology)
        return self._fabric

    @property
    def cost(self):
        if self._cost is None:
            from synth.model.cost import CostModel
            self._cost = CostModel(self.fabric)
        return self._cost

    @property
    def chooser(self):
        """Baselines of this topology, built once; the fastest per size by the cost model."""
        if self._chooser is None:
            from synth.baselines.choice import BaselineChooser
            self._chooser = BaselineChooser(self.fabric, self.cost)
        return self._chooser

    def _check_algo_file(self) -> None:
        """A forced algorithm that is a file (:func:`check_algo_arg` checked the name): its schedule loaded and
        verified on this topology, its same-bits warning said."""
        from synth.baselines import BASELINES
        if self.algo in BASELINES or self.algo == NCCL:
            return
        path = Path(self.algo)
        from synth.ir.verifier import check
        sched = load_schedule(path, fabric=self.fabric)
        if sched.ranks != self.topology.num_gpus:
            raise ScheduleInvalid(f"{path}: schedule has {sched.ranks} ranks, topology {self.topology.name!r} "
                                  f"has {self.topology.num_gpus}", rule="wrong-topology")
        check(sched, self.fabric)
        self.file_schedule = sched
        self.notes.append(f"schedule: {path} ({sched.name or 'unnamed'}, verified)")
        from synth.ir.sum_order import same_bits_warning
        self.same_bits_warning = same_bits_warning(sched, path.name)
        if self.same_bits_warning:
            self.notes.append(f"warning: {self.same_bits_warning}")
            if self.warn_fallback:                 # a library caller; the command lines print their notes
                warn_user(f"{self.owner}: {self.same_bits_warning}")

    # ------------------------------------------------------------------ choice
    def select(self, collective: str, nbytes: int, root: int | None = None) -> Choice:
        """The :class:`Choice` for ``collective`` of ``nbytes`` (nccl-tests size) and ``root``."""
        name = canonical(collective)
        root = root if name in ROOTED else None
        if self.file_schedule is not None:
            return Choice(self._from_file(name, root), "file", self.file_schedule.name or Path(self.algo).name)
        if self.algo == NCCL:
            sched, algo = self.chooser.best(name, root, nbytes)
            return Choice(sched, "algo", NCCL, nccl=True, fallback=f"best:{algo}")
        if self.algo is not None:
            return Choice(self._verified(("algo", self.algo, name, root), self._forced, name, root), "algo", self.algo)
        entry = self.plan.select(name, nbytes, root) if self.plan is not None else None
        if entry is not None and entry.schedule == NCCL and entry.fallback:
            sched = self._plan_schedule(entry, "fallback", name, root)
            return Choice(sched, "plan", f"plan:{NCCL}", nccl=True, entry=entry, fallback=f"plan:{entry.fallback}")
        if entry is not None and entry.schedule == NCCL:
            sched, algo = self.chooser.best(name, root, nbytes)
            return Choice(self._verified(("best-nccl", id(sched)), lambda: sched), "plan", f"plan:{NCCL}", nccl=True,
                          entry=entry, fallback=f"best:{algo}")
        if entry is not None:
            sched = self._plan_schedule(entry, "schedule", name, root)
            return Choice(sched, "plan", f"plan:{entry.schedule}", entry=entry)
        sched, algo = self.chooser.best(name, root, nbytes)
        self._verified(("best", algo, name, root), lambda: sched)
        if self.warn_fallback and self.plan is None and not self._warned:
            self._warned.add(("*", "*"))     # no plan at all: one warning for every collective
            from synth.plan.plan_command import plan_command
            warn_user(f"{self.owner}: no plan for {self.topology.name!r} ({plan_command(self.topology, self.typed)})"
                      f"; every call runs the fastest baseline at its size by the cost model (first: {name} of "
                      f"{nbytes} bytes, baseline {algo!r})")
        elif self.warn_fallback and self.plan is not None and (name, algo) not in self._warned:
            self._warned.add((name, algo))
            warn_user(f"{self.owner}: no plan entry for {name} of {nbytes} bytes on {self.topology.name!r}; "
                          f"using baseline {algo!r}, the fastest baseline at this size by the cost model (said "
                          f"once per collective and baseline)")
        return Choice(sched, "baseline", f"best:{algo}")

    def select_baseline(self, algo: str, collective: str, root: int | None = None) -> Choice | None:
        """The verified baseline ``algo`` for ``collective`` as a fallback :class:`Choice` (None: it does not apply)."""
        name = canonical(collective)
        root = root if name in ROOTED else None
        sched = self.chooser.get(algo, name, root)
        if sched is None:
            return None
        return Choice(self._verified(("best", algo, name, root), lambda: sched), "baseline", f"best:{algo}")

    def schedule_for(self, collective: str, nbytes: int, root: int | None = None) -> Schedule:
        """The verified schedule of :meth:`select` (remembered per collective, size and root: the MPI communicator asks
        on every call)."""
        key = (collective, nbytes, root)
        sched = self._chosen.get(key)
        if sched is None:
            if len(self._chosen) >= 4096:
                self._chosen.clear()
            sched = self._chosen[key] = self.select(collective, nbytes, root).schedule
        return sched

    def _verified(self, key: tuple, build, *args) -> Schedule:
        sched = self._cache.get(key)
        if sched is None:
            from synth.ir.verifier import check
            sched = build(*args)
            check(sched, self.fabric)
            if len(self._cache) >= 4096:
                self._cache.clear()
            self._cache[key] = sched
        return sched

    def _from_file(self, name: str, root: int | None) -> Schedule:
        s = self.file_schedule
        if s.collective != name:
            raise ScheduleInvalid(f"{self.algo}: schedule is {s.collective}, the call is {name}", rule="bad-collective")
        if root is not None and s.root != root:
            raise InvalidArgument(f"{self.algo}: schedule has root {s.root}, the call asks for root {root}")
        return s

    def _forced(self, name: str, root: int | None) -> Schedule:
        from synth.baselines import baseline
        return baseline(self.algo, self.fabric, name, root=root)

    def _plan_schedule(self, entry: PlanEntry, field: str, name: str, root: int | None) -> Schedule:
        """The verified schedule file of ``entry``'s ``field`` (``schedule`` or ``fallback``); an error (unreadable,
        another collective or root, refused by the verifier) is raised as its own class with one line naming the plan
        file, the entry and the field."""
        file = getattr(entry, field)
        try:
            return self._verified(("plan", file, name, root), self._from_plan, file, name, root)
        except TopocollError as err:
            k = next((i for i, e in enumerate(self.plan.entries) if e is entry), "?")
            err.args = (f"{self.plan.path or 'plan'}: entries[{k}].{field} {file}: {err.args[0] if err.args else err}",
                        *err.args[1:])
            raise

    def _from_plan(self, file: str, name: str, root: int | None) -> Schedule:
        sched = load_schedule(self.plan.schedule_path(file))
        if (sched.collective, sched.root) != (name, root):
            raise ScheduleInvalid(f"holds {sched.collective} root {sched.root}, the entry is {name} root {root}",
                                  rule="bad-collective")
        return sched


__all__ = ["NCCL", "Choice", "ScheduleSelector", "check_plan_arg", "find_plan", "results_dir", "DEFAULT_RESULTS"]
