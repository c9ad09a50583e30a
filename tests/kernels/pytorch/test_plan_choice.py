"""The process group runs what plan.json says (kernels.pytorch.plan_choice.choose is the
Communicator's lookup, kernels.comm.route.plan_route): a schedule entry runs its file, an ``nccl``
entry runs NCCL where torch's NCCL group can run it and the entry's fallback (with the reason)
where it cannot, e.g. on CPU tensors."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the topocoll process group needs torch (pip install 'topocoll[torch]')")

from kernels.pytorch.plan_choice import choose  # noqa: E402
from synth import baseline, build_fabric  # noqa: E402
from synth.plan.selector import ScheduleSelector  # noqa: E402
from synth.plan.size_plan import Plan, PlanEntry  # noqa: E402
from topo_probe.machines.generators import fully_connected  # noqa: E402


@pytest.fixture()
def selector(tmp_path):
    topo = fully_connected(4)
    fab = build_fabric(topo)
    for name in ("ring", "direct"):
        baseline(name, fab, "allreduce").save(tmp_path / "schedules" / f"allreduce-{name}.json")
    plan = Plan(topo.name, topo.fingerprint(), [
        PlanEntry("allreduce", 0, 1 << 20, "schedules/allreduce-direct.json"),
        PlanEntry("allreduce", 1 << 20, None, "nccl", fallback="schedules/allreduce-ring.json")])
    plan.save(tmp_path / "plan.json")
    return ScheduleSelector(topo, plan=Plan.load(tmp_path / "plan.json"))


def test_schedule_entry_runs_its_file(selector):
    r = choose(selector, "allreduce", 1024, 4, no_nccl="CPU tensors: NCCL runs on GPUs only")
    assert (r.planned, r.ran, r.reason) == ("schedules/allreduce-direct.json",) * 2 + ("",)
    assert r.schedule.name == selector.plan.load_schedule(selector.plan.entries[0]).name


def test_nccl_entry_runs_nccl_where_it_can_and_its_fallback_where_not(selector):
    count = 1 << 20                                  # 4 MiB of float32
    asked = []
    can = choose(selector, "allreduce", count, 4, no_nccl=lambda: asked.append(1) or "")
    assert (can.planned, can.ran, can.schedule) == ("nccl", "nccl", None) and asked == [1]
    cpu = choose(selector, "allreduce", count, 4, no_nccl="CPU tensors: NCCL runs on GPUs only")
    assert (cpu.planned, cpu.ran) == ("nccl", "schedules/allreduce-ring.json")
    assert cpu.reason.startswith("CPU tensors: NCCL runs on GPUs only") and cpu.schedule.num_steps > 1
    small = choose(selector, "allreduce", 16, 4, no_nccl=lambda: asked.append(2) or "x")
    assert small.ran == "schedules/allreduce-direct.json" and asked == [1]     # asked only where the plan says nccl
