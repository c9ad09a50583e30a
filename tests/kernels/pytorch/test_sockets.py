"""kernels/pytorch/sockets.py: two ranks' SocketMesh in one process (threads, torch's HashStore).
Messages of every size class (empty, a few bytes, up to and past INLINE_BYTES, 1 MiB) arrive
whole and in the order sent, both directions at once, while a burst the receiver does not read
yet fills the socket buffers (small sends then go to the pair's thread, after what it holds); a
small send on an idle pair is written before ``send`` returns; a peer that closed its end makes
a send fail with PeerGone."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")


def _pair():
    from _socket_pair import socket_pair
    return socket_pair()


def _messages(seed: int):
    from kernels.pytorch.sockets import INLINE_BYTES
    sizes = [0, 8, 4096, INLINE_BYTES - 16, INLINE_BYTES - 15, 1 << 20, 3, 60_000]
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (sizes[k % len(sizes)],), generator=g, dtype=torch.uint8) for k in range(40)]


def test_every_size_arrives_whole_and_in_order_both_ways_with_full_buffers():
    meshes = _pair()
    sent = {0: _messages(1), 1: _messages(2)}
    got = {0: [], 1: []}
    busy_seen = []

    def side(rank):
        mesh, peer = meshes[rank], 1 - rank
        works = [mesh.send([m], peer, 100 + k) for k, m in enumerate(sent[rank])]   # the burst, unread
        busy_seen.append(mesh._busy[peer])
        for k, m in enumerate(sent[peer]):
            out = torch.empty_like(m)
            mesh.recv([out], peer, 100 + k)
            got[rank].append(out)
        for w in works:
            w.wait()
    threads = [threading.Thread(target=side, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    for rank in (0, 1):
        assert len(got[rank]) == len(sent[1 - rank])
        assert all(torch.equal(a, b) for a, b in zip(got[rank], sent[1 - rank]))
    assert max(busy_seen) > 0                          # the burst did reach the pair's thread
    for m in meshes:
        m.close()


def test_a_small_send_on_an_idle_pair_is_written_at_once_and_a_closed_peer_fails_it():
    from kernels.pytorch.errors import PeerGone
    a, b = _pair()
    w = a.send([torch.arange(4, dtype=torch.int64)], 1, 5)
    assert w.done.is_set() and a._busy[1] == 0        # no hand-off to the thread
    out = torch.zeros(4, dtype=torch.int64)
    b.recv([out], 0, 5)
    assert out.tolist() == [0, 1, 2, 3]
    b.close()
    with pytest.raises(PeerGone, match="sending to rank 1 failed"):
        for _ in range(200):
            a.send([torch.ones(8)], 1, 6).wait()
    a.close()


@pytest.mark.parametrize("algo", ["ring", "oneshot"])
def test_a_schedule_over_the_pair_sends_in_place_reduces_in_pieces_and_equals_numpy(algo, monkeypatch):
    """run_share over two SocketMesh ranks (sends read the tensor in place, received messages
    reduced piece by piece as they arrive, in pieces of 4 KiB here): float32 sums equal NumPy's pairwise sum bit for bit (two addends: one rounding),
    twice in a row (kept buffers), and each piece is handed on once, in order, covering it."""
    import numpy as np

    import kernels.pytorch.sockets as sockets
    from kernels.pytorch.schedule_share import GroupTransport, run_share
    from synth import baseline, build_fabric
    from topo_probe.machines.generators import fully_connected
    sched = baseline(algo, build_fabric(fully_connected(2)), "allreduce")
    meshes = _pair()
    pieces: list = []
    plain = sockets.SocketMesh.recv_pieces

    def counted(self, t, peer, tag, on_piece, piece_bytes=4096):
        plain(self, t, peer, tag, lambda a, z: (pieces.append((self.rank, a, z)), on_piece(a, z)), piece_bytes)
    monkeypatch.setattr(sockets.SocketMesh, "recv_pieces", counted)
    g = torch.Generator().manual_seed(3)
    for _ in range(2):
        xs = [torch.randn(1 << 18, generator=g) for _ in range(2)]
        want = (xs[0].numpy() + xs[1].numpy()).view(np.uint32)
        errors: list = []

        def one(r):
            try:
                run_share(sched, xs[r], xs[r], xs[r].numel(), op="sum", rank=r, transport=GroupTransport(meshes[r]))
            except BaseException as e:  # noqa: BLE001  (reported below)
                errors.append(e)
        threads = [threading.Thread(target=one, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        for r in range(2):
            assert np.array_equal(xs[r].numpy().view(np.uint32), want), (algo, r)
    mine = [(a, z) for r, a, z in pieces if r == 0]
    assert all(z - a == 1024 for a, z in mine) and len(mine) == 2 * (1 << 18) // 1024 // (2 if algo == "ring" else 1)
    for m in meshes:
        m.close()


def test_a_stream_fed_in_pieces_arrives_whole_between_other_messages_and_abort_shuts_the_pair():
    """send_stream: the frame goes first, the bytes as fed; the pair's messages before and after
    it arrive in order, each whole; pieces out of order are refused; an unfinished stream's
    abort shuts the connection, so the peer's receive fails at once (not reading the pair's
    next message as the rest of it)."""
    from kernels.pytorch.errors import PeerGone
    a, b = _pair()
    g = torch.Generator().manual_seed(7)
    before, body, after = (torch.randint(-99, 99, (k,), generator=g) for k in (5, 300_001, 9))
    a.send([before], 1, 1)
    s = a.send_stream(body, 1, 2)
    with pytest.raises(ValueError, match="in order"):
        s.feed(10, 20)
    for lo in range(0, body.numel(), 70_000):
        s.feed(lo, min(body.numel(), lo + 70_000))
    a.send([after], 1, 3)
    got = [torch.empty_like(t) for t in (before, body, after)]
    for k, t in enumerate(got):
        b.recv([t], 0, k + 1)
    s.wait()
    assert all(torch.equal(x, y) for x, y in zip(got, (before, body, after)))
    cut = a.send_stream(body, 1, 4)
    cut.feed(0, 1000)
    cut.abort()
    assert cut.done.is_set()
    with pytest.raises(PeerGone, match="closed its connection|failed"):
        b.recv([torch.empty_like(body)], 0, 4)
    a.close()
    b.close()


@pytest.mark.parametrize("algo,n", [("ring", 2), ("ring", 4), ("direct", 3), ("direct", 4)])
def test_streamed_sends_give_the_numpy_sum_on_every_rank(algo, n, monkeypatch):
    """run_share over ``n`` SocketMesh ranks with streaming forced on (and off): int64 sums
    equal NumPy's exactly, float32 and bfloat16 sums with and without streaming are bit for bit
    the same (direct: NumPy's left fold in rank order, ``((x0 + x1) + x2) + ...``, rounded to the
    type at each step, ml_dtypes for bfloat16), and as many streams ran on every rank, at least
    n - 1 per call (ring: each reduce step's result forwarded; direct: exactly n - 1, the reduced
    block to every peer, also on the last rank, whose rank-order sum ends with its own value: that
    local reduce runs piece by piece behind the last receive's, share_order.trailing_local)."""
    import ml_dtypes
    import numpy as np
    from _socket_pair import socket_pair

    from kernels.pytorch import schedule_share as share
    from kernels.pytorch import sockets
    from synth import baseline, build_fabric
    from topo_probe.machines.generators import fully_connected
    sched = baseline(algo, build_fabric(fully_connected(n)), "allreduce")
    meshes = socket_pair(n)
    streams: list = []
    plain = sockets.SocketMesh.send_stream
    monkeypatch.setattr(sockets.SocketMesh, "send_stream", lambda self, *a: streams.append(self.rank) or plain(self, *a))
    monkeypatch.setattr(sockets, "PIECE_BYTES", 16 << 10)
    g = torch.Generator().manual_seed(11)
    calls = {"int": [torch.randint(-2**40, 2**40, (3 * (1 << 14) + 4,), generator=g) for _ in range(n)],
             "float": [torch.randn(1 << 16, generator=g) for _ in range(n)],
             "bf16": [torch.randn(3 * (1 << 14) + 6, generator=g).to(torch.bfloat16) for _ in range(n)]}
    results = {}
    for limit in (n, 1):                              # streamed, then not
        monkeypatch.setattr(share, "STREAM_MAX_RANKS", limit)
        for name, xs in calls.items():
            bufs = [x.clone() for x in xs]
            errors: list = []

            def one(r, bufs=bufs, errors=errors):
                try:
                    share.run_share(sched, bufs[r], bufs[r], bufs[r].numel(), op="sum", rank=r,
                                    transport=share.GroupTransport(meshes[r]))
                except BaseException as e:  # noqa: BLE001  (reported below)
                    errors.append(e)
            threads = [threading.Thread(target=one, args=(r,)) for r in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert not errors, errors
            results[limit, name] = bufs
        if limit == n:
            per_rank = len(streams) / n
            assert sorted(streams) == [r for r in range(n) for _ in range(int(per_rank))], streams  # as many on each
            if algo == "direct":
                assert per_rank == (n - 1) * len(calls), streams    # n - 1 streams per call
            assert per_rank >= (n - 1) * len(calls), streams
            streams.clear()
    assert not streams                                 # limit 1: none streamed
    want = np.sum(np.stack([x.numpy() for x in calls["int"]]), axis=0)
    folds = {"float": calls["float"][0].numpy().copy(),
             "bf16": calls["bf16"][0].view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()}
    for r in range(1, n):                              # NumPy's left fold in rank order
        folds["float"] = folds["float"] + calls["float"][r].numpy()
        folds["bf16"] = folds["bf16"] + calls["bf16"][r].view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    for r in range(n):
        assert np.array_equal(results[n, "int"][r].numpy(), want)
        for name in ("float", "bf16"):
            bits = [results[k, name][r].view(torch.int16 if name == "bf16" else torch.int32).numpy() for k in (n, 1)]
            assert np.array_equal(bits[0], bits[1]), (name, r)
            if algo == "direct":
                assert np.array_equal(bits[0], folds[name].view(bits[0].dtype)), (name, r)
    for m in meshes:
        m.close()


def test_a_silent_peer_ends_a_receive_and_a_send_it_does_not_take_within_the_timeout():
    """The connections block in the kernel, bounded by SO_RCVTIMEO/SO_SNDTIMEO: a receive from
    a live peer that sends nothing, and a send of more than the socket buffers hold to a peer
    that reads nothing, each fail with PeerGone after about the group's timeout (0.5 s here),
    not before and not much after."""
    import time

    from _socket_pair import socket_pair

    from kernels.pytorch.errors import PeerGone
    a, b = socket_pair(2, timeout_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(PeerGone, match="within the group's timeout"):
        b.recv([torch.empty(4)], 0, 1)
    assert 0.45 <= time.monotonic() - t0 < 5
    t0 = time.monotonic()
    with pytest.raises(PeerGone, match="sending to rank 1 failed"):
        a.send([torch.ones(64 << 20, dtype=torch.uint8)], 1, 2).wait()
    assert 0.45 <= time.monotonic() - t0 < 10
    a.close()
    b.close()


def test_a_peer_gone_mid_call_ends_a_streaming_rank_with_peer_gone_not_a_hang(monkeypatch):
    """Rank 1 closes its connections instead of running its share: rank 0's ring, its send of
    the block being reduced already posted as a stream, raises PeerGone within seconds (the
    stream is aborted, not waited for forever)."""
    import time

    from _socket_pair import socket_pair

    from kernels.pytorch import schedule_share as share
    from kernels.pytorch.errors import PeerGone
    from synth import baseline, build_fabric
    from topo_probe.machines.generators import fully_connected
    sched = baseline("ring", build_fabric(fully_connected(2)), "allreduce")
    monkeypatch.setattr(share, "STREAM_MAX_RANKS", 2)
    a, b = socket_pair(2)
    aborted: list = []
    plain = a.send_stream

    def counted(*args):
        s = plain(*args)
        stop = s.abort
        s.abort = lambda: (aborted.append(1), stop())
        return s
    monkeypatch.setattr(a, "send_stream", counted)
    b.close()
    x, errors = torch.ones(1 << 20), []

    def rank0():
        try:
            share.run_share(sched, x, x, x.numel(), op="sum", rank=0, transport=share.GroupTransport(a))
        except PeerGone as e:
            errors.append(e)
    t0 = time.monotonic()
    t = threading.Thread(target=rank0)
    t.start()
    t.join(15)
    assert not t.is_alive() and len(errors) == 1 and aborted == [1]
    assert time.monotonic() - t0 < 15
    a.close()
