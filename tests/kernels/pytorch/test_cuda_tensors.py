"""The collectives on CUDA tensors, 2 processes sharing one card.

Natively (``_native_jobs.cuda_job``): every collective of ``_torch_jobs._calls`` on 5 dtypes and
3 sizes equals gloo's on the CPU bit for bit, and every call with data ran as native launches
(the runner's launch count and ``last_path``, not the host fallback); an async call made on a
side stream after a late kernel that writes its input, waited for by the current stream; a rank
passing a CPU tensor where the others pass CUDA tensors makes every rank raise the same line; a
repeated native call's host side counted (3 messages per peer, 2 stream synchronisations, 1
export, no store access).
Staged through the host (``TOPOCOLL_TORCH_NATIVE=never``): the same results, no launch.  Skips with the reason where torch or a GPU is missing."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="no CUDA GPU visible to torch here")]


@pytest.fixture(scope="module")
def native_results():
    pytest.importorskip("cupy", reason="the native path on CUDA tensors needs CuPy")
    from _native_jobs import cuda_job
    from _torch_dist import run_job
    return run_job(cuda_job, 2, env={"LOCAL_WORLD_SIZE": "2", "TOPOCOLL_NATIVE_TIMEOUT_S": "30"}, timeout_s=150)


def test_collectives_on_cuda_tensors_run_natively_and_equal_gloo(native_results):
    from _torch_dist import checked, merged
    assert checked(native_results, "cuda") == 2 * 15 * 15      # 2 ranks x 15 (dtype, size) x 15 compared outputs
    assert not merged(native_results, "cuda")
    assert checked(native_results, "path") == 2 * 15 * 16      # every call of every rank ran natively
    assert not merged(native_results, "path")


def test_a_native_call_costs_the_host_three_socket_rounds_two_syncs_one_export_no_store(native_results):
    """On the card: each repeated native all_reduce sends 3 messages per peer, synchronises the
    stream twice, exports its one buffer once and asks nothing of the store."""
    from _torch_dist import merged
    assert all("percall:native" in res for res in native_results)
    assert not merged(native_results, "percall")


def test_an_async_call_on_a_side_stream_is_ordered_by_events(native_results):
    from _torch_dist import checked, merged
    assert checked(native_results, "stream") == 4
    assert not merged(native_results, "stream")


def test_mismatched_devices_are_refused_on_every_rank(native_results):
    from _torch_dist import checked, merged
    assert checked(native_results, "devices") == 4
    assert not merged(native_results, "devices")


def test_host_staged_collectives_equal_gloo_on_two_ranks_sharing_a_card():
    from _native_jobs import cuda_job
    from _torch_dist import checked, merged, run_job
    results = run_job(cuda_job, 2, env={"LOCAL_WORLD_SIZE": "2", "TOPOCOLL_TORCH_NATIVE": "never"}, timeout_s=150)
    assert checked(results, "cuda") == 2 * 15 * 15 and checked(results, "path") == 2 * 15 * 16
    assert not merged(results, "cuda") and not merged(results, "path") and not merged(results, "stream")


def _nccl_plan(tmp_path, n: int):
    """A plan for ``n`` fully connected ranks whose every all_reduce says NCCL (fallback: ring)."""
    from synth import baseline, build_fabric
    from synth.plan.size_plan import Plan, PlanEntry
    from topo_probe.machines.generators import fully_connected
    topo = fully_connected(n)
    baseline("ring", build_fabric(topo), "allreduce").save(tmp_path / "schedules" / "allreduce-ring.json")
    Plan(topo.name, topo.fingerprint(), [PlanEntry("allreduce", 0, None, "nccl",
                                                   fallback="schedules/allreduce-ring.json")]).save(tmp_path / "plan.json")
    return str(tmp_path / "plan.json")


@pytest.mark.parametrize("n", [1, 2])
def test_where_the_plan_says_nccl_torchs_nccl_group_runs_or_the_fallback_natively(tmp_path, n):
    """n = 1: torch's NCCL group is made and runs; n = 2 on one card: NCCL refuses two ranks on
    one device, so the plan's fallback runs natively and the route says why."""
    pytest.importorskip("cupy", reason="the native path on CUDA tensors needs CuPy")
    from _native_jobs import nccl_plan_job
    from _torch_dist import merged, run_job
    env = {"LOCAL_WORLD_SIZE": "2", "CUDA_VISIBLE_DEVICES": "0",        # one card, whatever the machine has
           "TOPOCOLL_PLAN": _nccl_plan(tmp_path, 2)} if n == 2 else {}
    results = run_job(nccl_plan_job, n, env=env, timeout_s=60)
    assert all(("nccl:single" if n == 1 else "nccl:fallback") in res for res in results)
    assert not merged(results, "nccl")
