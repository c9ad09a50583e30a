"""A ``topocoll`` group's timeout refused on one rank ends the group's making on every rank at once, with the
same one line naming the value and the rank (:mod:`kernels.pytorch.start_check`); ranks with different good
timeouts make the group.  The store is the caller's (``init_process_group(store=...)``), so torch's own
rendezvous, which reads the timeout first under ``init_method``, does not refuse it before the backend does."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

from _torch_dist import run_job  # noqa: E402

GOOD_S = 20
RULE = "expected a finite number of seconds >= 0.001"
BAD = {"negative": timedelta(seconds=-1), "zero": timedelta(0), "sub-microsecond": timedelta(microseconds=-1),
       "sub-millisecond": timedelta(microseconds=500)}


def _job(rank: int, n: int, init_method: str, timeouts: list) -> dict:
    import torch
    import torch.distributed as dist

    import kernels.pytorch  # noqa: F401  (registers the backend)
    host, port = init_method.removeprefix("tcp://").rsplit(":", 1)
    store = dist.TCPStore(host, int(port), n, rank == 0, timeout=timedelta(seconds=GOOD_S))
    t0 = time.monotonic()
    try:
        dist.init_process_group("topocoll", store=store, rank=rank, world_size=n, timeout=timeouts[rank])
        x = torch.full((4,), float(rank + 1))
        dist.all_reduce(x)
        got = {"raised": None, "sum": x.tolist()}
        dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001 - compared by the test
        got = {"raised": type(exc).__name__, "message": str(exc), "runtime": isinstance(exc, RuntimeError)}
    got["seconds"] = time.monotonic() - t0
    if rank == 0:       # rank 0 hosts the store: leaving at once would cut a slower rank's last store reads
        time.sleep(3)
    return got


def bad_job(rank: int, n: int, init_method: str) -> dict:
    import os
    bad = BAD[os.environ["TOPOCOLL_TEST_BAD"]]
    return _job(rank, n, init_method, [bad if r == 1 else timedelta(seconds=GOOD_S) for r in range(n)])


def differ_job(rank: int, n: int, init_method: str) -> dict:
    return _job(rank, n, init_method, [timedelta(seconds=GOOD_S + 10 * r) for r in range(n)])


@pytest.mark.parametrize("n,case", [(2, "negative"), (2, "zero"), (3, "sub-microsecond"), (2, "sub-millisecond")])
def test_a_bad_timeout_on_one_rank_stops_every_rank_at_once(n, case):
    """Reference: the line written by hand from the rule (kernels.mpi.waiter.checked_timeout on the seconds) and
    the refusal's suffix.  Old: rank 1 alone raised gloo's multi-line C++ enforce error ('timeout.count() >= 0.
    Invalid timeout', or for 0 a store wait timed out after 0 ms) and the other ranks waited out their whole
    20 s timeout for its connections."""
    results = run_job(bad_job, n, env={"TOPOCOLL_TEST_BAD": case}, timeout_s=120)
    seconds = BAD[case].total_seconds()
    want = (f"topocoll process group: timeout.total_seconds()={seconds!r}: {RULE} (the start-up check of the "
            f"timeout failed on ranks [1] of {n})")
    for r, got in enumerate(results):
        assert (got["raised"], got.get("message"), got.get("runtime")) == ("UnsupportedCall", want, True), (r, got)
        assert got["seconds"] < 10, (r, got)


def test_ranks_with_different_good_timeouts_make_the_group():
    """A timeout is each rank's own deadline: the check refuses a bad one, not a different one.  Reference: the
    sum 1 + 2 by hand."""
    results = run_job(differ_job, 2, timeout_s=120)
    assert [g.get("sum") for g in results] == [[3.0] * 4] * 2, results


def subgroup_job(rank: int, n: int, init_method: str) -> dict:
    """A world of ``n`` gloo ranks; ranks 1..n-1 make a ``topocoll`` subgroup, the last of them with a timeout of
    -1 s (its group rank is n-2, not its own)."""
    import torch.distributed as dist

    import kernels.pytorch  # noqa: F401  (registers the backend)
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=n,
                            timeout=timedelta(seconds=GOOD_S))
    t0 = time.monotonic()
    try:
        dist.new_group(list(range(1, n)), backend="topocoll",
                       timeout=timedelta(seconds=-1) if rank == n - 1 else timedelta(seconds=GOOD_S))
        got = {"raised": None}
    except Exception as exc:  # noqa: BLE001 - compared by the test
        got = {"raised": type(exc).__name__, "message": str(exc)}
    got["seconds"] = time.monotonic() - t0
    dist.destroy_process_group()
    return got


def test_a_subgroups_refusal_names_the_global_rank():
    """In new_group([1, 2]) of 3 ranks the refusing rank is named by its global rank (2), as the user knows it,
    with the group's ranks; rank 0, outside the group, makes nothing and raises nothing.  Reference: the line by
    hand.  Old: "failed on ranks [1] of 2", the group rank, which names a rank that did not refuse."""
    results = run_job(subgroup_job, 3, timeout_s=120)
    want = (f"topocoll process group: timeout.total_seconds()=-1.0: {RULE} (the start-up check of the timeout "
            f"failed on ranks [2] of the group's ranks [1, 2])")
    assert results[0]["raised"] is None, results
    for r in (1, 2):
        assert (results[r]["raised"], results[r].get("message")) == ("UnsupportedCall", want), (r, results)
        assert results[r]["seconds"] < 10, (r, results)
