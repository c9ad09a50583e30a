"""What runs for a collective call: the plan's decision looked up, and the one fallback rule.

:func:`plan_route` is the single answer to "what does the plan say runs for (collective, bytes,
dtype, op, root), and what runs here": both communicators call it on every call that is not an
identical repeat, and it only looks the decision up (a bisect in the plan,
:meth:`synth.plan.size_plan.Plan.select`; the decision itself was made when the plan was built,
:mod:`synth.plan.decision`).  No model is built at call time.

The fallback rule, where the plan says ``nccl`` and NCCL cannot run the call: the entry's
``fallback`` schedule runs (plans made before that field: the fastest baseline at the size by
the cost model), and the route says why NCCL did not run, the first of these that holds:

1. the caller's path has no NCCL (NumPy arrays on the host; the MPI communicator);
2. NCCL did not start here (no CuPy with NCCL, no GPU, ranks sharing one GPU, NCCL's own
   initialisation failing: :func:`kernels.comm.nccl_runtime.nccl_runtime_or_none`);
3. NCCL has no single call for the collective (gather, scatter, alltoall are point-to-point
   in NCCL; :data:`kernels.comm.nccl_runtime.NCCL_CALLS`);
4. NCCL has no datatype for the arrays' dtype (:data:`kernels.comm.nccl_runtime.NCCL_TYPES`).

Where no plan entry covers the call, the fastest baseline at the size runs (and where that is
ring or tree with every buffer on one GPU, ``direct``: see
:mod:`kernels.comm.communicator`); the route names that too.

>>> import numpy as np
>>> from synth.plan.selector import ScheduleSelector
>>> from synth.plan.size_plan import Plan, PlanEntry
>>> from topo_probe.machines.generators import fully_connected
>>> topo = fully_connected(4)
>>> plan = Plan(topo.name, topo.fingerprint(), [PlanEntry("allreduce", 0, None, "nccl")])
>>> sel = ScheduleSelector(topo, plan=plan)
>>> r = plan_route(sel, "allreduce", 4096, dtype=np.float32, no_nccl="NumPy arrays: NCCL runs on GPUs only")
>>> r.planned, r.ran, r.range, r.reason
('nccl', 'best:oneshot', (0, None), "NumPy arrays: NCCL runs on GPUs only; the plan's fallback runs")
>>> print(r.with_layer("host"))  # doctest: +NORMALIZE_WHITESPACE
Route(allreduce of 4 KiB: plan given 0 B-inf: nccl; ran best:oneshot on host (simple); NumPy arrays: NCCL runs
      on GPUs only; the plan's fallback runs)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kernels.comm.nccl_runtime import NCCL_CALLS, NCCL_TYPES
from synth.ir.collectives import ROOTED, canonical
from synth.ir.schedule import Schedule
from synth.ir.shared_results import SharedResults
from synth.plan.selector import NCCL, Choice
from topo_probe.errors import InvalidArgument, TopocollError

#: ``Route.layer`` of a call NCCL ran
NCCL_LAYER = "nccl"
#: why a plan's nccl range runs its fallback on the MPI communicator
MPI_NO_NCCL = "MPICommunicator runs no NCCL (one process per rank over MPI)"


@dataclass(frozen=True)
class Route:
    """What ran for one call, against what ``plan.json`` says.

    ``plan`` is the plan file (None: no plan); ``range`` the entry's ``(min_bytes, max_bytes)``
    (None: no entry covers the call); ``planned`` what the entry runs (``nccl`` or its schedule
    file; '' without an entry); ``ran`` what ran (``nccl``, a schedule file of the plan,
    ``best:<baseline>``, or the forced ``algo``); ``layer`` who ran it (``nccl``, ``native``, ``cupy-ops``, ``host``,
    ``mpi``, ...); ``reason`` why ``ran`` differs from ``planned`` (empty when it does not);
    ``schedule`` the schedule run (None when NCCL ran); ``protocol`` the protocol the plan entry
    gives the native executor (``simple`` or ``ll``; None without an entry: the layer's default)."""

    collective: str
    nbytes: int
    root: int | None
    plan: str | None
    range: tuple[int, int | None] | None
    planned: str
    ran: str
    layer: str
    reason: str = ""
    schedule: Schedule | None = None
    protocol: str | None = None

    @property
    def as_planned(self) -> bool:
        """Whether what ran is what ``plan.json`` says (no fallback, nothing substituted)."""
        return not self.reason

    def with_layer(self, layer: str) -> "Route":
        return dataclasses.replace(self, layer=layer)

    def __repr__(self) -> str:
        """One line (``print(comm.last_route)``): the call, what plan.json decided for its range, what ran, on
        which layer and protocol, its schedule's name, the reason; the schedule itself stays ``.schedule``."""
        from synth.formats.nccl_tests.sizes import size_label
        from synth.pipeline.reuse_check import range_text
        root = "" if self.root is None else f" root {self.root}"
        call = f"{self.collective}{root} of {size_label(self.nbytes, exact=True)}"
        if self.plan is None:
            decided = "no plan"
        else:
            where = f"plan {self.plan}"
            decided = (f"{where} {range_text(*self.range)}: {self.planned}" if self.range is not None
                       else f"{where}: no entry")
        ran = f"ran {self.ran}" + (f" on {self.layer}" if self.layer else "") + (
            f" ({self.protocol})" if self.protocol else "")
        name = getattr(self.schedule, "name", None)
        tail = (f", schedule {name!r}" if name and name not in self.ran else "") + (
            f"; {self.reason}" if self.reason else "")
        return f"Route({call}: {decided}; {ran}{tail})"


def nccl_type_ok(dtype) -> bool:
    """Whether NCCL has a datatype for ``dtype`` (:data:`kernels.comm.nccl_runtime.NCCL_TYPES`;
    remembered per dtype: asked on every call)."""
    ok = _TYPE_OK.get(dtype)
    if ok is None:
        name = "bfloat16" if str(dtype) == "bfloat16" else np.dtype(dtype).name
        ok = _TYPE_OK[dtype] = name in NCCL_TYPES
    return ok


_TYPE_OK: dict = {}


def why_not_nccl(collective: str, dtype, no_nccl) -> str:
    """Why NCCL cannot run this call (the fallback rule's reasons, in order), or ''; ``no_nccl``
    is the caller's reason, '' or None, or a function returning it."""
    if callable(no_nccl):                  # asked only here: NCCL starts only where the plan says nccl
        no_nccl = no_nccl()
    if no_nccl:
        return no_nccl
    if collective not in NCCL_CALLS:
        return f"NCCL has no single {collective} call (point-to-point in NCCL)"
    if dtype is not None and not nccl_type_ok(dtype):
        return f"NCCL has no datatype for {dtype}"
    return ""


def plan_route(selector, collective: str, nbytes: int, root: int | None = None, *, dtype=None, op: str = "sum",
               no_nccl=None, layer: str = "") -> Route:
    """The :class:`Route` of a call of ``collective`` of ``nbytes`` (nccl-tests size), ``dtype``,
    ``op`` and ``root`` on ``selector`` (:class:`synth.plan.selector.ScheduleSelector`);
    ``no_nccl``: why the caller's path cannot run NCCL (None or '': it can; a function returning
    that is called only where the plan says ``nccl``); ``layer``: who runs
    a schedule there.  ``op`` does not change the route (NCCL has every reduction op)."""
    name = canonical(collective)
    root = root if name in ROOTED else None
    choice: Choice = selector.select(name, nbytes, root)
    plan = selector.plan
    where = str(getattr(plan, "path", None) or "given") if plan is not None else None
    entry = choice.entry
    rng = (entry.min_bytes, entry.max_bytes) if entry is not None else None
    proto = getattr(entry, "protocol", None) if entry is not None else None
    if choice.nccl:
        planned = NCCL
        why = why_not_nccl(name, dtype, no_nccl)
        if not why:
            return Route(name, nbytes, root, where, rng, planned, NCCL, NCCL_LAYER)
        return Route(name, nbytes, root, where, rng, planned, _file(choice.fallback), layer,
                     f"{why}; the plan's fallback runs", choice.schedule, proto)
    ran = _file(choice.label)
    if choice.source in ("algo", "file"):
        return Route(name, nbytes, root, where, rng, ran, ran, layer, "", choice.schedule)
    if entry is not None:
        return Route(name, nbytes, root, where, rng, entry.schedule, ran, layer, "", choice.schedule, proto)
    why = "no plan entry covers this call" if plan is not None else "no plan"
    return Route(name, nbytes, root, where, rng, "", ran, layer,
                 f"{why}: the fastest baseline at this size by the cost model runs", choice.schedule)


def check_plan_files(selector) -> None:
    """Load and verify, now, every schedule file ``selector``'s plan names (each entry's ``schedule``
    and ``fallback``), so that an entry whose file is missing, unreadable, of another collective,
    root or rank count, or refused by the verifier is refused when the communicator is built, in
    one line naming the plan file, the entry and the field
    (:meth:`synth.plan.selector.ScheduleSelector.select`, whose cache then serves the calls),
    not at the first call of that size.  Entries that name no file (``nccl`` without a
    fallback) and entries the plan never selects (an empty range, or one an earlier overlapping
    entry of a plan made in memory covers whole) are skipped."""
    seen = _files_seen(selector)
    if seen is None:
        _check_entries(selector)
    else:
        _CHECKED.get(seen, lambda: _check_entries(selector) or True)


def _check_entries(selector) -> None:
    plan = selector.plan
    for entry in plan.entries if plan is not None else ():
        if entry.schedule == NCCL and not entry.fallback:
            continue
        # the entry is selected at its start or where an earlier overlapping entry ends (Plan.select: list order)
        sizes = [entry.min_bytes] + sorted(e.max_bytes for e in plan.entries if e.max_bytes is not None
                                           and e.max_bytes > entry.min_bytes and entry.covers(e.max_bytes))
        nbytes = next((b for b in sizes if plan.select(entry.collective, b, entry.root) is entry), None)
        if nbytes is not None:
            selector.select(entry.collective, nbytes, entry.root)


#: plan files (with every schedule file they name, each by path, modification time and size), their
#: entries as loaded and the topology fingerprint they were checked on, in this process: a
#: Communicator built again on unchanged files skips the check (about 0.1 s on a preset plan);
#: its first calls verify as always (a failed check raises, so nothing is kept for it)
_CHECKED: SharedResults = SharedResults(4096)


def _files_seen(selector) -> tuple | None:
    """The key of :data:`_CHECKED` for ``selector``'s plan, None for a plan made in memory or a file
    that cannot be read (then the check runs and says so)."""
    plan = selector.plan
    if plan is None or plan.path is None:
        return None
    files = sorted({f for e in plan.entries for f in (e.schedule, e.fallback) if f and f != NCCL})
    stats = []
    try:
        paths = [Path(plan.path)] + [plan.schedule_path(f) for f in files]
        for path in paths:
            st = path.stat()
            stats.append((str(path.resolve()), st.st_mtime_ns, st.st_size))
    except (OSError, ValueError, TopocollError):
        return None
    return selector.topology.fingerprint(), repr(plan.entries), tuple(stats)


def one_gpu(sends: list, recvs: list) -> bool:
    """Whether every (CuPy) buffer of a call lives on the same GPU (arrays without CuPy's
    ``.device.id`` say nothing: False): the fallback rule's ``direct`` instead of ring or tree."""
    ids = {getattr(getattr(a, "device", None), "id", None) for a in sends + recvs if a is not None}
    return len(ids) == 1 and None not in ids


def _file(label: str) -> str:
    """A choice label as a route names it: a plan entry's schedule file without ``plan:``."""
    return label[len("plan:"):] if label.startswith("plan:") else label


def substituted(route: Route, choice: Choice, why: str) -> Route:
    """``route`` with ``choice``'s schedule run instead, for the reason ``why``."""
    reason = f"{route.reason}; {why}" if route.reason else why
    return dataclasses.replace(route, ran=_file(choice.label), reason=reason, schedule=choice.schedule, protocol=None)


__all__ = ["Route", "plan_route", "check_plan_files", "one_gpu", "why_not_nccl", "nccl_type_ok",
           "substituted", "NCCL_LAYER", "MPI_NO_NCCL"]
