"""What a CPU all-reduce costs on the ``topocoll`` group's own transport (TCP between processes,
reductions by torch on the CPU), so that the cost-model fallback picks a baseline for that
transport rather than for GPUs.

The fallback (no plan entry covers the call) asks the GPU cost model of the group's topology,
which sees every rank fully connected by fast links and picks a one-shot all-reduce (every rank
sends its whole buffer to every peer and reduces all of it) up to large sizes.  Between CPU
processes a byte sent costs a kernel copy at each end and a byte reduced costs a pass of the
CPU, so a schedule that sends and reduces fewer bytes per rank (reduce-scatter + all-gather:
``direct``, ``ring``) is faster from a size on.  :func:`host_time_us` is an alpha-beta model
of one schedule on this transport: per step, a fixed cost plus the most bytes any rank sends in
it over the transport's rate, plus the most bytes any rank reduces in it over the CPU's rate,
plus one step for the per-call agreement where the data does not ride with it.
A plan's entry is never second-guessed: only the fallback's choice changes
(:func:`kernels.pytorch.plan_choice.choose`).

The constants were measured on the 2-core machine of ``results/pytorch/``: 16 MiB both ways
between two processes in 14 ms (1.2 GB/s per direction), a float32 add of 8 MiB into place
1.85 ms (4.5 GB/s); a step's fixed cost grows with the ranks, as each step needs every process
to run once (a step per rank: 300 µs, fitted to where the one-round one-shot and the 3-round
direct all-reduce took the same time on 4 processes, about 2 MiB; the one-round one-shot took
2.6 ms at 330 KB where direct took 5.4).  Only their ratios matter for the choice.

>>> from synth.ir.schedule import Schedule, Step, Transfer
>>> one = Schedule("allreduce", 2, 1, (Step(1, (Transfer(0, 0, 1, "reduce"), Transfer(1, 1, 0, "reduce"))),))
>>> round(host_time_us(one, 1 << 20)), round(host_time_us(one, 16 << 20)), round(host_time_us(one, 4, 4))
(1753, 10055, 600)
"""

from __future__ import annotations

#: fixed cost of one step on the transport per rank of the group (µs; module docstring)
STEP_US_PER_RANK = 300.0
#: bytes per µs one process sends (and, at once, receives) over the transport
SEND_BYTES_PER_US = 1200.0
#: bytes per µs of a reduction by torch on the CPU (output bytes)
REDUCE_BYTES_PER_US = 4500.0


def host_time_us(schedule, nbytes: int, one_round_bytes: int = 0) -> float:
    """Modelled µs of an all-reduce ``schedule`` of ``nbytes`` (the whole buffer) on the host
    transport (module docstring), the per-call agreement round included, except for a one-step
    schedule of up to ``one_round_bytes``, whose data rides with the agreement
    (:mod:`kernels.pytorch.fused`)."""
    chunk = nbytes / max(1, schedule.ranks * schedule.chunks_per_rank)
    step_us = STEP_US_PER_RANK * schedule.ranks
    total = 0.0 if len(schedule.steps) == 1 and nbytes <= one_round_bytes else step_us
    for step in schedule.steps:
        sent = [0] * schedule.ranks
        reduced = [0] * schedule.ranks
        for t in step.transfers:
            sent[t.src] += 1
            reduced[t.dst] += t.op == "reduce"
        total += (step_us + max(sent) * chunk / SEND_BYTES_PER_US
                  + max(reduced) * chunk / REDUCE_BYTES_PER_US)
    return total


__all__ = ["REDUCE_BYTES_PER_US", "SEND_BYTES_PER_US", "STEP_US_PER_RANK", "host_time_us"]
