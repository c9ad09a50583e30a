"""The topocoll process group on 2 and 4 spawned ranks (``job_results``: one job per rank
count): every collective on float32, bfloat16, float16, int64 and uint8, sizes 0, 1, 7, 1 Ki and
1 Mi elements, equals gloo's result bit for bit (integer-valued data: exact in any order);
random-valued sums, avg and premul_sum within the summation bound; premul_sum on every reducing
collective; async, coalesced, p2p, barrier, subgroups, bad input on every rank, backend strings;
a dead rank."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

from _torch_dist import checked, merged  # noqa: E402

#: calls of each family per (dtype, size)
FAMILIES = {"allreduce": 4, "allgather": 2, "reduce_scatter": 2, "broadcast": 1, "scatter": 1, "alltoall": 4}


def cases(n: int) -> int:
    """(dtype, size) pairs the job compares: 5 dtypes x 5 sizes (on 4 ranks 1 Mi elements for the
    dtypes of ``_torch_jobs.FOUR_RANK_LARGE``)."""
    from _torch_jobs import DTYPES, FOUR_RANK_LARGE
    return 25 if n == 2 else 20 + len(set(FOUR_RANK_LARGE) & set(DTYPES))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_collective_equals_gloo_bit_for_bit(job_results, family):
    n, results = job_results
    assert checked(results, family) == n * FAMILIES[family] * cases(n)   # the job compared them all
    assert not merged(results, family)


def test_rooted_collectives_equal_gloo_on_the_root(job_results):
    n, results = job_results
    assert checked(results, "reduce") == cases(n) and checked(results, "gather") == cases(n)
    assert not merged(results, "reduce") and not merged(results, "gather")


def test_random_sums_avg_and_premul_sum_are_within_the_summation_bound(job_results):
    n, results = job_results
    assert checked(results, "random") == n * 38
    assert not merged(results, "random")


def test_premul_sum_on_every_reducing_collective_and_integer_tensors_refused(job_results):
    """reduce_scatter (tensor, list, coalesced), reduce and all_reduce: sum of factor x input
    (float and tensor factors), inputs and non-root tensors unchanged; integer tensors BadTensor."""
    n, results = job_results
    assert checked(results, "premul") == n * 21
    assert not merged(results, "premul")


@pytest.mark.parametrize("family", ["async", "coalesced", "p2p", "barrier", "subgroup", "backend_string"])
def test_async_coalesced_p2p_barrier_subgroups_and_backend_strings(job_results, family):
    n, results = job_results
    assert checked(results, family) >= n
    assert not merged(results, family)


def test_bad_input_raises_on_every_rank_before_any_data_moves(job_results):
    n, results = job_results
    assert checked(results, "bad") >= n * 8
    assert not merged(results, "bad")


def test_a_dead_rank_ends_the_others_calls_within_the_timeout(job_results):
    n, results = job_results
    if n != 2:
        pytest.skip("the 2-rank job checks it (its last rank exits)")
    assert checked(results, "dead_rank") == 1                       # rank 0 called; rank 1 had left
    assert not merged(results, "dead_rank"), results[0]["__dead_rank__"]
