"""Per-call agreement of the MPICommunicator (kernels.mpi.agreement): a rank that makes another
call (collective, count, dtype, op, root or schedule) or cannot start it makes every rank raise
ProcessGroupMismatch within 5 s, naming the field and the ranks, before any message of
another call lands in a buffer, so the communicator still works afterwards.  Each mismatch
runs twice: with the call's digest in the data tags (headers beside the data) and with tags
as short as the MPI standard allows (every header awaited first).  Before the agreement these gave MPI errors,
heap corruption, silent wrong results or a hang until the timeout.

One ``mpirun -n 3`` runs every scenario (this file is the worker); rank 1 is the odd one out."""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from kernels.mpi.agreement import describe_mismatch, header_digest

from _mpi import worker_results

SCENARIOS = ("collective", "count", "dtype", "op", "root", "schedule", "bad-argument", "short-buffer")
#: what each rank's message must contain (the field and the ranks that hold each value)
NAMES = {"collective": "collective: ranks [0, 2] 'allreduce', ranks [1] 'allgather'",
         "count": "count: ranks [0, 2] 100, ranks [1] 90",
         "dtype": "dtype: ranks [0, 2] 'float32', ranks [1] 'float64'",
         "op": "op: ranks [0, 2] 'sum', ranks [1] 'max'",
         "root": "root: ranks [0, 2] 0, ranks [1] 2",
         "schedule": "schedule: ranks [0, 2] 'ring:",
         "bad-argument": "rank 1 could not start it: BufferLayoutError: all_reduce: rank 1: got a list",
         "short-buffer": "rank 1 could not start it: BufferLayoutError: all_reduce: rank 1: buffer has 50 elements"}


_SCHEDULES: dict = {}


def _call(comm, scenario: str, odd: bool, x=None, out=None) -> None:
    """The scenario's call on one rank (``odd``: rank 1's deviating version); ``x`` and ``out``
    (100 float32 each) are reused across calls when given."""
    from synth.baselines import baseline
    x = np.ones(100, np.float32) if x is None else x
    if out is None or (odd and scenario == "collective"):
        out = np.empty(100 if not odd or scenario != "collective" else 300, np.float32)
    if scenario == "collective":
        comm.all_gather(x, out) if odd else comm.all_reduce(x, out)
    elif scenario == "count":
        comm.all_reduce(x[:90] if odd else x, out[:90] if odd else out)
    elif scenario == "dtype":
        comm.all_reduce(x.astype(np.float64) if odd else x, out.astype(np.float64) if odd else out)
    elif scenario == "op":
        comm.all_reduce(x, out, op="max" if odd else "sum")
    elif scenario == "root":
        comm.broadcast(x, root=2 if odd else 0)
    elif scenario == "schedule":
        key = 2 if odd else 1     # one schedule object per shape: the communicator caches by object
        if key not in _SCHEDULES:
            _SCHEDULES[key] = baseline("ring", comm.selector.fabric, "allreduce", chunks=key)
        comm.run_schedule(_SCHEDULES[key], x, out)
    elif scenario == "bad-argument":
        comm.all_reduce(x.tolist() if odd else x, out)
    else:  # a receive buffer too small on rank 1 only
        comm.all_reduce(x, out[:50] if odd else out)


def _p2p_refused(comm, first: np.ndarray, wrong: np.ndarray) -> dict:
    """Rank 0 sends ``first`` then ``arange(4)`` of ``wrong``'s type; rank 1 receives the first
    into ``wrong`` (refused: another size or type), then the second works."""
    got = {}
    if comm.rank == 0:
        comm.send(first, 1)
        comm.send(np.arange(4, dtype=wrong.dtype), 1)
        comm.wait_sends()
    elif comm.rank == 1:
        try:
            comm.recv(wrong, 0)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            got = {"raised": type(exc).__name__, "message": str(exc)}
        ok = np.zeros(4, wrong.dtype)
        comm.recv(ok, 0)
        got["next"] = ok.tolist()
    comm.barrier()
    return got


def worker(out_path: str) -> None:
    from kernels.mpi.communicator import MPICommunicator
    from kernels.mpi.transport import keep_abandoned
    warnings.simplefilter("ignore")
    comm = MPICommunicator.from_mpi(plan=False, timeout_s=30, abort_on_error=False)
    r = comm.rank
    res = {}
    for scenario in (SCENARIOS + tuple(f"bound:{s}" for s in SCENARIOS)
                     + tuple(f"short-tags:{s}" for s in SCENARIOS)):
        if scenario.startswith("short-tags:") and comm._tag_ub != 32767:
            comm._tag_ub = 32767          # the MPI standard's least tag bound: no room for digests
            comm._programs.clear()
            comm._memo.clear()
        name, x, out, bound = scenario.split(":")[-1], None, None, 0
        if scenario.startswith("bound:"):   # the others' call runs on persistent requests
            x, out = np.ones(100, np.float32), np.empty(100, np.float32)
            for _ in range(2):
                _call(comm, name, False, x, out)
            bound = len(comm._runner._bound)
        t0 = time.monotonic()
        try:
            _call(comm, name, r == 1, x, out)
            got = {"raised": None}
        except Exception as exc:  # noqa: BLE001 - reported to the test
            got = {"raised": type(exc).__name__, "message": str(exc)}
        got["seconds"] = time.monotonic() - t0
        got["bound"] = bound
        if x is not None:                  # the same buffers again, every rank the same call
            comm.all_reduce(x, out)
            got["same_buffers"] = sorted(set(out.tolist()))
        after = np.empty(10, np.float32)   # the communicator still works: nothing stale in flight
        comm.all_reduce(np.full(10, r + 1, np.float32), after)
        got["after"] = after.tolist()
        got["abandoned"] = keep_abandoned()
        got["salted"] = sorted({hit[3].salted for hit in comm._programs.values()})
        res[scenario] = got
    res["p2p"] = _p2p_refused(comm, np.arange(3, dtype=np.float32), np.zeros(4, np.float32))
    res["p2p-type"] = _p2p_refused(comm, np.arange(4, dtype=np.float32), np.zeros(4, np.int32))  # same bytes
    every = comm.allgather_object(res)
    if r == 0:
        Path(out_path).write_text(json.dumps(every))
    comm.barrier()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return worker_results(3, Path(__file__).resolve(), tmp_path_factory.mktemp("agree") / "res.json")


@pytest.mark.parametrize("tags", ["salted", "bound", "short-tags"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_rank_with_another_call_stops_every_rank_naming_the_field(results, scenario, tags):
    """``bound``: the same call ran twice on the same buffers first, so the ranks that make it
    run it on persistent requests (kernels.mpi.persistent); the buffers work again afterwards."""
    ranks = [res[scenario if tags == "salted" else f"{tags}:{scenario}"] for res in results]
    for r, got in enumerate(ranks):
        assert got["salted"] == [tags != "short-tags"], got   # every plan of the pass (the check after it too)
        if tags == "bound":
            assert got["bound"] >= 1 and got["same_buffers"] == [3.0], (r, got)
        if scenario in ("bad-argument", "short-buffer") and r == 1:  # its own error, one line
            assert got["raised"] == "BufferLayoutError", got
        else:
            assert got["raised"] == "ProcessGroupMismatch", (r, got)
            assert NAMES[scenario] in got["message"], (r, got["message"])
        assert got["seconds"] < 5, (r, got)
        assert got["after"] == [6.0] * 10 and got["abandoned"] == 0, (r, got)
    messages = {got["message"] for r, got in enumerate(ranks) if got["raised"] == "ProcessGroupMismatch"}
    assert len(messages) == 1  # the same message on every rank


def test_a_receive_of_another_size_is_refused_and_the_channel_stays_clean(results):
    got = results[1]["p2p"]
    assert got["raised"] == "BufferLayoutError"
    assert got["message"] == ("recv: rank 1 expects 4 float32 (16 bytes) from rank 0, which sent 12 bytes of "
                              "float32; send and recv must name the same size and type")
    assert got["next"] == [0.0, 1.0, 2.0, 3.0]


def test_a_receive_of_another_type_is_refused_naming_both_and_the_channel_stays_clean(results):
    """Before (mpi67), a float32 send received as int32 of the same 16 bytes was reinterpreted."""
    got = results[1]["p2p-type"]
    assert got["raised"] == "BufferLayoutError", got
    assert got["message"] == ("recv: rank 1 expects 4 int32 (16 bytes) from rank 0, which sent 16 bytes of float32; "
                              "send and recv must name the same size and type")
    assert got["next"] == [0, 1, 2, 3]


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "worker":
    worker(sys.argv[2])


# ---------------------------------------------------------------------- without MPI
def test_digest_names_every_field():
    base = dict(collective="allreduce", root=None, count=8, dtype="float32", op="sum", schedule="ring:ab")
    digests = {header_digest({**base, k: v}) for k, v in (("collective", "reduce"), ("root", 0), ("count", 9),
                                                          ("dtype", "bfloat16"), ("op", "avg"), ("schedule", "x"))}
    assert len(digests) == 6 and header_digest(base) not in digests


def test_mismatch_message_lists_each_differing_field_with_its_ranks():
    a = dict(call=7, collective="reduce", root=0, count=8, dtype="float32", op="sum", schedule="s")
    msg = describe_mismatch([a, {**a, "root": 1, "count": 4}, a, {**a, "root": 1}])
    assert msg == ("call 7 (reduce): ranks disagree on root: ranks [0, 2] 0, ranks [1, 3] 1; "
                   "count: ranks [0, 2, 3] 8, ranks [1] 4")
