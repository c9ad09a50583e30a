"""synth: collective definitions, schedule IR, verifier, cost model, bounds, baselines, solvers, plans.

The names below are the public surface; each loads its module on first use, so ``import synth``
stays light (the OR-Tools solvers load only when a solver or a bound is used).

>>> from synth import build_fabric, baseline, verify, CostModel
>>> from topo_probe import get_preset
>>> f = build_fabric(get_preset("dgx1-v100"))
>>> s = baseline("ring", f, "allreduce")
>>> verify(s, f) is None, round(CostModel(f).schedule_time_us(s, 1 << 30) / 1e3, 1)
(True, 14.6)
"""

from __future__ import annotations

from topo_probe.lazy import lazy_exports

_EXPORTS = {
    "Schedule": "synth.ir.schedule", "Step": "synth.ir.schedule", "Transfer": "synth.ir.schedule",
    "CollectiveSpec": "synth.ir.collectives",
    "load_schedule": "synth.formats.schedule_file", "save_schedule": "synth.formats.schedule_file",
    "verify": ("synth.ir.verifier", "check"),
    "build_fabric": "synth.ir.fabric", "Fabric": "synth.ir.fabric",
    "CostModel": "synth.model.cost", "CostParams": "synth.model.cost",
    "lower_bounds": "synth.model.bounds",
    "baseline": "synth.baselines",
    "bandwidth_optimal": "synth.solve.bwopt.optimal",
    "solve_instance": "synth.solve.sat.instance",
    "synthesize": "synth.pipeline.api",
    "Plan": "synth.plan.size_plan", "ScheduleSelector": "synth.plan.selector",
    "load_nccl_tests": "synth.formats.nccl_tests.runs",
    "from_msccl_xml": "synth.formats.msccl.reader", "to_msccl_xml": "synth.formats.msccl.writer",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports("synth", _EXPORTS, globals())
