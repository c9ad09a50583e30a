"""kernels.mpi.transport: rank plans, the fake-device wire, and failure behaviour under mpirun
(a rank that raises, hangs or dies stops the job within a bounded time, naming the rank; a
start-up mismatch is the same clear error on every rank)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from kernels.backends.executor import program_for
from kernels.mpi.startup import compare_descriptors, plan_digest
from kernels.mpi.transport import HostWire, rank_plan, transfer_tags
from kernels.mpi.wires import DeviceWire, query_cuda_aware
from synth.baselines import baseline
from synth.ir.fabric import build_fabric
from topo_probe.errors import ProcessGroupMismatch, UnsupportedCollective
from topo_probe.machines.generators import fully_connected

from _mpi import run_mpi


# ---------------------------------------------------------------------- in-process unit tests
@pytest.mark.parametrize("coll,n,chunks", [("allreduce", 4, 2), ("alltoall", 3, 1), ("gather", 4, 1)])
def test_rank_plans_pair_every_send_with_one_receive(coll, n, chunks):
    """Across ranks, the (src, dst, tag) triples of sends and receives are the same set, tags
    are unique per pair, and every op of the program lands on exactly one rank as receive/local."""
    sched = baseline("ring" if coll != "gather" else "direct", build_fabric(fully_connected(n)), coll,
                     chunks=chunks if coll == "allreduce" else None, root=0 if coll == "gather" else None)
    prog = program_for(sched, 101, "float32")
    plans = [rank_plan(sched, prog, r) for r in range(n)]
    sends = sorted((r, peer, tag) for r, p in enumerate(plans) for (_, tag, peer, _) in p.sends)
    recvs = sorted((peer, r, tag) for r, p in enumerate(plans) for (_, tag, peer, _) in p.recvs)
    assert sends == recvs and len(set(sends)) == len(sends)
    remote = sum(1 for o in prog.ops() if o.remote)
    assert len(sends) == remote
    written = sorted(o.id for p in plans for o, *_ in p.recvs + p.local)
    assert written == sorted(o.id for o in prog.ops())
    for p in plans:  # dependencies only name this rank's ops
        mine = {o.id for o, *_ in p.sends + p.recvs + p.local}
        assert all(d <= mine for *_, d in p.sends + p.recvs) and all(d <= mine for _, d in p.local)


def test_transfer_tags_count_transfers_and_respect_the_tag_bound():
    sched = baseline("ring", build_fabric(fully_connected(4)), "allgather")
    tags = transfer_tags(sched)
    assert tags[0] == 16 and all(b - a == len(s.transfers) for a, b, s in zip(tags, tags[1:], sched.steps))
    with pytest.raises(UnsupportedCollective, match="tag bound"):
        rank_plan(sched, program_for(sched, 8, "int32"), 0, tag_ub=20)


def _fake_wire(aware: bool) -> tuple[DeviceWire, list]:
    log: list = []
    wire = DeviceWire(np, cuda_aware=aware, pinned_empty=lambda n, dt: log.append(("pin", n)) or np.empty(n, dt),
                      to_host=lambda h, d: log.append("d2h") or np.copyto(h, d),
                      to_device=lambda d, h: log.append("h2d") or np.copyto(d, h),
                      synchronize=lambda: log.append("sync"))
    return wire, log


def test_staged_wire_copies_through_pinned_host_buffers_and_syncs_before_sending():
    wire, log = _fake_wire(False)
    dev = np.arange(6, dtype=np.float32)
    out = wire.send_buffer(dev[2:5])
    assert log == [("pin", 12), "d2h", "sync"] and out.dtype == np.uint8   # 3 float32 = 12 bytes
    assert np.array_equal(out.view(np.float32), [2, 3, 4])
    target = np.zeros(3, np.float32)
    buf, fin = wire.recv_buffer(3, np.float32, into=target)
    buf.view(np.float32)[:] = [7, 8, 9]          # what MPI would write into the pinned buffer
    assert not target.any()                      # nothing reaches the device before finish()
    assert fin() is target and target.tolist() == [7, 8, 9] and log[-1] == "h2d"
    assert wire.staged == {"to_host": 1, "to_device": 1}


def test_cuda_aware_wire_hands_device_memory_to_mpi():
    wire, log = _fake_wire(True)
    dev = np.arange(4, dtype=np.int32)
    assert np.shares_memory(wire.send_buffer(dev), dev) and log == ["sync"]
    buf, fin = wire.recv_buffer(4, np.int32, into=dev)
    assert np.shares_memory(buf, dev) and fin() is dev and wire.staged == {"to_host": 0, "to_device": 0}


@pytest.mark.parametrize("op,a,b,want", [("sum", [1, 2], [3, 4], [4, 6]), ("avg", [1, 2], [3, 4], [4, 6]),
                                         ("prod", [2, 3], [4, 5], [8, 15]), ("max", [1, 9], [5, 2], [5, 9]),
                                         ("min", [1, 9], [5, 2], [1, 2])])
def test_host_wire_combines_like_numpy(op, a, b, want):
    dst = np.zeros(2, np.int64)
    HostWire().combine(dst, np.array(a), np.array(b), op)
    assert dst.tolist() == want


def test_postdiv_truncates_integers_toward_zero_and_divides_floats():
    x = np.array([7, -7, 6], np.int32)
    HostWire().postdiv(x, 2)
    f = np.array([1.0, 3.0], np.float32)
    HostWire().postdiv(f, 4)
    assert x.tolist() == [3, -3, 3] and f.tolist() == [0.25, 0.75]


class _FakeRequest:
    """An MPI request over ``buf``: posted (``active``) until MPI is done with it; persistent
    ones start inactive and are posted by ``Start``."""

    def __init__(self, buf, recv: bool, active: bool):
        self.buf, self.recv, self.active, self.cancelled, self.starts = buf, recv, active, False, 0

    def Start(self):
        assert not self.active, "a posted request started again"
        self.active, self.starts = True, self.starts + 1

    def Cancel(self):
        self.cancelled = True

    def Test(self):
        return not self.active or self.cancelled


class _FakeComm:
    """Records what it posts (``posted``: Isend/Irecv) and makes (``made``: Send_init/Recv_init)."""

    def __init__(self):
        self.posted, self.made = [], []

    def _request(self, into, msg, is_recv, active):
        into.append(_FakeRequest(msg[0], is_recv, active))
        return into[-1]

    def Isend(self, msg, dest, tag):
        return self._request(self.posted, msg, False, True)

    def Irecv(self, msg, source, tag):
        return self._request(self.posted, msg, True, True)

    def Send_init(self, msg, dest, tag):
        return self._request(self.made, msg, False, False)

    def Recv_init(self, msg, source, tag):
        return self._request(self.made, msg, True, False)


class _FailingWaiter:
    def some(self, reqs, what, peers):
        from topo_probe.errors import PeerFailed
        raise PeerFailed("rank 1 failed", rank=1)


def test_a_call_that_stops_keeps_every_posted_buffer_alive_and_cancels_its_receives(monkeypatch):
    """A peer failure (or Ctrl-C) in the middle of a collective: the receives still posted are
    cancelled and every posted request (holding its buffer) is kept until MPI is done with it,
    so no memory MPI may still write is freed or reused (before: the requests were dropped and
    their arena blocks freed -> heap corruption)."""
    import gc
    import weakref

    from kernels.mpi import transport as mt
    from topo_probe.errors import PeerFailed

    monkeypatch.setattr(mt, "_byte", lambda: None, raising=False)
    monkeypatch.setattr("kernels.mpi.wires._byte", lambda: None)
    monkeypatch.setattr(mt, "_ABANDONED", [])
    sched = baseline("ring", build_fabric(fully_connected(3)), "allreduce")
    prog = program_for(sched, 300, "float32")
    plan = rank_plan(sched, prog, 0)
    wire, comm = HostWire(), _FakeComm()
    bufs = {"input": np.ones(300, np.float32), "output": np.zeros(300, np.float32)}
    if "scratch" in prog.sizes[0]:
        bufs["scratch"] = wire.empty(prog.sizes[0]["scratch"], np.float32)
    with pytest.raises(PeerFailed):
        mt.execute(plan, bufs, wire, comm, _FailingWaiter(), op="sum", nranks=3)
    assert comm.posted and mt._ABANDONED == comm.posted  # every posted request is kept
    assert all(r.cancelled == r.recv for r in comm.posted)  # receives cancelled, sends not
    alive = [weakref.ref(r.buf.base if r.buf.base is not None else r.buf) for r in comm.posted]
    wire.arena = None
    del bufs
    gc.collect()
    assert all(ref() is not None for ref in alive)  # their memory is still there
    for r in comm.posted:
        r.active = False            # MPI is done with it
    assert mt.keep_abandoned() == 0 and mt._ABANDONED == []


class _Posted:
    """A request; ``done`` once MPI finished it.  Its first ``Test`` runs ``meanwhile`` (as the
    garbage collector may, mid-call: a dropped communicator's departure)."""

    def __init__(self, done=False, meanwhile=None):
        self.done, self.meanwhile = done, meanwhile

    def Test(self):
        run, self.meanwhile = self.meanwhile, None
        if run is not None:
            run()
        return self.done


def test_requests_abandoned_while_the_kept_ones_are_tested_are_kept_too(monkeypatch):
    """mpi69r: a communicator collected while keep_abandoned tests the kept requests moves its
    posted sends in and prunes the list itself (kernels.mpi.leaving.notify_departure: abandon,
    then keep_abandoned); before, the outer pass, reading a list shifted under it, skipped a
    posted request and wrote back a list without it (MPI then reads a freed buffer)."""
    from kernels.mpi import transport as mt

    monkeypatch.setattr(mt, "_ABANDONED", [])
    late = [_Posted(), _Posted()]

    def collected():
        mt.abandon(late, [False, False])
        mt.keep_abandoned()

    finished, busy = _Posted(done=True), _Posted(meanwhile=collected)
    posted = _Posted()
    mt.abandon([finished, busy, posted], [False] * 3)
    mt.keep_abandoned()
    kept = {id(r) for r in mt._ABANDONED}
    assert kept == {id(r) for r in (busy, posted, *late)}, [r for r in (busy, posted, *late) if id(r) not in kept]
    assert len(mt._ABANDONED) == 4


def test_a_bound_call_that_stops_keeps_what_it_started_and_its_binding_is_dropped(monkeypatch):
    """The same on persistent requests (kernels.mpi.persistent): the requests a bound call started
    and MPI has not finished are kept (receives cancelled), the ones it never started are not
    touched, and the runner forgets the binding so a request still posted is never started again."""
    import kernels.mpi.persistent as kp
    from kernels.mpi import transport as mt
    from topo_probe.errors import PeerFailed

    class FakeMPI:
        class Prequest:
            @staticmethod
            def Startall(reqs):
                for r in reqs:
                    r.Start()

        class Request:
            @staticmethod
            def Testsome(reqs):
                return None

    monkeypatch.setattr(kp, "_MPI", [FakeMPI])
    monkeypatch.setattr(kp, "_byte", lambda: None)
    monkeypatch.setattr("kernels.mpi.wires._byte", lambda: None)
    monkeypatch.setattr(mt, "_ABANDONED", [])
    sched = baseline("ring", build_fabric(fully_connected(3)), "allreduce")
    prog = program_for(sched, 300, "float32")
    plan = rank_plan(sched, prog, 0)
    bufs = {"input": np.ones(300, np.float32), "output": np.zeros(300, np.float32)}
    runner, comm = kp.PlanRunner(), _FakeComm()
    for _ in range(2):              # the first call runs unbound, the second binds
        with pytest.raises(PeerFailed):
            runner.execute(plan, bufs, HostWire(), comm, _FailingWaiter(), op="sum", nranks=3)
    assert runner.bound_calls == 1 and not runner._bound and not runner._by_id
    started = [r for r in comm.made if r.starts]
    assert started and len(started) < len(comm.made)          # a ring starts only its first step at once
    kept = [r for r in mt._ABANDONED if r in comm.made]
    assert kept == started and all(r.cancelled == r.recv for r in kept)


class _Req:
    def __init__(self, what):
        self.what = what

    def Cancel(self):
        pass

    def Test(self):
        return True


class _Comm:
    def __init__(self, log):
        self.log = log

    def Isend(self, msg, dest, tag):
        self.log.append(f"send {dest}")
        return _Req("send")

    def Irecv(self, msg, source, tag):
        self.log.append(f"recv {source}")
        return _Req("recv")


class _Gate:
    """A CallGate stand-in: a header receive and send per peer; ``bad`` names the peer whose
    header differs."""

    def __init__(self, peers, log, bad=None):
        self.peers, self.log, self.bad = peers, log, bad
        self.recvs = [_Req("header") for _ in peers]
        self.sends = [_Req("header-send") for _ in peers]
        self.left, self.mismatch = len(peers), False

    def arrived(self, k):
        self.left -= 1
        self.log.append(f"header {self.peers[k]}")
        self.mismatch |= self.peers[k] == self.bad

    def wait(self):
        for k in range(len(self.peers)):
            self.arrived(k)
        if self.mismatch:
            self.fail()

    def fail(self):
        self.log.append("fail")
        raise ProcessGroupMismatch("call 1: ranks disagree")


class _AgreementLast:   # data requests complete first, the agreement last (slow peers)
    """Like MPI's Testsome: a request reported complete is never reported again."""

    def __init__(self):
        self.done: set = set()

    def some(self, reqs, what, peers):
        live = [k for k in range(len(reqs)) if k not in self.done]
        data = [k for k in live if reqs[k].what != "header"]
        out = data or [max(k for k in live)]     # then the headers, last peer first
        self.done.update(out)
        return out

    def all(self, reqs, what, peers):
        assert all(r.what != "header" for r in reqs)   # header receives are never deferred


def _run_gated(coll, rank, bad=None, tag_ub=2**31 - 1, log=None):
    from kernels.mpi import transport as mt
    sched = baseline("direct", build_fabric(fully_connected(3)), coll, root=0 if coll == "broadcast" else None)
    prog = program_for(sched, 30, "float32")
    plan = rank_plan(sched, prog, rank, tag_ub=tag_ub, digest=12345)
    log = [] if log is None else log
    wire = HostWire()
    bufs = {"input": np.ones(30, np.float32), "output": np.zeros(30, np.float32)}
    if "scratch" in prog.sizes[rank]:
        bufs["scratch"] = wire.empty(prog.sizes[rank]["scratch"], np.float32)
    peers = [p for p in range(3) if p != rank]
    mt.execute(plan, bufs, wire, _Comm(log), _AgreementLast(), op="sum", nranks=3, gate=_Gate(peers, log, bad))
    return plan, log


def test_salted_receives_go_before_the_headers_and_unsalted_ones_wait_for_them(monkeypatch):
    """With the call's digest in the tags, data flows at once and every peer's header is awaited
    before the call returns (also on a rank that only sends: a broadcast root); with tags too
    short for it (the MPI standard's minimum bound 32767), nothing is posted before them."""
    monkeypatch.setattr("kernels.mpi.wires._byte", lambda: None)
    plan, log = _run_gated("allreduce", 1)
    assert plan.salted and log.index("recv 0") < log.index("header 0") and log.index("recv 2") < log.index("header 2")
    assert sorted(log[-2:]) == ["header 0", "header 2"]
    plan, log = _run_gated("broadcast", 0)
    assert plan.salted and sorted(log[:2]) == ["send 1", "send 2"] and sorted(log[2:]) == ["header 1", "header 2"]
    plan, log = _run_gated("allreduce", 1, tag_ub=32767)
    assert not plan.salted and sorted(log[:2]) == ["header 0", "header 2"] and len(log) > 2


@pytest.mark.parametrize("coll,rank,bad", [("broadcast", 0, 1), ("broadcast", 0, 2), ("allreduce", 1, 2),
                                           ("allreduce", 1, 0)])
def test_an_odd_header_fails_the_call_even_when_it_comes_last(monkeypatch, coll, rank, bad):
    """The odd header may be the last event of a call whose data is all done (a broadcast
    root): the call must still raise, not return (the other ranks raise too), and only once
    every header is in (the common error needs every rank)."""
    monkeypatch.setattr("kernels.mpi.wires._byte", lambda: None)
    monkeypatch.setattr("kernels.mpi.transport._ABANDONED", [])
    log: list = []
    with pytest.raises(ProcessGroupMismatch):
        _run_gated(coll, rank, bad=bad, log=log)
    assert log[-1] == "fail" and sorted(x for x in log if x.startswith("header")) == \
        [f"header {p}" for p in range(3) if p != rank]


def test_salted_tags_separate_calls_with_other_digests_and_stay_in_bounds():
    """Tags of one call's plan carry the digest's low bits above the transfer index: another
    digest gives disjoint tags on every rank, the same digest the same tags, every tag within
    the bound; a bound with no room leaves the plain transfer tags."""
    sched = baseline("ring", build_fabric(fully_connected(4)), "allreduce", chunks=2)
    prog = program_for(sched, 64, "float32")

    def tags(rank, digest, ub=2**31 - 1):
        p = rank_plan(sched, prog, rank, tag_ub=ub, digest=digest)
        return p, {t for _, t, _, _ in p.sends + p.recvs}

    for r in range(4):
        pa, a = tags(r, 0x1234_5678_9ABC)
        pb, b = tags(r, 0x1234_5678_9ABD)
        assert pa.salted and pb.salted and not a & b
        assert tags(r, 0x1234_5678_9ABC)[1] == a
        assert max(a | b) <= 2**31 - 1 and min(a | b) >= 16
        plain = {t for _, t, _, _ in rank_plan(sched, prog, r).sends + rank_plan(sched, prog, r).recvs}
        p_small, small = tags(r, 0x1234_5678_9ABC, ub=32767)
        assert not p_small.salted and small == plain
    # the sends of rank r and receives of its peers still pair up under one digest
    plans = [rank_plan(sched, prog, r, tag_ub=2**31 - 1, digest=99) for r in range(4)]
    sends = sorted((r, peer, tag) for r, p in enumerate(plans) for (_, tag, peer, _) in p.sends)
    recvs = sorted((peer, r, tag) for r, p in enumerate(plans) for (_, tag, peer, _) in p.recvs)
    assert sends == recvs


def test_cuda_awareness_env_override(monkeypatch):
    monkeypatch.setenv("TOPOCOLL_MPI_CUDA_AWARE", "1")
    assert query_cuda_aware() is True
    monkeypatch.setenv("TOPOCOLL_MPI_CUDA_AWARE", "0")
    assert query_cuda_aware() is False


def test_descriptor_mismatch_names_fields_and_ranks():
    base = {"ranks": 3, "fingerprint": "aa", "plan": "none"}
    with pytest.raises(ProcessGroupMismatch) as err:
        compare_descriptors([base, dict(base, plan="12ab"), dict(base, fingerprint="bb")])
    msg = str(err.value)
    assert "fingerprint: ranks [0, 1] 'aa', ranks [2] 'bb'" in msg
    assert "plan: ranks [0, 2] 'none', ranks [1] '12ab'" in msg
    compare_descriptors([base, dict(base)])
    assert plan_digest(None) == "none"


# ---------------------------------------------------------------------- failures under mpirun
def worker(mode: str, culprit: int) -> None:
    import warnings

    from kernels.mpi.communicator import MPICommunicator
    from topo_probe.errors import ProcessGroupMismatch as Mismatch
    warnings.simplefilter("ignore")
    from mpi4py import MPI
    r = MPI.COMM_WORLD.Get_rank()
    n = MPI.COMM_WORLD.Get_size()
    if mode == "mismatch":
        topo = fully_connected(n, bandwidth_gbps=50.0 if r == culprit else 25.0)
        try:
            MPICommunicator.from_mpi(topology=topo, plan=False, timeout_s=20, abort_on_error=False)
        except Mismatch as e:
            print(f"MISMATCH {e}", flush=True)
        return
    comm = MPICommunicator.from_mpi(plan=False, timeout_s=3)
    x = np.ones(1 << 12, np.float32)
    for it in range(40):
        if it == 3 and r == culprit:
            if mode == "raise":
                raise RuntimeError("boom in the training step")
            if mode == "hang":
                time.sleep(120)
            if mode == "die":
                os._exit(7)
        comm.all_reduce(x, x)
        x[:] = 1
    print(f"rank {r} finished", flush=True)


@pytest.mark.parametrize("mode,n", [("raise", 3), ("hang", 3), ("die", 2)])
def test_a_failing_rank_stops_every_rank_in_bounded_time(mode, n):
    t0 = time.monotonic()
    proc = run_mpi(n, [str(Path(__file__).resolve()), "worker", mode, "1"], timeout=60)
    took = time.monotonic() - t0
    assert proc.returncode != 0, proc.stdout
    assert took < 45, f"took {took:.0f} s"
    assert "finished" not in proc.stdout
    if mode == "raise":
        assert "topocoll: rank 1: error: RuntimeError: boom in the training step" in proc.stderr
    if mode == "hang":
        assert "rank(s) [1] do not respond" in proc.stderr, proc.stderr[-2000:]


def test_startup_mismatch_is_the_same_clear_error_on_every_rank():
    n = 3
    proc = run_mpi(n, [str(Path(__file__).resolve()), "worker", "mismatch", "1"], timeout=60)
    lines = sorted(ln for ln in proc.stdout.splitlines() if ln.startswith("MISMATCH"))
    assert len(lines) == n, proc.stdout + proc.stderr[-2000:]
    bodies = {ln.split(": ", 1)[1] for ln in lines}
    assert len(bodies) == 1 and "fingerprint: ranks [0, 2]" in bodies.pop()
    assert {ln.split(":")[0] for ln in lines} == {f"MISMATCH rank {r}" for r in range(n)}


if __name__ == "__main__" and len(sys.argv) > 3 and sys.argv[1] == "worker":
    worker(sys.argv[2], int(sys.argv[3]))


def test_a_rank_whose_scratch_and_receives_do_not_fit_is_refused(monkeypatch):
    """Ring reduce-scatter, 4 ranks, 1 Mi float32 per block: rank 1 keeps 2 Mi elements of scratch
    and receives 3 messages of 1 Mi (hand-counted from the ring: one per step), 20 MiB in all;
    with 8 MiB available its plan is refused in one line naming the rank."""
    import numpy as np

    import kernels.backends.memory as memory
    from _schedules import ring
    from kernels.backends.executor import program_for
    from kernels.mpi.transport import rank_plan
    from topo_probe.errors import InvalidArgument
    sched = ring("reducescatter", 4)
    prog = program_for(sched, 1 << 20, np.float32)
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 8 << 20)
    with pytest.raises(InvalidArgument, match=r"rank 1: reducescatter: the schedule's scratch and receive buffers "
                                              r"needs 20.0 MiB of host memory; 8.0 MiB available"):
        rank_plan(sched, prog, 1)
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 1 << 40)
    assert len(rank_plan(sched, prog, 1).recvs) == 3
