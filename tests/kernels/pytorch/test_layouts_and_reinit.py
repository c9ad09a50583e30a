"""kernels/pytorch/checks.py (``dense``, ``flat``) and process_group.py on 2 and 4 spawned ranks
(``_layout_jobs.layout_job``): a ``topocoll`` group destroyed and made again on the same store runs
(it hung in its second making: torch names the group as before and the old addresses were
read); every collective on dense channels_last / channels_last_3d tensors (torch's NCCL group
takes them: ``is_contiguous(suggest_memory_format())``) equals torch's gloo on contiguous copies
bit for bit, its outputs in their own layout; a transposed, strided or overlapping tensor on one
rank raises BadTensor on every rank before any byte moves (issue 35), the group in step after;
tensors of one call in different memory layouts raise BadTensor, ranks in different layouts
CollectiveMismatch, on every rank (NCCL would combine their bytes); layouts that coincide run."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

torch = pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

from _torch_dist import checked, merged, shared_part  # noqa: E402

layout_results = shared_part("layout")


def test_a_group_made_again_on_the_same_store_runs(layout_results):
    n, results = layout_results
    assert merged(results, "remade") == []
    assert checked(results, "remade") == 3 * n


def test_channels_last_tensors_equal_gloo_bit_for_bit_in_their_own_layout(layout_results):
    n, results = layout_results
    assert merged(results, "layout") == []
    assert checked(results, "layout") == 2 * (7 * n + 1)        # 8 calls x 2 formats; reduce: the root only


def test_strided_tensors_raise_bad_tensor_on_every_rank_untouched(layout_results):
    n, results = layout_results
    assert merged(results, "refused") == []
    assert checked(results, "refused") == 3 * 5 * 3 * n        # 3 layouts x 5 calls x (error, untouched, in step)


def test_ranks_in_different_layouts_raise_collective_mismatch_on_every_rank(layout_results):
    n, results = layout_results
    assert merged(results, "across") == []
    assert checked(results, "across") == 2 * 6 * 3 * n          # 2 sizes x 6 calls x (error, untouched, in step)


def test_tensors_of_one_call_in_different_layouts_raise_bad_tensor_on_every_rank(layout_results):
    n, results = layout_results
    assert merged(results, "within") == []
    assert checked(results, "within") == 2 * 5 * 3 * n          # every rank / last rank x 5 calls x 3 checks


def test_layouts_that_coincide_run_and_equal_gloo(layout_results):
    n, results = layout_results
    assert merged(results, "coincide") == []
    assert checked(results, "coincide") == 3 * n


def test_layout_bits_and_the_header_compare_by_intersection():
    """A tensor counts as every layout it is dense in; ranks agree where one layout is common."""
    from kernels.pytorch.agreement import Header, compare
    from kernels.pytorch.checks import layout_bits, same_layout
    from kernels.pytorch.errors import CollectiveMismatch
    cl = torch.zeros(2, 3, 2, 2).contiguous(memory_format=torch.channels_last)
    cl3 = torch.zeros(2, 3, 2, 2, 2).contiguous(memory_format=torch.channels_last_3d)
    both = torch.zeros(2, 3, 1, 1).contiguous(memory_format=torch.channels_last)
    assert [layout_bits(t) for t in (torch.zeros(2, 3, 2, 2), cl, cl3, both, torch.zeros(1), torch.zeros(0, 3, 2, 2))] \
        == [1, 2, 4, 3, 7, 7]
    assert same_layout([both, cl, torch.ones(1)]) == (0, "")
    assert same_layout([cl, both, torch.zeros(4)], 2) == (
        9, "tensor 2 is channels_last, tensor 4 is contiguous: the tensors of one call must share a memory layout")
    rows = [Header("allreduce", 1, 8, op="sum", layouts=b).encode(3) for b in (3, 2, 2)]
    compare(rows, ["", "", ""], this_rank=0)                         # channels_last is common
    rows = [Header("allreduce", 1, 8, op="sum", layouts=b).encode(3) for b in (3, 2, 1)]
    with pytest.raises(CollectiveMismatch, match="memory layout: rank 0 has contiguous/channels_last, rank 2 has "
                                                 "contiguous") as caught:
        compare(rows, ["", "", ""], this_rank=1)
    assert "\n" not in str(caught.value)


def test_flat_is_the_storage_of_a_dense_tensor_and_others_are_refused():
    from kernels.pytorch.checks import dense, flat, layouts_ok
    x = torch.arange(24.0).reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last)
    view = flat(x)
    assert view.data_ptr() == x.data_ptr() and view.tolist() == x.permute(0, 2, 3, 1).reshape(-1).tolist()
    view.mul_(2)                                             # no copy: writing it writes x
    assert torch.equal(x, torch.arange(24.0).reshape(1, 2, 3, 4) * 2)
    y = torch.arange(72.0).reshape(3, 2, 3, 4).contiguous(memory_format=torch.channels_last)[1:]   # offset 24
    assert dense(y) and y.storage_offset() == 24 and flat(y).data_ptr() == y.data_ptr()
    assert flat(y).tolist() == y.permute(0, 2, 3, 1).reshape(-1).tolist()
    refused = [torch.zeros(2, 3).t(), torch.zeros(8)[::2], torch.zeros(1, 4).expand(3, 4),
               torch.zeros(2, 3, 4, 5).permute(0, 2, 1, 3), torch.zeros(2, 3, 4, 4)[:, :, :, :2]]
    assert [dense(t) for t in refused] == [False] * 5
    assert layouts_ok([x, refused[0]], 3) == (1, "tensor 4 (shape (3, 2), strides (1, 3)) is not contiguous in any "
                                                 "memory format")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 7), max_size=12))
def test_odd_layout_is_where_the_running_intersection_first_empties(bits):
    """odd_layout against NumPy's running bitwise AND: the first position where it reaches 0."""
    import numpy as np
    from kernels.pytorch.checks import ANY_LAYOUT, LAYOUTS, odd_layout
    assert ANY_LAYOUT == 0b111 and len(LAYOUTS) == 3
    running = np.bitwise_and.accumulate(np.array([ANY_LAYOUT] + bits, dtype=np.int64))[1:]
    zeros = np.flatnonzero(running == 0)
    assert odd_layout(bits) == (int(zeros[0]) if zeros.size else None)
    assert odd_layout(iter(bits)) == odd_layout(bits)                       # any iterable
