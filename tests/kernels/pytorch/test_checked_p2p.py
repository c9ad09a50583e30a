"""kernels/pytorch/checked_p2p.py on 2 and 4 spawned ranks (``_checked_p2p_jobs.p2p_job``): matching
send/recv (isend/irecv, batch_isend_irecv) equals gloo bit for bit; a send whose element count or dtype
differs from the matching recv's tensor raises P2PMismatch (a TopocollError and a RuntimeError)
on the receiving rank only, leaves its tensor as it was, kills no process (before: gloo's
EnforceNotMet aborted the receiver) and the next message arrives intact; also with irecvs
outstanding, tags out of order and a receive from any source; at the inline threshold (0, 1, T - 1,
T, T + 1 elements) every message arrives bit for bit, and a count, dtype or tag mismatch just below
or above it is caught the same way.  Without processes: any header (hostile words included) ends in
the data or a TopocollError, and posts at most the announced receive; any size and dtype goes
through the sender's and receiver's code bit for bit, inline (one message) up to INLINE_BYTES."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

from _checked_p2p_jobs import DTYPES, SIZES  # noqa: E402
from _torch_dist import checked, merged, shared_part  # noqa: E402

p2p_results = shared_part("p2p")


def test_matching_traffic_equals_gloo_bit_for_bit(p2p_results):
    n, results = p2p_results
    assert checked(results, "match") == n * len(DTYPES) * len(SIZES)
    assert not merged(results, "match")


def test_sizes_at_the_inline_threshold_arrive_bit_for_bit(p2p_results):
    _, results = p2p_results
    assert checked(results, "edges") == 3 * 5
    assert not merged(results, "edges")


@pytest.mark.parametrize("family", ["mismatch", "outstanding", "anysource", "edgemismatch"])
def test_a_mismatch_raises_on_the_receiver_and_the_next_message_arrives(p2p_results, family):
    n, results = p2p_results
    assert all("__missing__" not in res for res in results)          # no process died
    assert checked(results, family) >= 3
    assert not merged(results, family)
    assert not merged(results, "alive") and checked(results, "alive") == n


class _Done:
    """A gloo Work that is already complete (from ``source``)."""

    def __init__(self, source: int = 0) -> None:
        self.source = source

    def wait(self):
        return True

    def _source_rank(self) -> int:
        return self.source


class _Payload:
    """The payload group of a receiver: a receive fills its tensor with 0x5A bytes (small ones)."""

    def __init__(self) -> None:
        self.posted = []

    def recv(self, tensors, src, tag):
        self.posted.append((tensors[0].numel(), tensors[0].dtype, src, tag))
        if tensors[0].numel() <= 1 << 16:
            tensors[0].view(-1).view(torch.uint8).fill_(0x5A)
        return _Done(src)


def _finish(words, tensor, tail: bytes = b""):
    """Receive a header message of ``words`` then ``tail`` as gloo leaves it in a header receive
    (at the front of the real posted buffer, the rest as it was: zero)."""
    from kernels.pytorch.checked_p2p import CheckedP2P, P2PWork, _header_buffer
    p2p = CheckedP2P(_Payload(), None, 1, timeout_s=0.05)
    work = P2PWork([tensor], "recv")
    sent = torch.tensor(words, dtype=torch.int64).view(torch.uint8).numpy().tobytes() + tail
    buf = _header_buffer()
    assert len(sent) <= buf.numel(), "gloo would abort: message larger than the posted receive"
    if sent:
        buf[:len(sent)].copy_(torch.frombuffer(bytearray(sent), dtype=torch.uint8))
    p2p._finish(work, tensor, buf, _Done(0), 0, 3)
    return p2p.payload.posted, work


def test_a_matching_header_fills_the_tensor_a_mismatch_drains_into_scratch():
    from kernels.pytorch.checked_p2p import _MAGIC
    from kernels.pytorch.dtypes import any_dtype_code
    t = torch.zeros(6, dtype=torch.int32)
    posted, work = _finish([_MAGIC, 0, 6, any_dtype_code(torch.int32)], t)
    assert work.wait() and posted == [(6, torch.int32, 0, 3)] and t.view(torch.uint8).eq(0x5A).all()
    t = torch.zeros(6, dtype=torch.int32)
    posted, work = _finish([_MAGIC, 0, 6, any_dtype_code(torch.float32)], t)       # same bytes, other dtype
    with pytest.raises(RuntimeError, match=r"rank 0 sent 6 elements of float32, the receiving tensor holds "
                                           r"6 elements of int32") as e:
        work.wait()
    assert type(e.value).__name__ == "P2PMismatch" and posted == [(24, torch.uint8, 0, 3)] and not t.any()


@settings(max_examples=300, deadline=None)
@given(magic=st.sampled_from([0x7470_3270, 0x7470_3269, 0, -1, 2**62]), seq=st.integers(-3, 3),
       count=st.integers(-5, 2**62), code=st.integers(-2, 80), size=st.integers(0, 8), ends=st.booleans())
def test_any_header_ends_in_the_data_or_a_topocoll_error(magic, seq, count, code, size, ends):
    """A header is checked before anything is posted: a bad magic, count or code is PeerGone with
    nothing posted, as is an inline header (0x74703269) whose message does not hold its announced
    bytes (0x5A) then the trailer (``ends`` False, or too many to fit); a header ahead of its turn
    times out (PeerGone); otherwise exactly one receive of the announced size and dtype is posted
    (none for an inline one), and the tensor changes (to 0x5A bytes) only when they match."""
    from kernels.pytorch.checked_p2p import _TRAILER, INLINE_BYTES
    from kernels.pytorch.dtypes import ANY_DTYPES, any_dtype_code
    from topo_probe.errors import TopocollError
    t = torch.zeros(size)
    inline = magic == 0x7470_3269
    valid = magic in (0x7470_3270, 0x7470_3269) and count >= 0 and 1 <= code <= len(ANY_DTYPES)
    fits = valid and count * ANY_DTYPES[code - 1].itemsize <= INLINE_BYTES
    tail = b"\x5a" * (count * ANY_DTYPES[code - 1].itemsize) + _TRAILER if inline and ends and fits else b""
    posted, work = _finish([magic, seq, count, code], t, tail)
    valid = valid and not (inline and not (ends and fits))
    match = valid and seq == 0 and count == size and code == any_dtype_code(torch.float32)
    if match:
        assert work.wait() and posted == ([] if inline else [(size, torch.float32, 0, 3)])
        assert t.view(torch.uint8).eq(0x5A).all()
        return
    with pytest.raises(TopocollError) as e:
        work.wait()
    assert isinstance(e.value, RuntimeError) and not t.any()
    if not valid or seq != 0:
        assert type(e.value).__name__ == "PeerGone" and posted == []
    elif type(e.value).__name__ == "P2PMismatch":
        assert posted == ([] if inline else [(count * ANY_DTYPES[code - 1].itemsize, torch.uint8, 0, 3)])  # drained
    else:                                         # a scratch this host cannot hold
        assert type(e.value).__name__ == "PeerGone" and posted == [] and "more than this host" in str(e.value)


@pytest.mark.parametrize("job_results", [2], indirect=True, ids=["2-ranks"])
def test_futures_waits_timeouts_and_unchecked_gloo_beside_checked_receives(job_results):
    """_checked_p2p_jobs.robust_job on 2 ranks (real gloo; a part of the shared ``job_results`` job,
    conftest.py): a send's get_future does not block and its wait() works twice; wait(timeout) is a
    RuntimeError in time; a receive on the group's gloo does not take an outstanding checked receive's
    payload."""
    from _torch_dist import part_results
    results = part_results(job_results, "robust")
    assert not merged(results, "robust")
    assert checked(results, "robust") >= 5


class _Wire:
    """Both ends of one pair and tag without processes: the sender's groups keep what it sends; the
    receiver's header receive takes the next header message as gloo's TCP pair does (its bytes at
    the front of the posted buffer, which must be at least as large: gloo aborts otherwise) and
    its payload receive the next payload (byte counts equal, as ``_scratch`` and the match give)."""

    def __init__(self) -> None:
        self.headers, self.payloads = [], []

    def group(self, kind: str):
        wire = self

        class _Group:
            def send(self, tensors, dst, tag):
                getattr(wire, kind).append(tensors[0].reshape(-1).view(torch.uint8).clone())
                return _Done()

            def recv(self, tensors, src, tag):
                sent = wire.payloads.pop(0)
                into = tensors[0].reshape(-1).view(torch.uint8)
                assert sent.numel() == into.numel(), (sent.numel(), into.numel())
                into.copy_(sent)
                return _Done(src)
        return _Group()

    def deliver(self, tensor, tag: int = 0):
        """The receiver's side of one message into ``tensor``: its Work and the payloads posted."""
        from kernels.pytorch.checked_p2p import CheckedP2P, P2PWork, _header_buffer
        p2p = self.receiver
        buf, sent = _header_buffer(), self.headers.pop(0)
        assert sent.numel() <= buf.numel(), "gloo would abort: message larger than the posted receive"
        buf[:sent.numel()].copy_(sent)
        work = P2PWork([tensor], "recv")
        posted = len(self.payloads)
        CheckedP2P._finish(p2p, work, tensor, buf, _Done(0), 0, tag)
        return work, posted - len(self.payloads)


def _pair():
    from kernels.pytorch.checked_p2p import CheckedP2P
    wire = _Wire()
    sender = CheckedP2P(wire.group("payloads"), wire.group("headers"), 0, timeout_s=0.05)
    wire.receiver = CheckedP2P(wire.group("payloads"), None, 1, timeout_s=0.05)
    return sender, wire


def _random_bits(dtype, count: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (count * dtype.itemsize,), generator=g, dtype=torch.uint8).view(dtype)


@settings(max_examples=200, deadline=None)
@given(dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.uint8, torch.int64, torch.bool]),
       count=st.integers(0, 3 * (16 << 10)), seed=st.integers(0, 2**31 - 1))
def test_a_message_of_any_size_arrives_bit_for_bit_inline_up_to_the_threshold(dtype, count, seed):
    """Any size of any of these dtypes arrives bit for bit (NaN payloads included); up to
    INLINE_BYTES bytes as one message with the header (no payload posted), above as two."""
    from kernels.pytorch.checked_p2p import INLINE_BYTES
    sender, wire = _pair()
    sent = _random_bits(dtype, count, seed) if dtype != torch.bool else _random_bits(torch.uint8, count, seed).bool()
    sender.send([sent], 1, 0).wait()
    inline = count * dtype.itemsize <= INLINE_BYTES
    assert (len(wire.headers), len(wire.payloads)) == (1, 0 if inline else 1)
    got = torch.empty(count, dtype=dtype)
    work, posted = wire.deliver(got)
    assert work.wait() and posted == (0 if inline else 1)
    assert torch.equal(got.view(torch.uint8), sent.view(torch.uint8))


@pytest.mark.parametrize("inline", [True, False])
@pytest.mark.parametrize("kind", ["count", "dtype"])
def test_a_mismatch_below_and_above_the_threshold_raises_and_writes_no_byte(inline, kind):
    """float32 of threshold / 4 elements (inline) or one more (two messages) into a tensor of
    another count or another dtype of the same size: P2PMismatch, the tensor as it was, the sender's send completed, and the next message arrives."""
    from kernels.pytorch.checked_p2p import INLINE_BYTES
    from kernels.pytorch.errors import P2PMismatch
    sender, wire = _pair()
    count = INLINE_BYTES // 4 + (0 if inline else 1)
    assert sender.send([torch.arange(count, dtype=torch.float32)], 1, 0).wait()
    into = (torch.full((count - 1,), 7.0) if kind == "count" else torch.full((count,), 7, dtype=torch.int32))
    before = into.clone()
    work, _ = wire.deliver(into)
    with pytest.raises(P2PMismatch, match=rf"rank 0 sent {count} elements of float32"):
        work.wait()
    assert torch.equal(into.view(torch.uint8), before.view(torch.uint8)) and not wire.payloads
    sender.send([torch.arange(3, dtype=torch.int64)], 1, 0)
    nxt = torch.zeros(3, dtype=torch.int64)
    assert wire.deliver(nxt)[0].wait() and nxt.tolist() == [0, 1, 2]


def test_an_inline_header_that_claims_more_bytes_than_it_carries_is_out_of_step():
    """The header alone in the real posted buffer (zero behind it) claiming 2 float32: before the
    trailer, the zeros were taken as the payload and wait() was True."""
    from kernels.pytorch.checked_p2p import _MAGIC_INLINE
    from kernels.pytorch.dtypes import any_dtype_code
    t = torch.full((2,), 7.0)
    posted, work = _finish([_MAGIC_INLINE, 0, 2, any_dtype_code(torch.float32)], t)
    with pytest.raises(RuntimeError, match="out of step") as e:
        work.wait()
    assert type(e.value).__name__ == "PeerGone" and posted == [] and t.tolist() == [7.0, 7.0]


def test_a_truncated_inline_message_is_out_of_step_and_writes_no_byte():
    """The reviewer's case: a header claiming 100 float32 (400 bytes) with only 8 bytes behind it
    (2 ones): before, 98 zeros and wait() True; now PeerGone, the tensor as it was."""
    from kernels.pytorch.checked_p2p import _MAGIC_INLINE
    from kernels.pytorch.dtypes import any_dtype_code
    t = torch.full((100,), 7.0)
    posted, work = _finish([_MAGIC_INLINE, 0, 100, any_dtype_code(torch.float32)], t, torch.ones(2).numpy().tobytes())
    with pytest.raises(RuntimeError, match="does not end right after the 100 elements of float32") as e:
        work.wait()
    assert type(e.value).__name__ == "PeerGone" and posted == [] and t.eq(7.0).all()


@settings(max_examples=200, deadline=None)
@given(count=st.integers(0, (16 << 10) // 4), seed=st.integers(0, 2**31 - 1), data=st.data())
def test_an_inline_message_cut_short_or_with_bytes_after_it_is_out_of_step(count, seed, data):
    """The sender's own inline message of ``count`` float32, cut to any shorter length, or followed
    by bytes that are not all zero (as long as gloo would take it: within the posted buffer), is
    PeerGone and writes no byte; whole (or followed by zeros only: the same bytes in the buffer) it arrives."""
    from kernels.pytorch.checked_p2p import _INLINE_ROOM, _message
    sent = _random_bits(torch.float32, count, seed)
    whole = _message(0, sent)[0].numpy().tobytes()
    room = _INLINE_ROOM - len(whole)
    change = data.draw(st.one_of(st.integers(0, len(whole) - 1),
                                 st.binary(min_size=1, max_size=min(room, 64)) if room else st.nothing(),
                                 st.just(None)))
    message = whole if change is None else whole[:change] if isinstance(change, int) else whole + change
    t = torch.full((count,), 7.0)
    posted, work = _finish([], t, message)
    if change is None or isinstance(change, bytes) and not any(change):
        assert work.wait() and torch.equal(t.view(torch.uint8), sent.view(torch.uint8))
        return
    with pytest.raises(RuntimeError, match="out of step") as e:
        work.wait()
    assert type(e.value).__name__ == "PeerGone" and posted == [] and t.eq(7.0).all()


@settings(max_examples=100, deadline=None)
@given(st.integers(-5, 200))
def test_any_dtype_codes_number_every_torch_dtype_by_name(code):
    """The header's dtype word: every torch dtype (hand-listed samples included) has a distinct 1-based code
    in name order; any other code maps to no dtype."""
    from kernels.pytorch.dtypes import any_dtype_code, any_dtype_from_code
    every = sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str)
    assert {torch.float32, torch.bfloat16, torch.complex64, torch.bool} <= set(every)
    assert [any_dtype_code(t) for t in every] == list(range(1, len(every) + 1))
    assert any_dtype_from_code(code) == (every[code - 1] if 1 <= code <= len(every) else None)
