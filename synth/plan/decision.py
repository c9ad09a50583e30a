"""The one decision between a synthesized schedule and NCCL, made when a plan is built.

At every plan size (:data:`synth.plan.planner.PLAN_SIZES`) each candidate schedule costs its
modelled time (:class:`synth.model.cost.CostModel`) **plus the measured fixed cost of the
executor that will run it** (:data:`EXECUTOR_COSTS`: a per-call cost and a cost per record of
the busiest rank, :func:`busiest_rank_records`).  The cheapest candidate keeps the size unless
it is not at least 5 % faster than NCCL's modelled time (:func:`synth.plan.versus_nccl.nccl_curve`,
:data:`synth.plan.versus_nccl.MARGIN`): then the size runs ``nccl``.  Consecutive sizes with
the same outcome form one plan range, and each range records in ``plan.json`` what was
counted (:func:`range_record`): the executor and its cost, the modelled times of both sides at
the range's first size and the margin.  An ``nccl`` range also names its ``fallback``: the
schedule that won among ours at those sizes, which runs wherever NCCL cannot.

Which executor is counted (:func:`executor_for`): the native GPU executor on one host (the only
path where NCCL is the alternative: the single-process Communicator on CuPy arrays, one GPU per
rank), the MPI path on a cluster of hosts.  The host (NumPy) path never has NCCL beside it, so
its cost never changes a decision: it runs what the plan says, or the ``fallback``.

Nothing here runs at call time: the communicators only look the decision up
(:meth:`synth.plan.size_plan.Plan.select`).

>>> decide_ranges([8, 1024, 1 << 20], {"a": [1.0, 2.0, 90.0], "b": [5.0, 6.0, 40.0]},
...               [20.0, 3.0, 60.0], {"a": 1, "b": 9}, "native")
[('a', None, 0, 1024), ('nccl', 'a', 1024, 1048576), ('b', None, 1048576, None)]
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from synth.plan.versus_nccl import MARGIN, NCCL


@dataclass(frozen=True)
class ExecutorCost:
    """An executor's fixed cost per call: ``call_us`` plus ``record_us`` per record of the
    busiest rank (µs); ``source`` names the measurement."""

    name: str
    call_us: float
    record_us: float
    source: str

    def fixed_us(self, records: int) -> float:
        """Fixed time (µs) of a call whose busiest rank runs ``records`` records."""
        return self.call_us + self.record_us * records


#: measured fixed costs of the executors a plan can be for
EXECUTOR_COSTS = {
    "native": ExecutorCost(
        "native", 4.0, 1.0,
        "native CUDA executor, repeated call on one H100 (results/gpu/native.md, benchmarks/bench_native_gpu.py): "
        "3.9-5.0 us for the one-shot all_reduce at 1 KiB (one record per rank), 12.6 us for the 8-rank direct "
        "all_reduce at 64 KiB (eight records)"),
    "mpi": ExecutorCost(
        "mpi", 15.3, 0.0,
        "MPICommunicator all_reduce of 1 KB on 2 ranks, ring, bound repeated call (results/mpi/report.md, "
        "benchmarks/bench_mpi_allreduce.py); a per-message cost is not separated in that measurement"),
}

#: most reduces the native executor joins into one record (kernels.native.device_program.MAX_CHAIN)
MAX_CHAIN = 16
#: collectives whose output holds each rank's own input block: one local copy per rank out of place
_OWN_COPY = ("allgather", "alltoall", "gather")


def executor_for(fabric) -> str:
    """The executor whose fixed cost a plan for ``fabric`` counts: ``mpi`` where its ranks span
    more than one host, else ``native``."""
    hosts = getattr(fabric, "hosts", None) or []
    return "mpi" if len(set(hosts)) > 1 else "native"


def busiest_rank_records(schedule) -> int:
    """Records the busiest rank runs for ``schedule`` on the native executor (one channel, no
    slicing: the small-message case, where the fixed cost matters), counted on the schedule:
    ops run on the rank they write; in the first step (nothing to wait for) the transfers from
    one peer join into one record and reduces from several peers into one chain; later each
    transfer waits for its source and is a record of its own (reduces into one chunk in one step
    chain, :data:`MAX_CHAIN` at most); plus the rank's own block copy where the output holds it.  A lower bound of
    the device program's count: there a first-step record another rank waits for joins no other (the 12-ring
    dgx-a100 all_reduce: 157 counted, 168 run), and a later step's chunk runs may split further.

    >>> from synth.ir.schedule import Schedule, Step, Transfer
    >>> ring = Schedule("allreduce", 2, 2, (Step(1, (Transfer(0, 0, 1, "reduce"), Transfer(1, 1, 0, "reduce"))),
    ...                                      Step(1, (Transfer(1, 0, 1), Transfer(0, 1, 0)))))
    >>> busiest_rank_records(ring)
    2
    """
    per_rank: dict[int, int] = defaultdict(int)
    for t_index, step in enumerate(schedule.steps):
        reduces: dict = defaultdict(lambda: defaultdict(int))
        copies: dict = defaultdict(set)
        for t in step.transfers:
            if t.op == "reduce":
                reduces[t.dst][t.chunk] += 1
            else:
                copies[t.dst].add((t.src, t.chunk))
        for rank in set(reduces) | set(copies):
            if t_index == 0:
                per_rank[rank] += len({src for src, _ in copies[rank]}) + (1 if reduces[rank] else 0)
            else:
                per_rank[rank] += len(copies[rank]) + sum(math.ceil(k / MAX_CHAIN) for k in reduces[rank].values())
    own = 1 if schedule.collective in _OWN_COPY else 0
    return max(per_rank.values(), default=0) + own


def counted_records(schedule, executor: str) -> int:
    """The records the decision counts for ``schedule`` on ``executor``: :func:`busiest_rank_records` where that
    executor has a cost per record, else 0 (clusters: a per-call cost only, no count).

    >>> from synth.ir.schedule import Schedule, Step, Transfer
    >>> one = Schedule("allgather", 2, 2, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),))
    >>> counted_records(one, "native"), counted_records(one, "mpi")
    (2, 0)
    """
    return busiest_rank_records(schedule) if EXECUTOR_COSTS[executor].record_us > 0 else 0


def decide_ranges(sizes: list[int], times: dict[str, list[float]], nccl_times: list[float] | None,
                  records: dict[str, int], executor: str, protocols: dict[str, list[str]] | None = None,
                  different_bits: frozenset[str] | set[str] = frozenset(),
                  ) -> list[tuple[str, str | None, int, int | None]]:
    """Plan ranges ``(runs, fallback, min_bytes, max_bytes)``: ``runs`` is the candidate with the
    least modelled time plus ``executor``'s fixed cost (ties: one not in ``different_bits``, the candidates whose
    ranks can end with different float bits (:func:`synth.ir.sum_order.inconsistent_chunks`), then the name that
    sorts first), or
    ``nccl`` where that is not :data:`MARGIN` times faster than NCCL's modelled time; ``fallback`` (``nccl``
    ranges only) is that candidate.  ``nccl_times`` None: no NCCL to compare with.  ``protocols``
    (the protocol each time was modelled under, :func:`synth.plan.protocol.with_protocols`): a
    range also ends where the chosen candidate's protocol changes."""
    cost = EXECUTOR_COSTS[executor]
    names = sorted(times)
    if not names:
        return []
    total = {nm: [t + cost.fixed_us(records.get(nm, 0)) for t in times[nm]] for nm in names}
    outcome = []
    for k in range(len(sizes)):
        best = min(names, key=lambda nm: (total[nm][k], nm in different_bits, nm))
        nccl_wins = nccl_times is not None and nccl_times[k] / MARGIN < total[best][k]   # ours: >= 5 % faster
        proto = protocols[best][k] if protocols else None
        outcome.append((NCCL, best, proto) if nccl_wins else (best, None, proto))
    ranges, start = [], 0
    for k in range(1, len(sizes) + 1):
        if k == len(sizes) or outcome[k] != outcome[k - 1]:
            end = sizes[k] if k < len(sizes) else None
            ranges.append((*outcome[k - 1][:2], start, end))
            start = end
    return ranges


def counted_executor_us(decision: dict | None, where: str) -> float:
    """The executor fixed cost (µs) a plan range's ``decision`` (:func:`range_record`, ``plan.json``) counted:
    :data:`EXECUTOR_COSTS` of its ``executor`` for its ``records``, unrounded (``executor_us`` is rounded to
    0.001 µs).  ValueError naming ``where`` for a decision without a known executor.

    >>> counted_executor_us({"executor": "native", "records": 2}, "broadcast")
    6.0
    """
    if not isinstance(decision, dict) or decision.get("executor") not in EXECUTOR_COSTS:
        raise ValueError(f"{where}: no decision naming a known executor ({decision!r}), so its fixed cost is unknown")
    return EXECUTOR_COSTS[decision["executor"]].fixed_us(int(decision.get("records") or 0))


def range_record(executor: str, records: int, schedule_us: float, nccl_us: float | None) -> dict:
    """What ``plan.json`` says a range's decision counted (µs at the range's first plan size):
    the executor, its fixed cost for ``records`` records, our schedule's modelled time, NCCL's
    (None: not compared) and ``margin`` = NCCL's time / (schedule + executor): a schedule range
    has ``margin`` >= :data:`MARGIN` (1.05), an ``nccl`` range less."""
    fixed = EXECUTOR_COSTS[executor].fixed_us(records)
    out = {"executor": executor, "executor_us": round(fixed, 3), "records": int(records),
           "schedule_us": round(schedule_us, 3), "nccl_us": None if nccl_us is None else round(nccl_us, 3),
           "margin": None}
    if nccl_us is not None:
        out["margin"] = round(nccl_us / max(schedule_us + fixed, 1e-9), 4)
    return out


__all__ = ["ExecutorCost", "EXECUTOR_COSTS", "MAX_CHAIN", "executor_for", "busiest_rank_records", "counted_records",
           "decide_ranges",
           "counted_executor_us", "range_record"]
