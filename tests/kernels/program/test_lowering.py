"""kernels.program.lowering: hand-checked programs, hazards, errors, and dependency sufficiency."""

import random

import numpy as np
import pytest
from _schedules import ALL, alloc_buffers, check_result, direct, make_inputs, random_schedule, ring
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.backends.executor import bind_buffers
from kernels.backends.kernel_twins import postdiv_host, reduce_copy_host
from kernels.program.lowering import INPUT, OUTPUT, SCRATCH, Region, lower
from synth.ir.collectives import CollectiveSpec
from synth.ir.schedule import Schedule, Step, Transfer
from topo_probe.errors import InvalidArgument, ScheduleInvalid

SETTINGS = settings(derandomize=True, deadline=None, database=None, max_examples=250,
                    suppress_health_check=[HealthCheck.too_slow])


def test_ring_allgather_ops_hand_checked():
    p = lower(ring("allgather", 3), 2, "int32")
    step0 = [(o.dst, o.src) for o in p.steps[0]]
    # step 0: rank r forwards its own block to r+1
    assert step0 == [(Region(1, OUTPUT, 0, 2), Region(0, INPUT, 0, 2)),
                     (Region(2, OUTPUT, 2, 4), Region(1, INPUT, 0, 2)),
                     (Region(0, OUTPUT, 4, 6), Region(2, INPUT, 0, 2))]
    # step 1 forwards what arrived in step 0, from the output buffer, after it arrived
    assert [(o.dst.rank, o.src.buf, o.src_deps) for o in p.steps[1]] == [(1, OUTPUT, (2,)), (2, OUTPUT, (0,)),
                                                                         (0, OUTPUT, (1,))]
    # epilogue: each rank copies its own block into place
    assert [(o.dst, o.src.buf) for o in p.steps[2]] == [(Region(0, OUTPUT, 0, 2), INPUT),
                                                       (Region(1, OUTPUT, 2, 4), INPUT),
                                                       (Region(2, OUTPUT, 4, 6), INPUT)]
    assert p.sizes == ({INPUT: 2, OUTPUT: 6},) * 3


def test_inplace_allgather_needs_no_local_copy():
    p = lower(ring("allgather", 3), 2, "int32", inplace=True)
    assert p.num_steps == 2 and all(o.src.buf == OUTPUT for o in p.ops())
    assert p.bindings == ({OUTPUT: "recv"},) * 3


def test_ring_allreduce_traffic_is_5_n_minus_1_buffers():
    """Hand count: n-1 reduce steps of n reduce-copies (3 accesses) of count/n elements, then
    n-1 copy steps (2 accesses): 5 (n-1) count * itemsize bytes."""
    n, count = 4, 1024
    p = lower(ring("allreduce", n), count, "float32")
    assert p.traffic_bytes() == 5 * (n - 1) * count * 4
    assert p.num_ops == 2 * (n - 1) * n and SCRATCH not in p.sizes[0]


def test_mutual_reduce_in_place_goes_through_scratch():
    """Both ranks reduce into each other in one step: each must read the other's value at the
    start of the step, so in-place the result cannot land in the (read) output at once."""
    s = Schedule("allreduce", 2, 1, (Step(1, (Transfer(0, 0, 1, "reduce"), Transfer(0, 1, 0, "reduce"),
                                              Transfer(1, 0, 1, "reduce"), Transfer(1, 1, 0, "reduce"))),))
    p = lower(s, 4, "float32", inplace=True)
    assert all(o.dst.buf == SCRATCH for o in p.steps[0])
    assert all(o.dst.buf == OUTPUT and o.src.buf == SCRATCH for o in p.steps[1])
    out_of_place = lower(s, 4, "float32")
    assert out_of_place.num_steps == 1 and SCRATCH not in out_of_place.sizes[0]


def test_inplace_alltoall_does_not_overwrite_unsent_data():
    p = lower(direct("alltoall", 3), 2, "int64", inplace=True)
    for o in p.steps[0]:
        assert o.dst.buf == SCRATCH          # every block is still to be sent this step
    assert {o.dst.buf for o in p.steps[1]} == {OUTPUT}


def test_several_reduces_into_one_chunk_chain_in_order():
    p = lower(direct("reduce", 4, root=0), 3, "int32")
    chain = [o for o in p.steps[0] if o.dst.rank == 0]
    assert [o.kind for o in chain] == ["reduce"] * 3
    assert chain[0].acc.buf == INPUT and all(c.acc == chain[0].dst for c in chain[1:])
    assert [c.dst_deps for c in chain] == [(), (chain[0].id,), (chain[1].id,)]


def test_integer_avg_adds_division_on_post_ranks_only():
    p = lower(direct("reduce", 3, root=2), 4, "int32", op="avg")
    scales = [o for o in p.ops() if o.kind == "scale"]
    assert [(o.dst.rank, o.dst.buf) for o in scales] == [(2, OUTPUT)]
    assert not [o for o in lower(direct("allgather", 3), 4, "int32", op="avg").ops() if o.kind == "scale"]
    assert all(o.premul == (False, False) for o in p.ops())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "float8_e5m2"])
def test_floating_avg_scales_each_raw_contribution_where_it_is_first_combined(dtype):
    """NCCL's PreMulSum: no division at the end; in a ring reduce-scatter the first reduce of a
    chunk combines two raw inputs (both scaled), every later one adds a raw input (acc) to a partial."""
    import ml_dtypes
    dt = getattr(ml_dtypes, dtype, None) or dtype
    p = lower(ring("reducescatter", 4), 4, dt, op="avg")
    assert not [o for o in p.ops() if o.kind == "scale"]
    for chunk in range(4):
        reduces = [o for o in p.ops() if o.kind == "reduce" and o.chunk == chunk]
        assert [o.premul for o in reduces] == [(True, True), (True, False), (True, False)]


def test_count_zero_and_tiny_counts():
    assert lower(ring("allreduce", 4, 2), 0, "float32").num_ops == 0
    p = lower(ring("allreduce", 4, 2), 3, "float32")          # 8 pieces, 3 of them non-empty
    assert {o.chunk for o in p.ops()} == {0, 1, 2} and all(o.dst.size == 1 for o in p.ops())


@pytest.mark.parametrize("steps,rule,where", [
    ((Step(1, (Transfer(0, 1, 0),)),), "not-held", (0, 0, 1, 0)),
    ((Step(1, (Transfer(0, 0, 1),)),), "postcondition", (None, None, 0, 1)),
])
def test_schedule_errors_name_step_transfer_rank_chunk(steps, rule, where):
    s = Schedule("allgather", 2, 1, steps)
    with pytest.raises(ScheduleInvalid) as e:
        lower(s, 4, "float32")
    assert e.value.rule == rule
    assert (e.value.step, e.value.transfer, e.value.rank, e.value.chunk) == where


def test_double_count_and_incomplete_reductions_are_rejected():
    twice = Schedule("reduce", 2, 1, (Step(1, (Transfer(0, 1, 0, "reduce"),)),
                                      Step(1, (Transfer(0, 1, 0, "reduce"),))), root=0)
    with pytest.raises(ScheduleInvalid, match="twice") as e:
        lower(twice, 4, "float32")
    assert (e.value.rule, e.value.step, e.value.rank) == ("double-count", 1, 0)
    missing = Schedule("reduce", 3, 1, (Step(1, (Transfer(0, 1, 0, "reduce"),)),), root=0)
    with pytest.raises(ScheduleInvalid, match=r"missing the contribution\(s\) of rank\(s\) \[2\]"):
        lower(missing, 4, "float32")


def test_bad_count_and_op():
    with pytest.raises(InvalidArgument):
        lower(ring("allgather", 2), -1, "float32")
    with pytest.raises(InvalidArgument, match="op must be"):
        lower(ring("allgather", 2), 1, "float32", op="mean")


def _run_in_dag_order(program, bufs, rng):
    """Execute ops in a random order that respects only the deps (not the steps)."""
    ops = {o.id: o for o in program.ops()}
    waiting = {i: set(o.deps) for i, o in ops.items()}
    done = set()
    while waiting:
        ready = sorted(i for i, d in waiting.items() if d <= done)
        i = rng.choice(ready)
        o = ops[i]
        view = lambda r: bufs[r.rank][r.buf][r.start:r.stop]  # noqa: E731
        if o.kind == "copy":
            np.copyto(view(o.dst), view(o.src))
        elif o.kind == "reduce":
            reduce_copy_host(view(o.dst), view(o.acc), view(o.src), program.op)
        else:
            postdiv_host(view(o.dst), program.ranks)
        done.add(i)
        del waiting[i]


@SETTINGS
@given(st.data())
def test_deps_alone_order_every_hazard(data):
    """Any topological order of the dependency DAG gives the NumPy answer: the deps (what the
    GPU backend turns into events) cover every read-after-write, write-after-read and
    write-after-write hazard, including in-place aliasing."""
    coll = data.draw(st.sampled_from(ALL))
    n = data.draw(st.integers(1, 5))
    C = data.draw(st.integers(1, 3))
    root = data.draw(st.integers(0, n - 1))
    sched = random_schedule(coll, n, C, root, data.draw(st.integers(0, 30)))
    count = data.draw(st.sampled_from([1, 2, 5, 8]))
    op = data.draw(st.sampled_from(["sum", "max", "avg"]))
    inplace = data.draw(st.booleans())
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    sends = make_inputs(coll, n, count, "int64", op, root, rng)
    sb, rb = alloc_buffers(coll, n, count, sends, "int64", root, inplace)
    spec = CollectiveSpec(coll, n, C, sched.root)
    count2, _, inpl, fs, fr = bind_buffers(spec, sb, rb)
    assert (count2, inpl) == (count, inplace and any(x is not None for x in sb))
    p = lower(sched, count, "int64", inplace=inpl, op=op)
    bufs = []
    for r in range(n):
        user = {"send": fs[r], "recv": fr[r]}
        d = {name: user[w] for name, w in p.bindings[r].items()}
        if SCRATCH in p.sizes[r]:
            d[SCRATCH] = np.full(p.sizes[r][SCRATCH], -7, np.int64)
        bufs.append(d)
    _run_in_dag_order(p, bufs, random.Random(data.draw(st.integers(0, 1000))))
    check_result(coll, n, count, sends, rb, op, root, "int64")


@SETTINGS
@given(st.data())
def test_program_invariants(data):
    """Deps point backwards; out-of-place inputs are never written; inside a step no op
    writes memory another op of the step reads unless a dep chains them."""
    coll = data.draw(st.sampled_from(ALL))
    n, C = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 3))
    sched = random_schedule(coll, n, C, data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, 30)))
    inplace = data.draw(st.booleans())
    p = lower(sched, data.draw(st.integers(0, 9)), "float32", inplace=inplace)
    seen, before = set(), {}
    for step in p.steps:
        for o in step:
            assert set(o.deps) <= seen and o.dst.size > 0
            if not inplace:
                assert o.dst.buf != INPUT
            seen.add(o.id)
            before[o.id] = set(o.deps).union(*(before[d] for d in o.deps))
        for w in step:
            for r in step:
                if r is w:
                    continue
                for reg in r.reads():
                    overlap = (reg.rank, reg.buf) == (w.dst.rank, w.dst.buf) and reg.start < w.dst.stop \
                        and w.dst.start < reg.stop
                    assert not overlap or w.id in before[r.id] or r.id in before[w.id]
