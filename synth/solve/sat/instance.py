"""One entry point for an SCCL-style instance (S, R, C) of any collective.

Non-combining collectives go straight to the CP-SAT step model (:mod:`synth.solve.sat.model`,
:mod:`synth.solve.sat.flow`); combining ones are derived from them by duality and composition
(:mod:`synth.solve.sat.compose`).
"""

from __future__ import annotations

from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule
from synth.solve.budget import SolveBudget
from synth.solve.sat.compose import solve_combining
from synth.solve.sat.model import solve_step_instance, spec_of


def solve_instance(fabric: Fabric, collective, steps: int, rounds: int, chunks: int, *,
                   root: int | None = None, time_limit_s: float = 60.0, workers: int = 2,
                   hint: Schedule | None = None, symmetry: int = 1, budget: SolveBudget | None = None) -> Schedule:
    """Synthesize a verified schedule with exactly ``steps`` steps and ``rounds`` rounds.

    Parameters
    ----------
    fabric : Fabric
        Channels and resources (:func:`synth.ir.fabric.build_fabric`).
    collective : str or CollectiveSpec
        Collective name (any spelling :func:`synth.ir.collectives.canonical` accepts).
    steps, rounds, chunks : int
        S (latency cost), R (sum of the steps' rounds, R >= S) and C (chunks per rank).
    root : int, optional
        Root rank of rooted collectives.
    time_limit_s : float
        CP-SAT budget in deterministic clock seconds of ``budget`` (default: a fresh
        :class:`~synth.solve.budget.SolveBudget`); model building is not counted.
    workers : int
        CP-SAT search workers.
    hint : Schedule, optional
        A schedule to start the search from (e.g. a ring or a smaller instance).
    symmetry : int
        Chunk-symmetry breaking: interchangeable chunks are ordered by their arrival steps at
        the first ``symmetry`` ranks, lexicographically (0: off).  1 is the measured best
        compromise: a full lexicographic order makes feasible instances much slower (DGX-1
        allgather S3 R7 C6: 0.2 s -> > 30 s), none makes some proofs slower (2-host cluster
        allgather S3 R11 C4: 2 s -> 10-40 s).

    Returns
    -------
    Schedule
        Named ``sat-S{S}-R{R}-C{C}``; ``meta`` holds solver status, wall time (s) and (S, R, C).

    Raises
    ------
    SynthesisInfeasible
        CP-SAT (or a bound) proved that no schedule exists.
    SynthesisTimeout
        The time limit passed before a schedule was found or ruled out.
    """
    spec = spec_of(collective, fabric.num_ranks, chunks, root)
    if spec.combining:
        return solve_combining(fabric, spec, steps, rounds, time_limit_s=time_limit_s, workers=workers,
                               budget=budget)
    return solve_step_instance(fabric, spec, steps, rounds, time_limit_s=time_limit_s, workers=workers,
                               hint=hint, symmetry=symmetry, budget=budget)


__all__ = ["solve_instance"]
