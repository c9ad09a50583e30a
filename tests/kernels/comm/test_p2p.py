"""kernels.comm.p2p: copies between ranks, FIFO pairing per (src, dst) against a queue model, errors."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.comm.p2p import pending, post, send_recv
from topo_probe.errors import BufferLayoutError


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
