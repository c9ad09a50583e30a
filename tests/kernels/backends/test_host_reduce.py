"""kernels.backends.host_reduce: the fused Numba n-way reduce against the chained NumPy twins,
bit for bit (NaN positions compared as NaN: IEEE leaves their sign and payload open), and the
reduce chains it finds in lowered programs."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from _paths import ROOT
from _schedules import direct, ring
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.backends.executor import program_for
from kernels.backends.host_reduce import (
    FusedReduce,
    chain_args,
    fuse_reduce_chains,
    merge_copy_heads,
    reduce_chain,
    reduce_nway,
    supports,
)
from kernels.backends.kernel_twins import PreMulSum, avg_scalar, reduce_copy_host
from kernels.program.ops import Op, Region
from topo_probe.errors import InvalidArgument

DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64")
OPS = ("sum", "prod", "max", "min", "avg")
SPECIAL = (0.0, -0.0, np.inf, -np.inf, np.nan, 1e38, -1e38, 65504.0, 7e4, 3.4e38, 1e-8, -1e-45, 1.5, -2.5)


def _dt(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _binops(op: str, dt: np.dtype, k: int) -> list:
    """The binary ops of a k-source chain as the lowering writes them (floating avg: PreMulSum)."""
    if op == "avg" and dt.kind not in "iu":
        return [PreMulSum(k, True, True)] + [PreMulSum(k, False, True)] * (k - 2)
    return ["sum" if op == "avg" else op] * (k - 1)


def _chained(srcs, binops):
    """The reference: the NumPy twin applied op by op, in order."""
    d = np.empty_like(srcs[0])
    reduce_copy_host(d, srcs[0], srcs[1], binops[0])
    for s, b in zip(srcs[2:], binops[1:]):
        reduce_copy_host(d, d, s, b)
    return d


def assert_same(got, want):
    """Bit for bit, except that where the reference is NaN the result must be NaN too."""
    if want.dtype.kind not in "iu":
        wn, gn = np.isnan(want.astype(np.float64)), np.isnan(got.astype(np.float64))
        assert np.array_equal(wn, gn)
        got, want = got[~wn], want[~wn]
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


def _values(dt: np.dtype, draw, length: int) -> np.ndarray:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, length, dtype=dt, endpoint=True)
    scale = draw(st.sampled_from([1.0, 100.0, 1e4, 1e30]))
    x = rng.normal(0, scale, length)
    special = rng.random(length) < 0.2
    x[special] = rng.choice(SPECIAL, int(special.sum()))
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np.float32).astype(dt) if dt.name == "bfloat16" else x.astype(dt)


@settings(derandomize=True, deadline=None, database=None, max_examples=120,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_fused_reduce_equals_the_chained_twins_bit_for_bit(data):
    dt = _dt(data.draw(st.sampled_from(DTYPES), label="dtype"))
    op = data.draw(st.sampled_from(OPS), label="op")
    k = data.draw(st.integers(2, 16), label="sources")
    length = data.draw(st.sampled_from([0, 1, 2, 7, 31, 1001, 8191, 8193, 20_003]), label="length")
    srcs = [_values(dt, data.draw, length) for _ in range(k)]
    binops = _binops(op, dt, k)
    with np.errstate(all="ignore"):
        want = _chained(srcs, binops)
        got = np.full_like(want, 3)
        reduce_chain(got, srcs, binops, parallel=data.draw(st.booleans(), label="parallel"))
    assert_same(got, want)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_more_than_16_sources_run_in_rounds_and_dst_may_be_the_first_source(dtype):
    dt = _dt(dtype)
    rng = np.random.default_rng(3)
    srcs = [rng.integers(-50, 50, 513).astype(dt) for _ in range(37)]
    binops = _binops("avg" if dt.kind == "f" or dtype == "bfloat16" else "sum", dt, 37)
    want = _chained(srcs, binops)
    first = srcs[0].copy()
    srcs[0] = first                     # in place: dst is the first source
    reduce_chain(first, srcs, binops, parallel=False)
    assert_same(first, want)


def test_premul_sum_rounds_the_product_first_no_fused_multiply_add():
    """float64 avg of a and b: round(round(a * s) + b), never round(a * s + b) in one step.
    Inputs where the two differ are searched with exact rationals; the kernel keeps the twin's."""
    s = float(avg_scalar(np.float64, 3))
    rng = np.random.default_rng(0)
    a, b = rng.uniform(1, 2, 4096), rng.uniform(-1, 1, 4096)
    fma = np.array([float(Fraction(x) * Fraction(s) + Fraction(y)) for x, y in zip(a, b)])
    got = np.empty_like(a)
    reduce_nway(got, [a, b], "sum", [True, False], s, parallel=False)
    twin = a * s + b                       # NumPy: product rounded, then the sum
    assert np.array_equal(got, twin)
    assert (fma != twin).sum() > 100       # the data do tell the two apart
    from kernels.backends import _host_reduce_jit as J
    assert not any(f.targetoptions.get("fastmath") for f in (J.native_serial, J.native_parallel, J._combine))


def test_hand_computed_cases():
    d = np.empty(3, np.int8)
    reduce_nway(d, [np.array([100, -128, 5], np.int8)] * 3, "sum")
    assert d.tolist() == [44, -128, 15]                       # 300 -> 44, -384 -> -128 (wrap)
    h = np.empty(2, np.float16)
    reduce_chain(h, [np.array([60000, 1], np.float16)] * 4, [PreMulSum(4, True, True)] + [PreMulSum(4, False, True)] * 2)
    assert h.tolist() == [60000.0, 1.0]                       # pre-divided: no overflow
    b = np.empty(1, ml_dtypes.bfloat16)                       # 1 + 2^-8 is a tie: rounds to even (1.0) each op
    reduce_nway(b, [np.array([1.0], ml_dtypes.bfloat16), np.array([2.0**-8], ml_dtypes.bfloat16)] + [
        np.array([2.0**-8], ml_dtypes.bfloat16)] * 2, "sum")
    assert b.tolist() == [1.0]
    m = np.empty(2, np.float32)
    reduce_nway(m, [np.array([-0.0, 1], np.float32), np.array([0.0, np.nan], np.float32)], "max")
    assert np.signbit(m[0]) == np.signbit(np.fmax(np.float32(-0.0), np.float32(0.0))) and m[1] == 1   # NCCL's fmaxf


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("k", [2, 3])
def test_max_min_drop_nan_like_nccl(name, op, k):
    """Every pair of special values (and a third source of NaN: it changes nothing) against the
    independent element reference of NCCL's fmaxf / __hmax (tests/_minmax_reference.py)."""
    from _minmax_reference import check_minmax, special_pairs
    dt = np.dtype(getattr(ml_dtypes, name, None) or name)
    a, b = special_pairs(dt)
    d = np.empty_like(a)
    reduce_nway(d, [a, b] + [np.full(a.size, np.nan, dt)] * (k - 2), op, parallel=False)
    assert check_minmax(d, a, b, op, f"reduce_nway {name}") > a.size * 0.9


def test_bad_input_is_one_line_invalid_argument():
    x = np.zeros(4, np.float32)
    for call, match in [
        (lambda: reduce_nway(np.zeros(2, ml_dtypes.float8_e4m3fn), [np.zeros(2, ml_dtypes.float8_e4m3fn)] * 2),
         "dtype float8_e4m3fn is not supported"),
        (lambda: reduce_nway(x, [x, np.zeros(3, np.float32)]), "1-D contiguous float32 of 4 elements"),
        (lambda: reduce_nway(x, [x, x], "xor"), "got 'xor'"),
        (lambda: reduce_nway(x, []), "at least one source"),
        (lambda: reduce_nway(np.zeros(4, np.int32), [np.zeros(4, np.int32)] * 2, "sum", [True, False], 1),
         "only floating types"),
        (lambda: chain_args(["sum", "max"], np.float32), "one op out of"),
    ]:
        with pytest.raises(InvalidArgument, match=match) as exc:
            call()
        assert "\n" not in str(exc.value)
    assert not supports(ml_dtypes.float8_e5m2) and supports(ml_dtypes.bfloat16)


def test_importing_the_module_does_not_import_numba():
    code = "import sys; import kernels.backends.host_reduce, kernels.backends.host; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert out.stdout.strip() == "False"


def test_fuse_reduce_chains_finds_each_ranks_chain_and_nothing_else():
    p = program_for(direct("allreduce", 4), 8, "float32", op="avg")
    step0 = fuse_reduce_chains(list(p.steps[0]))
    # rank-order sums (synth.ir.sum_order): ranks 2 and 3 first copy x0 in, then add x1, their own, ...
    copies, chains = [step0[2], step0[4]], [step0[i] for i in (0, 1, 3, 5)]
    assert [(o.kind, o.rank, o.src.rank) for o in copies] == [("copy", 2, 0), ("copy", 3, 0)]
    assert [len(f.ops) for f in chains] == [3, 3, 3, 3] and all(isinstance(f, FusedReduce) for f in chains)
    f = chains[1]
    assert f.dst.rank == 1 and f.ops[0].acc.rank == 1 and [o.src.rank for o in f.ops] == [0, 2, 3]
    f = chains[2]
    assert f.ops[0].acc == f.dst == copies[0].dst and [o.src.rank for o in f.ops] == [1, 2, 3]
    assert fuse_reduce_chains(list(p.steps[1])) == list(p.steps[1])            # copies stay ops
    ringp = program_for(ring("allreduce", 4), 8, "float32")
    assert all(not isinstance(x, FusedReduce) for s in ringp.steps for x in fuse_reduce_chains(list(s)))



def test_a_copy_that_starts_a_rank_order_sum_merges_into_its_first_reduce():
    """Direct all-reduce, avg: rank 2 copies rank 0's piece in, then adds x1, its own, x3 (rank
    order).  Merged, the first reduce reads rank 0's piece as its accumulator (still raw: premul),
    and the chain then fuses like ranks 0 and 1's; ops that are not such a pair stay as they are."""
    p = program_for(direct("allreduce", 4), 8, "float32", op="avg")
    merged = merge_copy_heads(list(p.steps[0]))
    assert len(merged) == len(p.steps[0]) - 2 and all(o.kind == "reduce" for o in merged)
    first = next(o for o in merged if o.rank == 2)
    assert first.acc.rank == 0 and first.acc.buf == "input" and first.src.rank == 1 and first.premul == (True, True)
    step0 = fuse_reduce_chains(merged)
    assert [len(f.ops) for f in step0] == [3, 3, 3, 3] and [o.src.rank for o in step0[2].ops] == [1, 2, 3]
    assert merge_copy_heads(list(p.steps[1])) == list(p.steps[1])               # copies of results stay


def _run_host_ops(ops, bufs):
    """Hand interpreter, one op at a time: copy ``dst <- src``, reduce ``dst <- acc + src``
    (both operands read before the write, as NumPy does)."""
    def view(r):
        return bufs[(r.rank, r.buf)][r.start:r.stop]
    for o in ops:
        view(o.dst)[:] = view(o.src) if o.kind == "copy" else view(o.acc) + view(o.src)
    return bufs


@pytest.mark.parametrize("reduce_src, merges", [(Region(0, "scratch", 0, 2), True),      # disjoint
                                                (Region(0, "output", 1, 3), False),     # overlaps dst
                                                (Region(0, "output", 2, 4), True)])     # same buf, apart
def test_a_copy_head_merges_only_where_no_source_overlaps_the_destination(reduce_src, merges):
    """x[0:2] <- y, then x[0:2] <- x[0:2] + t: where t overlaps x[0:2] the reduce reads what the
    copy wrote (x = [1..6], y = [10, 20], t = x[1:3]: [30, 23] by hand), so one pass reading y
    as the accumulator ([12, 23]) would be wrong; the merge is refused there and kept elsewhere,
    and the ops' results are the same either way."""
    dst, y = Region(0, "output", 0, 2), Region(1, "input", 0, 2)
    ops = [Op(0, 0, "copy", dst, src=y), Op(1, 0, "reduce", dst, src=reduce_src, acc=dst, dst_deps=(0,))]
    merged = merge_copy_heads(ops)
    assert len(merged) == (1 if merges else 2)
    if merges:
        assert merged[0] == Op(1, 0, "reduce", dst, src=reduce_src, acc=y, dst_deps=(0,))
    fresh = {(0, "output"): np.arange(1.0, 7.0), (1, "input"): np.array([10.0, 20.0]), (0, "scratch"): np.ones(2)}
    want = _run_host_ops(ops, {k: v.copy() for k, v in fresh.items()})
    got = _run_host_ops(merged, {k: v.copy() for k, v in fresh.items()})
    assert all(np.array_equal(want[k], got[k]) for k in fresh)
    if reduce_src.buf == "output" and reduce_src.start == 1:
        assert want[(0, "output")][:2].tolist() == [30.0, 23.0]
    a_copy_reading_its_own_destination = [Op(0, 0, "copy", dst, src=Region(0, "output", 1, 3)), ops[1]]
    assert merge_copy_heads(a_copy_reading_its_own_destination) == a_copy_reading_its_own_destination
