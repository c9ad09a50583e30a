"""Several reduces into one (rank, chunk) in one step run in rank order on every executor, so a
one-shot all-reduce gives every rank the same bits: NumPy's left fold in rank order, bit for bit."""

import random

import ml_dtypes  # noqa: F401 - registers bfloat16 with NumPy
import numpy as np
import pytest
from _schedules import alloc_buffers
from tests.kernels.native._emulator import EmulatedNativeLayer
from _sum_order_cases import two_trees

from kernels.backends.executor import run_schedule
from kernels.backends.host import HostLayer
from kernels.backends.kernel_twins import premul_scale
from kernels.backends.reference import run_reference
from kernels.program.lowering import lower
from synth.baselines import baseline
from synth.ir.collectives import element_range
from synth.ir.fabric import build_fabric
from synth.ir.schedule import Schedule, Step, Transfer
from synth.ir.sum_order import final_expressions
from topo_probe.machines.generators import fully_connected
from topo_probe.machines.presets import get_preset


def rank_order_fold(xs: list[np.ndarray], op: str) -> np.ndarray:
    """The reference: ((x_0 + x_1) + x_2) + ..., each addition rounded to the type (avg: each
    x_r times 1/n first, NCCL's premul sum)."""
    n = len(xs)
    terms = [premul_scale(np, x, n) for x in xs] if op == "avg" else xs
    acc = terms[0].copy()
    for x in terms[1:]:
        acc = (acc + x).astype(xs[0].dtype)
    return acc


def inputs(n: int, count: int, dtype: str, seed: int) -> list[np.ndarray]:
    """Values of mixed magnitudes, so the order of additions shows in the last bits."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(count) * 10.0 ** rng.integers(-3, 4, count)).astype(dtype) for _ in range(n)]


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint8)


@pytest.mark.parametrize("n,dtype,op", [(3, "float32", "sum"), (4, "float16", "sum"), (4, "bfloat16", "sum"),
                                        (8, "float32", "sum"), (8, "bfloat16", "sum"), (4, "float32", "avg")])
def test_one_shot_is_the_rank_order_sum_on_every_rank(n, dtype, op):
    """Host executor (in and out of place; op by op and with half-type chains fused into one
    n-way pass, a copy heading the chain), the native device program on its CPU emulator
    (random interleavings, channels and tiles) and the reference: every rank's output is the
    rank-order fold, bit for bit.  Before the fix rank d summed x_d first and differed."""
    sched = baseline("oneshot", build_fabric(fully_connected(n)), "allreduce")
    count = 1000
    xs = inputs(n, count, dtype, 7 * n)
    want = bits(rank_order_fold(xs, op))
    backends = [HostLayer(threads=2), HostLayer(threads=2, fuse_bytes=2), EmulatedNativeLayer(seed=n), "reference"]
    for inplace in (False, True):
        for be in backends:
            sb, rb = alloc_buffers("allreduce", n, count, xs, dtype, None, inplace)
            if be == "reference":
                run_reference(sched, [x.copy() for x in xs], rb, op=op)
            else:
                run_schedule(sched, sb, rb, op=op, backend=be)
            for r in range(n):
                assert np.array_equal(bits(rb[r]), want), f"{be}: rank {r} in_place={inplace}"


def _program_expressions(schedule, ex):
    """Every post rank's final expression as the lowered program computes it (out of place),
    walking its ops in order: a copy moves an expression, a reduce joins acc's and src's."""
    spec, count = schedule.spec, 2 * schedule.spec.pieces_per_block
    prog = lower(schedule, count, "float32")
    state = {}
    for c in spec.chunks():
        for r in c.pre:
            a, b = element_range(spec, count, spec.input_position(c.id, r))
            state[(r, "input", a, b)] = ex.leaf(r)

    def key(reg):
        return (reg.rank, reg.buf, reg.start, reg.stop)
    for o in prog.ops():
        if o.kind == "copy":
            state[key(o.dst)] = state[key(o.src)]
        elif o.kind == "reduce":
            state[key(o.dst)] = ex.node(state[key(o.acc)], state[key(o.src)])
    out = {}
    for c in spec.chunks():
        for r in c.post:
            a, b = element_range(spec, count, spec.output_position(c.id, r))
            out[(r, c.id)] = state[(r, "output", a, b)]
    return out


@pytest.mark.parametrize("make", [
    lambda: baseline("oneshot", build_fabric(fully_connected(3)), "allreduce"),
    lambda: baseline("oneshot", build_fabric(get_preset("dgx-a100")), "allreduce", chunks=2),
    lambda: baseline("ring", build_fabric(fully_connected(4)), "allreduce", chunks=2),
    lambda: baseline("rhd", build_fabric(fully_connected(8)), "allreduce"),
    lambda: baseline("tree", build_fabric(get_preset("dgx1-v100")), "allreduce"),
    lambda: baseline("direct", build_fabric(fully_connected(4)), "reducescatter"),
    two_trees])
def test_the_checker_replays_what_the_lowering_computes(make):
    """The checker's expressions (synth.ir.sum_order) are the lowered program's, rank by rank and
    chunk by chunk: a lowering that summed in another order than the checker assumes fails here."""
    schedule = make()
    state, ex = final_expressions(schedule)
    got = _program_expressions(schedule, ex)
    assert got == {key: state[key] for key in got}


def _two_level(seed: int) -> Schedule:
    """A random all-reduce: per chunk, step 1 reduces every rank into one of a few random heads
    (several reduces into one rank, listed in random order), step 2 the heads into the first head
    (a rank-order sum of peers' partials, so a copy of a partial may start it), step 3 copies."""
    rng = random.Random(seed)
    n = rng.randint(3, 6)
    steps: list[list] = [[], [], []]
    for k in range(n):
        perm = rng.sample(range(n), n)
        heads = perm[:rng.randint(1, max(1, n // 2))]
        for m in perm[len(heads):]:
            steps[0].append(Transfer(k, m, rng.choice(heads), "reduce"))
        steps[1] += [Transfer(k, h, heads[0], "reduce") for h in rng.sample(heads[1:], len(heads) - 1)]
        steps[2] += [Transfer(k, heads[0], r) for r in range(n) if r != heads[0]]
    return Schedule("allreduce", n, 1, tuple(Step(1, tuple(rng.sample(s, len(s)))) for s in steps if s))


def _evaluate(ex, e: int, leaves: list[np.ndarray]) -> np.ndarray:
    """Expression ``e`` of the checker computed in NumPy, each addition rounded to the type."""
    key = ex._keys[e]
    if key[0] == "x":
        return leaves[key[1]]
    a, b = _evaluate(ex, key[1], leaves), _evaluate(ex, key[2], leaves)
    return (a + b).astype(a.dtype)


@pytest.mark.parametrize("seed", range(6))
def test_random_two_level_sums_are_the_checkers_expressions_on_every_executor(seed):
    """Random multi-step schedules with several reduces into one rank per step: every executor
    (host op by op and fused, emulated native, reference; in and out of place) gives every rank
    the checker's expression of each chunk computed in NumPy, bit for bit."""
    schedule = _two_level(seed)
    spec, n = schedule.spec, schedule.ranks
    dtype = ("float32", "float16", "bfloat16")[seed % 3]
    count = n * (5 + seed) + seed % n
    xs = inputs(n, count, dtype, seed)
    state, ex = final_expressions(schedule)
    want = np.zeros(count, dtype)
    for c in spec.chunks():
        a, b = element_range(spec, count, spec.output_position(c.id, c.post[0]))
        ia, ib = element_range(spec, count, spec.input_position(c.id, 0))
        want[a:b] = _evaluate(ex, state[(c.post[0], c.id)], [x[ia:ib] for x in xs])
    for inplace in (False, True):
        backends = (HostLayer(threads=2), HostLayer(threads=2, fuse_bytes=2), EmulatedNativeLayer(seed=seed), "reference")
        for be in backends:
            sb, rb = alloc_buffers("allreduce", n, count, xs, dtype, None, inplace)
            if be == "reference":
                run_reference(schedule, [x.copy() for x in xs], rb)
            else:
                run_schedule(schedule, sb, rb, backend=be)
            for r in range(n):
                assert np.array_equal(bits(rb[r]), bits(want)), f"{be}: rank {r} in_place={inplace}"
