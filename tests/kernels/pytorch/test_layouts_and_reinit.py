"""kernels/pytorch/process_group.py and layouts.py on 2 and 4 spawned ranks (``_layout_jobs.layout_job``): a
``topocoll`` group destroyed and made again on the same store runs (it hung in its second
making: torch names the group as before and the old addresses were read), and every collective
on non-contiguous tensors (transposed, channels_last, strided) equals torch's gloo on the same
tensors bit for bit, strides included (it raised BadTensor where gloo runs)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

from _torch_dist import checked, merged, on_2_and_4_ranks  # noqa: E402

layout_results = on_2_and_4_ranks("_layout_jobs:layout_job", timeout_s=120)


def test_a_group_made_again_on_the_same_store_runs(layout_results):
    n, results = layout_results
    assert merged(results, "remade") == []
    assert checked(results, "remade") == 3 * n


def test_non_contiguous_tensors_equal_gloo_bit_for_bit(layout_results):
    n, results = layout_results
    assert merged(results, "layout") == []
    assert checked(results, "layout") == n * (4 * 3 + 1) + 3      # reduce: the root only


def test_dense_copies_stage_only_non_contiguous_tensors():
    from kernels.pytorch.layouts import dense_copies
    a, b = torch.zeros(2, 3), torch.zeros(4, 2).t()
    (xs, [ys]), staged = dense_copies([a, b], [[b]])
    assert xs[0] is a and xs[1] is not b and xs[1].is_contiguous() and ys[0].is_contiguous()
    assert [p[0] is b for p in staged] == [True, True] and torch.equal(xs[1], b)
