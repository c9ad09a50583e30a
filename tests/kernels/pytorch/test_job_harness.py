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
        run_job(stuck_job, 2, timeout_s=12)
    assert time.monotonic() - t0 < 40                      # killed, not waited for (the job sleeps 120 s)
    said = str(err.value)
    assert "stuck_job on 2 ranks ran over 12 s" in said
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
