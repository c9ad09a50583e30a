"""The collectives on CUDA tensors, 2 processes sharing one card.

Natively (``_native_jobs.cuda_job``): every collective of ``_torch_jobs._calls`` on 5 dtypes and
3 sizes equals gloo's on the CPU bit for bit, and every call with data ran as native launches
(the runner's launch count and ``last_path``, not the host fallback); an async call made on a
side stream after a late kernel that writes its input, waited for by the current stream; a rank
passing a CPU tensor where the others pass CUDA tensors makes every rank raise the same line.
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
