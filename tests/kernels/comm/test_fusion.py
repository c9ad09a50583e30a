"""Fusion: bucket planning (exhaustive, against brute-force definitions) and fused collectives."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

from kernels.comm.communicator import Communicator
from kernels.comm.fusion import MIB, fused_all_gather, fused_all_reduce, plan_buckets
from topo_probe.errors import InvalidArgument

pytestmark = pytest.mark.filterwarnings("ignore:Communicator")


# ------------------------------------------------------------------ plan_buckets
def all_partitions(count: int):
    """Every split of 0..count-1 into consecutive non-empty ranges."""
    for mask in range(1 << max(count - 1, 0)):
        cuts = [i + 1 for i in range(count - 1) if mask >> i & 1]
        b = [0] + cuts + [count]
        yield [range(x, y) for x, y in zip(b, b[1:])] if count else []


def greedy_ok(parts, sizes, cap, keys=None) -> bool:
    """The size-mode rule stated independently: every bucket fits (or holds one tensor) and
    the first tensor of each bucket would have overflowed the previous one (or a key changes)."""
    for k, p in enumerate(parts):
        if len(p) > 1 and sum(sizes[i] for i in p) > cap:
            return False
        if keys is not None and len({keys[i] for i in p}) > 1:
            return False
        if k:
            prev = parts[k - 1]
            key_break = keys is not None and keys[p.start] != keys[p.start - 1]
            if not key_break and sum(sizes[i] for i in prev) + sizes[p.start] <= cap:
                return False
    return True


def test_size_mode_exhaustive_against_brute_force():
    cap = 4 * MIB
    alphabet = [0, 1, 2 * MIB, 4 * MIB - 1, 4 * MIB, 5 * MIB]
    checked = 0
    for count in range(0, 6):
        for sizes in itertools.product(alphabet, repeat=count):
            want = [p for p in all_partitions(count) if greedy_ok(p, sizes, cap)]
            assert len(want) == 1, sizes  # the rule has exactly one solution
            assert plan_buckets(sizes, "size", bucket_mb=4) == want[0]
            checked += 1
    assert checked == sum(len(alphabet) ** c for c in range(6))


def test_auto_mode_is_64_mib_or_index():
    sizes = [40 * MIB, 30 * MIB, 10 * MIB, 70 * MIB, 1]
    assert plan_buckets(sizes) == [range(0, 1), range(1, 3), range(3, 4), range(4, 5)]
    assert plan_buckets(sizes, split_points=[2]) == [range(0, 2), range(2, 5)]


def test_index_mode_exhaustive():
    for count in range(1, 8):
        for r in range(count):
            for pts in itertools.combinations(range(1, count), r):
                got = plan_buckets([1] * count, "index", split_points=list(pts))
                b = [0, *pts, count]
                assert got == [range(x, y) for x, y in zip(b, b[1:])]
    assert plan_buckets([1] * 50, "index", split_points=[20, 35]) == [range(0, 20), range(20, 35), range(35, 50)]


@pytest.mark.parametrize("pts,msg", [([0], r"split_points\[0\] = 0 is not in 1..4"),
                                     ([5], "is not in 1..4"), ([3, 2], "must increase"),
                                     ([2, 2], "must increase"), (None, "needs split_points")])
def test_index_mode_rejects_bad_points(pts, msg):
    with pytest.raises(ValueError, match=msg):
        plan_buckets([1] * 5, "index", split_points=pts)


def test_keys_split_buckets_exhaustive():
    cap = 3 * MIB
    for count in range(0, 6):
        for sizes in itertools.product([1, 2 * MIB], repeat=count):
            for keys in itertools.product("ab", repeat=count):
                want = [p for p in all_partitions(count) if greedy_ok(p, sizes, cap, keys)]
                assert plan_buckets(sizes, "size", bucket_mb=3, keys=keys) == want[0]
                for pts in ([], [1]) if count > 1 else ([],):
                    got = plan_buckets(sizes, "index", split_points=pts, keys=keys)
                    assert all(len({keys[i] for i in p}) == 1 for p in got)
                    assert [i for p in got for i in p] == list(range(count))


def test_bad_arguments():
    with pytest.raises(ValueError, match="mode 'nope'"):
        plan_buckets([1], "nope")
    with pytest.raises(ValueError, match="bucket_mb must be > 0"):
        plan_buckets([1], "size", bucket_mb=0)
    with pytest.raises(ValueError, match=r"sizes_bytes\[1\] is negative"):
        plan_buckets([1, -1])


# ------------------------------------------------------------------ fused collectives
class CountingComm:
    """Wrap a Communicator and count collective calls (one per bucket expected)."""

    def __init__(self, comm):
        self.comm, self.size, self.calls = comm, comm.size, []

    def all_reduce(self, ins, outs, op="sum"):
        self.calls.append(("all_reduce", ins[0].size, ins[0].dtype))
        return self.comm.all_reduce(ins, outs, op=op)

    def all_gather(self, ins, outs):
        self.calls.append(("all_gather", ins[0].size, ins[0].dtype))
        return self.comm.all_gather(ins, outs)

    def all_to_all(self, ins, outs):
        return self.comm.all_to_all(ins, outs)


@pytest.fixture(scope="module")
def comm4():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Communicator(4, plan=False)


def make_tensors(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    shapes = [(3,), (2, 5), (), (7, 1, 2), (1,), (4, 4), (0,), (9,)]
    dtypes = [np.float32, np.float32, np.float32, np.int32, np.int32, np.float64, np.float64, np.float64]
    return [[rng.integers(-4, 5, s).astype(d) for s, d in zip(shapes, dtypes)] for _ in range(n)]


@pytest.mark.parametrize("mode,kw,n_buckets", [
    ("auto", {}, 3),                         # dtype changes only: f32 | i32 | f64
    ("size", {"bucket_mb": 16 / MIB}, 8),    # 16-byte buckets: every tensor alone
    ("index", {"split_points": [1, 5]}, 4),  # [0] [1,2] [3,4] [5..7]: also cut where dtype changes
])
def test_fused_all_reduce_matches_numpy_in_place(comm4, mode, kw, n_buckets):
    ts = make_tensors(4)
    ids = [[id(t) for t in row] for row in ts]
    want = [sum(ts[r][i].astype(np.float64) for r in range(4)) for i in range(len(ts[0]))]
    cc = CountingComm(comm4)
    buckets = fused_all_reduce(cc, ts, mode=mode, **kw)
    assert len(buckets) == len(cc.calls) == n_buckets
    assert [[id(t) for t in row] for row in ts] == ids
    for r in range(4):
        for i, w in enumerate(want):
            assert ts[r][i].shape == w.shape
            np.testing.assert_array_equal(ts[r][i], w.astype(ts[r][i].dtype))


def test_fused_all_reduce_ops_and_strided_tensors(comm4):
    base = [np.arange(12, dtype=np.float64).reshape(3, 4) * (r + 1) for r in range(4)]
    views = [[b.T, b[:, ::2]] for b in base]  # non-contiguous views into base
    fused_all_reduce(comm4, views, op="max")
    for r in range(4):
        np.testing.assert_array_equal(base[r][:, ::2], (np.arange(12).reshape(3, 4) * 4)[:, ::2])
        np.testing.assert_array_equal(base[r].T, (np.arange(12).reshape(3, 4) * 4).T)


def test_fused_all_reduce_with_compression(comm4):
    rng = np.random.default_rng(3)
    ts = [[rng.standard_normal(50).astype(np.float32), rng.standard_normal((3, 3)).astype(np.float32)]
          for _ in range(4)]
    exact = [sum(ts[r][i].astype(np.float64) for r in range(4)) for i in range(2)]
    S = [sum(np.abs(ts[r][i].astype(np.float64)) for r in range(4)) for i in range(2)]
    fused_all_reduce(comm4, ts, compression="bf16", op="sum")
    for i in range(2):  # first-order bound of kernels.comm.compression: 2u * sum|x|
        assert np.all(np.abs(ts[1][i] - exact[i]) <= 2.01 * 2.0 ** -8 * S[i] + 1e-30)


class _Liar(str):
    """A str subclass whose ``__eq__`` says yes to everything."""

    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


_RULE = "Communicator.fused_all_reduce: compression must be one of fp16, bf16, fp8; got "


@pytest.mark.parametrize("tensors,kw,line", [
    ("two", {"compression": "fp4"}, _RULE + "'fp4'"),
    ("two", {"compression": _Liar("fp4")}, _RULE + "'fp4'"),
    ("two", {"compression": "x" * 6000}, _RULE + "'" + "x" * 56 + "..."),
    ("two", {"compression": 16}, _RULE + "16"),
    ("none", {"compression": "fp4"}, _RULE + "'fp4'"),
    ("two", {"compression": "fp16", "op": "max"},
     "Communicator.fused_all_reduce: compressed all_reduce op must be one of sum, avg; got 'max'"),
], ids=["fp4", "liar", "huge", "int", "no-tensors", "op-max"])
def test_fused_all_reduce_compression_refusal_names_fused_all_reduce(comm4, tensors, kw, line):
    """fused_all_reduce(compression=...) checks the op and name by kernels.comm.compression's rules, first, and the
    refusal names the function the user called.  Reference: the lines written by hand from the rule.  Old: the
    refusal named Communicator.compressed_all_reduce (called per bucket), and with no tensors a bad name ran."""
    ts = [[np.ones(3, np.float32), np.ones(5, np.float32)] if tensors == "two" else [] for _ in range(4)]
    with pytest.raises(InvalidArgument) as e:
        fused_all_reduce(comm4, ts, **kw)
    assert str(e.value) == line
    assert [t.tolist() for t in ts[0]] == ([[1.0] * 3, [1.0] * 5] if tensors == "two" else [])   # nothing ran


def test_fused_all_gather(comm4):
    ts = make_tensors(4, seed=5)
    cc = CountingComm(comm4)
    out = fused_all_gather(cc, ts)
    assert len(cc.calls) == 3
    for r in range(4):
        for i in range(len(ts[0])):
            np.testing.assert_array_equal(out[r][i], np.stack([ts[k][i] for k in range(4)]))


def test_mismatched_tensor_lists_name_rank_and_index(comm4):
    ts = make_tensors(4)
    ts[2][3] = ts[2][3].astype(np.int64)
    with pytest.raises(ValueError, match="rank 2 tensor 3: dtype int64 differs from rank 0's int32"):
        fused_all_reduce(comm4, ts)
    ts = make_tensors(4)
    ts[1] = ts[1][:-1]
    with pytest.raises(ValueError, match="rank 1 has 7 tensors, rank 0 has 8"):
        fused_all_reduce(comm4, ts)
    assert fused_all_reduce(comm4, [[], [], [], []]) == []
