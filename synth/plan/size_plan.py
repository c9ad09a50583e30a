"""Size-based plans: for each collective, which schedule file to run for which message size.

A plan is what ``synthesize`` writes (``results/<topology>/plan.json``) and what the
Communicator loads.  JSON document::

    {"format": "topocoll.plan", "version": 1,
     "topology": {"name": "dgx1-v100", "fingerprint": "0123abcd..."},
     "model": "results 3, cost model bb99449d8dd8, NCCL model 2.28, code 6b3457645bf6",
     "entries": [
        {"collective": "allgather", "root": null, "min_bytes": 0, "max_bytes": 65536,
         "schedule": "schedules/allgather-sat-S2-R3-C2.json", "predicted_us": 7.9},
        {"collective": "allgather", "root": null, "min_bytes": 65536, "max_bytes": null,
         "schedule": "schedules/allgather-lp-trees.json"}, ...]}

Sizes are nccl-tests sizes in bytes (max of send and receive buffer bytes); ``min_bytes`` is
inclusive, ``max_bytes`` exclusive (``null`` = no upper limit).  Two entries of one collective
(and root) whose ranges overlap are refused when loaded; gaps are legal (a size no entry covers
runs the fastest baseline).  Schedule paths are relative to the plan file.  Rooted collectives
have one entry set per root they were planned for.

Plans made with the one decision (:mod:`synth.plan.decision`) add, per entry, ``decision``
(what was counted: ``executor``, ``executor_us``, ``records``, ``schedule_us``, ``nccl_us``,
``margin``) and, on ``nccl`` entries, ``fallback``: the schedule file that runs where NCCL
cannot.  Both are optional (plans made before them load unchanged).

``model`` names the models that made the plan (:mod:`synth.plan.model_identity`, the same line as
``summary.json``'s ``options.model``); optional (hand-written plans and plans made before it load
unchanged: a reader that predates it ignores it, so the version stays 1).  A plan recording other
models than the installed ones still runs; the selector says so once per file.

Each entry also says under which protocol our executor moves the schedule's steps
(``"protocol": "simple"`` or ``"ll"``, :mod:`synth.plan.protocol`; on an ``nccl`` entry: its
fallback's).  A plan without the field runs Simple; an ``ll`` entry covers no size above
:data:`synth.model.physics.LL_MAX_BYTES`, the largest call the executor runs under LL.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth.ir.collectives import ROOTED, canonical
from synth.ir.schedule import Schedule, atomic_write_text, read_json
from synth.model.physics import LL_MAX_BYTES, PROTOCOLS
from synth.plan.model_identity import MAX_MODEL_CHARS
from topo_probe.errors import ScheduleFormatError, TopocollError, show
from topo_probe.limits import MAX_BYTES, MAX_GPUS, MAX_TIME_US
from topo_probe.number_checks import check_float, check_int
from topo_probe.number_rules import is_int

PLAN_FORMAT = "topocoll.plan"
PLAN_VERSION = 1


@dataclass(frozen=True)
class PlanEntry:
    """Run ``schedule`` (a path relative to the plan) for sizes in [min_bytes, max_bytes)."""

    collective: str
    min_bytes: int
    max_bytes: int | None
    schedule: str
    root: int | None = None
    predicted_us: float | None = None
    #: ``nccl`` entries: the schedule file run where NCCL cannot (None: made before the field)
    fallback: str | None = None
    #: what the plan's decision counted (:func:`synth.plan.decision.range_record`), or None
    decision: dict | None = field(default=None, compare=False, hash=False)
    #: the protocol our executor moves the steps with: ``simple`` or ``ll`` (LL lines, calls of at
    #: most LL_MAX_BYTES); on an ``nccl`` entry the fallback's
    protocol: str = "simple"

    def covers(self, nbytes: int) -> bool:
        return self.min_bytes <= nbytes and (self.max_bytes is None or nbytes < self.max_bytes)


@dataclass
class Plan:
    """A topology's plan; ``base_dir`` is the folder schedule paths are relative to."""

    topology_name: str
    topology_fingerprint: str
    entries: list[PlanEntry] = field(default_factory=list)
    base_dir: Path = Path(".")
    #: the file it was loaded from (None: made in memory)
    path: Path | None = None
    #: the models that made it (:func:`synth.plan.model_identity.model_version`); None: not recorded
    model: str | None = None

    def select(self, collective: str, nbytes: int, root: int | None = None) -> PlanEntry | None:
        """The entry covering ``nbytes`` for this collective (and root), or None: a bisect in an
        index built once (rebuilt if :attr:`entries` changes length)."""
        name = canonical(collective)
        index = self.__dict__.get("_index")
        if index is None or index[0] != len(self.entries):
            index = self.__dict__["_index"] = (len(self.entries), _index(self.entries))
        found = index[1].get((name, root if name in ROOTED else None))
        if found is None:
            return None
        starts, entries, disjoint = found
        if not disjoint:                    # overlapping ranges (in-memory plans; load refuses them): list order
            return next((e for e in entries if e.covers(nbytes)), None)
        k = bisect.bisect_right(starts, nbytes) - 1
        return entries[k] if k >= 0 and entries[k].covers(nbytes) else None

    def load_schedule(self, entry: PlanEntry) -> Schedule:
        from synth.formats.schedule_file import load_schedule
        return load_schedule(self.schedule_path(entry.schedule))

    def schedule_path(self, file: str) -> Path:
        """``base_dir / file``, refused (ScheduleFormatError) where it resolves outside ``base_dir``
        (``..``, an absolute path, or a link out of the folder)."""
        _inside(file, "plan entry schedule")
        path = self.base_dir / file
        try:
            base, real = self.base_dir.resolve(), path.resolve()
        except (OSError, RuntimeError) as err:       # a symlink loop: RuntimeError before Python 3.13
            raise ScheduleFormatError(f"{path}: cannot resolve: {err}") from None
        if base not in real.parents:
            raise ScheduleFormatError(f"{path}: resolves outside the plan's folder {self.base_dir}")
        return path

    def to_dict(self) -> dict:
        return {"format": PLAN_FORMAT, "version": PLAN_VERSION,
                "topology": {"name": self.topology_name, "fingerprint": self.topology_fingerprint},
                **({"model": self.model} if self.model is not None else {}),
                "entries": [{"collective": e.collective, "root": e.root, "min_bytes": e.min_bytes,
                             "max_bytes": e.max_bytes, "schedule": e.schedule,
                             "predicted_us": e.predicted_us, "protocol": e.protocol,
                             **({"fallback": e.fallback} if e.fallback is not None else {}),
                             **({"decision": e.decision} if e.decision is not None else {})}
                            for e in self.entries]}

    def save(self, path: str | Path) -> None:
        """Write the plan; one with overlapping ranges is refused as :meth:`load` refuses it."""
        path = Path(path)
        _disjoint(self.entries, str(path))
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "Plan":
        """Read and check a plan file (the limits of :mod:`topo_probe.limits` apply); every
        failure is a ScheduleFormatError naming the file and the field."""
        path = Path(path)
        doc = read_json(path, "plan")
        if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
            raise ScheduleFormatError(f"{path}: format must be {PLAN_FORMAT!r}")
        if not is_int(doc.get("version")) or doc.get("version") != PLAN_VERSION:
            raise ScheduleFormatError(f"{path}: plan version {show(doc.get('version'))} is not supported")
        topo = doc.get("topology") or {}
        if not isinstance(topo, dict):
            raise ScheduleFormatError(f"{path}: topology must be an object, got {show(topo)}")
        items = doc.get("entries", [])
        if not isinstance(items, list):
            raise ScheduleFormatError(f"{path}: entries must be a list, got {show(items)}")
        entries = [_entry(e, f"{path}: entries[{k}]") for k, e in enumerate(items)]
        _disjoint(entries, str(path))
        names = []
        for key in ("name", "fingerprint"):
            names.append(topo.get(key, ""))
            if not isinstance(names[-1], str):
                raise ScheduleFormatError(f"{path}: topology.{key} must be a string, got {show(names[-1])}")
        return cls(names[0], names[1], entries, path.parent, path, _model(doc.get("model"), str(path)))


def _groups(entries: list[PlanEntry]) -> dict:
    """``(collective, root) -> [(index, entry), ...]`` sorted by ``min_bytes`` (then file order)."""
    groups: dict = {}
    for k, e in enumerate(entries):
        groups.setdefault((e.collective, e.root), []).append((k, e))
    return {key: sorted(items, key=lambda ke: (ke[1].min_bytes, ke[0])) for key, items in groups.items()}


def _overlap(items: list) -> tuple | None:
    """The first two neighbours of a :func:`_groups` list whose byte ranges overlap, else None (sorted by
    start, any overlap shows between neighbours: if i < j overlap, so do i and i + 1)."""
    return next(((a, b) for a, b in zip(items, items[1:])
                 if a[1].max_bytes is None or a[1].max_bytes > b[1].min_bytes), None)


def _index(entries: list[PlanEntry]) -> dict:
    """``(collective, root) -> (sorted min_bytes, entries, disjoint)``: entries sorted by
    ``min_bytes`` where their ranges are disjoint (what ``synthesize`` writes), else in file order."""
    out = {}
    for key, items in _groups(entries).items():
        disjoint = _overlap(items) is None
        ordered = [e for _, e in (items if disjoint else sorted(items, key=lambda ke: ke[0]))]
        out[key] = ([e.min_bytes for _, e in items], ordered, disjoint)
    return out


def _span(lo: int, hi: int | None) -> str:
    return f"[{lo}, {'no limit' if hi is None else hi})"


def _disjoint(entries: list[PlanEntry], where: str) -> None:
    """Refuse (ScheduleFormatError) two entries of one collective and root whose byte ranges
    overlap: which one runs at a size in both would be an accident of order.  Gaps are legal (a
    size no entry covers runs the fastest baseline: :class:`synth.plan.selector.ScheduleSelector`)."""
    for (name, root), items in _groups(entries).items():
        pair = _overlap(items)
        if pair is None:
            continue
        (i, a), (j, b) = pair                          # a starts first: they overlap where a ends after b starts
        ends = min((x for x in (a.max_bytes, b.max_bytes) if x is not None), default=None)
        first, second = sorted((i, j))
        raise ScheduleFormatError(
            f"{where}: entries[{first}] and entries[{second}] overlap: {name}"
            f"{'' if root is None else f' root {root}'} bytes "
            f"{_span(entries[first].min_bytes, entries[first].max_bytes)} and "
            f"{_span(entries[second].min_bytes, entries[second].max_bytes)} both cover "
            f"{_span(b.min_bytes, ends)}; a plan has one entry per size")


def _decision(d: Any, where: str) -> dict | None:
    """The optional ``decision`` record of an entry: an object of known keys and plain values."""
    if d is None:
        return None
    if not isinstance(d, dict):
        raise ScheduleFormatError(f"{where}.decision must be an object, got {show(d)}")
    for key, value in d.items():
        if key == "executor":
            if not isinstance(value, str):
                raise ScheduleFormatError(f"{where}.decision.executor must be a string, got {show(value)}")
        elif value is not None:
            check_float(value, f"{where}.decision.{key}", ScheduleFormatError, lo=0.0, hi=MAX_TIME_US, unit="")
    return dict(d)


def _model(model: Any, where: str) -> str | None:
    """The optional ``model`` identity: one printable line of at most MAX_MODEL_CHARS characters
    (it is quoted in a warning where it is not the installed one)."""
    if model is not None and (not isinstance(model, str) or not model.isprintable()
                              or not 0 < len(model) <= MAX_MODEL_CHARS):
        raise ScheduleFormatError(f"{where}: model must be one printable line of 1 to {MAX_MODEL_CHARS} characters "
                                  f"(the models that made the plan), got {show(model)}")
    return model


def _inside(path: str, where: str) -> None:
    """A schedule path of a plan names a file inside the plan's folder: relative, no ``..``
    (a plan from elsewhere must not make us read ``/etc/passwd`` or ``../../secret``)."""
    parts = path.replace("\\", "/").split("/")
    if path.startswith(("/", "\\")) or (len(path) > 1 and path[1] == ":") or ".." in parts or path.startswith("~"):
        raise ScheduleFormatError(f"{where}: {show(path)} is outside the plan's folder; schedule paths are relative "
                                  "to it, without '..'")


def _entry(e: Any, where: str) -> PlanEntry:
    """One plan entry, every field checked (sizes in 0..MAX_BYTES, a root only for rooted
    collectives, a schedule path without NUL, a finite predicted time)."""
    if not isinstance(e, dict):
        raise ScheduleFormatError(f"{where} must be an object, got {show(e)}")
    for key in ("collective", "min_bytes", "schedule"):
        if key not in e:
            raise ScheduleFormatError(f"{where}: missing field {key!r}")
    if not isinstance(e["collective"], str):
        raise ScheduleFormatError(f"{where}.collective must be a string, got {show(e['collective'])}")
    try:
        name = canonical(e["collective"])
    except TopocollError as bad:
        raise ScheduleFormatError(f"{where}: {bad}") from None
    lo = check_int(e["min_bytes"], f"{where}.min_bytes", ScheduleFormatError, lo=0, hi=MAX_BYTES, what="bytes")
    hi = e.get("max_bytes")
    if hi is not None:
        hi = check_int(hi, f"{where}.max_bytes", ScheduleFormatError, lo=0, hi=MAX_BYTES, what="bytes")
        if hi <= lo:
            raise ScheduleFormatError(f"{where}: max_bytes {hi} must be > min_bytes {lo}")
    sched = e["schedule"]
    if not isinstance(sched, str) or not sched or "\0" in sched:
        raise ScheduleFormatError(f"{where}.schedule must be a file path, got {show(sched)}")
    if sched != "nccl":
        _inside(sched, f"{where}.schedule")
    root = e.get("root")
    if name in ROOTED:
        root = check_int(root, f"{where}.root", ScheduleFormatError, lo=0, hi=MAX_GPUS - 1, what="(a rank)")
    elif root is not None:
        raise ScheduleFormatError(f"{where}.root: {name} takes no root, got {show(root)}")
    pred = e.get("predicted_us")
    if pred is not None:
        pred = check_float(pred, f"{where}.predicted_us", ScheduleFormatError, lo=0.0, hi=MAX_TIME_US, unit="µs")
    fallback = e.get("fallback")
    if fallback is not None and (not isinstance(fallback, str) or not fallback or "\0" in fallback
                                 or fallback == "nccl"):
        raise ScheduleFormatError(f"{where}.fallback must be a schedule file path, got {show(fallback)}")
    if fallback is not None:
        _inside(fallback, f"{where}.fallback")
    return PlanEntry(name, lo, hi, sched, root, pred, fallback, _decision(e.get("decision"), where),
                     _protocol(e.get("protocol", "simple"), hi, where))


def _protocol(protocol: Any, max_bytes: int | None, where: str) -> str:
    """An entry's protocol: one of PROTOCOLS; ``ll`` only on a range within LL_MAX_BYTES."""
    if not isinstance(protocol, str) or protocol not in PROTOCOLS:
        raise ScheduleFormatError(f"{where}.protocol must be one of {', '.join(PROTOCOLS)}, got {show(protocol)}")
    if protocol == "ll" and (max_bytes is None or max_bytes > LL_MAX_BYTES + 1):
        raise ScheduleFormatError(f"{where}.protocol: ll runs calls of at most {LL_MAX_BYTES} bytes, but the range "
                                  f"reaches {'no upper limit' if max_bytes is None else max_bytes - 1} bytes")
    return protocol
