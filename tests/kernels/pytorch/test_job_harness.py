"""The spawned-ranks harness (tests/_torch_dist.py) ends a stuck job at its timeout and says where
each rank was: a rank still running 10 s before the timeout dumps its threads' stacks, and the
TimeoutError carries them (a job that hangs under load in CI is then diagnosable from the log)."""

from __future__ import annotations

import time

import pytest


def test_a_stuck_job_times_out_with_every_ranks_stack():
    pytest.importorskip("torch", reason="the harness spawns torch.multiprocessing ranks")
    from _torch_dist import run_job
    from _torch_jobs import stuck_job
    t0 = time.monotonic()
    with pytest.raises(TimeoutError) as err:
        run_job(stuck_job, 2, timeout_s=20)               # ranks importing torch beside a 4-rank job need > 12 s
    assert time.monotonic() - t0 < 50                      # killed, not waited for (the job sleeps 120 s)
    said = str(err.value)
    assert "stuck_job on 2 ranks ran over 20 s" in said
    for rank in (0, 1):
        assert f"rank {rank}:" in said
    assert said.count("in stuck_job") == 2                 # each rank's stack names the frame it hung in


def test_rendezvous_ports_are_free_and_below_the_ephemeral_range():
    """Outgoing connections take ports from the kernel's ephemeral range: a rendezvous port picked there
    and bound minutes later by a rank may be taken meanwhile; picked below it, only another explicit pick
    can take it."""
    import socket

    from _torch_dist import _ephemeral_range, free_port
    low = _ephemeral_range()[0]
    ports = {free_port() for _ in range(20)}
    assert all(10000 <= p < low for p in ports) and len(ports) > 10
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))                    # still free: nothing else holds it


def _raises_with_its_group_made(rank: int, n: int, init: str) -> dict:
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=n)
    raise RuntimeError("broken on purpose")


def _returns_with_its_group_made(rank: int, n: int, init: str) -> dict:
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=n)
    return {"left": []}


def _makes_its_own_group(rank: int, n: int, init: str) -> dict:
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=n)
    x = torch.full((2,), 3.0)
    dist.all_reduce(x)
    dist.destroy_process_group()
    return {"after:sum": [] if x.tolist() == [3.0, 3.0] else [str(x.tolist())]}


def test_a_failed_job_part_is_its_own_tests_error_and_the_next_part_starts_clean(monkeypatch):
    """_torch_jobs._parts (1 rank, in process): a part that raises, or returns, with its default group
    made has ``__error__`` (its traceback / what it left) and its group destroyed; the next part makes
    its own default group and runs; part_results raises with the failed rank's traceback, readable."""
    torch = pytest.importorskip("torch", reason="the harness runs torch.distributed jobs")
    import torch.distributed as dist

    import _torch_jobs
    from _torch_dist import free_port, part_results
    parts = {"broken": (f"{__name__}:_raises_with_its_group_made", (1,)),
             "left": (f"{__name__}:_returns_with_its_group_made", (1,)),
             "after": (f"{__name__}:_makes_its_own_group", (1,)), "other": (f"{__name__}:nothing", (2, 4))}
    monkeypatch.setattr(_torch_jobs, "PARTS", parts)
    for name in parts:
        monkeypatch.setenv(f"TOPOCOLL_TEST_INIT_{name.upper()}", f"tcp://127.0.0.1:{free_port()}")
    store = dist.TCPStore("127.0.0.1", free_port(), 1, True, timeout=torch.distributed.constants.default_pg_timeout)
    out = _torch_jobs._parts(0, 1, store)
    assert not dist.is_initialized() and sorted(out) == ["after", "broken", "left"]
    assert "RuntimeError: broken on purpose" in out["broken"]["__error__"]
    assert out["left"]["__error__"] == "part left returned with its default group still made"
    assert part_results((1, [{"__parts__": out}]), "after") == [{"after:sum": []}]
    with pytest.raises(AssertionError) as err:
        part_results((1, [{"__parts__": out}]), "broken")
    assert str(err.value).startswith("job part broken on 1 ranks failed:\nrank 0:\nTraceback")
    assert "in _raises_with_its_group_made" in str(err.value)


def test_a_rank_that_left_no_result_is_named_in_its_parts_error():
    """run_job gives ``{"__missing__": True}`` for a rank that died without a result: part_results
    names it, not a KeyError for every test of the shared job."""
    from _torch_dist import part_results
    with pytest.raises(AssertionError) as err:
        part_results((2, [{"__parts__": {"fused": {}}}, {"__missing__": True}]), "fused")
    assert str(err.value) == "job part fused on 2 ranks failed:\nrank 1:\nthe rank left no result (it died)"
