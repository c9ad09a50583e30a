"""When the single-process Communicator calls NCCL instead of running a schedule on its GPUs.

The plan (``synthesize``) compares schedules with NCCL as if both ran as native kernels: a
schedule's modelled time is what an MSCCL-style runtime would take.  The CuPy executor is
driven from Python instead, one CUDA call (or a few) per op, and that host time comes on top.
Measured on one H200 (``benchmarks/bench_cupy_gpu.py``, ``results/gpu/cupy_gpu.md``): about
:data:`CUPY_CALL_US` per call plus :data:`CUPY_OP_US` per op of the lowered program, against
NCCL's 17-26 µs per call up to 16 MiB on the same card.  So where NCCL can run, a schedule
keeps its range only if its modelled time *plus that host time* still beats NCCL's modelled
time by the plan's margin; elsewhere NCCL runs, so the drop-in is not slower than NCCL
because of our Python.

>>> from topo_probe import get_preset
>>> from synth.plan.selector import ScheduleSelector
>>> sel = ScheduleSelector(get_preset("dgx-h100"), plan=False, warn_fallback=False)
>>> ring = sel.chooser.get("ring", "allreduce", None)
>>> nccl_beats_executor(sel, "allreduce", 1 << 20, ring, ops=56)
True
"""

from __future__ import annotations

from synth.plan.versus_nccl import MARGIN, nccl_curve

#: CuPy executor's host time per call (µs): validation, planning, buffer binding
CUPY_CALL_US = 250.0
#: CuPy executor's host time per op (µs): a kernel or copy launch, its views, events and waits
CUPY_OP_US = 35.0


def executor_host_us(ops: int) -> float:
    """Host time (µs) the CuPy executor adds to a program of ``ops`` ops."""
    return CUPY_CALL_US + CUPY_OP_US * ops


def nccl_beats_executor(selector, collective: str, nbytes: int, schedule, ops: int) -> bool:
    """Whether NCCL (modelled) is faster than ``schedule`` run by the CuPy executor: the
    schedule's modelled time plus :func:`executor_host_us` must beat NCCL's by :data:`MARGIN`."""
    ours = selector.cost.schedule_time_us(schedule, nbytes) + executor_host_us(ops)
    theirs = nccl_curve(selector.topology, collective, [nbytes])["times"][0]
    return ours * MARGIN > theirs


__all__ = ["nccl_beats_executor", "executor_host_us", "CUPY_CALL_US", "CUPY_OP_US"]
