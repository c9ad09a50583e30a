"""MPICommunicator when one rank of ``mpirun -n 2`` misbehaves (rank 1 is the odd one out): every
rank gets an error at once, never only some ranks, never a silent wrong answer, and the
communicator is either still usable (the next call is right) or clearly closed.

Each scenario failed before its fix (mpi67 audit): a read-only output on one rank raised a bare
``ValueError`` / ``BufferError`` there while the other rank returned; a barrier against a
collective hung until the timeout and then desynchronised the next calls; compressed all-reduces
with another format or op returned garbage on both ranks; ``count=True`` ran as 1 and
``count=4.0`` raised a ``TypeError`` about slices; a list among ``fused_all_reduce``'s tensors
raised an ``AttributeError`` on that rank while the others waited for the timeout; a replayed
call wrote into an output made read-only since; and a rank that joined a call its peer had
given up on (timeout) returned success while the peer raised, then both carried on.  Review fixes:
that late rank's PeerFailed named the rank that timed out, not the one it blamed; a receive's
timeout told no peer and left the communicator open; send, recv and wait_sends ran on a closed
communicator.  (A receive of another type: test_agreement.py.)

One ``mpirun -n 2`` runs every scenario (this file is the worker)."""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from _mpi import attempt, worker_results

#: timeout of the communicator the late-rank scenario uses (seconds)
SHORT_S = 2.0
#: timeout of rank 1 in the receive scenario: it hears of rank 0's timeout long before its own
LONG_S = 8.0


def _scenarios(comm) -> dict:
    r, n, odd = comm.rank, comm.size, comm.rank == 1
    x = np.arange(8, dtype=np.float32) + r

    def ro(a, readonly):
        a.flags.writeable = not readonly
        return a

    def replayed_then_readonly():
        o = np.empty(8, np.float32)
        for _ in range(3):          # the call is replayed from the third time on (kernels.mpi.replay)
            comm.all_reduce(x, o)
        comm.all_reduce(x, ro(o, odd))

    return {
        "replayed-readonly": replayed_then_readonly,
        "fused-list": lambda: comm.fused_all_reduce([x.copy(), [1.0, 2.0] if odd else x[:2].copy()]),
        "readonly-out": lambda: comm.all_reduce(x, ro(np.empty(8, np.float32), odd)),
        "readonly-broadcast": lambda: comm.broadcast(ro(x.copy(), odd), root=0),
        "readonly-reduce-root": lambda: comm.reduce(x, ro(np.empty(8, np.float32), r == 0), root=0),
        "barrier-vs-allreduce": lambda: comm.barrier() if odd else comm.all_reduce(x, np.empty(8, np.float32)),
        "object-vs-allreduce": lambda: (comm.allgather_object({"a": 1}) if odd
                                        else comm.all_reduce(x, np.empty(8, np.float32))),
        "compression": lambda: comm.compressed_all_reduce(x, np.empty(8, np.float32),
                                                          compression="fp16" if odd else "bf16"),
        "compressed-op": lambda: comm.compressed_all_reduce(x, np.empty(8, np.float32), op="avg" if odd else "sum"),
        "compressed-list": lambda: comm.compressed_all_reduce(x.tolist() if odd else x, np.empty(8, np.float32)),
        "count-bool": lambda: comm.all_gather(x, np.empty(8 * n, np.float32), count=True if odd else 1),
        "count-float": lambda: comm.reduce_scatter(np.tile(x, n), np.empty(8, np.float32),
                                                   count=4.0 if odd else 4),
    }


def _late_rank(MPICommunicator) -> dict:
    """Rank 1 joins a call after rank 0 gave up on it (timeout), then both call again."""
    comm = MPICommunicator.from_mpi(plan=False, timeout_s=SHORT_S, abort_on_error=False)
    x = np.full(4, comm.rank + 1, np.float32)
    if comm.rank == 1:
        time.sleep(SHORT_S + 2.5)
    got = {"late": attempt(lambda: comm.all_reduce(x, np.empty(4, np.float32)))}
    got["next"] = attempt(lambda: comm.all_reduce(x, np.empty(4, np.float32)))
    peer = 1 - comm.rank   # point to point on the closed communicator: refused too, not exchanged
    got["p2p"] = [attempt(lambda: comm.send(x, peer)), attempt(lambda: comm.recv(np.empty(4, np.float32), peer)),
                  attempt(comm.wait_sends)]
    return got


def _recv_timeout(MPICommunicator) -> dict:
    """Both ranks receive from each other, nothing is sent: rank 0 (deadline SHORT_S) gives up first,
    rank 1 (deadline LONG_S) must hear of it rather than wait for its own; then both call again."""
    comm = MPICommunicator.from_mpi(plan=False, timeout_s=SHORT_S if comm_rank() == 0 else LONG_S,
                                    abort_on_error=False)
    got = {"recv": attempt(lambda: comm.recv(np.empty(4, np.float32), 1 - comm.rank))}
    got["next"] = attempt(lambda: comm.all_reduce(np.ones(4, np.float32), np.empty(4, np.float32)))
    return got


def comm_rank() -> int:
    from mpi4py import MPI
    return MPI.COMM_WORLD.Get_rank()


def worker(out_path: str) -> None:
    from kernels.mpi.communicator import MPICommunicator
    warnings.simplefilter("ignore")
    comm = MPICommunicator.from_mpi(plan=False, timeout_s=8, abort_on_error=False)
    res = {}
    for name, fn in _scenarios(comm).items():
        got = attempt(fn)
        after = np.empty(4, np.float32)   # every rank the same call: the communicator still works
        got["after"] = attempt(lambda: comm.all_reduce(np.full(4, comm.rank + 1, np.float32), after))
        got["after"]["value"] = after.tolist()
        res[name] = got
    res["late-rank"] = _late_rank(MPICommunicator)
    res["recv-timeout"] = _recv_timeout(MPICommunicator)
    every = comm.allgather_object(res)
    if comm.rank == 0:
        Path(out_path).write_text(json.dumps(every))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return worker_results(2, Path(__file__).resolve(), tmp_path_factory.mktemp("hostile") / "res.json")


#: scenario -> (rank that refuses its own call, its error type, words its message must hold)
OWN_ERRORS = {"readonly-out": (1, "BufferLayoutError", "rank 1's recvbuf is read-only"),
              "readonly-broadcast": (1, "BufferLayoutError", "rank 1's recvbuf is read-only"),
              "readonly-reduce-root": (0, "BufferLayoutError", "rank 0's recvbuf is read-only"),
              "compressed-list": (1, "BufferLayoutError", "rank 1: got a list"),
              "fused-list": (1, "BufferLayoutError", "fused_all_reduce: tensors[1]: rank 1: got a list"),
              "replayed-readonly": (1, "BufferLayoutError", "rank 1's recvbuf is read-only"),
              "count-bool": (1, "InvalidArgument", "count must be an integer >= 0, got True"),
              "count-float": (1, "InvalidArgument", "count must be an integer >= 0, got 4.0")}
#: scenario -> words of the ProcessGroupMismatch every rank raises
MISMATCHES = {"barrier-vs-allreduce": "collective: ranks [0] 'allreduce', ranks [1] 'barrier'",
              "object-vs-allreduce": "collective: ranks [0] 'allreduce', ranks [1] 'allgather_object'",
              "compression": "schedule: ranks [0] 'bf16",
              "compressed-op": "op: ranks [0] 'sum', ranks [1] 'avg'"}


@pytest.mark.parametrize("scenario", sorted(OWN_ERRORS) + sorted(MISMATCHES))
def test_every_rank_stops_at_once_in_one_line_and_the_next_call_works(results, scenario):
    for r, res in enumerate(results):
        got = res[scenario]
        if scenario in OWN_ERRORS and r == OWN_ERRORS[scenario][0]:
            _, kind, words = OWN_ERRORS[scenario]
            assert got["raised"] == kind and words in got["message"], (r, got)
        else:
            assert got["raised"] == "ProcessGroupMismatch", (r, got)
            want = MISMATCHES.get(scenario) or f"rank {OWN_ERRORS[scenario][0]} could not start it"
            assert want in got["message"], (r, got["message"])
        assert "\n" not in got["message"] and got["seconds"] < 5, (r, got)
        assert got["after"]["raised"] is None and got["after"]["value"] == [3.0] * 4, (r, got)


def test_a_rank_that_joins_a_call_its_peer_gave_up_on_fails_too_and_the_communicator_is_closed(results):
    early, late = results[0]["late-rank"], results[1]["late-rank"]
    assert early["late"]["raised"] == "PeerFailed" and "no progress" in early["late"]["message"], early
    assert late["late"]["raised"] == "PeerFailed", late             # not a success beside rank 0's error
    assert "rank 0 timed out" in late["late"]["message"] and late["late"]["seconds"] < 1, late
    assert early["late"]["rank"] == late["late"]["rank"] == 1, (early, late)   # rank 1 was silent: not rank 0
    for got in (early["next"], late["next"], *early["p2p"], *late["p2p"]):    # closed, not desynchronised
        assert got["raised"] == "PeerFailed" and "closed" in got["message"] and got["seconds"] < 1, got



def test_a_rank_whose_receive_times_out_tells_its_peers_and_closes_the_communicator(results):
    early, late = results[0]["recv-timeout"], results[1]["recv-timeout"]
    assert late["recv"]["raised"] == "PeerFailed", late        # not its own deadline (LONG_S)
    assert late["recv"]["seconds"] < SHORT_S + 1 < LONG_S, late  # rank 0's deadline, a ping rank 1 answers, the notice
    assert "stopping because rank 0 timed out" in late["recv"]["message"], late
    assert early["recv"]["raised"] == "PeerFailed", early
    assert "recv from rank 1: no progress for 2 s" in early["recv"]["message"], early
    assert early["recv"]["rank"] == late["recv"]["rank"] == 1, (early, late)
    for got in (early["next"], late["next"]):
        assert got["raised"] == "PeerFailed" and "closed" in got["message"] and got["seconds"] < 1, got


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "worker":
    worker(sys.argv[2])
