"""A rank that leaves normally while its peers still call (``mpirun -n 2`` and ``-n 4``; this file
is the worker): the peers learn it from its ``left`` notice, not from the deadline.

Before (mpi67 docs/mpi.md): a rank that returned from its script (so ``MPI_Finalize`` ran) while its
peers made another call was only seen by the deadline, ``TOPOCOLL_MPI_TIMEOUT`` + about 1.2 s
(6.0 s with 5 s).  Now, with a 30 s deadline: the peers raise PeerFailed naming it well within
2 s; a rank that finished the same calls as its peers and ends first fails nobody (its notice
is read during or after the last call, which it finished); ``close()`` and garbage collection
leave the same way, with the default abort hook too (mpi69: it held the communicator); a large send
its peer receives after the sender left arrives whole (mpi69: the sender's MPI_Finalize crashed, SIGSEGV)."""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _mpi import attempt, run_mpi

#: calls every rank makes before one leaves
CALLS = 3
#: the deadline of the peers (seconds): far above what a departure may take to be seen
DEADLINE_S = "30"
#: float32 elements of a send far above Open MPI's eager limit (4 MiB: rendezvous, completes only once received)
LARGE = 1 << 20


def worker(mode: str, out: str) -> None:
    from kernels.mpi.communicator import MPICommunicator
    comm = MPICommunicator.from_mpi(plan=False, abort_on_error=False)
    leaver, x = comm.size - 1, np.arange(64, dtype=np.float32) + comm.rank
    for _ in range(CALLS):
        comm.all_reduce(x, np.empty_like(x))
    res = {}
    if mode in ("exit", "finalize"):
        if comm.rank == leaver:
            if mode == "finalize":      # the program finalizes MPI itself, then ends
                from mpi4py import MPI
                MPI.Finalize()
            return                      # the end of the script: atexit, then MPI_Finalize
        res["next"] = attempt(lambda: comm.all_reduce(x, np.empty_like(x)))
        res["after"] = attempt(comm.barrier)
    elif mode == "midcall":             # the leaver's call 4 stops after its agreement (not JSON), then it ends
        if comm.rank == leaver:
            res["own"] = attempt(lambda: comm.allgather_object(object()))
            return
        res["next"] = attempt(lambda: comm.allgather_object(comm.rank))
    elif mode == "finish":              # the same calls everywhere; the leaver ends first
        if comm.rank == leaver:
            return
        end, res["read"] = time.monotonic() + 20, {"raised": None}   # its notice: once its interpreter exits
        while leaver not in comm.waiter.departed and time.monotonic() < end and not res["read"]["raised"]:
            res["read"] = attempt(comm.waiter.check_notices)   # a loaded machine: a fixed 1 s sleep was flaky
            time.sleep(0.01)
        res["departed"] = {str(k): v[0] for k, v in comm.waiter.departed.items()}
    elif mode == "p2p":                 # the leaver sends one message, then ends
        if comm.rank == leaver:
            comm.send(x, 0)
            return
        time.sleep(0.5)
        got = np.empty_like(x)
        res["sent"] = attempt(lambda: comm.recv(got, leaver))
        res["value"] = got.tolist()
        res["never"] = attempt(lambda: comm.recv(got, leaver))
    elif mode == "unreceived":          # a large send (rendezvous: completes only once received) to the leaver
        if comm.rank == 0:
            comm.send(np.ones(1 << 20, np.float32), leaver)
            time.sleep(0.5)
            res["wait"] = attempt(comm.wait_sends)
        elif comm.rank == leaver:
            return
    elif mode == "large":               # a large send (rendezvous) the peer receives after the leaver ended
        if comm.rank == leaver:
            comm.send(np.arange(LARGE, dtype=np.float32) * 3, 0)
            return                      # no wait_sends(): atexit, then MPI_Finalize with the send posted
        end = time.monotonic() + 20
        while leaver not in comm.waiter.departed and time.monotonic() < end:
            comm.waiter.check_notices()
            time.sleep(0.01)
        time.sleep(0.5)                 # the leaver is in (or past) its MPI_Finalize now
        got = np.zeros(LARGE, np.float32)
        res["sent"] = attempt(lambda: comm.recv(got, leaver))
        res["wrong"] = int(np.count_nonzero(got != np.arange(LARGE, dtype=np.float32) * 3))
        res["never"] = attempt(lambda: comm.recv(got[:64], leaver))
    elif mode == "large_dropped":       # the same through a communicator the leaver drops (collected) first
        other = MPICommunicator.from_mpi(plan=False, abort_on_error=False)
        if comm.rank == leaver:
            other.send(np.arange(LARGE, dtype=np.float32) * 3, 0)
            del other
            gc.collect()
            junk = [np.full(LARGE, 7.0, np.float32) for _ in range(4)]   # memory a freed buffer would hand out
            time.sleep(1.0)
            del junk
            return
        end = time.monotonic() + 20
        while leaver not in other.waiter.departed and time.monotonic() < end:
            other.waiter.check_notices()
            time.sleep(0.01)
        got = np.zeros(LARGE, np.float32)
        res["sent"] = attempt(lambda: other.recv(got, leaver))
        res["wrong"] = int(np.count_nonzero(got != np.arange(LARGE, dtype=np.float32) * 3))
    elif mode == "dropped":             # a communicator with the default abort hook, dropped by one rank
        other = MPICommunicator.from_mpi(plan=False)
        if comm.rank == leaver:
            del other
            gc.collect()
            time.sleep(5.0)             # still running (and not leaving at exit) while the peers call
        else:
            time.sleep(0.5)
            res["collected"] = attempt(lambda: other.all_reduce(x, np.empty_like(x)))
    elif mode == "close":
        other = MPICommunicator.from_mpi(plan=False, abort_on_error=False)
        if comm.rank == leaver:
            comm.close()
            res["own"] = attempt(lambda: comm.all_reduce(x, np.empty_like(x)))
            del other                   # garbage: collected, so it leaves too
            gc.collect()
            time.sleep(3.0)             # still running while the peers call
        else:
            time.sleep(0.5)
            res["next"] = attempt(lambda: comm.all_reduce(x, np.empty_like(x)))
            res["collected"] = attempt(lambda: other.all_reduce(x, np.empty_like(x)))
    Path(out, f"rank{comm.rank}.json").write_text(json.dumps(res))


def _run(n: int, mode: str, tmp_path, monkeypatch) -> dict:
    monkeypatch.setenv("TOPOCOLL_MPI_TIMEOUT", DEADLINE_S)
    t0 = time.monotonic()
    proc = run_mpi(n, [str(Path(__file__).resolve()), mode, str(tmp_path)], timeout=240)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, f"mpirun failed (rc {proc.returncode}): {proc.stderr[-3000:]}"
    got = {int(p.stem[4:]): json.loads(p.read_text()) for p in tmp_path.glob("rank*.json")}
    return {"ranks": got, "wall": wall}


@pytest.mark.parametrize("n, how", [(2, "exit"), (4, "exit"), (2, "finalize")])
def test_a_rank_that_ends_its_script_after_call_k_fails_the_peers_call_k_plus_1_at_once(n, how, tmp_path,
                                                                                          monkeypatch):
    run = _run(n, how, tmp_path, monkeypatch)
    assert sorted(run["ranks"]) == list(range(n - 1)), run   # every peer reports
    for r, got in run["ranks"].items():
        nxt = got["next"]
        assert nxt["raised"] == "PeerFailed" and nxt["rank"] == n - 1, (r, nxt)
        assert f"call {CALLS + 1}: stopping because rank {n - 1} left after its call {CALLS}" in nxt["message"]
        assert nxt["seconds"] < 2.0, (r, nxt)            # the deadline is 30 s
        assert got["after"]["raised"] == "PeerFailed" and "closed after call" in got["after"]["message"], got
    assert run["wall"] < 30, run["wall"]                  # the job did not wait for the deadline either


def test_a_rank_that_left_during_a_call_fails_the_peers_call_at_once(tmp_path, monkeypatch):
    # its allgather_object agreed, then raised TypeError before sending: it did not finish call 4
    got = _run(2, "midcall", tmp_path, monkeypatch)["ranks"][0]["next"]
    assert got["raised"] == "PeerFailed" and got["rank"] == 1 and got["seconds"] < 2.0, got
    assert f"call {CALLS + 1}: stopping because rank 1 left after its call {CALLS} (" in got["message"], got


@pytest.mark.parametrize("n", [2, 4])
def test_a_rank_that_finished_the_same_calls_and_ends_first_fails_nobody(n, tmp_path, monkeypatch):
    run = _run(n, "finish", tmp_path, monkeypatch)
    assert sorted(run["ranks"]) == list(range(n - 1)), run
    for r, got in run["ranks"].items():
        assert got["read"]["raised"] is None, (r, got)
        # its notice was read and says call 3 (so do those of survivors that ended already)
        assert got["departed"][str(n - 1)] == CALLS and set(got["departed"].values()) == {CALLS}, (r, got)


def test_a_receive_gets_what_a_rank_sent_before_it_left_and_then_fails_at_once(tmp_path, monkeypatch):
    got = _run(2, "p2p", tmp_path, monkeypatch)["ranks"][0]
    assert got["sent"]["raised"] is None and got["value"] == (np.arange(64) + 1.0).tolist(), got
    never = got["never"]
    assert never["raised"] == "PeerFailed" and never["rank"] == 1 and never["seconds"] < 2.5, never
    assert "recv from rank 1: rank 1 left (closed its communicator or ended) without sending it" in never["message"]


def test_waiting_for_a_send_a_rank_that_left_never_received_fails_at_once(tmp_path, monkeypatch):
    got = _run(2, "unreceived", tmp_path, monkeypatch)["ranks"][0]["wait"]
    assert got["raised"] == "PeerFailed" and got["rank"] == 1 and got["seconds"] < 2.5, got
    assert "send to rank 1: rank 1 left (closed its communicator or ended) without receiving it" in got["message"]


def test_a_large_send_received_after_its_sender_ended_arrives_and_the_sender_exits_cleanly(tmp_path, monkeypatch):
    # before: the leaver's MPI_Finalize progressed the rendezvous from the freed buffer: SIGSEGV, mpirun rc 139
    got = _run(2, "large", tmp_path, monkeypatch)["ranks"][0]     # _run asserts mpirun's rc 0
    assert got["sent"]["raised"] is None and got["wrong"] == 0, got
    never = got["never"]
    assert never["raised"] == "PeerFailed" and never["rank"] == 1 and never["seconds"] < 2.5, never


def test_a_large_send_of_a_dropped_communicator_still_arrives_whole(tmp_path, monkeypatch):
    # its posted sends must outlive the communicator: MPI reads the buffer when the peer receives
    got = _run(2, "large_dropped", tmp_path, monkeypatch)["ranks"][0]
    assert got["sent"]["raised"] is None and got["wrong"] == 0, got


def test_a_dropped_communicator_leaves_with_the_default_abort_hook(tmp_path, monkeypatch):
    # before: the abort hook held the communicator, so the peer only learnt at the leaver's exit (~4.5 s later)
    got = _run(2, "dropped", tmp_path, monkeypatch)["ranks"][0]["collected"]
    assert got["raised"] == "PeerFailed" and got["rank"] == 1 and got["seconds"] < 2.0, got
    assert "call 1: stopping because rank 1 left after its call 0" in got["message"], got


def test_close_and_collection_leave_too(tmp_path, monkeypatch):
    run = _run(2, "close", tmp_path, monkeypatch)
    peer, leaver = run["ranks"][0], run["ranks"][1]
    assert leaver["own"]["raised"] == "InvalidArgument" and "closed after call 3" in leaver["own"]["message"], leaver
    for got in (peer["next"], peer["collected"]):
        assert got["raised"] == "PeerFailed" and got["rank"] == 1 and got["seconds"] < 2.0, got
    assert f"call {CALLS + 1}: stopping because rank 1 left after its call {CALLS}" in peer["next"]["message"]
    assert "call 1: stopping because rank 1 left after its call 0" in peer["collected"]["message"]


def test_the_abandoned_requests_are_kept_past_exit_once_per_process():
    """Every communicator's watch keeps the one list of abandoned requests (kernels.mpi.transport) past the
    interpreter's teardown: one reference more in a fresh process (CPython), however many communicators."""
    import os
    import subprocess
    code = ("import sys; from kernels.mpi import leaving, transport as mt; r = sys.getrefcount(mt._ABANDONED); "
            "[leaving.keep_abandoned_past_exit() for _ in range(3)]; print(sys.getrefcount(mt._ABANDONED) - r)")
    root = Path(__file__).resolve().parents[3]
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert res.returncode == 0 and res.stdout.split() == ["1"], res.stderr


if __name__ == "__main__" and len(sys.argv) > 2:
    worker(sys.argv[1], sys.argv[2])
