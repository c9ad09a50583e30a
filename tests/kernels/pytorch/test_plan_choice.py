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


def test_a_plan_entry_stands_on_cpu_tensors(selector):
    """host=True (CPU tensors) changes only the fallback: the plan's entries run as they say."""
    small = choose(selector, "allreduce", 1024, 4, host=True)
    assert (small.planned, small.ran, small.reason) == ("schedules/allreduce-direct.json",) * 2 + ("",)
    big = choose(selector, "allreduce", 1 << 20, 4, host=True)
    assert (big.planned, big.ran) == ("nccl", "schedules/allreduce-ring.json")


@pytest.mark.parametrize("n, gpu_pick, cpu_pick", [(2, "best:oneshot", "best:ring"), (4, "best:direct", "best:direct")])
def test_the_fallback_on_cpu_tensors_sends_and_reduces_fewer_bytes_at_16_mib(n, gpu_pick, cpu_pick):
    """Without a plan the GPU cost model picks the one-shot all-reduce at 16 MiB on 2 ranks (each
    rank sends and reduces the whole buffer, counted below); on CPU tensors the host transport's
    model picks a reduce-scatter + all-gather (ring: the first of the equals on 2 ranks), which
    reduces half of it; on 4 ranks both pick direct; at 4 bytes the one-step one-shot (one round)."""
    from kernels.pytorch.host_cost import host_time_us
    sel = ScheduleSelector(fully_connected(n), plan=None)
    gpu = choose(sel, "allreduce", 4 << 20, 4)
    cpu = choose(sel, "allreduce", 4 << 20, 4, host=True)
    assert (gpu.ran, cpu.ran) == (gpu_pick, cpu_pick)
    assert ("host transport" in cpu.reason) == (cpu_pick != gpu_pick)
    oneshot = sel.select_baseline("oneshot", "allreduce").schedule
    sent = sum(t.src == 0 for s in oneshot.steps for t in s.transfers) / (n * oneshot.chunks_per_rank)
    assert sent == n - 1                                         # the whole buffer to each peer
    assert host_time_us(cpu.schedule, 16 << 20) < host_time_us(oneshot, 16 << 20)
    assert choose(sel, "allreduce", 1, 4, host=True).ran == "best:oneshot"
