"""The DDP comm hook and the backend under DDP (from the shared ``job_results`` job on 2 and 4
ranks): 50 steps with ``topocoll`` as DDP's group, and with gloo as DDP's group plus
``topocoll_hook`` (none, fp16, bf16), end with gloo's parameters within ``_torch_ddp.TOLERANCE``;
10 FSDP2 (``fully_shard``) steps on 2 ranks end with gloo's parameters;
the hook's compressed mean is within :func:`kernels.comm.compression.error_bound`."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

from _torch_dist import checked, merged  # noqa: E402


def test_fifty_ddp_steps_end_with_the_parameters_gloo_gives(job_results):
    n, results = job_results
    assert checked(results, "ddp") == n * (5 if n == 2 else 2)     # 2 ranks: + FSDP2; 4: topocoll, bf16 hook
    assert not merged(results, "ddp:"), results[0].get("__ddp_max_diff__")


def test_the_compressed_mean_is_within_the_compression_error_bound(job_results):
    n, results = job_results
    assert checked(results, "hook") == n * 6
    assert not merged(results, "hook")


def test_an_unknown_compression_is_refused():
    from kernels.pytorch.errors import UnsupportedCall
    from kernels.pytorch.hooks import TopocollHookState
    with pytest.raises(UnsupportedCall, match="fp8"):
        TopocollHookState.create("fp8")
