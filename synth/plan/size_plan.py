"""Size-based plans: for each collective, which schedule file to run for which message size.

A plan is what ``synthesize`` writes (``results/<topology>/plan.json``) and what the
Communicator loads.  JSON document::

    {"format": "topocoll.plan", "version": 1,
     "topology": {"name": "dgx1-v100", "fingerprint": "0123abcd..."},
     "entries": [
        {"collective": "allgather", "root": null, "min_bytes": 0, "max_bytes": 65536,
         "schedule": "schedules/allgather-sat-S2-R3-C2.json", "predicted_us": 7.9},
        {"collective": "allgather", "root": null, "min_bytes": 65536, "max_bytes": null,
         "schedule": "schedules/allgather-lp-trees.json"}, ...]}

Sizes are nccl-tests sizes in bytes (max of send and receive buffer bytes); ``min_bytes`` is
inclusive, ``max_bytes`` exclusive (``null`` = no upper limit).  Schedule paths are relative
to the plan file.  Rooted collectives have one entry set per root they were planned for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from synth.ir.collectives import ROOTED, canonical
from synth.ir.schedule import Schedule, atomic_write_text, read_json
from topo_probe.errors import ScheduleFormatError

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

    def covers(self, nbytes: int) -> bool:
        return self.min_bytes <= nbytes and (self.max_bytes is None or nbytes < self.max_bytes)


@dataclass
class Plan:
    """A topology's plan; ``base_dir`` is the folder schedule paths are relative to."""

    topology_name: str
    topology_fingerprint: str
    entries: list[PlanEntry] = field(default_factory=list)
    base_dir: Path = Path(".")

    def select(self, collective: str, nbytes: int, root: int | None = None) -> PlanEntry | None:
        """The entry covering ``nbytes`` for this collective (and root), or None."""
        name = canonical(collective)
        want_root = root if name in ROOTED else None
        for e in self.entries:
            if e.collective == name and e.root == want_root and e.covers(nbytes):
                return e
        return None

    def load_schedule(self, entry: PlanEntry) -> Schedule:
        from synth.formats.schedule_file import load_schedule
        return load_schedule(self.base_dir / entry.schedule)

    def to_dict(self) -> dict:
        return {"format": PLAN_FORMAT, "version": PLAN_VERSION,
                "topology": {"name": self.topology_name, "fingerprint": self.topology_fingerprint},
                "entries": [{"collective": e.collective, "root": e.root, "min_bytes": e.min_bytes,
                             "max_bytes": e.max_bytes, "schedule": e.schedule,
                             "predicted_us": e.predicted_us} for e in self.entries]}

    def save(self, path: str | Path) -> None:
        path = Path(path)
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "Plan":
        path = Path(path)
        doc = read_json(path, "plan")
        if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
            raise ScheduleFormatError(f"{path}: format must be {PLAN_FORMAT!r}")
        if doc.get("version") != PLAN_VERSION:
            raise ScheduleFormatError(f"{path}: plan version {doc.get('version')!r} is not supported")
        topo = doc.get("topology") or {}
        entries = []
        for k, e in enumerate(doc.get("entries", [])):
            where = f"{path}: entries[{k}]"
            try:
                entry = PlanEntry(canonical(e["collective"]), int(e["min_bytes"]),
                                  None if e.get("max_bytes") is None else int(e["max_bytes"]),
                                  str(e["schedule"]), e.get("root"), e.get("predicted_us"))
            except KeyError as miss:
                raise ScheduleFormatError(f"{where}: missing field {miss.args[0]!r}") from None
            except (TypeError, ValueError) as bad:
                raise ScheduleFormatError(f"{where}: {bad}") from None
            if entry.max_bytes is not None and entry.max_bytes <= entry.min_bytes:
                raise ScheduleFormatError(f"{where}: max_bytes {entry.max_bytes} must be > min_bytes "
                                          f"{entry.min_bytes}")
            entries.append(entry)
        return cls(str(topo.get("name", "")), str(topo.get("fingerprint", "")), entries, path.parent)
