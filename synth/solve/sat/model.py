"""SCCL-style synthesis of one schedule instance with OR-Tools CP-SAT.

An **instance** is (fabric, collective, S steps, R rounds, C chunks per rank).  Like SCCL,
every chunk travels along a tree of sends; a chunk sent over channel i->j in step s arrives at
j at the end of step s and j may forward it from step s+1 on.  Step s lasts ``r_s >= 1``
rounds (``sum r_s = R``) and, for every shared fabric **resource** e (an NVLink bundle, an
NVSwitch port, a PCIe uplink, the CPU interconnect, a NIC port), the chunks crossing e in step
s, weighted by the fraction of each channel's traffic that crosses e, must fit in
``r_s * bandwidth(e) / unit_gbps`` (see :mod:`synth.ir.fabric`).  Heterogeneous links therefore
need nothing special.

Encoding (time-indexed, pure 0-1 apart from the ``r_s``): one Boolean ``x[c, i, j, s]``
per chunk, channel and step.  The SCCL variables are linear in them: chunk c arrives at rank j
in step ``s`` iff ``sum_i x[c, i, j, s] = 1`` (its *arrival step*, 0 for pre ranks, never for
ranks with no incoming send), the send's step is ``s``, and "one source per arrival" is
``sum_{i, s} x[c, i, j, s] <= 1`` (``= 1`` for post ranks).  Relaying only after arrival is
``x[c, i, j, s] <= sum_{k, s' < s} x[c, k, i, s']``.  Compared with SCCL's integer arrival
times this has a tight LP relaxation, which is what lets CP-SAT prove infeasibility quickly.
Variables that cannot be part of a minimal schedule are never created: a send i->j in step s
needs i within s-1 hops of a holder and j within S-s hops of a rank that needs the chunk.
Redundant but valid cuts: a rank that does not need a chunk forwards every copy it gets;
chunks with the same pre/post sets are interchangeable, so they are ordered by their arrival
step at one rank (symmetry breaking; see ``symmetry`` of :func:`synth.solve.sat.instance.solve_instance`).  A
fractional capacity ``floor(ratio * r_s)`` is made exact through one-hot Booleans for r_s.
Unicast collectives (alltoall, gather, scatter) use the aggregated :class:`FlowModel`
(:mod:`synth.solve.sat.flow`); hop distances, capacity constraints, decoding and the solver call
are shared through :mod:`synth.solve.sat.common`.

Only non-combining collectives are encoded here; ReduceScatter, Reduce and AllReduce are
derived by duality in :mod:`synth.solve.sat.compose` (:func:`synth.solve.sat.instance.solve_instance` dispatches).
Every schedule returned has passed ``synth.ir.verifier.check(schedule, fabric)``.
"""

from __future__ import annotations

import math
import time

from ortools.sat.python import cp_model

from synth.ir.collectives import CollectiveSpec
from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule, Transfer
from synth.solve.budget import SolveBudget, budget_or_new
from synth.solve.sat.common import NEVER, Sum, add_capacity, decode_schedule, hop_distances, run_cp_sat
from synth.solve.sat.flow import FlowModel, is_unicast
from topo_probe.errors import InvalidArgument, ScheduleInvalid, SynthesisInfeasible, UnsupportedCollective


def latency_lower_bound(fabric: Fabric, spec: CollectiveSpec) -> int:
    """Fewest steps any schedule needs: the farthest post rank from the nearest pre rank
    (for combining collectives: from every pre rank, as every contribution must get there).

    >>> from synth.ir.fabric import build_fabric
    >>> from topo_probe.machines.generators import ring
    >>> latency_lower_bound(build_fabric(ring(6)), CollectiveSpec("allgather", 6, 1))
    3
    """
    dist = hop_distances(fabric)
    worst = 0
    for ch in spec.chunks():
        for p in ch.post:
            far = [dist[q][p] for q in ch.pre]
            worst = max(worst, max(far) if spec.combining else min(far))
    if worst >= NEVER:
        raise UnsupportedCollective(f"{spec.name} on {fabric.topology_name!r}: some rank cannot be reached")
    return worst


def spec_of(collective, ranks: int, chunks: int, root: int | None) -> CollectiveSpec:
    """A CollectiveSpec from a name (or a spec whose name and root are reused)."""
    if isinstance(collective, CollectiveSpec):
        root = collective.root if root is None else root
        collective = collective.name
    return CollectiveSpec(collective, ranks, chunks, root)


class StepModel:
    """The CP-SAT model of one non-combining instance (see module docstring).

    Attributes ``model`` (CpModel), ``x`` ({(chunk, src, dst, step): BoolVar}) and
    ``r`` (rounds IntVar per step, index 0 = step 1).
    """

    def __init__(self, fabric: Fabric, spec: CollectiveSpec, steps: int, rounds: int,
                 symmetry: int = 1) -> None:
        self.fabric, self.spec, self.S, self.R = fabric, spec, steps, rounds
        self.sym_k = int(symmetry)
        self.model = cp_model.CpModel()
        self.x: dict[tuple[int, int, int, int], cp_model.IntVar] = {}
        self._variables()
        self._flow()
        self._capacity()
        if symmetry:
            self._symmetry()

    # ------------------------------------------------------------------ variables
    def _variables(self) -> None:
        S, m = self.S, self.model
        dist = hop_distances(self.fabric)
        self.chunks = self.spec.chunks()
        self.r = [m.new_int_var(1, self.R - S + 1, f"r[{s}]") for s in range(1, S + 1)]
        m.add(sum(self.r) == self.R)
        n = self.spec.ranks
        for ch in self.chunks:
            need = [p for p in ch.post if p not in ch.pre]
            d_in = [min(dist[q][i] for q in ch.pre) for i in range(n)]
            d_out = [min((dist[j][p] for p in need), default=NEVER) for j in range(n)]
            for (i, j) in self.fabric.channels:
                if j in ch.pre:
                    continue
                for s in range(d_in[i] + 1, S - d_out[j] + 1):
                    self.x[ch.id, i, j, s] = m.new_bool_var(f"x[c{ch.id},{i}->{j},s{s}]")

    # ------------------------------------------------------------------ constraints
    def _flow(self) -> None:
        m, n = self.model, self.spec.ranks
        self._into: dict[tuple[int, int], list] = {}
        outs: dict[tuple[int, int], list] = {}
        for (c, i, j, s), v in self.x.items():
            self._into.setdefault((c, j), []).append((s, v))
            outs.setdefault((c, i), []).append((s, v))
        for ch in self.chunks:
            into = {j: self._into.get((ch.id, j), []) for j in range(n)}
            out = {j: outs.get((ch.id, j), []) for j in range(n)}
            for j in range(n):
                if j in ch.pre:
                    continue
                got = [v for _, v in into[j]]
                if j in ch.post:
                    if not got:
                        raise SynthesisInfeasible(f"{self.spec.name}: chunk {ch.id} cannot reach rank {j} "
                                                  f"in {self.S} steps on {self.fabric.topology_name!r}")
                    m.add(Sum(got) == 1)
                else:
                    m.add(Sum(got) <= 1)
                    if got:  # a relay that does not need the chunk forwards what it gets
                        m.add(Sum(got) <= Sum([v for _, v in out[j]]))
                for s, v in out[j]:  # relay only after arrival
                    earlier = [w for t, w in into[j] if t < s]
                    if earlier:
                        m.add(v <= Sum(earlier))
                    else:
                        m.add(v == 0)

    def _capacity(self) -> None:
        add_capacity(self.model, self.fabric, ((i, j, s, v) for (c, i, j, s), v in self.x.items()), self.r,
                     self.R - self.S + 1)

    def arrival(self, c: int, j: int):
        """Arrival step of chunk c at rank j as a linear expression (S+1 = never)."""
        return (self.S + 1) - sum((self.S + 1 - s) * v for s, v in self._into.get((c, j), []))

    def _symmetry(self) -> None:
        classes: dict[tuple, list[int]] = {}
        for ch in self.chunks:
            classes.setdefault((ch.pre, ch.post), []).append(ch.id)
        base = self.S + 2
        for (pre, _), ids in classes.items():
            if len(ids) < 2:
                continue
            ranks = [j for j in range(self.spec.ranks) if j not in pre]
            k = max(1, min(len(ranks), int(40 / math.log2(base)), self.sym_k))
            keys = [sum(base ** (k - 1 - t) * self.arrival(c, j) for t, j in enumerate(ranks[:k])) for c in ids]
            for a, b in zip(keys, keys[1:]):
                self.model.add(a <= b)

    # ------------------------------------------------------------------ hints and decoding
    def add_hint(self, schedule: Schedule) -> None:
        """Hint the solver with a schedule of this instance (sends outside the model are dropped)."""
        sent = {(t.chunk, t.src, t.dst, s) for s, st in enumerate(schedule.steps, 1) for t in st.transfers}
        for key, v in self.x.items():
            self.model.add_hint(v, key in sent)
        for s, st in enumerate(schedule.steps[:self.S]):
            self.model.add_hint(self.r[s], st.rounds)

    def decode(self, solver: cp_model.CpSolver, meta: dict) -> Schedule:
        """The solver's assignment as a Schedule (transfers sorted by chunk, src, dst)."""
        per_step: list[list[Transfer]] = [[] for _ in range(self.S)]
        for (c, i, j, s), v in self.x.items():
            if solver.boolean_value(v):
                per_step[s - 1].append(Transfer(c, i, j, "copy"))
        return decode_schedule(self, solver, per_step, meta)


def verify(schedule: Schedule, fabric: Fabric) -> None:
    """Raise ScheduleInvalid unless ``synth.ir.verifier.check`` accepts ``schedule`` on ``fabric``."""
    from synth.ir.verifier import check
    check(schedule, fabric)


def solve_step_instance(fabric: Fabric, spec: CollectiveSpec, steps: int, rounds: int, *,
                        time_limit_s: float = 60.0, workers: int = 2, hint: Schedule | None = None,
                        symmetry: int = 1, budget: SolveBudget | None = None) -> Schedule:
    """A verified schedule of the non-combining instance ``spec`` with exactly ``steps`` steps and
    ``rounds`` rounds, straight from the CP-SAT model (parameters as
    :func:`synth.solve.sat.instance.solve_instance`, which also handles combining collectives).
    """
    budget = budget_or_new(budget)
    if spec.combining:
        raise InvalidArgument(f"solve_step_instance takes non-combining collectives, got {spec.name} "
                                    f"(synth.solve.sat.instance.solve_instance composes those)")
    chunks = spec.chunks_per_rank
    where = f"{spec.name} on {fabric.topology_name!r} with S={steps}, R={rounds}, C={chunks}"
    if steps < 1 or rounds < steps:
        raise SynthesisInfeasible(f"{where}: need 1 <= S <= R (every step takes at least one round)")
    t0 = time.perf_counter()
    if steps < latency_lower_bound(fabric, spec):
        raise SynthesisInfeasible(f"{where}: fewer steps than the latency bound "
                                  f"{latency_lower_bound(fabric, spec)}")
    sm = FlowModel(fabric, spec, steps, rounds) if is_unicast(spec) else StepModel(fabric, spec, steps, rounds,
                                                                                  symmetry)
    if hint is not None:
        sm.add_hint(hint)
    build_s = time.perf_counter() - t0
    solver, name = run_cp_sat(sm.model, time_limit_s, workers, where, budget)
    wall = time.perf_counter() - t0
    meta = {"solver": "cp-sat", "status": name, "wall_s": round(wall, 3), "build_s": round(build_s, 3),
            "steps": steps, "rounds": rounds, "chunks": chunks, "model": type(sm).__name__,
            "variables": len(sm.model.proto.variables), "workers": int(workers), "time_limit_s": float(time_limit_s)}
    sched = sm.decode(solver, meta)
    try:
        verify(sched, fabric)
    except ScheduleInvalid as e:
        raise ScheduleInvalid(f"{where}: solver output rejected by the verifier (model bug): {e}",
                              rule=e.rule, step=e.step, rank=e.rank, chunk=e.chunk) from e
    return sched
