"""The torch backend tests share one job per process count: ``collectives_job`` (the jobs of
test_fused, test_checked_p2p, test_layouts_and_reinit and test_sum_order_ranks, then every
collective, bad input, subgroups, backend strings, DDP, coalesced refusals, gloo parity, a dead
rank) spawned once on 2 and once on 4 ranks for the whole run, whichever test asks first. Under
pytest-xdist the workers share it too: the first to ask runs it under a file lock in the run's
common temporary folder and leaves the results (or its error) there (the pattern pytest-xdist's
documentation gives for session fixtures). ``shm_results``: the native-path job over the emulated share
backend (``_native_jobs.shm_job``), once per process for the tests of native_exec.py and
native_comm.py."""

from __future__ import annotations

import fcntl
import pickle

import pytest


def _run(n: int):
    from _torch_dist import free_port, run_job
    from _torch_jobs import PARTS, collectives_job
    env = {f"TOPOCOLL_TEST_INIT{k}": f"tcp://127.0.0.1:{free_port()}" for k in (2, 3, 4, 5, 6)}
    env.update({f"TOPOCOLL_TEST_INIT_{name.upper()}": f"tcp://127.0.0.1:{free_port()}" for name in (*PARTS, "parts")})
    return run_job(collectives_job, n, env=env, timeout_s=360)


@pytest.fixture(scope="session", params=[2, 4], ids=["2-ranks", "4-ranks"])
def job_results(request, tmp_path_factory):
    pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")
    n = request.param
    if getattr(request.config, "workerinput", None) is None:      # not an xdist worker
        return n, _run(n)
    shared = tmp_path_factory.getbasetemp().parent
    done = shared / f"topocoll-torch-job-{n}.pkl"
    with open(shared / f"topocoll-torch-job-{n}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            try:
                done.write_bytes(pickle.dumps(_run(n)))
            except Exception as e:        # left for the other workers too: one failed (or timed out) run, not one each
                done.write_bytes(pickle.dumps(f"{type(e).__name__}: {e}"))
                raise
        got = pickle.loads(done.read_bytes())
    if isinstance(got, str):
        raise AssertionError(f"the shared job on {n} ranks failed in another worker: {got}")
    return n, got


@pytest.fixture(scope="session")
def shm_results():
    pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")
    from _native_jobs import shm_job
    from _torch_dist import run_job
    return run_job(shm_job, 2, timeout_s=180)
