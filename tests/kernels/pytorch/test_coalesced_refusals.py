"""kernels/pytorch/calls.py's coalesced calls on 2 and 4 spawned ranks (``_coalesced_jobs``, checks of
the shared ``job_results`` job, conftest.py):
a bad 2nd or 3rd part of ``all_gather_into_tensor`` / ``reduce_scatter_tensor`` / ``all_reduce``
under ``_coalescing_manager`` (a size this rank alone gets wrong, a strided output, a count or a
dtype the ranks disagree on) raises the same error class on every rank before any byte moves: the
1st part's output is untouched everywhere (before, it had been written), the next call right;
good parts of mixed dtypes and sizes equal the same calls made one by one."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

from _torch_dist import checked, merged  # noqa: E402

#: refused cases: allgather 4, reduce_scatter 3, allreduce 1, allgather lists 2; each: error, 1st part
#: untouched, in step
REFUSED = 4 + 3 + 1 + 2


def test_a_bad_later_part_raises_on_every_rank_before_any_byte_moves(job_results):
    n, results = job_results
    assert merged(results, "parts_refused") == []
    assert checked(results, "parts_refused") == REFUSED * 3 * n


def test_every_rank_raises_the_same_error(job_results):
    """Same class on every rank; a CollectiveMismatch's message is word for word the same (a
    BadTensor's names the failing rank's own note on that rank only)."""
    n, results = job_results
    messages = [r["__coalesced_messages__"] for r in results]
    assert len(messages[0]) == REFUSED and all(m.keys() == messages[0].keys() for m in messages)
    for name, first in messages[0].items():
        kinds = {m[name].split(":")[0] for m in messages}
        assert len(kinds) == 1, (name, [m[name] for m in messages])
        if first.startswith("CollectiveMismatch"):
            assert all(m[name] == first for m in messages), (name, [m[name] for m in messages])
        else:
            assert all("rank 0: " in m[name] for m in messages), (name, [m[name] for m in messages])
            part = 1 if "second" in name else 2                 # rank 0's own note names the bad part
            assert f"rank 0: pair {part}: " in messages[0][name], messages[0][name]


def test_good_coalesced_parts_of_mixed_dtypes_equal_the_calls_one_by_one(job_results):
    n, results = job_results
    assert merged(results, "parts_mixed") == []
    assert checked(results, "parts_mixed") == 6 * n
