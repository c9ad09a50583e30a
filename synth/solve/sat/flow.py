"""Aggregated CP-SAT model for unicast collectives (alltoall, gather, scatter).

When every chunk has one holder and at most one other rank needing it (:func:`is_unicast`),
chunks with the same source and destination are interchangeable and never copied, so the
model counts them per channel and step (:class:`FlowModel`) instead of tracking each chunk:
an integer flow over time, exact and free of the chunk symmetry.
:func:`synth.solve.sat.instance.solve_instance` picks this model for those collectives.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from synth.ir.collectives import CollectiveSpec
from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule, Transfer
from synth.solve.sat.common import Sum, add_capacity, decode_schedule, hop_distances
from topo_probe.errors import SynthesisInfeasible


def is_unicast(spec: CollectiveSpec) -> bool:
    """True when every chunk has one holder and at most one other rank needing it
    (alltoall, gather, scatter): then :class:`FlowModel` applies."""
    return all(len(ch.pre) == 1 and len(set(ch.post) - set(ch.pre)) <= 1 for ch in spec.chunks())


class FlowModel:
    """Aggregated model for unicast collectives (see :func:`is_unicast`).

    Chunks with the same source a and destination b are interchangeable and need no copies, so
    ``y[(a, b), i, j, s]`` (integer) counts how many of them cross channel i->j in step s: an
    integer flow over time, which decomposes into one path per chunk (exact, and free of the
    C! chunk symmetry).  A relay forwards in step s at most what it received before s.
    """

    def __init__(self, fabric: Fabric, spec: CollectiveSpec, steps: int, rounds: int) -> None:
        self.fabric, self.spec, self.S, self.R = fabric, spec, steps, rounds
        m = self.model = cp_model.CpModel()
        self.r = [m.new_int_var(1, rounds - steps + 1, f"r[{s}]") for s in range(1, steps + 1)]
        m.add(sum(self.r) == rounds)
        self.classes: dict[tuple[int, int], list[int]] = {}
        for ch in spec.chunks():
            need = [p for p in ch.post if p not in ch.pre]
            if need:
                self.classes.setdefault((ch.pre[0], need[0]), []).append(ch.id)
        dist = hop_distances(fabric)
        self.y: dict[tuple[tuple[int, int], int, int, int], cp_model.IntVar] = {}
        for (a, b), ids in self.classes.items():
            for (i, j) in fabric.channels:
                if j == a or i == b:
                    continue
                for s in range(dist[a][i] + 1, steps - dist[j][b] + 1):
                    self.y[(a, b), i, j, s] = m.new_int_var(0, len(ids), f"y[{a}->{b},{i}->{j},s{s}]")
        self._conservation()
        add_capacity(m, fabric, ((i, j, s, v) for (_, i, j, s), v in self.y.items()), self.r, rounds - steps + 1)

    def _conservation(self) -> None:
        m, n = self.model, self.spec.ranks
        per: dict = {}
        for (k, i, j, s), v in self.y.items():
            per.setdefault((k, "out", i), []).append((s, v))
            per.setdefault((k, "in", j), []).append((s, v))
        for (a, b), ids in self.classes.items():
            k = (a, b)
            if not per.get((k, "in", b)):
                raise SynthesisInfeasible(f"{self.spec.name}: rank {a} cannot reach rank {b} in {self.S} steps "
                                          f"on {self.fabric.topology_name!r}")
            m.add(Sum([v for _, v in per[k, "out", a]]) == len(ids))
            m.add(Sum([v for _, v in per[k, "in", b]]) == len(ids))
            for v_rank in range(n):
                if v_rank in (a, b):
                    continue
                ins, outs = per.get((k, "in", v_rank), []), per.get((k, "out", v_rank), [])
                m.add(Sum([v for _, v in ins]) == Sum([v for _, v in outs]))
                for s in sorted({t for t, _ in outs}):
                    m.add(Sum([v for t, v in outs if t <= s]) <= Sum([v for t, v in ins if t < s]))

    def add_hint(self, schedule: Schedule) -> None:
        """Hint with a schedule of this instance (counts per class, channel and step)."""
        owner = {cid: k for k, ids in self.classes.items() for cid in ids}
        count: dict = {}
        for s, st in enumerate(schedule.steps, 1):
            for t in st.transfers:
                if t.chunk in owner:
                    key = (owner[t.chunk], t.src, t.dst, s)
                    count[key] = count.get(key, 0) + 1
        for key, v in self.y.items():
            self.model.add_hint(v, count.get(key, 0))
        for s, st in enumerate(schedule.steps[:self.S]):
            self.model.add_hint(self.r[s], st.rounds)

    def decode(self, solver: cp_model.CpSolver, meta: dict) -> Schedule:
        """Decompose the flow into one path per chunk (tokens move from rank to rank)."""
        per_step: list[list[Transfer]] = [[] for _ in range(self.S)]
        sends: dict = {}
        for (k, i, j, s), v in self.y.items():
            amount = int(solver.value(v))
            if amount:
                sends.setdefault((k, s), []).append((i, j, amount))
        for k, ids in self.classes.items():
            ready = {k[0]: list(ids)}  # chunks a rank may forward in the current step
            for s in range(1, self.S + 1):
                moved: dict[int, list[int]] = {}
                for i, j, amount in sorted(sends.get((k, s), [])):
                    for _ in range(amount):
                        c = ready[i].pop()  # conservation guarantees a token is there
                        per_step[s - 1].append(Transfer(c, i, j, "copy"))
                        moved.setdefault(j, []).append(c)
                for j, cs in moved.items():
                    ready.setdefault(j, []).extend(cs)
        return decode_schedule(self, solver, per_step, meta)
