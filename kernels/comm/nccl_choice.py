"""When the single-process Communicator calls NCCL instead of running a schedule on its GPUs.

The plan (``synthesize``) compares schedules with NCCL as if both ran as native kernels: a
schedule's modelled time is what an MSCCL-style runtime would take.  Our native executor
(:mod:`kernels.native`) is such a runtime, with a fixed cost the model does not count: measured
on one H100 (``benchmarks/bench_native_gpu.py``, ``results/gpu/native.md``) a repeated call
costs about :data:`NATIVE_CALL_US` (graph launch and kernel start) plus
:data:`NATIVE_RECORD_US` per record of the busiest thread block (:func:`native_records`: each
record a barrier, and a flag wait or release where it has one): 3.9-5.0 µs for the one-shot
all_reduce at 1 KiB (one record per rank) on 2-8 ranks, 12.6 µs for the 8-rank direct
all_reduce at 64 KiB (eight records: a chain and seven copies).  Where NCCL can run, a schedule keeps its range only if its
modelled time *plus that cost* still beats NCCL's modelled time by the plan's margin.
The op-by-op CuPy layer (``backend="cupy-ops"``, and the staged path where GPUs cannot reach
each other) costs far more: :data:`CUPY_CALL_US` per call plus :data:`CUPY_OP_US` per op
(measured on one H200, ``results/gpu/cupy_gpu.md``).

>>> from topo_probe import get_preset
>>> from synth.plan.selector import ScheduleSelector
>>> sel = ScheduleSelector(get_preset("dgx-h100"), plan=False, warn_fallback=False)
>>> ring = sel.chooser.get("ring", "allreduce", None)
>>> nccl_beats_executor(sel, "allreduce", 1 << 20, ring, ops=56, native=False)
True
>>> round(executor_host_us(14), 1), round(executor_host_us(14, native=False), 1)
(18.0, 740.0)
"""

from __future__ import annotations

from synth.plan.versus_nccl import MARGIN, nccl_curve

#: native executor: a repeated call's fixed cost (µs): graph launch and kernel start
NATIVE_CALL_US = 4.0
#: native executor: cost per op of the busiest rank (µs): flag wait, barrier, release
NATIVE_RECORD_US = 1.0
#: op-by-op CuPy layer's host time per call (µs): validation, planning, buffer binding
CUPY_CALL_US = 250.0
#: op-by-op CuPy layer's host time per op (µs): a kernel or copy launch, its views, events and waits
CUPY_OP_US = 35.0


def native_records(program) -> int:
    """Records of the busiest thread block when ``program`` runs natively in one channel
    without slicing (reduce chains and records that continue each other joined, as the
    native executor runs them; the small-message case, where the fixed cost matters)."""
    from kernels.native.device_program import build_device_program
    dp = build_device_program(program, 1, slices=1)
    return int(max((dp.block_start[b + 1] - dp.block_start[b] for b in range(dp.num_blocks)), default=0))


def executor_host_us(ops: int, *, native: bool = True) -> float:
    """Fixed time (µs) the executor adds to a program whose busiest thread block runs ``ops``
    records (native, :func:`native_records`), or of ``ops`` ops in all (op-by-op layer)."""
    if native:
        return NATIVE_CALL_US + NATIVE_RECORD_US * ops
    return CUPY_CALL_US + CUPY_OP_US * ops


def nccl_beats_executor(selector, collective: str, nbytes: int, schedule, ops: int, *, native: bool = True) -> bool:
    """Whether NCCL (modelled) is faster than ``schedule`` run by our executor: the schedule's
    modelled time plus :func:`executor_host_us` must beat NCCL's by :data:`MARGIN`."""
    ours = selector.cost.schedule_time_us(schedule, nbytes) + executor_host_us(ops, native=native)
    theirs = nccl_curve(selector.topology, collective, [nbytes])["times"][0]
    return ours * MARGIN > theirs


__all__ = ["nccl_beats_executor", "executor_host_us", "native_records", "NATIVE_CALL_US", "NATIVE_RECORD_US", "CUPY_CALL_US",
           "CUPY_OP_US"]
