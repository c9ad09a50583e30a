"""kernels.native.device_program, run on the emulator (tests/kernels/native/_emulator.py):
every collective, dtype and op, in-place and out-of-place, uneven sizes, every schedule source
(baselines on presets, random valid schedules, hand-written), 1-4 channels and 1-3 slices, in
random interleavings, against NumPy; and the detectors themselves against planted faults."""

import numpy as np
import pytest
from _campaign import examples
from _emulator import DeadlockDetected, EmulatedNativeLayer, Emulator, RaceDetected
from _schedules import DTYPES, OPS, check_result, direct, draw_schedule, make_inputs, ring, run_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.backends.executor import program_for
from kernels.native.device_program import KIND_MASK, KINDS, PUBLISH, build_device_program, choose_channels, piece_bounds
from kernels.program.lowering import lower

#: randomized interleaved runs: 700 drawn cases per CI run (2,600 in the campaign profile), each
#: run once or twice
SETTINGS = settings(derandomize=True, deadline=None, database=None, max_examples=examples(700, 2600),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(st.data())
def test_emulated_native_matches_numpy(data):
    sched, _ = draw_schedule(data, sources=("baseline", "baseline", "random", "hand"))
    count = data.draw(st.sampled_from([1, 2, 3, 5, 7, 8, 16, 31, 40, 67]), label="count")
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    op = data.draw(st.sampled_from(OPS), label="op")
    inplace = data.draw(st.booleans(), label="inplace")
    layer = EmulatedNativeLayer(seed=data.draw(st.integers(0, 2**20), label="layer seed"))
    run_case(sched, count, dtype, op, inplace, [layer], data.draw(st.integers(0, 2**20), label="seed"))
    ops = program_for(sched, count, dtype, inplace=inplace, op=op).num_ops
    assert layer.runs >= 1 or ops == 0 or inplace   # in-place bindings may give another program


#: seeded interleavings per program below; with the property test's 700 cases (one or two
#: calls each) and the tests after it a CI run emulates 8,509 interleaved calls (counted)
INTERLEAVINGS = 2500


@pytest.mark.parametrize("coll,n,count,ch,sl", [("allreduce", 4, 13, 2, 2), ("alltoall", 5, 6, 1, 1),
                                                  ("reducescatter", 3, 10, 3, 1)])
def test_many_interleavings_of_one_program(coll, n, count, ch, sl):
    """One program, INTERLEAVINGS random interleavings (records cut into parts in half of
    them), flags kept across all calls, each result compared with NumPy (int64: exact)."""
    sched = ring(coll, n) if coll != "alltoall" else direct(coll, n)
    prog = lower(sched, count, "int64")
    dp = build_device_program(prog, ch, slices=sl)
    rng = np.random.default_rng(7)
    sends = make_inputs(coll, n, count, "int64", "sum", None, rng)
    em = Emulator(dp)
    for seed in range(INTERLEAVINGS):
        bufs = {(r, "input"): sends[r] for r in range(n)}
        bufs.update({(r, name): np.full(size, 9, np.int64) for r in range(n) for name, size in prog.sizes[r].items()
                     if name != "input"})
        em.run(bufs, seed=seed, split=seed % 2 == 0)
        check_result(coll, n, count, sends, [bufs[(r, "output")] for r in range(n)], "sum", None, "int64")
    assert em.epoch == INTERLEAVINGS


@pytest.mark.parametrize("ranks", [2, 5, 16])
def test_ring_blocks_and_waits_are_what_the_ring_needs(ranks):
    """A ring all-reduce in one channel: one block per rank; each rank's step-s record waits
    for exactly its left neighbour's record of step s-1 (hand-counted: 2(n-1) records, the
    first waits for nothing)."""
    dp = build_device_program(lower(ring("allreduce", ranks), 4 * ranks, "float32"), 1, slices=1)
    assert dp.num_blocks == ranks
    for b in range(ranks):
        recs = list(dp.block_records(b))
        assert len(recs) == 2 * (ranks - 1)
        r = int(dp.block_rank[b])
        for j, i in enumerate(recs):
            waits = [tuple(w) for w in dp.waits[dp.wait_start[i]:dp.wait_start[i + 1]]]
            left = int(np.nonzero(dp.block_rank == (r - 1) % ranks)[0][0])
            assert (left, j - 1) in waits if j else waits == []


def test_records_cover_every_op_exactly_once():
    """The records of all blocks write, per op, exactly the elements the op writes (counted
    against the op list), for uneven sizes in several channels and slices."""
    prog = lower(ring("allgather", 3, 2), 1001, "float16")
    for ch, sl in ((1, 1), (3, 2), (7, 3)):
        dp = build_device_program(prog, ch, slices=sl)
        written = {}
        for rec in dp.records:
            key = (int(rec[1]), )
            written.setdefault(key, []).append((int(rec[2]), int(rec[2] + rec[7])))
        total = sum(int(r[7]) for r in dp.records)
        assert total == sum(o.dst.size for o in prog.ops())
        assert set((dp.records[:, 0] & ~PUBLISH).tolist()) <= set(KINDS.values())


def test_piece_bounds_are_vector_aligned_and_cover():
    for length in (0, 1, 3, 17, 1000, 4099):
        for pieces in (1, 2, 3, 8):
            for item in (1, 2, 4, 8):
                b = piece_bounds(length, pieces, item)
                assert b[0] == 0 and b[-1] == length and b == sorted(b) and len(b) == pieces + 1
                v = 16 // item
                assert all(x % v == 0 for x in b[1:-1] if x != length)


def test_channels_grow_with_size_and_respect_the_block_limit():
    small = lower(ring("allreduce", 8), 256, "float32")
    big = lower(ring("allreduce", 8), 1 << 22, "float32")
    assert choose_channels(small, 264) == 1
    assert choose_channels(big, 264) == 264 // 8
    assert choose_channels(big, 16) == 2


def test_one_writer_gets_every_block_the_card_holds():
    """A gather has one writing rank: its channels fill the card (264 blocks on an H100), not
    a fixed cap (64 left half the SMs idle: 46 % of the copy bandwidth on an H100)."""
    from synth.baselines import baseline
    from synth.ir.fabric import build_fabric
    from topo_probe.machines.generators import fully_connected
    g = lower(baseline("direct", build_fabric(fully_connected(8)), "gather", root=0), 1 << 23, "float32")
    assert {o.rank for o in g.ops()} == {0}
    assert choose_channels(g, 264) == 264


def test_deadlock_detector_finds_a_planted_cycle():
    dp = build_device_program(lower(ring("allreduce", 3), 6, "int32"), 1, slices=1)
    waits = dp.waits.copy()
    # make block 0's first record wait for block 1's last record, which (transitively) waits for block 0
    first = int(dp.block_start[0])
    waits = np.insert(waits, dp.wait_start[first], [1, int(dp.block_start[2] - dp.block_start[1] - 1)], axis=0)
    ws = dp.wait_start.copy()
    ws[first + 1:] += 1
    bad = type(dp)(**{**dp.__dict__, "waits": waits, "wait_start": ws})
    bufs = {(r, n): np.zeros(s, np.int32) for r in range(3) for n, s in
            lower(ring("allreduce", 3), 6, "int32").sizes[r].items()}
    with pytest.raises(DeadlockDetected, match="deadlock: .*block 0"):
        Emulator(bad).run(bufs)


def test_race_detector_finds_a_dropped_wait():
    """Dropping every wait of a ring lets a rank read a partial its neighbour is still writing;
    some interleaving shows it as a race."""
    prog = lower(ring("allreduce", 4), 64, "int32")
    dp = build_device_program(prog, 1, slices=1)
    bare = type(dp)(**{**dp.__dict__, "waits": dp.waits[:0], "wait_start": np.zeros_like(dp.wait_start)})
    bufs = {(r, n): np.zeros(s, np.int32) for r in range(4) for n, s in prog.sizes[r].items()}
    with pytest.raises(RaceDetected):
        for seed in range(200):
            Emulator(bare).run(bufs, seed=seed)


@pytest.mark.parametrize("dtype,op", [("float16", "avg"), ("float32", "sum"), ("int8", "prod"), ("bfloat16", "avg")])
def test_reduce_chains_fuse_and_give_the_same_bits(dtype, op):
    """Direct all-reduce on 8 ranks: each rank's 7 reduces into its chunk become one chain
    record (hand-counted: 1 chain + 7 copies per rank instead of 14 records; ranks 2-7 sum in
    rank order, so their chain starts with a copy of rank 0's piece, one more unfused record
    each, fused into the chain), and the fused program gives bit-for-bit what the unfused one
    gives (same order, same roundings)."""
    n, count = 8, 8 * 5 + 3
    prog = lower(direct("allreduce", n), count, dtype, op=op)
    fused, plain = build_device_program(prog, 1), build_device_program(prog, 1, fuse=False)
    assert plain.num_records == n * 14 + (n - 2) and fused.num_records == n * 8
    kinds = fused.records[:, 0] & KIND_MASK
    assert (kinds == KINDS["reduce_chain"]).sum() == n and int(fused.records[kinds == 6, 4].min()) == n - 1
    sends = make_inputs("allreduce", n, count, dtype, op, None, np.random.default_rng(5))
    outs = []
    for dp in (fused, plain):
        bufs = {(r, "input"): sends[r].copy() for r in range(n)}
        bufs.update({(r, name): np.zeros(size, sends[0].dtype) for r in range(n) for name, size in prog.sizes[r].items()
                     if name != "input"})
        Emulator(dp).run(bufs, seed=3)
        outs.append([bufs[(r, "output")].view(np.uint8) for r in range(n)])
    assert all(np.array_equal(a, b) for a, b in zip(*outs))
    check_result("allreduce", n, count, sends, [o.view(sends[0].dtype) for o in outs[0]], op, None, dtype)


def test_a_waited_for_reduce_does_not_fuse():
    """Ring reduce-scatter: every reduce is waited for by the next rank, so nothing fuses."""
    prog = lower(ring("reducescatter", 4), 12, "float32")
    assert build_device_program(prog, 1).num_records == build_device_program(prog, 1, fuse=False).num_records


def test_resolved_records_and_waits_hold_absolute_addresses():
    """Hand-computed: slot s at 0x10000 * (s + 1); float32, so offset o is 4 * o bytes; a chain's
    src is its row in the source list; a wait's flag address is the block's entry."""
    from kernels.native.device_program import resolve_records, resolve_sources, resolve_waits
    prog = lower(direct("allreduce", 8), 16, "float32")       # chains whose source rows (up to 48)
    dp = build_device_program(prog, 1)                         # outnumber the 16 slots
    assert len(dp.sources) > len(dp.slots)
    table = np.array([0x10000 * (s + 1) for s in range(len(dp.slots))], np.uint64)
    res = resolve_records(dp, table, 0x900000)
    srcs = resolve_sources(dp, table)
    for rec, row in zip(dp.records, res):
        assert int(row[0]) == 0x10000 * (int(rec[1]) + 1) + 4 * int(rec[2])
        assert int(row[3]) == int(rec[7]) and int(row[4]) == int(rec[0])
        if rec[0] & KIND_MASK == KINDS["reduce_chain"]:
            assert int(row[1]) == 0x900000 + 8 * int(rec[3])
            first = dp.sources[int(rec[3])]
            assert int(srcs[int(rec[3])]) == 0x10000 * (int(first[0]) + 1) + 4 * int(first[1])
    flags = np.array([0xA000 + 8 * b for b in range(dp.num_blocks)], np.uint64)
    w = resolve_waits(dp, flags).reshape(-1, 2)
    assert w[:, 0].tolist() == [0xA000 + 8 * int(b) for b in dp.waits[:, 0]]
    assert w[:, 1].tolist() == dp.waits[:, 1].tolist()


@pytest.mark.parametrize("dtype,op", [("float32", "sum"), ("bfloat16", "avg"), ("int32", "prod"), ("float64", "max")])
def test_one_shot_allreduce_is_one_record_per_rank_and_exact(dtype, op):
    """One-shot all-reduce on 8 ranks out of place: the 8 per-chunk chains of each rank join
    into one record covering the whole buffer, with no wait at all (hand-counted: 8 records,
    0 waits; unjoined, ranks 2-7 copy rank 0's chunk in before their rank-order sum: 8 more
    records each); the joined program gives bit for bit what the unjoined one gives, in random
    interleavings, and in place it stays right (the lowering's scratch then adds waits)."""
    from synth.baselines import baseline
    from synth.ir.fabric import build_fabric
    from topo_probe.machines.generators import fully_connected
    n, count = 8, 8 * 7 + 5
    sched = baseline("oneshot", build_fabric(fully_connected(n)), "allreduce")
    prog = lower(sched, count, dtype, op=op)
    joined, plain = build_device_program(prog, 1), build_device_program(prog, 1, fuse=False)
    assert joined.num_records == n and len(joined.waits) == 0 and plain.num_records == n * n * (n - 1) + (n - 2) * n
    assert joined.records[:, 7].tolist() == [count] * n
    sends = make_inputs("allreduce", n, count, dtype, op, None, np.random.default_rng(11))
    outs = []
    for dp, seed in ((joined, 1), (plain, 2)):
        bufs = {(r, "input"): sends[r].copy() for r in range(n)}
        bufs.update({(r, name): np.zeros(size, sends[0].dtype) for r in range(n) for name, size in prog.sizes[r].items()
                     if name != "input"})
        Emulator(dp).run(bufs, seed=seed, split=True)
        outs.append([bufs[(r, "output")].view(np.uint8) for r in range(n)])
    assert all(np.array_equal(a, b) for a, b in zip(*outs))
    check_result("allreduce", n, count, sends, [o.view(sends[0].dtype) for o in outs[0]], op, None, dtype)
    for seed in range(3):
        run_case(sched, count, dtype, op, True, [EmulatedNativeLayer(seed=seed)], seed)


def test_contiguous_records_join_only_without_a_hazard():
    """Hand-made records (kind, dst slot, dst off, src slot, src off, acc slot, acc off, count,
    tile, tile stride): copies continuing each other join; a join whose reads would overlap its
    own write at another position (slot 0: write [0, 8), read [4, 12)) is refused, as are kind
    or slot changes and tiled records (their elements are not contiguous)."""
    from kernels.native.device_program import _joined
    copy = KINDS["copy"]
    a, b = [copy, 1, 0, 2, 0, -1, 0, 4, 0, 0], [copy, 1, 4, 2, 4, -1, 0, 4, 0, 0]
    assert _joined(a, [], b, []) == ([copy, 1, 0, 2, 0, -1, 0, 8, 0, 0], [])
    assert _joined([copy, 0, 0, 0, 4, -1, 0, 4, 0, 0], [], [copy, 0, 4, 0, 8, -1, 0, 4, 0, 0], []) is None
    assert _joined(a, [], [KINDS["reduce"], 1, 4, 2, 4, 1, 4, 4, 0, 0], []) is None
    assert _joined(a, [], [copy, 1, 4, 3, 4, -1, 0, 4, 0, 0], []) is None
    assert _joined(a, [], [copy, 1, 5, 2, 4, -1, 0, 4, 0, 0], []) is None
    assert _joined(a, [], [copy, 1, 4, 2, 4, -1, 0, 4, 4, 8], []) is None
    assert _joined([copy, 1, 0, 2, 0, -1, 0, 4, 4, 8], [], b, []) is None
    red = KINDS["reduce"]                                  # dst == acc element for element: allowed
    assert _joined([red, 1, 0, 2, 0, 1, 0, 4, 0, 0], [], [red, 1, 4, 2, 4, 1, 4, 4, 0, 0], []) is not None


@settings(derandomize=True, deadline=None, max_examples=400)
@given(st.integers(1, 5000), st.integers(1, 9), st.sampled_from([1, 2, 4, 8]), st.sampled_from([None, 1, 2, 3, 5]),
       st.sampled_from([None, 0, 16, 32, 48, 4096]))
def test_channel_pieces_partition_the_op(length, channels, item, slices, tile_bytes):
    """Every element of an op lies in exactly one record of one channel, whatever the layout
    (counted against a brute-force coverage array); tiled records hold whole tiles of their own
    channel (tile g to channel g mod channels) and only the op's last tile may be short."""
    from kernels.native.device_program import channel_pieces, record_runs, tile_elements
    hits = np.zeros(length, np.int64)
    t = tile_elements(length, channels, item, tile_bytes)
    for c in range(channels):
        for lo, n, tile, stride in channel_pieces(length, channels, c, item, slices, tile_bytes):
            assert n > 0 and tile == t and stride == channels * t
            for off, k in record_runs(n, tile, stride, 0, n):
                hits[lo + off:lo + off + k] += 1
                if t:
                    g, within = divmod(lo + off, t)
                    assert g % channels == c and within == 0 and (k == t or lo + off + k == length)
    assert hits.tolist() == [1] * length


def test_tiles_deal_large_ops_to_the_channels_in_turn():
    """Hand-counted: 2 ranks' all-gather of 40 float32 in 2 channels with 16-byte tiles (4
    elements): each op (20 elements, 5 tiles) gives channel 0 tiles 0, 2, 4 (12 elements from
    element 0, stride 8) and channel 1 tiles 1, 3 (8 elements from element 4); the emulated
    call is exact and race-free; with tiles off the pieces are contiguous halves."""
    s = direct("allgather", 2, 1)
    prog = lower(s, 20, "float32")
    dp = build_device_program(prog, 2, slices=1, tile_bytes=16)
    assert sorted((int(r[2]) % 20, int(r[7]), int(r[8]), int(r[9])) for r in dp.records) == \
        sorted([(0, 12, 4, 8), (4, 8, 4, 8)] * (len(dp.records) // 2))
    plain = build_device_program(prog, 2, slices=1, tile_bytes=None)
    assert sorted((int(r[2]) % 20, int(r[7]), int(r[8])) for r in plain.records) == \
        sorted([(0, 12, 0), (12, 8, 0)] * (len(plain.records) // 2))
    sends = make_inputs("allgather", 2, 20, "float32", "sum", None, np.random.default_rng(5))
    for seed in range(20):
        bufs = {(r, "input"): sends[r].copy() for r in range(2)}
        bufs.update({(r, name): np.zeros(size, np.float32) for r in range(2) for name, size in prog.sizes[r].items()
                     if name != "input"})
        Emulator(dp).run(bufs, seed=seed)
        check_result("allgather", 2, 20, sends, [bufs[(r, "output")] for r in range(2)], "sum", None, "float32")


def test_tiles_must_be_whole_vectors():
    with pytest.raises(Exception, match="tile_bytes must be a positive multiple of 16"):
        build_device_program(lower(direct("allgather", 2, 1), 20, "float32"), 2, tile_bytes=24)
