"""kernels.mpi.native without a GPU: every rank's share of a device program, each in its own
"process" (a backend that maps its peers' shared-memory blocks itself, so it sees their bytes at
other addresses, as CUDA IPC does), run in random interleavings of all ranks' blocks and checked
against the NumPy reference executor; pointer resolution checked against a fake IPC layer by
hand; the fingerprint check; the deadlock detector and the resolution check shown to fail on
planted faults."""

from __future__ import annotations

import random

import numpy as np
import pytest
from _native_shares import DeadlockDetected, ShmShareBackend, run_interleaved
from _schedules import direct, make_inputs, random_schedule, ring
from hypothesis import given, settings
from hypothesis import strategies as st

import kernels.mpi.native as native
from kernels.backends.executor import program_for
from kernels.backends.reference import run_reference
from kernels.mpi.native import Share, exports_digest, share_blocks
from kernels.native.device_program import TILE_BYTES
from kernels.program.ops import SCRATCH, is_float
from synth.ir.collectives import COMBINING, ROOTED
from topo_probe.errors import ProcessGroupMismatch

COLLS = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "gather", "scatter", "alltoall")


def _carve(backend, x: np.ndarray, pad: int) -> np.ndarray:
    """``x`` copied into shared memory ``pad`` elements into a larger allocation (base + offset)."""
    arena = backend.empty(x.size + pad + 3, x.dtype)
    out = arena[pad:pad + x.size]
    out[...] = x
    return out


def _buffers(backends, coll, n, count, sends, dt, root, inplace, rng):
    """Per-rank (send, recv) in each rank's shared memory, aliased in place as NCCL does."""
    from synth.ir.collectives import CollectiveSpec
    spec = CollectiveSpec(coll, n, 1, root if coll in ROOTED else None)
    out = []
    for r in range(n):
        be, pad = backends[r], rng.randint(0, 5)
        has_out = coll not in ("reduce", "gather") or r == spec.root
        rv = _carve(be, np.full(spec.output_blocks() * count, 7, dt), pad) if has_out else None
        s = None if sends[r] is None else _carve(be, sends[r], rng.randint(0, 5))
        if inplace and s is not None and rv is not None:
            if coll in ("allgather", "gather"):
                rv[r * count:(r + 1) * count] = sends[r]
                s = rv[r * count:(r + 1) * count]
            elif coll in ("reducescatter", "scatter"):
                rv = s[r * count:(r + 1) * count]
            else:
                rv[...] = sends[r]
                s = rv
        out.append((s, rv))
    return out


def make_shares(prog, n, backends, channels, fuse=False, tile_bytes=TILE_BYTES, protocol="simple"):
    shares = [Share(prog, r, backends[r], channels=channels, fuse=fuse, tile_bytes=tile_bytes, protocol=protocol)
              for r in range(n)]
    every = [s.descriptor() for s in shares]
    for s in shares:
        s.connect(every, "test")
    return shares


def attach_all(shares, prog, user):
    bufs = [{name: {"send": user[r][0], "recv": user[r][1]}[which] for name, which in prog.bindings[r].items()}
            for r in range(len(shares))]
    exports = [s.exports(b) for s, b in zip(shares, bufs)]
    keys = tuple(exports_digest(e) for e in exports)
    return [s.attach(keys, exports, b) for s, b in zip(shares, bufs)]


def _check(coll, sched, sends, user, op, dt):
    """Every rank's output against the reference executor (own, out-of-place copies)."""
    n = sched.ranks
    ref_s = [None if s is None else s.copy() for s in sends]
    ref_r = [None if rv is None else np.zeros(rv.size, dt) for _, rv in user]
    run_reference(sched, ref_s, ref_r, op=op)
    for r in range(n):
        got, want = user[r][1], ref_r[r]
        if want is None:
            continue
        if is_float(dt) and coll in COMBINING and op not in ("max", "min"):
            # the lowering reduces in the schedule's order, as the reference does: equal to 1 ulp
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                       rtol=4 * float(np.finfo(np.float32).eps) if dt.itemsize >= 4 else 2e-2,
                                       atol=1e-6 if dt.itemsize >= 4 else 5e-2, err_msg=f"rank {r}")
        else:
            assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), f"rank {r}: {got} != {want}"


def run_case(sched, count, dtype, op, inplace, seed, channels, fuse=False, calls=2, tile_bytes=TILE_BYTES,
             protocol="simple"):
    coll, n = sched.collective, sched.ranks
    dt = np.dtype(dtype)
    rng = random.Random(seed)
    backends = [ShmShareBackend(seed + r, run_now=False) for r in range(n)]
    try:
        sends = make_inputs(coll, n, count, dt, op, sched.root, np.random.default_rng(seed))
        user = _buffers(backends, coll, n, count, sends, dt, sched.root, inplace, rng)
        prog = program_for(sched, count, dt, inplace=inplace, op=op)
        shares = make_shares(prog, n, backends, channels, fuse, tile_bytes, protocol)
        bs = attach_all(shares, prog, user)
        for call in range(calls):            # flags only grow: the second call checks the epochs
            if call:
                for r, (s, rv) in enumerate(user):
                    if rv is not None and not (s is not None and np.shares_memory(s, rv)):
                        rv[...] = 7
                    if s is not None:
                        s[...] = sends[r]
            for s, b in zip(shares, bs):
                s.launch(b)
            run_interleaved([k for be in backends for k in be.pending], rng)
            for be in backends:
                be.pending.clear()
            _check(coll, sched, sends, user, op, dt)
        return shares
    finally:
        for be in backends:
            be.release()


_TYPES = {"float32": ("sum", "avg", "prod", "max"), "int32": ("sum", "avg", "min"), "bfloat16": ("sum", "max"),
          "float64": ("sum", "avg"), "uint8": ("max", "sum"), "int64": ("sum",)}


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.data())
def test_every_rank_share_in_its_own_process_matches_the_reference(data):
    coll = data.draw(st.sampled_from(COLLS))
    n = data.draw(st.integers(2, 8))
    root = data.draw(st.integers(0, n - 1)) if coll in ROOTED else None
    kind = data.draw(st.sampled_from(["direct", "ring", "random"]))
    if kind == "ring" and coll in ("allreduce", "allgather", "reducescatter"):
        sched = ring(coll, n, data.draw(st.integers(1, 2)))
    elif kind == "random":
        sched = random_schedule(coll, n, data.draw(st.integers(1, 2)), root, data.draw(st.integers(0, 999)))
    else:
        sched = direct(coll, n, data.draw(st.integers(1, 2)), root)
    dtype = data.draw(st.sampled_from(sorted(_TYPES)))
    op = data.draw(st.sampled_from(_TYPES[dtype])) if coll in COMBINING else "sum"
    count = data.draw(st.sampled_from([1, 3, 17, 61]))       # uneven: pieces and vectors cut unevenly
    run_case(sched, count, dtype, op, data.draw(st.booleans()), data.draw(st.integers(0, 9999)),
             channels=data.draw(st.integers(1, 3)), fuse=data.draw(st.booleans()),
             tile_bytes=data.draw(st.sampled_from([TILE_BYTES, 16, 32])))    # small tiles: dealt layouts


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.data())
def test_ll_shares_carry_their_lines_across_processes(data):
    """The LL protocol with one process per rank: each rank's LL region lives in its own
    "process" and is exported with its flags; a producer writes its lines, as 8-byte halves that
    land late and in any order, into the consumer's region through its own mapping; two calls
    (the second's lines must not be taken for the first's) against the reference executor."""
    coll = data.draw(st.sampled_from(COLLS))
    n = data.draw(st.integers(2, 6))
    root = data.draw(st.integers(0, n - 1)) if coll in ROOTED else None
    if coll in ("allreduce", "allgather", "reducescatter") and data.draw(st.booleans()):
        sched = ring(coll, n, data.draw(st.integers(1, 2)))
    else:
        sched = random_schedule(coll, n, data.draw(st.integers(1, 2)), root, data.draw(st.integers(0, 999)))
    dtype = data.draw(st.sampled_from(["float32", "int32", "bfloat16", "uint8", "float64"]))
    op = data.draw(st.sampled_from(["sum", "max", "avg"] if dtype != "uint8" else ["sum", "max"])) \
        if coll in COMBINING else "sum"
    shares = run_case(sched, data.draw(st.sampled_from([1, 3, 17, 61])), dtype, op, data.draw(st.booleans()),
                      data.draw(st.integers(0, 9999)), channels=data.draw(st.integers(1, 3)),
                      fuse=data.draw(st.booleans()), protocol="ll")
    assert all(s.dp.protocol == "ll" for s in shares)


def _ll_ring(n=4, count=40):
    """A ring all-reduce's program (and schedule), for the LL tests below."""
    return program_for(ring("allreduce", n), count, np.dtype("float32")), ring("allreduce", n)


def test_ll_lines_go_to_the_consumers_region_through_the_producers_mapping():
    """By hand, from the raw device program of a 4-rank ring all-reduce under LL: every LL
    region a producer writes is a consumer's on another rank, and the producer's process
    resolves it to its own mapping of that region (its mapped base of the consumer's handle +
    offset); the consumer reads its operand from its own region at the same offset."""
    from kernels.native.ll import LL_BUF
    from kernels.native.record_format import KIND_MASK, KINDS, ll_source
    prog, _ = _ll_ring(4, 40)
    fakes = [FakeIpc(r) for r in range(4)]
    shares = make_shares(prog, 4, fakes, channels=1, protocol="ll")
    user = [(fakes[r].alloc("send", 16, 160), fakes[r].alloc("recv", 48, 160)) for r in range(4)]
    bs = attach_all(shares, prog, user)
    dp, item, written, read = shares[0].dp, 4, 0, 0
    for p, (share, b) in enumerate(zip(shares, bs)):
        first, nb = share_blocks(dp, p)
        for i in range(int(dp.block_start[first]), int(dp.block_start[first + nb])):
            start, k = (int(x) for x in dp.records[i, 10:12])
            for t in range(start, start + k):
                slot, off = (int(x) for x in dp.ll_targets[t])
                q, name = dp.slots[slot]
                assert name == LL_BUF and q != p, f"rank {p} record {i} writes lines to {dp.slots[slot]}"
                lines = shares[q].ll_lines
                want = fakes[p].mapped[fakes[q].own[lines["addr"]][0]] + 128 + off * item
                assert int(b["sources"][len(dp.sources) + t]) == want, f"rank {p} record {i}: wrong LL target"
                written += 1
            word = int(dp.records[i, 0])
            if ll_source(word, 0) and word & KIND_MASK != KINDS["reduce_chain"]:
                slot, off = (int(x) for x in dp.records[i, 3:5])
                assert dp.slots[slot] == (p, LL_BUF)
                assert int(b["records"][i][1]) == share.ll_lines["addr"] + off * item
                read += 1
    assert written and read, (written, read)


def test_ll_lines_written_into_the_producers_own_region_are_caught(monkeypatch):
    """The LL check is not vacuous: a process that resolves its peers' LL regions to its own
    region (lines that never reach the consumer's process) gives wrong answers or hangs."""
    from kernels.native.ll import LL_BUF
    real = native.slot_table

    def own_region(dp, rank, local, remote):
        return real(dp, rank, local, {k: local[LL_BUF] if k[1] == LL_BUF else v for k, v in remote.items()})
    monkeypatch.setattr(native, "slot_table", own_region)
    with pytest.raises((AssertionError, DeadlockDetected)):
        run_case(ring("allreduce", 4), 40, "float32", "sum", False, 5, channels=1, protocol="ll", calls=1)


def test_a_peer_ll_region_that_is_not_mapped_is_refused_in_one_line(monkeypatch):
    """The LL regions are part of what a share must map: without the peers' regions, binding
    refuses in one line naming the rank and the region instead of launching into address 0."""
    from topo_probe.errors import BufferLayoutError
    prog, _ = _ll_ring(3, 12)
    fakes = [FakeIpc(r) for r in range(3)]
    real = Share.connect

    def connect_without_ll(self, every, what):
        real(self, [{**d, "ll": None} for d in every], what)
    monkeypatch.setattr(Share, "connect", connect_without_ll)
    shares = make_shares(prog, 3, fakes, channels=1, protocol="ll")
    user = [(fakes[r].alloc("send", 16, 48), fakes[r].alloc("recv", 48, 48)) for r in range(3)]
    with pytest.raises(BufferLayoutError, match=r"^native share of rank 0: rank \d's @ll buffer is used but not "
                                                r"mapped$"):
        attach_all(shares, prog, user)


def test_a_rank_that_never_launches_is_reported_as_a_deadlock():
    """The detector is not vacuous: drop one rank's launch and its peers' waits never end."""
    sched = ring("allreduce", 3)
    backends = [ShmShareBackend(r, run_now=False) for r in range(3)]
    try:
        prog = program_for(sched, 12, np.dtype("float32"))
        user = [(_carve(be, np.ones(12, np.float32), 1), _carve(be, np.zeros(12, np.float32), 2)) for be in backends]
        shares = make_shares(prog, 3, backends, 1)
        bs = attach_all(shares, prog, user)
        for s, b in list(zip(shares, bs))[1:]:
            s.launch(b)
        with pytest.raises(DeadlockDetected, match=r"rank [12] block \d+ record \d+ waits for block"):
            run_interleaved([k for be in backends for k in be.pending], random.Random(0))
    finally:
        for be in backends:
            be.release()


# ---------------------------------------------------------------------- pointer resolution
class FakeIpc:
    """A share backend with no memory: buffers are names at fake addresses, a handle opened in
    process p maps to a fake base of its own (not the owner's), closes are counted."""

    def __init__(self, rank: int) -> None:
        self.rank, self.mapped, self.closed = rank, {}, []
        self.own: dict[int, tuple[str, int]] = {}      # fake local address -> (handle, offset)

    def alloc(self, tag: str, offset: int, nbytes: int):
        addr = 0x1000_0000 * (self.rank + 1) + 0x10_0000 * len(self.own) + offset
        self.own[addr] = (f"r{self.rank}-{tag}", offset)
        return {"addr": addr, "nbytes": nbytes}

    def empty(self, n, dtype):
        return self.alloc(f"scratch{len(self.own)}", 64, n * np.dtype(dtype).itemsize)

    def flags(self, n):
        return self.alloc(f"flags{len(self.own)}", 128, 8 * n)

    @staticmethod
    def address(arr):
        return arr["addr"]

    def export(self, arr, what):
        handle, offset = self.own[arr["addr"]]
        return {"handle": handle, "offset": offset, "nbytes": arr["nbytes"]}

    def open(self, handle):
        return self.mapped.setdefault(handle, 0x7000_0000_0000 + 0x1_0000_0000 * self.rank
                                      + 0x100_0000 * (len(self.mapped) + 1))

    def close(self, base):
        self.closed.append(base)

    def upload(self, host):
        return host, 0xD000_0000 + 0x1000 * self.rank

    def prepare(self, share):
        return {}


def _resolution_case(n=3):
    sched = ring("allreduce", n)
    prog = program_for(sched, 40, np.dtype("float32"))
    fakes = [FakeIpc(r) for r in range(n)]
    shares = make_shares(prog, n, fakes, channels=2)
    user = [(fakes[r].alloc("send", 16 * (r + 1), 160), fakes[r].alloc("recv", 48, 160)) for r in range(n)]
    bs = attach_all(shares, prog, user)
    return prog, fakes, shares, user, bs


def check_resolution(prog, fakes, shares, user, bs) -> None:
    """By hand, from the raw device program: every pointer rank p's records and waits hold is
    its own address for its own buffers, else p's mapped base of the owner's handle + offset."""
    dp = shares[0].dp
    item = dp.dtype.itemsize

    def where(p, q, name):
        if name == SCRATCH:
            arr = shares[q].scratch
        else:
            arr = {"send": user[q][0], "recv": user[q][1]}[prog.bindings[q][name]]
        if p == q:
            return arr["addr"]
        handle, offset = fakes[q].own[arr["addr"]]
        return fakes[p].mapped[handle] + offset

    for p, (share, b) in enumerate(zip(shares, bs)):
        first, nb = share_blocks(dp, p)
        lo, hi = int(dp.block_start[first]), int(dp.block_start[first + nb])
        for i in range(dp.num_records):
            got = b["records"][i]
            if not lo <= i < hi:
                assert not got.any(), f"rank {p} resolved record {i} of another rank"
                continue
            for col, (sc, oc) in ((0, (1, 2)), (1, (3, 4)), (2, (5, 6))):
                slot, off = int(dp.records[i, sc]), int(dp.records[i, oc])
                want = 0 if slot < 0 else where(p, *dp.slots[slot]) + off * item
                assert int(got[col]) == want, f"rank {p} record {i} column {col}: {int(got[col]):#x} != {want:#x}"
        for w, (blk, j) in enumerate(dp.waits):
            q = int(dp.block_rank[blk])
            fq, _ = share_blocks(dp, q)
            flags = shares[q].flags
            base = flags["addr"] if q == p else fakes[p].mapped[fakes[q].own[flags["addr"]][0]] + 128
            assert int(share.waits[2 * w]) == base + 8 * (int(blk) - fq), f"rank {p} wait {w}: wrong flag address"
            assert int(share.waits[2 * w + 1]) == int(j)


def test_resolved_pointers_are_mapped_base_plus_offset_of_the_right_rank():
    prog, fakes, shares, user, bs = _resolution_case()
    check_resolution(prog, fakes, shares, user, bs)
    # each process opened each peer allocation once (flags, scratch if any, send, recv) and no own one
    for p, f in enumerate(fakes):
        assert all(not h.startswith(f"r{p}-") for h in f.mapped)
        assert sorted({h.split("-")[0] for h in f.mapped}) == [f"r{q}" for q in range(3) if q != p]


def test_the_resolution_check_catches_a_wrong_offset(monkeypatch):
    real = native.slot_table

    def off_by_one_element(dp, rank, local, remote):
        return real(dp, rank, local, {k: v + 4 for k, v in remote.items()})
    monkeypatch.setattr(native, "slot_table", off_by_one_element)
    with pytest.raises(AssertionError, match="column 1"):
        check_resolution(*_resolution_case())


def test_mappings_are_closed_when_the_last_binding_lets_go():
    prog, fakes, shares, user, bs = _resolution_case(2)
    assert shares[0].maps.open_count() == 3          # rank 1's flags, send and recv
    shares[0].close()
    assert sorted(fakes[0].closed) == sorted(set(fakes[0].mapped.values()))


# ---------------------------------------------------------------------- fingerprints
def test_ranks_with_another_device_program_all_raise_the_same_line():
    sched = ring("allreduce", 3)
    prog = program_for(sched, 3000, np.dtype("float32"))
    fakes = [FakeIpc(r) for r in range(3)]
    shares = [Share(prog, r, fakes[r], channels=2 if r == 1 else 1) for r in range(3)]
    every = [s.descriptor() for s in shares]
    msgs = []
    for s in shares:
        with pytest.raises(ProcessGroupMismatch) as err:
            s.connect(every, "native allreduce (ring)")
        msgs.append(str(err.value))
    assert len(set(msgs)) == 1 and "\n" not in msgs[0]
    assert msgs[0].startswith("native allreduce (ring): ranks disagree on the device program: ranks [0, 2] ")
    assert f"ranks [1] {shares[1].fingerprint}" in msgs[0]


def test_a_share_without_its_waits_is_caught_racing():
    """The race check is not vacuous: with every wait removed from the program, some record reads a
    peer's output while the peer still writes it."""
    import dataclasses

    from _native_shares import RaceDetected
    real = native.build_share_program

    def no_waits(program, channels, fuse=False, tile_bytes=TILE_BYTES):
        dp = real(program, channels, fuse=fuse, tile_bytes=tile_bytes)
        return dataclasses.replace(dp, wait_start=np.zeros_like(dp.wait_start), waits=np.zeros((0, 2), np.int32))
    caught = 0
    for seed in range(6):
        native.build_share_program = no_waits
        try:
            run_case(ring("allreduce", 3), 40, "int32", "sum", False, seed, 1, calls=1)
        except RaceDetected:
            caught += 1
        finally:
            native.build_share_program = real
    assert caught == 6
