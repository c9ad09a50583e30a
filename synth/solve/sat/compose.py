"""Combining collectives from non-combining ones: duality, composition and refinement.

* **Duality.**  Reversing a broadcast-style schedule turns it into a reduction: every chunk
  travels along a tree, and running the tree backwards (steps in reverse order, ``src`` and
  ``dst`` swapped, ``copy`` -> ``reduce``) makes every rank send its partial towards the root
  after it has combined its children's.  The reversed schedule loads the *reversed* channels,
  so the forward schedule is synthesized on :func:`reverse_fabric` (channel i->j of the
  reversed fabric carries the route of j->i, every resource u->v turned into v->u); the two
  fabrics coincide for symmetric machines.  ReduceScatter = dual of AllGather, Reduce = dual of
  Broadcast (same chunk ids: AllGather chunk ``r*C+c`` starts at rank r where ReduceScatter
  chunk ``r*C+c`` must end).
* **AllReduce = ReduceScatter ; AllGather** with one chunk mapping: AllReduce chunk g (pre all,
  post all) is reduced onto rank ``g // C`` by the ReduceScatter and broadcast from there by
  the AllGather, whose chunk g starts exactly there.  (SCCL's composition put chunks in the
  wrong place, msccl-tools issue 58.)
* **Refinement.**  Cutting every chunk into k pieces and every step into k times the rounds
  keeps a schedule valid, so (S, R, C) implies (S, kR, kC); used to compose schedules of
  different C.

Every schedule built here is checked with ``synth.ir.verifier.check`` before it is returned.
"""

from __future__ import annotations


from synth.ir.collectives import CollectiveSpec
from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule, Step, Transfer
from synth.solve.budget import SolveBudget, budget_or_new
from synth.solve.sat.model import latency_lower_bound, solve_step_instance, verify
from topo_probe.errors import InvalidArgument, SynthesisInfeasible, SynthesisTimeout, UnsupportedCollective

#: combining collective -> the non-combining collective whose reversal implements it
DUALS = {"reducescatter": "allgather", "reduce": "broadcast"}
_REV = "reversed:"


def reverse_fabric(fabric: Fabric) -> Fabric:
    """The fabric with every channel and resource reversed (i->j carries j->i's route flipped).

    Name and fingerprint are marked ``reversed:`` so a schedule made for one never passes as
    made for the other; reversing twice gives the original back.

    >>> from synth.ir.fabric import build_fabric
    >>> from topo_probe.machines.generators import line
    >>> f = build_fabric(line(2))
    >>> r = reverse_fabric(f)
    >>> r.channels[(1, 0)], r.fingerprint.startswith("reversed:"), reverse_fabric(r) == f
    ([(('gpu1', 'gpu0'), Fraction(1, 1))], True, True)
    """
    def flip(res):
        return (res[1], res[0])

    def mark(text: str) -> str:
        return text[len(_REV):] if text.startswith(_REV) else _REV + text

    resources = {flip(r): info for r, info in sorted(fabric.resources.items())}
    channels = {(j, i): sorted((flip(r), f) for r, f in route) for (i, j), route in sorted(fabric.channels.items())}
    latency = {(j, i): list(v) for (i, j), v in fabric.path_latency_us.items()}
    return Fabric(mark(fabric.topology_name), mark(fabric.fingerprint), fabric.num_ranks,
                  dict(sorted(resources.items())), dict(sorted(channels.items())), fabric.unit_gbps,
                  list(fabric.hosts), dict(sorted(latency.items())))


def reverse_schedule(schedule: Schedule, collective: str, fabric: Fabric) -> Schedule:
    """Run ``schedule`` backwards as ``collective`` (its dual) on ``fabric`` (the reversed fabric
    of the one ``schedule`` was made for), then verify it.

    Steps come in reverse order with their rounds; each transfer's ``src``/``dst`` swap; the op
    becomes ``reduce`` when ``collective`` combines, else ``copy``.
    """
    spec = CollectiveSpec(collective, schedule.ranks, schedule.chunks_per_rank, schedule.root)
    op = "reduce" if spec.combining else "copy"
    steps = tuple(Step(st.rounds, tuple(sorted((Transfer(t.chunk, t.dst, t.src, op) for t in st.transfers),
                                               key=lambda t: (t.chunk, t.src, t.dst))))
                  for st in reversed(schedule.steps))
    meta = dict(schedule.meta)
    meta["derived"] = f"reversal of a {schedule.collective} schedule synthesized on the reversed fabric"
    out = Schedule(spec.name, spec.ranks, spec.chunks_per_rank, steps, spec.root, False, schedule.name,
                   fabric.topology_name, fabric.fingerprint, meta)
    verify(out, fabric)
    return out


def refine(schedule: Schedule, k: int, fabric: Fabric | None = None) -> Schedule:
    """Cut every chunk into ``k`` pieces (chunk g -> g*k .. g*k+k-1) and multiply rounds by ``k``.

    The step's loads grow k-fold and so does its capacity, so the result is valid whenever the
    input is; it is verified on ``fabric`` when given.
    """
    if k < 1:
        raise InvalidArgument(f"refine: k must be >= 1, got {k}")
    steps = tuple(Step(st.rounds * k, tuple(Transfer(t.chunk * k + p, t.src, t.dst, t.op)
                                            for t in st.transfers for p in range(k)))
                  for st in schedule.steps)
    c = schedule.chunks_per_rank * k
    out = schedule.with_(chunks_per_rank=c, steps=steps, meta={**schedule.meta, "refined_by": k},
                         name=f"{schedule.name}-x{k}" if k > 1 else schedule.name)
    if fabric is not None:
        verify(out, fabric)
    return out


def solve_dual(fabric: Fabric, spec: CollectiveSpec, steps: int, rounds: int, *,
               time_limit_s: float = 60.0, workers: int = 2, budget: SolveBudget | None = None) -> Schedule:
    """ReduceScatter or Reduce instance (S, R, C) by solving its dual on the reversed fabric.

    Raises SynthesisInfeasible / SynthesisTimeout exactly when the dual instance does.
    Reversal maps broadcast trees one-to-one onto reduction trees, so "infeasible" means no
    schedule in which every chunk is reduced up a tree exists (schedules that also copy
    partial sums around are not covered).
    """
    if spec.name not in DUALS:
        raise UnsupportedCollective(f"{spec.name} has no dual here (expected {', '.join(DUALS)})")
    rev = reverse_fabric(fabric)
    fwd = solve_step_instance(rev, CollectiveSpec(DUALS[spec.name], spec.ranks, spec.chunks_per_rank, spec.root),
                              steps, rounds, time_limit_s=time_limit_s, workers=workers, budget=budget)
    return reverse_schedule(fwd, spec.name, fabric)


def compose_allreduce(rs: Schedule, ag: Schedule, fabric: Fabric) -> Schedule:
    """AllReduce = ``rs`` (ReduceScatter) followed by ``ag`` (AllGather), chunk ids unchanged.

    Both must have the same ranks and chunks per rank; chunk g then ends fully reduced at rank
    ``g // C`` after ``rs``, which is where ``ag``'s chunk g starts.
    """
    if (rs.collective, ag.collective) != ("reducescatter", "allgather"):
        raise InvalidArgument(f"compose_allreduce needs reducescatter then allgather, got "
                                    f"{rs.collective} then {ag.collective}")
    if (rs.ranks, rs.chunks_per_rank) != (ag.ranks, ag.chunks_per_rank):
        raise InvalidArgument(f"compose_allreduce: ranks/chunks differ ({rs.ranks}/{rs.chunks_per_rank} "
                                    f"vs {ag.ranks}/{ag.chunks_per_rank}); refine() one of them first")
    S, R, C = rs.num_steps + ag.num_steps, rs.num_rounds + ag.num_rounds, rs.chunks_per_rank
    meta = {"derived": "reducescatter ; allgather", "reducescatter": rs.name, "allgather": ag.name,
            "steps": S, "rounds": R, "chunks": C,
            "wall_s": round(float(rs.meta.get("wall_s", 0)) + float(ag.meta.get("wall_s", 0)), 3)}
    out = Schedule("allreduce", rs.ranks, C, rs.steps + ag.steps, None, False, f"sat-S{S}-R{R}-C{C}",
                   fabric.topology_name, fabric.fingerprint, meta)
    verify(out, fabric)
    return out


def _splits(S: int, R: int, lo_rs: int, lo_ag: int):
    """(S1, R1) pairs for the ReduceScatter part, most balanced first."""
    out = [(s1, r1) for s1 in range(lo_rs, S - lo_ag + 1) for r1 in range(s1, R - (S - s1) + 1)]
    return sorted(out, key=lambda p: (abs(2 * p[0] - S), abs(2 * p[1] - R), p))


def solve_allreduce(fabric: Fabric, steps: int, rounds: int, chunks: int, *,
                    time_limit_s: float = 60.0, workers: int = 2, budget: SolveBudget | None = None) -> Schedule:
    """An AllReduce (S, R, C) composed of a ReduceScatter (S1, R1, C) and an AllGather
    (S - S1, R - R1, C), trying the most balanced splits first within ``time_limit_s`` in all.

    Raises SynthesisInfeasible when every split was proved impossible: that rules out
    compositions, not every AllReduce schedule (a direct one could mix reduces and copies).
    """
    budget = budget_or_new(budget)
    deadline = budget.now() + time_limit_s
    n = fabric.num_ranks
    lo_rs = max(1, latency_lower_bound(fabric, CollectiveSpec("reducescatter", n, chunks)))
    lo_ag = max(1, latency_lower_bound(fabric, CollectiveSpec("allgather", n, chunks)))
    cache: dict[tuple[str, int, int], Schedule | None] = {}
    timed_out = False

    def get(kind: str, s: int, r: int) -> Schedule | None:
        nonlocal timed_out
        key = (kind, s, r)
        if key not in cache:
            left = deadline - budget.now()
            if left <= 0:
                timed_out = True
                return None
            try:
                spec = CollectiveSpec(kind, n, chunks)
                solve = solve_dual if spec.combining else solve_step_instance
                cache[key] = solve(fabric, spec, s, r, time_limit_s=left, workers=workers, budget=budget)
            except SynthesisInfeasible:
                cache[key] = None
            except SynthesisTimeout:
                timed_out = True
                return None
        return cache[key]

    for s1, r1 in _splits(steps, rounds, lo_rs, lo_ag):
        rs = get("reducescatter", s1, r1)
        ag = get("allgather", steps - s1, rounds - r1) if rs is not None else None
        if rs is not None and ag is not None:
            return compose_allreduce(rs, ag, fabric)
        if budget.now() >= deadline:
            timed_out = True
            break
    where = f"allreduce on {fabric.topology_name!r} with S={steps}, R={rounds}, C={chunks}"
    if timed_out:
        raise SynthesisTimeout(f"{where}: no ReduceScatter+AllGather composition found within {time_limit_s:g} s")
    raise SynthesisInfeasible(f"{where}: no ReduceScatter+AllGather composition exists (every split proved "
                              f"infeasible)")


def solve_combining(fabric: Fabric, spec: CollectiveSpec, steps: int, rounds: int, *,
                    time_limit_s: float = 60.0, workers: int = 2, budget: SolveBudget | None = None) -> Schedule:
    """Dispatch for :func:`synth.solve.sat.instance.solve_instance` on combining collectives."""
    if spec.name == "allreduce":
        return solve_allreduce(fabric, steps, rounds, spec.chunks_per_rank, time_limit_s=time_limit_s,
                               workers=workers, budget=budget)
    return solve_dual(fabric, spec, steps, rounds, time_limit_s=time_limit_s, workers=workers, budget=budget)
