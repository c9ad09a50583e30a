"""The same collectives on CUDA tensors, 2 processes sharing one card (``_torch_jobs.cuda_job``):
equal to gloo's on the CPU bit for bit, and an async call on a side stream waited for by the
current stream.  Skips with the reason where torch or a GPU is missing."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="no CUDA GPU visible to torch here")]


def test_collectives_on_cuda_tensors_equal_gloo_on_two_ranks_sharing_a_card():
    from _torch_dist import checked, merged, run_job
    from _torch_jobs import cuda_job
    results = run_job(cuda_job, 2, env={"LOCAL_WORLD_SIZE": "2"})
    assert checked(results, "cuda") > 100
    assert not merged(results, "cuda")
