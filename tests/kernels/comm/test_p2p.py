"""kernels.comm.p2p: copies between ranks, FIFO pairing per (src, dst) against a queue model, errors."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.comm.p2p import pending, post, send_recv
from topo_probe.errors import BufferLayoutError, TopocollError


def _deliver(size):
    return lambda s, d, a, b: send_recv(s, d, a, b, size=size)


def test_send_recv_copies_a_strided_source():
    dst = np.full(3, -1.0)
    send_recv(0, 1, np.arange(6.0).reshape(3, 2)[:, 0], dst, size=2)
    assert dst.tolist() == [0.0, 2.0, 4.0]


@pytest.mark.parametrize("dst", [np.full(4, -1.0), np.full(2, -1.0)])
def test_send_recv_of_another_count_is_refused_and_writes_nothing(dst):
    """3 elements into 4 (or 2): NCCL's send and recv name the same count; nothing is written."""
    with pytest.raises(BufferLayoutError, match=f"rank 1 receives {dst.size} elements but rank 0 sends 3"):
        send_recv(0, 1, np.arange(3.0), dst, size=2)
    assert (dst == -1.0).all()


@pytest.mark.parametrize("src, dst, msg", [
    ([1.0, 2.0], np.zeros(2), "send_recv: rank 0: got a list, not an array"),
    (np.zeros(2, complex), np.zeros(2, complex), "send_recv: rank 0: dtype complex128 is not an NCCL type"),
    (np.zeros(2, bool), np.zeros(2, bool), "dtype bool is not an NCCL type"),
])
def test_send_recv_refuses_non_arrays_and_other_types(src, dst, msg):
    with pytest.raises(BufferLayoutError, match=msg):
        send_recv(0, 1, src, dst, size=2)


@pytest.mark.parametrize("args, msg", [
    ((0, 2, np.ones(2), np.ones(2)), r"^send_recv: dst_rank 2 is not a rank \(0..1\)$"),
    ((0, 1, np.ones(2), np.ones(2, np.int32)), r"^send_recv: rank 1: dtype int32 differs from rank 0's float64$"),
    ((0, 1, np.ones(3), np.ones(2)), r"^send_recv: rank 1 receives 2 elements but rank 0 sends 3; "),
])
def test_send_recv_errors(args, msg):
    with pytest.raises(ValueError, match=msg):
        send_recv(*args, size=2)


def test_post_rejects_bad_ranks():
    with pytest.raises(ValueError, match=r"^recv: 5 is not a rank \(0..2\)$"):
        post({}, {}, (0, 5), np.ones(1), sending=False, size=3, deliver=_deliver(3))


@settings(derandomize=True, max_examples=80, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 2), st.integers(0, 2)), max_size=25))
def test_pairing_matches_a_fifo_queue_model(ops):
    """Each send carries a distinct value; the k-th recv of a pair gets the k-th send of that
    pair, whichever was posted first (model: one queue of values per pair)."""
    sends, recvs, got = {}, {}, []
    model_sent, model_recv, model_pairs = {}, {}, []
    for k, (is_send, src, dst) in enumerate(ops):
        if is_send:
            post(sends, recvs, (src, dst), np.array([float(k)]), sending=True, size=3, deliver=_deliver(3))
            q = model_recv.get((src, dst))
            if q:
                model_pairs.append((q.popleft(), k))
            else:
                model_sent.setdefault((src, dst), deque()).append(k)
        else:
            buf = np.array([-1.0])
            got.append((k, buf))
            post(recvs, sends, (src, dst), buf, sending=False, size=3, deliver=_deliver(3))
            q = model_sent.get((src, dst))
            if q:
                model_pairs.append((k, q.popleft()))
            else:
                model_recv.setdefault((src, dst), deque()).append(k)
    filled = {k: buf[0] for k, buf in got}
    assert sorted((k, float(v)) for k, v in model_pairs) == sorted((k, filled[k]) for k, _ in model_pairs)
    assert all(v == -1.0 for k, v in filled.items() if k not in dict(model_pairs))
    want = sorted([("send", *p) for p, q in model_sent.items() for _ in q]
                  + [("recv", *p) for p, q in model_recv.items() for _ in q])
    assert sorted(pending(sends, recvs)) == want


@pytest.mark.parametrize("src, dst, msg", [
    (True, 1, r"^send_recv: src_rank True is not a rank \(0..1\)$"),
    (0.5, 1, r"^send_recv: src_rank 0.5 is not a rank \(0..1\)$"),
    (0, "1", r"^send_recv: dst_rank '1' is not a rank \(0..1\)$"),
])
def test_send_recv_refuses_ranks_that_are_not_integers(src, dst, msg):
    """Old: ``int(r)`` read True, 0.5 and "1" as ranks 1, 0 and 1 and copied; a rank is an integer."""
    got = np.full(2, -1.0)
    with pytest.raises(ValueError, match=msg):
        send_recv(src, dst, np.ones(2), got, size=2)
    assert (got == -1.0).all()


def _read_only(a):
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("src, dst, msg", [
    (None, np.zeros(2), r"^send_recv: rank 0's array is None$"),
    (np.ones(2), None, r"^send_recv: rank 1's array is None$"),
    (np.ones(2), _read_only(np.zeros(2)), r"^send_recv: rank 1's array is read-only$"),
])
def test_send_recv_refuses_missing_and_read_only_buffers_in_one_line(src, dst, msg):
    """Old: AttributeError ('NoneType' has no dtype) and NumPy's ValueError from inside the copy."""
    with pytest.raises(BufferLayoutError, match=msg):
        send_recv(0, 1, src, dst, size=2)


@pytest.mark.parametrize("sending, array, msg", [
    (True, np.zeros(2, complex), r"^send: rank 0: dtype complex128 is not an NCCL type"),
    (False, _read_only(np.zeros(2)), r"^recv: rank 1's array is read-only$"),
    (False, np.zeros(4)[::2], r"^recv: rank 1's array is not C-contiguous"),
    (True, None, r"^send: rank 0's array is None$"),
])
def test_a_bad_post_raises_at_once_and_is_not_queued(sending, array, msg):
    """Old: the post was queued unchecked, and raised (or not) only when its peer posted."""
    sends, recvs = {}, {}
    mine, theirs = (sends, recvs) if sending else (recvs, sends)
    with pytest.raises(BufferLayoutError, match=msg):
        post(mine, theirs, (0, 1), array, sending=sending, size=2, deliver=_deliver(2))
    assert pending(sends, recvs) == []


def test_a_pair_that_cannot_copy_leaves_the_earlier_post_queued():
    """A recv of 4 elements meets a send of 3: refused, nothing written, and the send stays at the
    head of its queue (old: it was dropped), so the recv of the right count then gets it."""
    sends, recvs = {}, {}
    post(sends, recvs, (0, 1), np.arange(3.0), sending=True, size=2, deliver=_deliver(2))
    wrong = np.full(4, -1.0)
    with pytest.raises(BufferLayoutError, match="rank 1 receives 4 elements but rank 0 sends 3"):
        post(recvs, sends, (0, 1), wrong, sending=False, size=2, deliver=_deliver(2))
    assert (wrong == -1.0).all() and pending(sends, recvs) == [("send", 0, 1)]
    right = np.full(3, -1.0)
    post(recvs, sends, (0, 1), right, sending=False, size=2, deliver=_deliver(2))
    assert right.tolist() == [0.0, 1.0, 2.0] and pending(sends, recvs) == []


def test_communicator_p2p_checks_each_array_against_its_ranks_gpu():
    """``Communicator([0, 1])``: rank r's buffers live on GPU r (CuPy arrays, stood in for by a
    NumPy subclass CuPy's module name and ``.device.id``); old: send_recv and send/recv copied
    between whatever GPUs the arrays were on."""
    import types
    import warnings

    from kernels.comm.communicator import Communicator
    from topo_probe.machines.generators import fully_connected

    class OnGpu1(np.ndarray):
        __module__ = "cupy._core.core"
        device = types.SimpleNamespace(id=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        comm = Communicator([0, 1], topology=fully_connected(2), plan=False)
    src, dst = np.ones(2).view(OnGpu1), np.zeros(2).view(OnGpu1)
    with pytest.raises(BufferLayoutError, match=r"^send_recv: rank 0: device cuda:1 is not its rank's cuda:0$"):
        comm.send_recv(0, 1, src, dst)
    with pytest.raises(BufferLayoutError, match=r"^send: rank 0: device cuda:1 is not its rank's cuda:0$"):
        comm.send(src, 1, rank=0)
    assert comm.pending() == [] and (dst == 0).all()


@settings(derandomize=True, max_examples=150, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 1), st.integers(0, 1), st.integers(1, 2)), max_size=30))
def test_failed_pairings_keep_each_pairs_posting_order(ops):
    """Posts of 1 or 2 elements: a post that meets one of the other count raises, is not queued,
    and the earlier post keeps its place at the head of its queue, so the k-th successful recv of
    a pair still gets the k-th queued send of that pair (NCCL matches a pair's sends and recvs in
    posting order).  Model: per pair, a queue of (post number, count); a count mismatch with the
    head drops only the new post.  Fails if the earlier post is re-queued at the tail or lost."""
    sends, recvs, bufs, model_pairs = {}, {}, {}, []
    model = {True: {}, False: {}}                     # sending -> pair -> deque of (k, count)
    for k, (is_send, src, dst, count) in enumerate(ops):
        array = np.full(count, float(k)) if is_send else np.full(count, -1.0)
        head = model[not is_send].get((src, dst))
        mine, theirs = (sends, recvs) if is_send else (recvs, sends)
        if head and head[0][1] != count:
            with pytest.raises(BufferLayoutError, match="elements but rank"):
                post(mine, theirs, (src, dst), array, sending=is_send, size=2, deliver=_deliver(2))
            assert (array == (float(k) if is_send else -1.0)).all()
            continue
        post(mine, theirs, (src, dst), array, sending=is_send, size=2, deliver=_deliver(2))
        bufs[k] = array
        if head:
            other = head.popleft()[0]
            model_pairs.append((other, k) if is_send else (k, other))   # (recv's k, send's k)
        else:
            model[is_send].setdefault((src, dst), deque()).append((k, count))
    for recv_k, send_k in model_pairs:
        assert (bufs[recv_k] == float(send_k)).all(), (recv_k, send_k)
    for sending, queues in model.items():
        for (src, dst), q in queues.items():
            assert [a[0] for a in (sends if sending else recvs).get((src, dst), [])] == [float(k) if sending
                                                                                          else -1.0 for k, _ in q]
    assert sorted(pending(sends, recvs)) == sorted(("send" if s else "recv", *p)
                                                   for s, qs in model.items() for p, q in qs.items() for _ in q)


def test_a_queued_recv_made_read_only_after_posting_is_dropped_when_matched_and_never_jams():
    """Decision (NCCL checks a post's arguments when it is posted and has no cancel call): a receive
    buffer made read-only while its recv waits is refused when a send meets it, in one line saying the
    queued recv is dropped; nothing is written, the send is not queued, and the pair's next recv and
    send then pair as usual (old: the bad recv went back to the head, every later send on the pair failed)."""
    from kernels import Communicator
    comm = Communicator(2, plan=False)
    stale = np.zeros(3)
    comm.recv(stale, 0, rank=1)
    stale.flags.writeable = False
    with pytest.raises(BufferLayoutError, match=r"^send: the queued recv 0->1 .*read-only.*; nothing "
                       r"was written, that recv is dropped and this send is not queued: post both again$"):
        comm.send(np.ones(3), 1, rank=0)
    assert (stale == 0).all() and comm.pending() == []
    fresh = np.full(3, -1.0)
    comm.recv(fresh, 0, rank=1)
    comm.send(np.full(3, 2.0), 1, rank=0)
    assert fresh.tolist() == [2.0, 2.0, 2.0] and comm.pending() == []


def _post_and_pair(model, kind, pair, k, bufs, mine, theirs):
    """Post number k (its array bufs[k]) and follow the queue model: where the model holds an opposite
    post of the pair, the oldest is paired with k (its data checked); else k joins the pair's queue."""
    sending = kind == "send"
    head = model["recv" if sending else "send"].get(pair)
    post(mine, theirs, pair, bufs[k], sending=sending, size=2, deliver=_deliver(2))
    if head:
        other = head.popleft()
        r, s = (other, k) if sending else (k, other)
        assert (bufs[r] == float(s)).all(), (r, s)
    else:
        model[kind].setdefault(pair, deque()).append(k)


def _pending_is_the_model(sends, recvs, model):
    assert sorted(pending(sends, recvs)) == sorted((kind, *p) for kind, qs in model.items()
                                                   for p, q in qs.items() for _ in q)


@settings(derandomize=True, max_examples=150, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["send", "recv", "freeze"]), st.integers(0, 1), st.integers(0, 1)),
                    max_size=30))
def test_posts_with_recvs_frozen_while_queued_match_a_queue_model(ops):
    """Sends, recvs and "freeze the oldest queued recv of a pair" in any order: the k-th successful recv
    of a pair gets the oldest still-valid send; a frozen recv that a send meets is dropped with an error
    (the send not queued); the queues never hold a frozen recv behind which posts wait forever.
    Model: per pair, deques of post numbers and a set of frozen recvs."""
    sends, recvs, bufs, frozen = {}, {}, {}, set()
    model = {"send": {}, "recv": {}}
    for k, (kind, src, dst) in enumerate(ops):
        pair = (src, dst)
        if kind == "freeze":
            q = model["recv"].get(pair)
            if q:
                bufs[q[0]].flags.writeable = False
                frozen.add(q[0])
            continue
        sending = kind == "send"
        array = np.full(2, float(k)) if sending else np.full(2, -1.0)
        bufs[k] = array
        mine, theirs = (sends, recvs) if sending else (recvs, sends)
        head = model["recv" if sending else "send"].get(pair)
        if sending and head and head[0] in frozen:
            with pytest.raises(BufferLayoutError, match="that recv is dropped and this send is not queued: post both again"):
                post(mine, theirs, pair, array, sending=True, size=2, deliver=_deliver(2))
            head.popleft()
            continue
        _post_and_pair(model, kind, pair, k, bufs, mine, theirs)
    _pending_is_the_model(sends, recvs, model)
    for k in frozen:
        assert (bufs[k] == -1.0).all()


@settings(derandomize=True, max_examples=150, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["send", "recv", "lose"]), st.integers(0, 1), st.integers(0, 1),
                              st.booleans()), max_size=30))
def test_a_queued_post_a_layer_can_no_longer_check_is_named_dropped_and_never_lost_silently(ops):
    """Sends, recvs and "the oldest queued send (or recv) of a pair becomes uncheckable" (its device
    gone: the array check raises RuntimeError, not BufferLayoutError) in any order.  A post that meets an
    uncheckable one raises BufferLayoutError naming that post (its rank, peer and count) and the layer's
    error; the uncheckable post is dropped, the new one not queued, and every other post pairs in
    posting order.  Model: per pair and direction, a deque of post numbers, and the set of lost posts.
    Old: the RuntimeError came out as it was, naming no post, and the queued post vanished."""
    import kernels.comm.p2p as p2p
    sends, recvs, bufs, lost = {}, {}, {}, set()
    model = {"send": {}, "recv": {}}
    real = p2p.check_buffer

    def check(array, what, **kw):
        if any(array is bufs[k] for k in lost):
            raise RuntimeError("device lost")
        return real(array, what, **kw)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(p2p, "check_buffer", check)
        for k, (kind, src, dst, of_sends) in enumerate(ops):
            pair = (src, dst)
            if kind == "lose":
                q = model["send" if of_sends else "recv"].get(pair)
                if q:
                    lost.add(q[0])
                continue
            sending = kind == "send"
            theirs = "recv" if sending else "send"
            array = np.full(2, float(k)) if sending else np.full(2, -1.0)
            bufs[k] = array
            mine, other_q = (sends, recvs) if sending else (recvs, sends)
            head = model[theirs].get(pair)
            if head and head[0] in lost:
                rank, peer = (dst, src) if theirs == "recv" else (src, dst)
                want = (f"{kind}: the queued {theirs} {src}->{dst} it matched (rank {rank}, peer {peer}, 2 elements) "
                        f"could not be checked again (RuntimeError: device lost); nothing was written, that {theirs} "
                        f"is dropped and this {kind} is not queued: post both again")
                with pytest.raises(BufferLayoutError) as info:
                    post(mine, other_q, pair, array, sending=sending, size=2, deliver=_deliver(2))
                assert str(info.value) == want
                head.popleft()
                continue
            _post_and_pair(model, kind, pair, k, bufs, mine, other_q)
    _pending_is_the_model(sends, recvs, model)
    for key, queues in (("send", sends), ("recv", recvs)):
        for pair, q in queues.items():
            assert [id(a) for a in q] == [id(bufs[k]) for k in model[key].get(pair, ())], (key, pair)
    assert all((bufs[k] == -1.0).all() for k in lost if ops[k][0] == "recv")      # a lost recv is never written


@pytest.mark.parametrize("sending", [True, False])
def test_an_interrupted_copy_keeps_the_queued_post_it_matched(sending):
    """Ctrl-C (KeyboardInterrupt, not an Exception) while a matched pair is being copied: the queued
    post goes back to the head of its queue, as after any failed copy, and meets the next post.
    Reference: the hand-made queue.  Old: only an Exception put it back; the popped post vanished."""
    sends, recvs = {}, {}
    queued = np.full(2, -1.0) if sending else np.array([7.0, 8.0])
    mine, theirs = (sends, recvs) if sending else (recvs, sends)
    post(theirs, mine, (0, 1), queued, sending=not sending, size=2, deliver=_deliver(2))

    def interrupted(*_):
        raise KeyboardInterrupt
    new = np.array([1.0, 2.0]) if sending else np.full(2, -1.0)
    with pytest.raises(KeyboardInterrupt):
        post(mine, theirs, (0, 1), new, sending=sending, size=2, deliver=interrupted)
    assert pending(sends, recvs) == [("recv" if sending else "send", 0, 1)]
    again = np.array([3.0, 4.0]) if sending else np.full(2, -1.0)
    post(mine, theirs, (0, 1), again, sending=sending, size=2, deliver=_deliver(2))
    assert pending(sends, recvs) == []
    got = queued if sending else again
    assert got.tolist() == ([3.0, 4.0] if sending else [7.0, 8.0])


@pytest.mark.parametrize("first", ["send", "recv"])
@pytest.mark.parametrize("dst,words", [
    (np.zeros(4, np.float32), "rank 1 receives 4 elements but rank 0 sends 3"),
    (np.zeros(3, np.float64), "rank 1: dtype float64 differs from rank 0's float32")], ids=["count", "dtype"])
def test_a_p2p_mismatch_names_the_method_called(first, dst, words):
    """The Communicator's Notes: every refusal of a call is one line starting with the method's name.  A
    recv (or send) whose count or dtype differs from the queued post it meets names recv (send), not the
    send_recv it copies with (old), and writes nothing."""
    from kernels import Communicator
    comm = Communicator(2, plan=False)
    src = np.ones(3, np.float32)
    if first == "send":
        comm.send(src, 1, rank=0)
        call, name = (lambda: comm.recv(dst, 0, rank=1)), "recv"
    else:
        comm.recv(dst, 0, rank=1)
        call, name = (lambda: comm.send(src, 1, rank=0)), "send"
    with pytest.raises(TopocollError) as info:
        call()
    assert str(info.value).startswith(f"{name}: {words}"), str(info.value)
    assert not dst.any() and comm.pending() == [(first, 0, 1)]
