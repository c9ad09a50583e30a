"""The MPI deadline: ``$TOPOCOLL_MPI_TIMEOUT`` and ``timeout_s`` must be finite seconds >= 0.001
(``nan`` and ``inf`` would disable the deadline, so a dead rank would hang the job); a timeout's
failure notices (a fake control communicator): kept until sent, and blaming the rank the timed-out
rank blamed, whatever bytes a notice holds; a peer's departure notice (``left:<rank>:<calls>``,
kernels.mpi.leaving) fails only calls beyond those it finished."""

from __future__ import annotations

import re

import numpy as np
import pytest
from types import SimpleNamespace
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kernels.mpi.leaving import notify_departure
from kernels.mpi.waiter import (DEFAULT_TIMEOUT_S, NOTICE_BYTES, TAG_NOTICE, Waiter, checked_timeout, default_timeout,
                               departure_notice, notify_failure, read_departure)
from topo_probe.errors import InvalidArgument, PeerFailed


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "-5", "0", "abc", "1e999", "1e-6", "0.0009"])
def test_env_timeout_refused_in_one_line(monkeypatch, raw):
    monkeypatch.setenv("TOPOCOLL_MPI_TIMEOUT", raw)
    with pytest.raises(InvalidArgument) as e:
        default_timeout()
    assert str(e.value) == f"TOPOCOLL_MPI_TIMEOUT={raw!r}: expected a finite number of seconds >= 0.001"


@pytest.mark.parametrize("raw, seconds", [("30", 30.0), ("0.25", 0.25), (" 7 ", 7.0)])
def test_env_timeout_taken(monkeypatch, raw, seconds):
    monkeypatch.setenv("TOPOCOLL_MPI_TIMEOUT", raw)
    assert default_timeout() == seconds


def test_env_timeout_unset_or_empty_is_default(monkeypatch):
    monkeypatch.delenv("TOPOCOLL_MPI_TIMEOUT", raising=False)
    assert default_timeout() == DEFAULT_TIMEOUT_S
    monkeypatch.setenv("TOPOCOLL_MPI_TIMEOUT", "")
    assert default_timeout() == DEFAULT_TIMEOUT_S


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, 0, True, "x", None])
def test_waiter_timeout_argument_checked(bad):
    if bad is None:  # None means "the default", which is fine
        assert Waiter(None, 0, None).timeout_s == default_timeout()
        return
    with pytest.raises(InvalidArgument, match="timeout_s="):
        Waiter(None, 0, bad)
    assert checked_timeout(2) == 2.0


@pytest.mark.parametrize("bad", ["nan", -1.0])
def test_an_mpi_communicators_timeout_refusal_names_it(bad):
    """The MPICommunicator's ``timeout_s`` refusal starts with its owner, as its plan, algo, ipc and native
    refusals do, through the start-up check that raises it on every rank (test_mpi_timeout_at_start).  Reference: the
    line by hand.  Old: "timeout_s='nan': ..." naming no one."""
    pytest.importorskip("mpi4py")
    from kernels.mpi.communicator import MPICommunicator
    with pytest.raises(InvalidArgument) as e:
        MPICommunicator(plan=False, abort_on_error=False, timeout_s=bad)
    assert str(e.value) == (f"MPICommunicator: timeout_s={bad!r}: expected a finite number of seconds >= 0.001 "
                            "(the start-up check of arguments, topology and plan failed on ranks [0] of 1)")


@pytest.mark.parametrize("bad,shown", [("x" * 300, f"'{'x' * 56}..."),
                                       (10**400, "an integer of about 401 digits")], ids=["long-str", "huge-int"])
def test_a_timeout_refusal_quotes_the_value_through_show(bad, shown):
    """A refused ``timeout_s`` is quoted as every one-line refusal quotes its value (topo_probe.errors.show), as
    the MPICommunicator's ipc= and native= refusals now are.  Reference: the lines by hand.  Old: the whole repr,
    a 370-character line for 300 x's, 469 for 10**400."""
    with pytest.raises(InvalidArgument) as e:
        checked_timeout(bad, "MPICommunicator: timeout_s")
    assert str(e.value) == f"MPICommunicator: timeout_s={shown}: expected a finite number of seconds >= 0.001"


class _FloatThatRaises(float):
    """A real number (a float subclass) whose ``__float__`` raises, as a hostile or broken wrapper might."""

    def __float__(self):
        raise ZeroDivisionError("no float today")


class _StrThatRaises(str):
    """A str subclass whose ``__float__`` raises."""

    def __float__(self):
        raise TypeError("no float today")


@pytest.mark.parametrize("bad", [_FloatThatRaises(2.0), _StrThatRaises("2")], ids=["float-subclass", "str-subclass"])
def test_a_value_whose_float_raises_is_refused_in_one_line(bad):
    """A value whose ``float()`` raises is not a number of seconds: InvalidArgument in the rule's line, so
    :func:`kernels.mpi.startup.start_timeout` runs the start-up on to the exchange (that rank's error reaches every
    rank) instead of raising it alone.  Reference: the lines by hand.  Old: the ZeroDivisionError / TypeError
    escaped checked_timeout and start_timeout, before the start-up exchange."""
    from kernels.mpi.startup import start_timeout
    with pytest.raises(InvalidArgument) as e:
        checked_timeout(bad, "MPICommunicator: timeout_s")
    assert str(e.value) == f"MPICommunicator: timeout_s={bad!r}: expected a finite number of seconds >= 0.001"
    assert start_timeout(bad) == DEFAULT_TIMEOUT_S


class _Req:
    """A fake mpi4py request: ``done`` says whether Test() completes it; ``buf`` is what it sends."""

    def __init__(self, done: bool, buf=None, dest=None, tag=None) -> None:
        self.done, self.buf, self.dest, self.tag = done, buf, dest, tag

    def Test(self) -> bool:
        return self.done


class _Ctrl:
    """A fake control communicator of ``size`` ranks: every peer answers pings at once, sends of
    failure notices never complete (the peers are busy), ``notices`` are (source, bytes) waiting."""

    def __init__(self, size: int, notices=()) -> None:
        self.size, self.sent, self.notices = size, [], list(notices)

    def Get_size(self) -> int:
        return self.size

    def Isend(self, msg, dest, tag):
        self.sent.append(_Req(False, msg[0], dest, tag))
        return self.sent[-1]

    def Irecv(self, msg, source, tag):
        return _Req(True)

    def Iprobe(self, source, tag, status):
        if tag == TAG_NOTICE and self.notices:
            status.Set_source(self.notices[0][0])
            return True
        return False

    def Recv(self, msg, source, tag):
        src, raw = self.notices.pop(0)
        msg[0][:len(raw)] = np.frombuffer(raw, np.uint8)


def test_a_timeout_keeps_its_failure_notices_and_their_buffers_until_mpi_is_done():
    w = Waiter(_Ctrl(3), 0, 1.0)
    with pytest.raises(PeerFailed, match="no progress for 1 s waiting on rank"):
        w.timed_out("allreduce", [1, 2])
    notices = [r for r in w.ctrl.sent if r.tag == TAG_NOTICE]
    assert sorted(r.dest for r in notices) == [1, 2]
    for r in notices:      # still posted: referenced by the waiter, with the bytes they send
        assert any(s is r for s in w._sent), "an active notice send was dropped (mpi4py frees it)"
        assert b"no progress" in bytes(r.buf)


def test_a_wait_stopped_by_a_notice_keeps_its_posted_requests_and_their_buffers():
    """Seen under CI load (mpirun -n 4, a rank leaving): a peer's call-agreement wait raised on the
    departure notice, dropped its posted header receives, and the other peers' headers then landed
    in freed memory (glibc: corrupted double-linked list).  The requests must stay referenced."""
    raw = departure_notice(2, 3, None, None)
    w = Waiter(_Ctrl(3, [(2, raw)]), 0, 1.0)
    w.call, w.spin, w.probe_s = 4, 0, 0.0
    real = w.MPI
    w.MPI = SimpleNamespace(**{k: getattr(real, k) for k in ("Status", "ANY_SOURCE", "ANY_TAG", "BYTE")},
                            Request=SimpleNamespace(Testall=lambda reqs: all(r.Test() for r in reqs)))
    pending = [_Req(False, np.zeros(8, np.uint8)) for _ in range(2)]
    with pytest.raises(PeerFailed, match="rank 2 left after its call 3"):
        w.all(pending, "allreduce", lambda i: i + 1)
    for r in pending:
        assert any(s is r for s in w._sent), "a posted request was dropped (mpi4py frees its buffer)"


def _notice_from(size: int, src: int, sender_does) -> PeerFailed:
    """The PeerFailed a rank of ``size`` raises on the notice rank ``src`` sends by ``sender_does``."""
    sender = Waiter(_Ctrl(size), src, 1.0)
    sender_does(sender)
    raw = bytes(next(r.buf for r in sender.ctrl.sent if r.tag == TAG_NOTICE and r.dest == 0)).rstrip(b"\0")
    w = Waiter(_Ctrl(size, [(src, raw)]), 0, 1.0)
    with pytest.raises(PeerFailed) as e:
        w.check_notices()
    assert (w.failure, w.failed_rank) == (str(e.value), e.value.rank)   # the communicator closes on it
    return e.value


def _times_out_on(waiting, silent=()):
    def run(sender):
        sender.unresponsive = lambda size, within_s=1.0: list(silent)
        with pytest.raises(PeerFailed):
            sender.timed_out("allreduce", list(waiting))
    return run


@pytest.mark.parametrize("waiting, silent, blamed", [([2, 3], [2, 3], None), ([2, 3], [3], 3), ([2], [], 2),
                                                     ([2, 3], [], None)])
def test_a_timeout_notice_blames_the_rank_the_timed_out_rank_blamed_not_the_sender(waiting, silent, blamed):
    # seen: ranks 2, 3 silent, rank 1 timed out; ranks 2, 3 got PeerFailed(rank=1)
    got = _notice_from(4, 1, _times_out_on(waiting, silent))
    assert got.rank == blamed and got.reporter == 0, got
    assert f"rank 0: stopping because rank 1 timed out: rank 1: allreduce: no progress for 1 s waiting on rank(s) " \
           f"{waiting}" in str(got) and "\n" not in str(got)


@pytest.mark.parametrize("text", ["boom", "timeout:3:spoofed by a user's error text", "timeout:None:x"])
def test_a_crash_notice_blames_its_sender_whatever_its_text(text):
    got = _notice_from(4, 2, lambda sender: notify_failure(sender.ctrl, 2, 4, text, grace_s=0))
    assert got.rank == 2 and str(got) == f"rank 0: stopping because rank 2 failed: {text}"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64).map(lambda b: b.rstrip(b"\0")), st.sampled_from([b"", b"timeout:", b"failed:"]),
       st.integers(1, 3))
def test_any_notice_bytes_are_one_peer_failed_naming_a_rank_of_the_communicator_or_none(raw, head, src):
    # every notice but a departure (``left:``, only fatal to later calls: tested below) fails the call
    assume(not (head + raw).startswith(b"left:"))
    w = Waiter(_Ctrl(4, [(src, head + raw)]), 0, 1.0)
    with pytest.raises(PeerFailed) as e:
        w.check_notices()
    assert e.value.rank is None or 0 <= e.value.rank < 4, e.value.rank
    assert f"rank 0: stopping because rank {src} " in str(e.value)


# ---------------------------------------------------------------- a peer that left (kernels.mpi.leaving)
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 7), st.integers(0, 10**12), st.sampled_from([None, "rank 3: no progress"]),
       st.sampled_from([None, 0, 5, 7]))
def test_a_departure_notice_reads_back_as_sent(rank, finished, failure, failed_rank):
    got = read_departure(departure_notice(rank, finished, failure, failed_rank).decode(), 8)
    assert got == (finished, failure is not None, failed_rank if failure is not None else None)


def test_a_peer_that_left_fails_only_calls_beyond_those_it_finished():
    w = Waiter(_Ctrl(4, [(2, b"left:2:5")]), 0, 1.0)
    w.call = 5                    # this rank is still in call 5, which rank 2 finished: drain it
    w.check_notices()
    assert w.departed == {2: (5, False, None)} and w.failure is None
    w.call = 6                    # call 6: rank 2 will never make it
    with pytest.raises(PeerFailed) as e:
        w.check_notices()
    assert e.value.rank == 2 and str(e.value) == ("rank 0: call 6: stopping because rank 2 left after its call 5 "
                                                  "(closed its communicator or ended)")


def test_a_peer_that_left_cleanly_is_named_before_one_that_left_after_failing_because_of_it():
    # rank 1 failed on rank 3's departure and left; its notice may be read first
    w = Waiter(_Ctrl(4, [(1, b"left:1:3:failed:3"), (3, b"left:3:3")]), 0, 1.0)
    w.call = 4
    with pytest.raises(PeerFailed) as e:
        w.check_notices()
    assert e.value.rank == 3 and "because rank 3 left after its call 3 (" in str(e.value)
    alone = Waiter(_Ctrl(4, [(1, b"left:1:3:failed:3")]), 0, 1.0)
    alone.call = 4
    with pytest.raises(PeerFailed) as e:
        alone.check_notices()
    assert e.value.rank == 3 and "because rank 1 left after its call 3 failed" in str(e.value)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40) | st.from_regex(r"[0-9]{0,3}:[0-9]{1,3}(:failed:([0-9]|None|x)?)?", fullmatch=True),
       st.integers(0, 9))
def test_any_left_notice_text_is_a_departure_or_a_failure_naming_its_sender(tail, call):
    raw = ("left:" + tail).encode()[:NOTICE_BYTES - 1]
    text = raw.rstrip(b"\0").decode("utf-8", "replace")   # what the receiver reads (NOTICE_BYTES, zero padded)
    # reference: the documented format left:<rank>:<calls finished>[:failed:<rank>] (departure_notice)
    form = re.fullmatch(r"left:[^:]*:(\d+)(?::(.*))?", text, re.S)
    w = Waiter(_Ctrl(4, [(1, raw)]), 0, 1.0)
    w.call = call
    if form is None:            # not a departure: a failure notice of rank 1, whatever it says
        with pytest.raises(PeerFailed) as e:
            w.check_notices()
        assert e.value.rank == 1 and str(e.value) == f"rank 0: stopping because rank 1 failed: {text}"
        return
    finished = int(form.group(1))
    cause = re.fullmatch(r"failed:(\d+)(:.*)?", form.group(2) or "", re.S)
    cause = int(cause.group(1)) if cause and int(cause.group(1)) < 4 else None
    if call <= finished:        # a call rank 1 finished: drained, never failed
        w.check_notices()
        assert w.failure is None and w.departed[1][0] == finished
        return
    with pytest.raises(PeerFailed) as e:
        w.check_notices()
    failed = (form.group(2) or "").split(":")[0] == "failed"
    assert e.value.rank == (cause if failed else 1), (text, e.value.rank)
    assert f"rank 0: call {call}: stopping because rank 1 left after its call {finished}" in str(e.value)


def test_leaving_tells_every_peer_not_yet_gone_the_calls_it_finished_and_closes_this_rank(monkeypatch):
    from kernels.mpi import transport as mt
    monkeypatch.setattr(mt, "_ABANDONED", [])           # the fake requests stay out of the process's list
    w = Waiter(_Ctrl(4, [(2, b"left:2:1")]), 0, 1.0)   # rank 2 left already: it needs no notice
    w.finished = 7
    send = _Req(False)                                   # a send of the communicator, posted still
    posted = [(send, 1, None)]
    notify_departure(w, posted, grace_s=0)
    sent = {r.dest: bytes(r.buf) for r in w.ctrl.sent if r.tag == TAG_NOTICE}
    assert sent == {1: b"left:0:7", 3: b"left:0:7"} and w.closed
    assert posted == [] and all(any(k is r for k in mt._ABANDONED) for r in [send, *w.ctrl.sent])   # kept


def test_wait_sends_stopped_by_a_notice_keeps_its_posted_sends_and_their_buffers(monkeypatch):
    """mpi69r: ``wait_sends`` took the posted sends off the communicator, then a peer's notice (or
    the deadline, or Ctrl-C) raised and the sends were dropped while posted: mpi4py frees them,
    and MPI reads the freed buffers once the peer receives.  They must stay referenced, as
    :meth:`Waiter.all` keeps its own."""
    from kernels.mpi import transport as mt
    from kernels.mpi.p2p import wait_sends

    monkeypatch.setattr(mt, "_ABANDONED", [])
    w = Waiter(_Ctrl(3, [(2, departure_notice(2, 3, None, None))]), 0, 1.0)
    w.call, w.spin, w.probe_s = 4, 0, 0.0
    real = w.MPI
    w.MPI = SimpleNamespace(**{k: getattr(real, k) for k in ("Status", "ANY_SOURCE", "ANY_TAG", "BYTE")},
                            Request=SimpleNamespace(Testall=lambda reqs: all(r.Test() for r in reqs)))
    posted = [_Req(False, np.zeros(8, np.uint8)) for _ in range(2)]
    comm = SimpleNamespace(agreement=SimpleNamespace(refuse_if_closed=lambda: None), waiter=w,
                           _pending=[(r, 1, r.buf) for r in posted])
    with pytest.raises(PeerFailed, match="rank 2 left after its call 3"):
        wait_sends(comm)
    for r in posted:
        assert any(s is r for s in mt._ABANDONED + w._sent), "a posted send was dropped (mpi4py frees its buffer)"


def test_the_shortest_deadline_is_a_millisecond():
    """torch's c10d store counts waits in whole milliseconds: 1 ms is taken, anything shorter refused (a 500 us
    deadline waited 0 ms on its rank alone while the peers waited out theirs)."""
    assert checked_timeout(0.001) == 0.001 and checked_timeout("0.0010") == 0.001
    for bad in (0.000999, 5e-4, 1e-6, "1e-6"):
        with pytest.raises(InvalidArgument, match=r"expected a finite number of seconds >= 0\.001$"):
            checked_timeout(bad)
