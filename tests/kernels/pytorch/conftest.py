"""The torch backend tests share one job per process count: ``collectives_job`` (every
collective, bad input, subgroups, backend strings, DDP) spawned once on 2 and once on 4 ranks for
the whole session, whichever test module asks first."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", params=[2, 4], ids=["2-ranks", "4-ranks"])
def job_results(request):
    pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")
    from _torch_dist import free_port, run_job
    from _torch_jobs import collectives_job
    env = {f"TOPOCOLL_TEST_INIT{k}": f"tcp://127.0.0.1:{free_port()}" for k in (2, 3, 4)}
    return request.param, run_job(collectives_job, request.param, env=env)
