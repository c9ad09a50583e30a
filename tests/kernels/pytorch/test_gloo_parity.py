"""What a user of torch.distributed hits beyond the core collectives, on 2 and 4 spawned ranks
(``_parity_jobs.parity_checks``, in the shared ``job_results`` job, conftest.py), each call on
``topocoll`` next to the same call on gloo: equal values or both refused; where we follow NCCL
instead (docs/pytorch.md, "Where the two differ"), against an independent reference. Found by
this audit: AVG of bool tensors returned all False (gloo and torch's NCCL group refuse it; now
BadTensor on every rank), and a list ``reduce_scatter`` with uneven blocks was refused (gloo and
NCCL run it; now padded)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

from _torch_dist import checked, merged  # noqa: E402

#: comparisons per rank of each family (DTensor: a 1-D mesh, and a 2 x 2 one on 4 ranks)
FAMILIES = {"objects": 4, "lists": 8, "dtypes": 4 * 8, "zero_dim": 5, "work": 1, "strides": 8, "exact": 7}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_calls_equal_gloo_or_are_refused_like_it(job_results, family):
    """Object collectives, batch_isend_irecv both ways, list all_to_all with uneven and empty
    blocks (gloo refuses: against the blocks by hand), list reduce_scatter empty and uneven (sum
    by hand, max, product), bool / int8 / float64 / complex64 under sum, max, min, product, avg
    and band (bool avg refused as gloo; int8 avg as NCCL, truncated; band refused as NCCL),
    0-dim tensors, five async works waited in reverse order with is_completed / exception / a
    chained future; size-1 dimensions with rank-dependent strides in list all_gather,
    all_gather_into_tensor and all_gather_coalesced, all_gather_coalesced in torch's documented
    layout (one output list per rank: before, ours read one list per input, n equal inputs came
    back transposed), a transposed input refused (BadTensor on every rank); ops exact in any order
    (int64 / uint8 / float32 max and min, int64 sum, over 2 MiB) bit for bit."""
    n, results = job_results
    assert merged(results, family) == []
    assert checked(results, family) == n * FAMILIES[family]


def test_dtensor_redistribute_equals_the_tensor_it_stands_for(job_results):
    n, results = job_results
    assert merged(results, "dtensor") == []
    assert checked(results, "dtensor") == n * (4 if n == 2 else 8)


def test_ddp_options_and_the_hook_against_torchs_compression_hooks(job_results):
    """no_sync, static_graph, find_unused_parameters, gradient_as_bucket_view on topocoll equal
    gloo's parameters within 1e-5; topocoll_hook fp16 / bf16 within 1e-4 / 1e-3 of torch's
    fp16_compress_hook / bf16_compress_hook; bf16 parameters within 2 bf16 ulps (4 ranks: the
    hook's compressed paths only: topocoll sums in rank order, gloo's ring in its own); every
    rank's bf16 replica after 12 steps is the same bits (before the rank-order sum, 4 ranks
    drifted 9-33 bf16 ulps apart)."""
    n, results = job_results
    assert merged(results, "ddp_options") == [], results[0].get("__ddp_options__")
    assert len({res["__bf16_params_sha__"] for res in results}) == 1
    assert checked(results, "ddp_options") == n * (9 if n == 2 else 7)
