"""A refused ``timeout_s`` (or ``$TOPOCOLL_MPI_TIMEOUT``) on one rank stops every rank at start-up, at once, with
the same one line naming the value and the rank, as a refused plan, ipc= or native= does
(:func:`kernels.mpi.startup.checked_start`); the ranks stay in step for the next communicator.  Ranks may still
use different good deadlines (a deadline is each rank's own: test_mpi_hostile's ranks do)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from _mpi import run_mpi

GOOD_S = 20
RULE = "expected a finite number of seconds >= 0.001"


class FloatThatRaises(float):
    """A real number whose ``float()`` raises (a hostile or broken wrapper)."""

    def __float__(self):
        raise ZeroDivisionError("no float today")


#: case -> (rank 1's timeout_s, its $TOPOCOLL_MPI_TIMEOUT or None, the refusal's head written by hand)
CASES = {
    "nan": (float("nan"), None, f"MPICommunicator: timeout_s=nan: {RULE}"),
    "negative": (-1, None, f"MPICommunicator: timeout_s=-1: {RULE}"),
    "long-str": ("x" * 300, None, f"MPICommunicator: timeout_s='{'x' * 56}...: {RULE}"),
    "bool": (True, None, f"MPICommunicator: timeout_s=True: {RULE}"),
    "env": (None, "inf", f"TOPOCOLL_MPI_TIMEOUT='inf': {RULE}"),
    "float-raises": (FloatThatRaises(3.0), None, f"MPICommunicator: timeout_s=3.0: {RULE}"),
}


def worker(case: str, out: str) -> None:
    """Rank 1 gives the case's bad deadline, the others a good one (GOOD_S); each rank writes what it raised
    and how long that took, then every rank makes a good communicator and all-reduces its rank + 1."""
    import numpy as np
    from mpi4py import MPI

    from kernels.mpi.communicator import MPICommunicator
    r = MPI.COMM_WORLD.Get_rank()
    bad, env, _ = CASES[case]
    if r == 1 and env is not None:
        os.environ["TOPOCOLL_MPI_TIMEOUT"] = env
    t0 = time.monotonic()
    try:
        MPICommunicator(plan=False, abort_on_error=False, timeout_s=bad if r == 1 else GOOD_S)
        got = {"raised": None}
    except Exception as exc:  # noqa: BLE001 - reported to the test
        got = {"raised": type(exc).__name__, "message": str(exc)}
    got["seconds"] = time.monotonic() - t0
    os.environ.pop("TOPOCOLL_MPI_TIMEOUT", None)
    comm = MPICommunicator(plan=False, abort_on_error=False, timeout_s=GOOD_S)
    y = np.empty(4, np.float32)
    comm.all_reduce(np.full(4, r + 1, np.float32), y)
    got["after"] = y.tolist()
    comm.close()
    (Path(out) / f"out{r}.json").write_text(json.dumps(got))


@pytest.mark.parametrize("n,case", [(2, "nan"), (2, "long-str"), (2, "env"), (3, "negative"), (3, "bool"),
                                    (2, "float-raises")])
def test_a_bad_timeout_on_one_rank_stops_every_rank_at_once(tmp_path, n, case):
    """Reference: the line written by hand from the rule (checked_timeout, errors.show) and the start-up refusal's
    suffix; the sum 1 + ... + n by hand.  Old: rank 1 raised alone before the start-up exchange and the other ranks
    waited out their whole GOOD_S deadline in it, then raised PeerFailed naming rank 1 as lost."""
    proc = run_mpi(n, [str(Path(__file__).resolve()), "worker", case, str(tmp_path)], timeout=150)
    assert proc.returncode == 0, f"mpirun failed (rc {proc.returncode}): {proc.stderr[-3000:]}"
    got = [json.loads((tmp_path / f"out{r}.json").read_text()) for r in range(n)]
    want = f"{CASES[case][2]} (the start-up check of arguments, topology and plan failed on ranks [1] of {n})"
    for r, g in enumerate(got):
        assert (g["raised"], g["message"]) == ("InvalidArgument", want), (r, got)
        assert g["seconds"] < 10, (r, got)
        assert g["after"] == [n * (n + 1) / 2] * 4, (r, got)


def test_ranks_with_different_good_deadlines_start():
    """A deadline is each rank's own (test_mpi_hostile gives rank 0 a shorter one): the start-up check refuses a bad
    value, not a different one.  Reference: the sum 1 + 2 by hand."""
    proc = run_mpi(2, [str(Path(__file__).resolve()), "differ"], timeout=120)
    assert proc.returncode == 0 and "sum [3.0, 3.0]" in proc.stdout, (proc.stdout[-1500:], proc.stderr[-1500:])


def differ_worker() -> None:
    import numpy as np
    from mpi4py import MPI

    from kernels.mpi.communicator import MPICommunicator
    r = MPI.COMM_WORLD.Get_rank()
    comm = MPICommunicator(plan=False, abort_on_error=False, timeout_s=5 + 10 * r)
    y = np.empty(2, np.float32)
    comm.all_reduce(np.full(2, r + 1, np.float32), y)
    print(f"rank {r} timeout {comm.waiter.timeout_s} sum {y.tolist()}", flush=True)
    comm.close()


if __name__ == "__main__" and len(sys.argv) > 3 and sys.argv[1] == "worker":
    worker(sys.argv[2], sys.argv[3])
if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "differ":
    differ_worker()
