"""The torch backend on 4 spawned ranks: small CPU all_reduces (the one-shot, one round) give
every rank the same bits, the rank-order sum NumPy's fold gives (``_sum_order_jobs.sum_order_job``).
Before the fix rank d summed its own tensor first and floating results differed between ranks."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")


def test_small_all_reduces_are_the_rank_order_sum_on_every_rank():
    from _sum_order_jobs import DTYPES, SIZES, sum_order_job
    from _torch_dist import checked, merged, run_job
    results = run_job(sum_order_job, 4, timeout_s=180)
    assert checked(results, "sum_order") == 4 * (len(DTYPES) * len(SIZES) + 1)
    assert not merged(results, "sum_order")
    digests = [res["__digests__"] for res in results]
    assert all(d == digests[0] for d in digests[1:])
