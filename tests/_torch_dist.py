"""Start N processes once, run a job of many checks in each, collect what each rank found.

``run_job(job, n)`` spawns ``n`` processes (``torch.multiprocessing``, spawn), each calling
``job(rank, n, init_method)`` with a fresh TCP rendezvous; each returns a dict of check name ->
list of failure lines (empty: passed) and counters; ``run_job`` returns the list of per-rank
dicts, or raises with the ranks' tracebacks.
"""

from __future__ import annotations

import os
import pickle
import socket
import tempfile
import traceback


def _ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands to outgoing connections and to ``bind(port 0)`` (Linux's default when
    the setting cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = map(int, f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port(low: int = 10000) -> int:
    """A free port for a rendezvous a rank binds later, below the kernel's ephemeral range: a port
    ``bind(0)`` gives comes from that range, where any outgoing connection of a concurrent job (the
    other xdist worker's ranks open hundreds) may take it before the rank binds it, minutes later."""
    import random
    top = min(_ephemeral_range()[0], 32768)
    for _ in range(200):
        port = random.randrange(low, top)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:                     # every try taken: the kernel's choice, as before
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def result_path(rank: int) -> str:
    """Where ``rank`` leaves its result (a job whose rank exits early writes it itself)."""
    return os.path.join(os.environ["TOPOCOLL_TEST_OUT"], f"rank{rank}.pkl")


def write_result(rank: int, result: dict) -> None:
    with open(result_path(rank), "wb") as f:
        pickle.dump(result, f)


def _entry(rank: int, job, n: int, init_method: str, out_dir: str, env: dict, stacks_after_s: float = 0) -> None:
    os.environ.update(env)
    os.environ["TOPOCOLL_TEST_OUT"] = out_dir
    if stacks_after_s > 0:            # a rank still running near the job's timeout leaves its threads' stacks
        import faulthandler
        faulthandler.dump_traceback_later(stacks_after_s, file=open(_stacks_path(out_dir, rank), "w"))
    import torch
    torch.set_num_threads(1)          # as torchrun does (OMP_NUM_THREADS=1); spawn imported torch already
    try:
        result = job(rank, n, init_method)
    except BaseException:
        result = {"__error__": traceback.format_exc()}
    write_result(rank, result)
    os._exit(0)                       # no teardown: a peer may be gone (dead-rank test)


def _stacks_path(out_dir: str, rank: int) -> str:
    return os.path.join(out_dir, f"rank{rank}.stacks")


def _stacks(out_dir: str, n: int, lines: int = 30) -> str:
    """The last ``lines`` lines of every rank's stack dump (``_entry``), where there is one."""
    said = []
    for r in range(n):
        try:
            with open(_stacks_path(out_dir, r)) as f:
                tail = f.read().strip().splitlines()[-lines:]
        except OSError:
            continue
        if tail:
            said.append(f"rank {r}:\n" + "\n".join(tail))
    return "\n".join(said)


def run_job(job, n: int, *, env: dict | None = None, timeout_s: float = 240) -> list[dict]:
    """Run ``job`` on ``n`` spawned ranks (module docstring); past ``timeout_s`` the ranks are killed and
    the TimeoutError carries where each was 10 s before (its threads' stacks)."""
    import torch.multiprocessing as mp
    env = {"OMP_NUM_THREADS": "1", "TOPOCOLL_RESULTS": tempfile.gettempdir() + "/topocoll-no-results", **(env or {})}
    with tempfile.TemporaryDirectory() as out:
        init = f"tcp://127.0.0.1:{free_port()}"
        ctx = mp.start_processes(_entry, args=(job, n, init, out, env, max(1.0, timeout_s - 10)), nprocs=n,
                                 join=False, start_method="spawn")
        import time
        deadline = time.monotonic() + timeout_s
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                raise TimeoutError(f"{job.__name__} on {n} ranks ran over {timeout_s} s; where the ranks were "
                                   f"10 s before:\n{_stacks(out, n)}")
        results = []
        for r in range(n):
            path = os.path.join(out, f"rank{r}.pkl")
            if not os.path.exists(path):
                results.append({"__missing__": True})
                continue
            with open(path, "rb") as f:
                results.append(pickle.load(f))
    errors = [f"rank {r}:\n{res['__error__']}" for r, res in enumerate(results) if "__error__" in res]
    if errors:
        raise AssertionError("\n".join(errors))
    return results


def part_results(job_results, name: str) -> list[dict]:
    """Every rank's result of the job part ``name`` (``_torch_jobs.PARTS``) from ``job_results``'
    ``(n, per-rank results)``; an AssertionError with each failed rank's traceback if it raised."""
    n, ranks = job_results
    results = [res["__parts__"][name] if "__parts__" in res else {"__error__": "the rank left no result (it died)"}
               for res in ranks]
    errors = [f"rank {r}:\n{res['__error__']}" for r, res in enumerate(results) if "__error__" in res]
    if errors:
        raise AssertionError(f"job part {name} on {n} ranks failed:\n" + "\n".join(errors))
    return results


def shared_part(name: str):
    """A pytest fixture giving ``(n, run_job's per-rank results of the job part name)``: the part (a
    job of ``_torch_jobs.PARTS``) runs first inside the shared ``job_results`` job, spawned once on
    2 and once on 4 ranks (tests/kernels/pytorch/conftest.py)."""
    import pytest

    @pytest.fixture
    def results(job_results):
        return job_results[0], part_results(job_results, name)
    return results


def merged(results: list[dict], prefix: str) -> list[str]:
    """Every rank's failure lines of the checks whose name starts with ``prefix``."""
    return [f"rank {r}: {name}: {line}" for r, res in enumerate(results) for name, lines in sorted(res.items())
            if name.startswith(prefix) and isinstance(lines, list) for line in lines]


def checked(results: list[dict], prefix: str) -> int:
    """How many comparisons the checks under ``prefix`` made (the job counts them)."""
    return sum(res.get("__count__", {}).get(prefix, 0) for res in results)
