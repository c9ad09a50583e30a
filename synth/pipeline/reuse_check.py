"""What a run that reuses earlier results still does, so the user sees real work in seconds:
every schedule the plan runs is loaded and verified against this topology's fabric, and the plan
is summarised (per collective: the size ranges and what runs them).  A run that cannot reuse them
first checks what it would drop (:func:`dropped_results`): results of another topology, or of
collectives and roots it does not redo, are replaced only with ``--force``.

A schedule that fails to load or verify makes the results not reusable: the run says why and
synthesizes again (:func:`synth.pipeline.synthesize.run`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from synth.formats.nccl_tests.sizes import size_label
from synth.ir.fabric import Fabric
from synth.plan.size_plan import Plan, PlanEntry
from topo_probe.errors import TopocollError

#: a plan entry run by NCCL rather than by a schedule file
NCCL = "nccl"

def _size(n: int | None) -> str:
    """A range boundary as the plan lines print it: :func:`~synth.formats.nccl_tests.sizes.size_label` where that
    is exact (``64 KiB``, ``8 B``), else plain bytes (``1048577 B``, not the rounded ``1.0 MiB``); ``inf`` for no end."""
    return "inf" if n is None else size_label(n, exact=True)


def range_text(lo: int, hi: int | None) -> str:
    """A plan range ``[lo, hi)`` (plan.json's ``min_bytes`` inclusive, ``max_bytes`` exclusive:
    :meth:`~synth.plan.size_plan.PlanEntry.covers`) as the plan lines print it: ``1 KiB-64 KiB``, ``64 KiB-inf``;
    a range of one size alone (``1 MiB``, not ``1 MiB-1048577 B``).

    >>> range_text(1 << 10, 1 << 16), range_text(1 << 20, (1 << 20) + 1), range_text(0, None)
    ('1 KiB-64 KiB', '1 MiB', '0 B-inf')
    """
    return _size(lo) if hi == lo + 1 else f"{_size(lo)}-{_size(hi)}"


def _runner(entry: PlanEntry) -> str:
    """What an entry runs: its schedule's name, ``(LL)`` where our executor runs it under LL; an ``nccl`` entry
    with the fallback that runs where NCCL cannot (what tells adjacent ``nccl`` ranges apart)."""
    ll = entry.protocol == "ll"
    if entry.schedule != NCCL:
        return Path(entry.schedule).name.split(".")[0] + (" (LL)" if ll else "")
    if not entry.fallback:       # a plan made before that field: the cost model's baseline runs, under the protocol
        return NCCL + (" (fallback under LL)" if ll else "")
    return f"{NCCL} (fallback {Path(entry.fallback).name.split('.')[0]}{' under LL' if ll else ''})"


def plan_lines(plan: Plan) -> list[str]:
    """One line per collective (and root): ``allreduce: 0 B-64 KiB oneshot, 64 KiB-inf nccl``; a
    schedule our executor runs under LL says so, an ``nccl`` range names its fallback; adjacent ranges that
    print the same are printed as one.

    >>> p = Plan("t", "f", [PlanEntry("allreduce", 0, 1 << 10, "schedules/allreduce-tree.json", protocol="ll"),
    ...                     PlanEntry("allreduce", 1 << 10, 1 << 16, "schedules/allreduce-oneshot.json"),
    ...                     PlanEntry("allreduce", 1 << 16, 1 << 20, "nccl", fallback="allreduce-direct.json"),
    ...                     PlanEntry("allreduce", 1 << 20, 1 << 30, "nccl", fallback="allreduce-ring.json"),
    ...                     PlanEntry("allreduce", 1 << 30, None, "nccl", fallback="allreduce-ring.json")])
    >>> plan_lines(p)[0].split(": ", 1)[1].split(", ")  # doctest: +NORMALIZE_WHITESPACE
    ['0 B-1 KiB allreduce-tree (LL)', '1 KiB-64 KiB allreduce-oneshot', '64 KiB-1 MiB nccl (fallback allreduce-direct)',
     '1 MiB-inf nccl (fallback allreduce-ring)']
    """
    rows: dict[tuple, list[list]] = {}
    for e in plan.entries:
        parts, runs = rows.setdefault((e.collective, e.root), []), _runner(e)
        if parts and parts[-1][1] == e.min_bytes and parts[-1][2] == runs:    # adjacent, printed the same: one
            parts[-1][1] = e.max_bytes
        else:
            parts.append([e.min_bytes, e.max_bytes, runs])
    return [f"{coll}{'' if root is None else f' (root {root})'}: "
            + ", ".join(f"{range_text(lo, hi)} {runs}" for lo, hi, runs in parts)
            for (coll, root), parts in rows.items()]


def verify_reused(out_dir: Path, fabric: Fabric, model: str) -> tuple[int, float, list[str]] | str:
    """``(schedules verified, seconds, plan lines)`` of the plan in ``out_dir`` against
    ``fabric``, or a one-line reason the results cannot be reused (a schedule missing, malformed
    or not valid on this fabric; a plan recording models other than ``model``, the run's
    :func:`~synth.plan.model_identity.model_version`, though ``summary.json`` records this one)."""
    from synth.formats.schedule_file import load_schedule
    from synth.ir.verifier import check
    t0 = time.perf_counter()
    try:
        plan = Plan.load(out_dir / "plan.json")
        if plan.model is not None and plan.model != model:
            return f"{out_dir / 'plan.json'} was made by other models ({plan.model}; this run: {model})"
        done: set[str] = set()
        for e in plan.entries:
            for file in (e.schedule, e.fallback):      # a fallback runs where NCCL cannot: verified too
                if file and file != NCCL and file not in done:
                    check(load_schedule(plan.schedule_path(file)), fabric)
                    done.add(file)
    except TopocollError as exc:
        return str(exc)
    return len(done), time.perf_counter() - t0, plan_lines(plan)


def dropped_results(out_dir: Path, fingerprint: str, wanted: dict[str, int | None]) -> str | None:
    """What a new run would silently drop from the results in ``out_dir``: results of another
    topology (``fingerprint`` differs), or of a collective or root not in ``wanted``
    (collective -> root, None for unrooted ones); None where it drops nothing (or there are no
    readable results).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "summary.json").write_text('{"topology": "t", "fingerprint": "f1", '
    ...     '"collectives": {"allreduce": {"root": null}, "broadcast": {"root": 0}}}')
    >>> dropped_results(d, "f1", {"allreduce": None, "broadcast": 0}) is None
    True
    >>> dropped_results(d, "f1", {"broadcast": 3})
    'holds results for allreduce, broadcast root 0 that this run (broadcast root 3) would drop'
    >>> dropped_results(d, "f2", {"allreduce": None, "broadcast": 0})
    "holds results of another topology ('t', fingerprint f1)"
    """
    try:
        old = json.loads((out_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(old, dict) or not isinstance(old.get("collectives"), dict):
        return None
    if old.get("fingerprint") != fingerprint:
        return f"holds results of another topology ({old.get('topology')!r}, fingerprint {old.get('fingerprint')})"

    def named(coll: str, root) -> str:
        return coll if root is None else f"{coll} root {root}"
    gone = [named(c, rec.get("root")) for c, rec in old["collectives"].items()
            if isinstance(rec, dict) and (c not in wanted or rec.get("root") != wanted[c])]
    if not gone:
        return None
    asked = ", ".join(named(c, r) for c, r in wanted.items())
    return f"holds results for {', '.join(gone)} that this run ({asked}) would drop"


__all__ = ["verify_reused", "plan_lines", "range_text", "dropped_results"]
