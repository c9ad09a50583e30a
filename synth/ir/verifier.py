"""Symbolic verification: prove that a :class:`~synth.ir.schedule.Schedule` implements its collective.

The verifier replays a schedule on symbolic state, the one definition of each collective being
:mod:`synth.ir.collectives` (chunk ids with their pre/postconditions):

* non-combining collectives: for every (rank, chunk), whether the rank holds the chunk;
* combining collectives (reducescatter, allreduce, reduce): the set of contributions the rank's
  copy of the chunk combines (initially ``{r}`` for every rank ``r`` in the chunk's ``pre``).

Within a step every transfer reads the state as it was at the start of the step; writes
apply at the end of the step.  Steps and transfers are numbered from 0, like ``steps[i]`` and
``steps[i].transfers[j]`` of the JSON document.

Rules (the ``rule`` string of a :class:`Violation`):

``not-held``          a transfer sends a chunk its source does not hold (yet).
``double-count``      a reduce whose contributions overlap the destination's, or two reduces into
                      the same (dst, chunk) in one step with overlapping contributions.
``reduce-into-empty`` a reduce into a rank that holds no contribution of the chunk.
``overwrite-loses``   a copy (combining collectives) onto a rank whose contributions are not a
                      subset of the incoming ones: they would be lost.
``write-conflict``    a copy and another write to the same (dst, chunk) in one step.
``op-mismatch``       a reduce in a non-combining collective.
``no-channel``        src -> dst is not a channel of the fabric.
``over-capacity``     a step loads a fabric resource (:meth:`Fabric.load` of its transfers) beyond
                      ``Fabric.capacity(resource, rounds)`` + 1e-9.
``postcondition``     after the last step a ``post`` rank lacks a chunk or holds a partial reduction.
``wrong-topology``    the schedule was made for another topology (fingerprint or rank count).
``bad-transfer``      a transfer names a chunk or rank that is not an integer (a bool, float or string:
                      :func:`topo_probe.number_rules.is_int`) or out of range, src == dst, or an unknown op.
``bad-rounds``        a step declares fewer than 1 round.
``bad-collective``    the schedule's collective/ranks/chunks/root do not make a collective.

Examples
--------
>>> from synth.ir.schedule import Schedule, Step, Transfer
>>> ag = Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),))
>>> verify(ag).ok
True
>>> bad = ag.with_(steps=(Step(1, (Transfer(0, 1, 0),)),))
>>> check(bad)
Traceback (most recent call last):
...
topo_probe.errors.ScheduleInvalid: step 0, transfer 0 (chunk 0, rank 1 -> 0): rank 1 does not hold chunk 0 yet (rule: not-held)
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from synth.ir.capacity import (  # noqa: F401  (re-exported: the verifier's capacity rule, in one place)
    ARRAY_LOADS, CAPACITY_EPS, over_capacity, required_rounds, rounds_for_loads, sized_steps, step_loads)
from synth.ir.collectives import CollectiveSpec
from synth.ir.fabric import Fabric, Resource
from synth.ir.schedule import OPS, Schedule, Step
from synth.ir.step_columns import kept_columns
from topo_probe.errors import InvalidArgument, ScheduleInvalid, TopocollError
from topo_probe.number_rules import is_int

#: steps with at least this many transfers are first tried in bulk (:mod:`synth.ir.step_replay`)
CLEAN_STEP_TRANSFERS = 256
RULES = ("not-held", "double-count", "reduce-into-empty", "overwrite-loses", "write-conflict",
         "op-mismatch", "no-channel", "over-capacity", "postcondition", "wrong-topology",
         "bad-transfer", "bad-rounds", "bad-collective")



@dataclass(frozen=True)
class Violation:
    """One broken rule; ``step``/``transfer``/``rank``/``chunk`` locate it (None if n/a)."""

    rule: str
    message: str
    step: int | None = None
    transfer: int | None = None
    rank: int | None = None
    chunk: int | None = None

    def error(self) -> ScheduleInvalid:
        """This violation as a :class:`~topo_probe.errors.ScheduleInvalid`."""
        return ScheduleInvalid(self.message, rule=self.rule, step=self.step, transfer=self.transfer,
                               rank=self.rank, chunk=self.chunk)


@dataclass
class VerifyReport:
    """Result of :func:`verify`.

    ``loads[s]`` maps each fabric resource to the chunks step ``s`` moves across it and
    ``rounds_needed[s]`` is the fewest rounds step ``s`` needs (both empty without a fabric).
    """

    ok: bool
    violations: list[Violation] = field(default_factory=list)
    loads: list[dict[Resource, float]] = field(default_factory=list)
    rounds_needed: list[int] = field(default_factory=list)

    def raise_first(self) -> None:
        """Raise the first violation as ScheduleInvalid (nothing when ``ok``)."""
        if self.violations:
            raise self.violations[0].error()


def resource_name(resource: Resource) -> str:
    """``"gpu0->gpu1"`` for resource ``("gpu0", "gpu1")``."""
    return f"{resource[0]}->{resource[1]}"


def _ranks_text(mask: int) -> str:
    return "[" + ", ".join(str(i) for i in range(mask.bit_length()) if mask >> i & 1) + "]"


def _where(si: int, ti: int, t) -> str:
    return f"step {si}, transfer {ti} (chunk {t.chunk}, rank {t.src} -> {t.dst})"


class _Replay:
    """Symbolic state and the rule checks of one verification run."""

    def __init__(self, schedule: Schedule, spec: CollectiveSpec, fabric: Fabric | None,
                 known_loads: list | None = None) -> None:
        self.s, self.spec, self.fabric = schedule, spec, fabric
        self.known_loads = known_loads
        self.n, self.m = spec.ranks, spec.num_chunks
        self.combining = spec.combining
        # per step, the columns the bulk replay read (None where it read none), where verify keeps them
        self.columns: list | None = None
        self.chunks = spec.chunks()
        # state[rank * m + chunk]: contribution bit mask (combining) or 1 (held); absent: nothing
        # (a dict: an alltoall of 256 ranks has 16 million (rank, chunk) slots, few of them used)
        self.state: dict[int, int] = {}
        for c in self.chunks:
            for r in c.pre:
                self.state[r * self.m + c.id] = (1 << r) if self.combining else 1
        self.violations: list[Violation] = []
        self.loads: list[dict[Resource, float]] = []
        self.rounds_needed: list[int] = []
        self.channel_ok: dict[tuple[int, int], bool] = {}   # has_channel, asked once per pair

    def add(self, rule: str, text: str, step=None, transfer=None, rank=None, chunk=None) -> None:
        self.violations.append(Violation(rule, f"{text} (rule: {rule})", step, transfer, rank, chunk))

    # ---------------------------------------------------------------- one step
    def step(self, si: int, step: Step) -> None:
        clean = None
        if len(step.transfers) >= CLEAN_STEP_TRANSFERS:      # a big step that breaks no transfer rule: in bulk
            from synth.ir.step_replay import replay_clean_step      # (NumPy: loaded when a step is big)
            clean = replay_clean_step(self, si, step)
        if clean is not None:
            if self.fabric is not None:
                self._capacity(si, step, clean)
            return
        found: list[Violation] = []
        keep, self.violations = self.violations, found
        if step.rounds < 1:
            self.add("bad-rounds", f"step {si}: rounds must be >= 1, got {step.rounds}", si)
        # (dst * m + chunk) -> the step's first write into it (transfer, op, value); later ones in `more`
        first: dict[int, tuple[int, str, int]] = {}
        more: dict[int, list[tuple[int, str, int]]] = {}
        pairs: list[tuple[int, int]] = []
        n, m, state, fabric, channel_ok = self.n, self.m, self.state, self.fabric, self.channel_ok
        combining = self.combining
        for ti, t in enumerate(step.transfers):
            chunk, src, dst, op = t.chunk, t.src, t.dst, t.op
            if not (type(chunk) is type(src) is type(dst) is int and 0 <= chunk < m and 0 <= src < n
                    and 0 <= dst < n and src != dst and op in OPS) and not self._transfer_ok(si, ti, t):
                continue                                   # (NumPy integers pass _transfer_ok's rules)
            if fabric is not None:
                pair = (src, dst)
                ok = channel_ok.get(pair)
                if ok is None:
                    ok = channel_ok[pair] = fabric.has_channel(src, dst)
                if ok:
                    pairs.append(pair)
                else:
                    self.add("no-channel", f"{_where(si, ti, t)}: rank {src} -> {dst} is not a channel "
                             f"of fabric {fabric.topology_name!r}", si, ti, src, chunk)
            if op == "reduce" and not combining:
                self.add("op-mismatch", f"{_where(si, ti, t)}: reduce in {self.spec.name}, which does not "
                         f"combine", si, ti, dst, chunk)
                continue
            val = state.get(src * m + chunk, 0)
            if not val:
                self.add("not-held", f"{_where(si, ti, t)}: rank {src} does not hold chunk {chunk} yet",
                         si, ti, src, chunk)
                continue
            key = dst * m + chunk
            if key in first:
                more.setdefault(key, []).append((ti, op, val))
            else:
                first[key] = (ti, op, val)
        if combining:
            updates = []
            for key, w in first.items():
                cur = state.get(key, 0)
                if key in more or (not cur if w[1] == "reduce" else cur & ~w[2]) or (w[1] == "reduce" and w[2] & cur):
                    updates.append((key, self._resolve(si, step, divmod(key, m), [w, *more.get(key, ())])))
                else:            # one write and nothing to report: _resolve's result, by hand
                    updates.append((key, cur | w[2] if w[1] == "reduce" else w[2]))
        elif more:        # no reduces here (op-mismatch): one copy is written, two conflict
            updates = [(key, w[2] if key not in more else self._resolve(si, step, divmod(key, m), [w, *more[key]]))
                       for key, w in first.items()]
        else:
            updates = [(key, w[2]) for key, w in first.items()]
        for key, val in updates:
            state[key] = val
        if fabric is not None:
            self._capacity(si, step, pairs)
        found.sort(key=lambda v: (v.transfer is None, v.transfer or 0))
        self.violations = keep + found

    def _transfer_ok(self, si: int, ti: int, t) -> bool:
        where = f"step {si}, transfer {ti}"
        odd = next((f"{key} {val!r}" for key, val in (("chunk", t.chunk), ("src", t.src), ("dst", t.dst))
                    if not is_int(val)), None)
        if odd is not None:                # True is not chunk 1, nor 1.0 (or "1") rank 1
            self.add("bad-transfer", f"{where}: {odd} is not an integer", si, ti)
        elif not 0 <= t.chunk < self.m:
            self.add("bad-transfer", f"{where}: chunk {t.chunk} is out of range 0..{self.m - 1}", si, ti,
                     chunk=t.chunk)
        elif not (0 <= t.src < self.n and 0 <= t.dst < self.n):
            self.add("bad-transfer", f"{where}: rank {t.src} -> {t.dst} is not a pair of ranks "
                     f"0..{self.n - 1}", si, ti, chunk=t.chunk)
        elif t.src == t.dst:
            self.add("bad-transfer", f"{where}: src and dst are both rank {t.src}", si, ti, t.src, t.chunk)
        elif t.op not in OPS:
            self.add("bad-transfer", f"{where}: op must be 'copy' or 'reduce', got {t.op!r}", si, ti,
                     t.src, t.chunk)
        else:
            return True
        return False

    def _resolve(self, si: int, step: Step, key: tuple[int, int], ws: list[tuple[int, str, int]]) -> int:
        dst, chunk = key
        cur = self.state.get(dst * self.m + chunk, 0)
        copies = [w for w in ws if w[1] == "copy"]
        if copies and len(ws) > 1:
            first, second = ws[0], ws[1]
            t = step.transfers[second[0]]
            self.add("write-conflict", f"{_where(si, second[0], t)}: rank {dst}'s chunk {chunk} is also "
                     f"written by transfer {first[0]} in this step", si, second[0], dst, chunk)
            return copies[0][2]
        if copies:
            ti, _, val = copies[0]
            if self.combining and cur & ~val:
                t = step.transfers[ti]
                self.add("overwrite-loses", f"{_where(si, ti, t)}: the copy overwrites rank {dst}'s "
                         f"contributions {_ranks_text(cur & ~val)} to chunk {chunk}, which the incoming "
                         f"copy {_ranks_text(val)} lacks", si, ti, dst, chunk)
            return val
        acc = cur
        for ti, _, val in ws:
            t = step.transfers[ti]
            if not cur and ti == ws[0][0]:
                self.add("reduce-into-empty", f"{_where(si, ti, t)}: rank {dst} holds no contribution to "
                         f"chunk {chunk} to reduce into", si, ti, dst, chunk)
            if val & acc:
                whose = "rank %d's" % dst if val & cur else "another reduce's in this step"
                self.add("double-count", f"{_where(si, ti, t)}: contributions {_ranks_text(val & acc)} "
                         f"to chunk {chunk} are already in {whose} copy", si, ti, dst, chunk)
            acc |= val
        return acc

    def _capacity(self, si: int, step: Step, pairs: list[tuple[int, int]]) -> None:
        fab = self.fabric
        # loads a builder computed for this step's transfers: the same as step_loads(fab, pairs)
        # when every transfer passed the checks above (pairs is then every transfer, in order)
        known = self.known_loads[si] if self.known_loads is not None and len(pairs) == len(step.transfers) else None
        loads = known if known is not None else step_loads(fab, pairs)
        self.loads.append(loads)
        self.rounds_needed.append(rounds_for_loads(fab, loads) if pairs else 1)
        if step.rounds < 1:
            return
        for r in sorted(over_capacity(fab, loads, step.rounds)):
            cap = fab.capacity(r, step.rounds)
            if loads[r] > cap + CAPACITY_EPS:
                self.add("over-capacity", f"step {si}: resource {resource_name(r)} carries {loads[r]:g} "
                         f"chunks but {step.rounds} round(s) give it capacity {cap:g}", si)

    # ---------------------------------------------------------------- the end
    def postcondition(self) -> None:
        last = f"after the last step (step {len(self.s.steps) - 1})" if self.s.steps else "with no steps"
        for c in self.chunks:
            full = 0
            for r in c.pre:
                full |= 1 << r
            for r in c.post:
                val = self.state.get(r * self.m + c.id, 0)
                if not val:
                    self.add("postcondition", f"{last}: rank {r} lacks chunk {c.id}", rank=r, chunk=c.id)
                elif self.combining and val != full:
                    self.add("postcondition", f"{last}: rank {r} holds a partial reduction of chunk {c.id}: "
                             f"contributions {_ranks_text(full & ~val)} are missing", rank=r, chunk=c.id)


def _topology_violations(schedule: Schedule, fabric: Fabric) -> list[Violation]:
    out = []
    fp_s, fp_f = schedule.topology_fingerprint, fabric.fingerprint
    if fp_s and fp_f and fp_s != fp_f:
        msg = (f"schedule: made for topology {schedule.topology_name or '?'!r} (fingerprint {fp_s}), "
               f"not fabric {fabric.topology_name!r} (fingerprint {fp_f}) (rule: wrong-topology)")
        out.append(Violation("wrong-topology", msg))
    if schedule.ranks != fabric.num_ranks:
        msg = (f"schedule: has {schedule.ranks} ranks but fabric {fabric.topology_name!r} has "
               f"{fabric.num_ranks} (rule: wrong-topology)")
        out.append(Violation("wrong-topology", msg))
    return out


def verify(schedule: Schedule, fabric: Fabric | None = None, *, loads: list | None = None) -> VerifyReport:
    """Replay ``schedule`` symbolically and report every broken rule (see module docstring).

    Parameters
    ----------
    schedule : Schedule
        The schedule to check.
    fabric : Fabric, optional
        When given, transfers must use its channels, each step's resource loads must fit
        ``capacity(resource, step.rounds)``, and the topology fingerprints must agree.
    loads : list, optional
        Per step of ``schedule``, :func:`step_loads` of ``fabric`` for that step's transfers'
        ``(src, dst)`` pairs, as :func:`sized_steps` returns them: not computed again (a step
        with a transfer that fails a check has its loads computed without it, as always).

    On a fabric lent a :class:`~synth.ir.step_columns.KeptColumns` (``synthesize`` lends its fabric one:
    :func:`~synth.ir.step_columns.keeping_columns`), a combining schedule that passes leaves there the
    columns its bulk replay read, for the same-bits check of the same schedule, and the replay takes those
    an earlier verification of the same steps left.

    Returns
    -------
    VerifyReport
        ``ok`` is True when there are no violations; violations are in schedule order.
    """
    try:
        spec = schedule.spec
    except TopocollError as e:
        v = Violation("bad-collective", f"schedule: {e} (rule: bad-collective)")
        return VerifyReport(False, [v])
    pre: list[Violation] = []
    if fabric is not None:
        pre = _topology_violations(schedule, fabric)
        if schedule.ranks != fabric.num_ranks:
            fabric = None
    if loads is not None and len(loads) != len(schedule.steps):
        raise InvalidArgument(f"verify: {len(loads)} step loads for {len(schedule.steps)} steps")
    keep = kept_columns(fabric)
    rep = _Replay(schedule, spec, fabric, loads if fabric is not None else None)
    if keep is not None and spec.combining:            # columns an earlier verification of these steps read
        rep.columns = keep.take(schedule.steps) or [None] * len(schedule.steps)
    rep.violations = pre
    for si, step in enumerate(schedule.steps):
        rep.step(si, step)
    rep.postcondition()
    if rep.columns is not None and not rep.violations:
        keep.offer(schedule.steps, rep.columns)
    return VerifyReport(not rep.violations, rep.violations, rep.loads, rep.rounds_needed)


#: id of the steps of a schedule :func:`check` passed -> (that schedule, its fabric), weakly held
_PASSED: dict[int, tuple] = {}
_FIELDS = ("collective", "ranks", "chunks_per_rank", "root", "inplace", "topology_name", "topology_fingerprint")


def _passed_before(schedule: Schedule, fabric: Fabric | None) -> bool:
    """Did :func:`check` pass this schedule's very steps, with the same fields but ``name`` and
    ``meta``, on this very fabric object?  (Schedules are immutable, fabrics treated so.)"""
    hit = _PASSED.get(id(schedule.steps))
    if hit is None:
        return False
    old, fab = hit[0](), hit[1]
    same_fabric = fab is None if fabric is None else (fab is not None and fab() is fabric)
    return (old is not None and old.steps is schedule.steps and same_fabric
            and all(getattr(old, f) == getattr(schedule, f) for f in _FIELDS))


def _remember(schedule: Schedule, fabric: Fabric | None) -> None:
    key = id(schedule.steps)
    ref = weakref.ref(schedule, lambda r, key=key, passed=_PASSED: passed.pop(key, None)
                      if passed.get(key, (None,))[0] is r else None)
    _PASSED[key] = (ref, weakref.ref(fabric) if fabric is not None else None)


def check(schedule: Schedule, fabric: Fabric | None = None, *, loads: list | None = None) -> None:
    """Raise :class:`~topo_probe.errors.ScheduleInvalid` for the first violation of :func:`verify`.

    The error's ``rule``, ``step``, ``transfer``, ``rank`` and ``chunk`` locate it; its message
    is one line, e.g. ``step 3, transfer 5 (chunk 12, rank 2 -> 6): rank 2 does not hold
    chunk 12 yet (rule: not-held)``.

    A schedule whose very steps (the same tuple object, as ``schedule.with_(meta=...)`` keeps
    them) already passed on the very same fabric object is not replayed again: a synthesizer's
    check and the pipeline's check before saving verify it once.  ``loads``: as :func:`verify`'s.
    """
    if _passed_before(schedule, fabric):
        return
    verify(schedule, fabric, loads=loads).raise_first()
    _remember(schedule, fabric)
