"""The LL protocol (kernels/native/ll.py) without a GPU: the launcher through the CuPy stand-in
(_fake_cupy.py, whose LL stores land as 8-byte halves in any order, some late), bit for bit
against the host backend, call after call with new data (so a line left from an earlier call
read as fresh would give the earlier call's numbers); the rewrite itself (which waits become
LL edges, which records share a pass) checked against the program's regions."""

import numpy as np
import pytest
from _fake_cupy import FakeCupy
from _schedules import direct, ring
from hypothesis import given, settings
from hypothesis import strategies as st
from test_launcher import _case, _same, fake_launcher

import kernels.native.launcher as launcher
from kernels.native.device_program import build_device_program
from kernels.native.ll import LL_BUF
from kernels.native.record_format import BATCH, KIND_MASK, KINDS, LL, LL_SRC_SHIFT, PUBLISH, ll_units
from synth.ir.collectives import ROOTED


def _schedule(data, coll, n):
    root = data.draw(st.integers(0, n - 1)) if coll in ROOTED else None
    if coll in ("allreduce", "allgather", "reducescatter") and data.draw(st.booleans()):
        return ring(coll, n, data.draw(st.integers(1, 2)))
    if coll == "allreduce" and data.draw(st.booleans()):
        from synth.baselines import oneshot
        from synth.ir.fabric import build_fabric
        from topo_probe.machines.generators import fully_connected
        return oneshot.build(build_fabric(fully_connected(n)), "allreduce")
    return direct(coll, n, data.draw(st.integers(1, 2)), root)


@settings(max_examples=250, deadline=None, derandomize=True)
@given(st.data())
def test_ll_calls_match_the_host_backend_call_after_call(data):
    coll = data.draw(st.sampled_from(["allreduce", "allgather", "reducescatter", "alltoall", "reduce", "broadcast",
                                      "gather", "scatter"]))
    n = data.draw(st.integers(2, 8))
    sched = _schedule(data, coll, n)
    dtype = data.draw(st.sampled_from(["float32", "float16", "int8", "bfloat16", "float8_e5m2", "float64", "int64"]))
    op = data.draw(st.sampled_from(["sum", "prod", "max", "min", "avg"]))
    count = data.draw(st.sampled_from([1, 3, 7, 64, 301]))
    with fake_launcher(data.draw(st.integers(0, 99))):
        prog, bufs, got, want = _case(sched, count, dtype, op, seed=3)
        ctx = launcher.NativeContext(prog, [0] * n, channels=data.draw(st.integers(1, 3)),
                                     fuse=data.draw(st.booleans()), protocol="ll")
        assert ctx.dp.protocol == "ll" and ctx.route == "interpreter"
        for seed in (3, 4, 5):                  # new data each call; call 2 captures, 3 replays
            p2, bufs2, got2, want2 = _case(sched, count, dtype, op, seed=seed)
            assert p2.sizes == prog.sizes
            ctx.run(bufs2)
            _same(got2, want2)
        ctx.run(bufs)
        _same(got, want)


def _regions(dp, i):
    rec = dp.records[i]
    n = int(rec[7])
    return (int(rec[1]), int(rec[2]), int(rec[2]) + n)


def test_two_shot_allreduce_reads_its_peers_through_ll_lines():
    """Direct all-reduce (reduce-scatter, then all-gather): every all-gather copy reads a peer's
    reduced chunk, so every wait of the Simple program becomes an LL edge, each producer writes
    one region per consumer rank, and nothing publishes a flag."""
    from kernels.program.lowering import lower
    n, count = 4, 4 * 64
    simple = build_device_program(lower(direct("allreduce", n), count, "float32"), fuse=True)
    dp = build_device_program(lower(direct("allreduce", n), count, "float32"), fuse=True, protocol="ll")
    assert len(simple.waits) == n * (n - 1) and len(dp.waits) == 0
    words = dp.records[:, 0]
    assert not (words & PUBLISH).any() and (words & LL).all()
    assert int(((words >> LL_SRC_SHIFT) & 1).sum()) == n * (n - 1)
    assert len(dp.ll_targets) == n * (n - 1)
    assert dp.ll_bytes == tuple([(n - 1) * ll_units(count // n, 4) * 16] * n)
    assert [s for s in dp.slots if s[1] == LL_BUF] == [(r, LL_BUF) for r in range(n)]
    # each consumer's src is the LL region its producer writes
    targets = {tuple(t) for t in dp.ll_targets.tolist()}
    for i in np.nonzero((words >> LL_SRC_SHIFT) & 1)[0]:
        assert (int(dp.records[i, 3]), int(dp.records[i, 4])) in targets
        assert int(dp.records[i, 0]) & KIND_MASK == KINDS["copy"]


def test_passes_hold_records_that_touch_no_common_element():
    """Within a pass no record writes what another reads or writes (brute force over the pass's
    element ranges), a record with a flag wait starts a pass, a publishing record ends one."""
    from kernels.program.lowering import lower
    for sched, count in ((ring("allreduce", 5, 2), 97), (direct("allgather", 8), 16), (direct("alltoall", 6), 12),
                         (direct("reduce", 5, 1, 2), 40)):
        dp = build_device_program(lower(sched, count, "float32"), channels=2, protocol="ll")
        words = dp.records[:, 0]
        for b in range(dp.num_blocks):
            members: list[int] = []
            for i in dp.block_records(b):
                if words[i] & BATCH:
                    assert dp.wait_start[i] == dp.wait_start[i + 1], "a record joining a pass waits for a flag"
                    assert not words[i - 1] & PUBLISH, "a pass goes on past a published record"
                    members.append(i)
                else:
                    members = [i]
                _disjoint(dp, members)
        if sched.collective == "allgather":
            assert ((words & BATCH) != 0).sum() == 8 * 2 * 7, "each block's 8 copies should share one pass"


def _disjoint(dp, members):
    item = {}
    for i in members:
        ds, lo, hi = _regions(dp, i)
        for e in range(lo, hi):
            assert (ds, e) not in item, f"records {item.get((ds, e))} and {i} of one pass write one element"
            item[(ds, e)] = i
    for i in members:
        rec = dp.records[i]
        word = int(rec[0])
        if word & KIND_MASK != KINDS["reduce_chain"] and int(rec[3]) >= 0 and not (word >> LL_SRC_SHIFT) & 1:
            for e in range(int(rec[4]), int(rec[4]) + int(rec[7])):
                assert item.get((int(rec[3]), e), i) == i, f"record {i} reads what record {item[(int(rec[3]), e)]} writes"


def test_ll_needs_no_tiles_and_refuses_unknown_protocols():
    from kernels.program.lowering import lower
    from topo_probe.errors import InvalidArgument
    dp = build_device_program(lower(direct("allgather", 4), 1 << 16, "float32"), channels=4, protocol="ll")
    assert not dp.records[:, 8].any(), "an LL program was tiled"
    with pytest.raises(InvalidArgument, match="protocol must be 'simple' or 'll'"):
        build_device_program(lower(direct("allgather", 2), 4, "float32"), protocol="ll128")


def test_a_missing_ll_line_times_out_naming_it(monkeypatch):
    """A consumer whose LL line never arrives (its producer's output list emptied) ends in the
    timeout report, which names an LL line rather than a flag."""
    from topo_probe.errors import ExecutionTimeout
    cp = FakeCupy(seed=2)
    monkeypatch.setattr(launcher, "_cupy", lambda: cp)
    monkeypatch.setattr(launcher, "_KERNELS", {})
    prog, bufs, _, _ = _case(direct("allreduce", 3), 3 * 8, "float32", "sum")
    ctx = launcher.NativeContext(prog, [0] * 3, protocol="ll")
    import dataclasses
    recs = ctx.dp.records.copy()
    recs[:, 0] &= ~(0xFF << 32)                  # no record writes its LL regions
    ctx.dp = dataclasses.replace(ctx.dp, records=recs)
    ctx.run(bufs)
    with pytest.raises(ExecutionTimeout, match="an LL line"):
        ctx.run(bufs)


def test_programs_past_the_kernels_limits_are_refused_before_upload(monkeypatch):
    """The kernel sizes its shared memory for 16 chain sources, 16 LL outputs and passes of 16
    records and checks none of them: the launcher refuses a program past them, naming the record."""
    import kernels.native.launcher as launcher_mod
    from kernels.native.record_format import BATCH, CHAIN_COUNT_SHIFT, LL_OUT_SHIFT, check_limits
    from topo_probe.errors import InvalidArgument
    from kernels.program.lowering import lower
    dp = build_device_program(lower(direct("allgather", 4), 64, "float32"), protocol="ll")
    check_limits(dp.records, dp.block_start)                      # a built program passes
    for bits, what in ((KINDS["reduce_chain"] | 17 << CHAIN_COUNT_SHIFT, "chain of 17 sources"),
                       (KINDS["copy"] | 17 << LL_OUT_SHIFT, "writes 17 LL regions")):
        bad = dp.records.copy()
        bad[0, 0] = bits
        with pytest.raises(InvalidArgument, match=f"record 0 of block 0 .*{what}"):
            check_limits(bad, dp.block_start)
    long = np.zeros((17, dp.records.shape[1]), np.int64)
    long[1:, 0] = BATCH
    with pytest.raises(InvalidArgument, match="record 16 of block 0 makes an LL pass of 17 records"):
        check_limits(long, np.array([0, 17]))
    cp = FakeCupy(seed=1)
    monkeypatch.setattr(launcher_mod, "_cupy", lambda: cp)
    monkeypatch.setattr(launcher_mod, "_KERNELS", {})
    import dataclasses
    real = launcher_mod.build_device_program

    def tampered(*a, **k):
        out = real(*a, **k)
        recs = out.records.copy()
        recs[0, 0] = KINDS["reduce_chain"] | 17 << CHAIN_COUNT_SHIFT
        return dataclasses.replace(out, records=recs)
    monkeypatch.setattr(launcher_mod, "build_device_program", tampered)
    prog, _, _, _ = _case(direct("allreduce", 3), 3 * 8, "float32", "sum")
    with pytest.raises(InvalidArgument, match="chain of 17 sources"):
        launcher_mod.NativeContext(prog, [0] * 3, protocol="ll")
