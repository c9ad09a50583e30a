"""synth.sweep.entries: counts and busbw factors per collective.

References are independent: hand-computed counts, nccl-tests' published bus-bandwidth formulas
and the real A100 log's columns.
"""

import pytest
from _paths import FIXTURES

from synth.sweep.entries import TABLE, entry

FIXTURE = FIXTURES / "nccl_tests_allreduce_a100x8_single_process.txt"

#: nccl-tests' bus bandwidth factors (README "Performance" section), written out by hand
FACTORS = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
           "reducescatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
           "gather": lambda n: (n - 1) / n, "scatter": lambda n: (n - 1) / n,
           "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0}


#: nccl-tests v2.19.6 ``*GetCollByteCount``: one block ``count = size / eltSize`` (all_reduce.cu:35, broadcast.cu:11,
#: reduce.cu:11), else per rank ``(count / nranks) & ~(16 / eltSize - 1)`` (all_gather.cu:11, reduce_scatter.cu:11,
#: gather.cu:11, scatter.cu:11, alltoall.cu:19); printed size = max(sendBytes, recvBytes) (common.cu:938).  Each row
#: worked by hand from those lines.
@pytest.mark.parametrize("name, size, itemsize, n, count, size_out", [
    ("all_reduce", 1024, 4, 8, 256, 1024),
    ("all_reduce", 1001, 4, 3, 250, 1000),       # one block: no rounding to 16 bytes (all_reduce.cu:35)
    ("all_gather", 1024, 4, 8, 32, 1024),        # each rank sends 32, receives 256
    ("all_gather", 1000, 4, 4, 60, 960),         # 250 floats / 4 ranks = 62, & ~3 = 60
    ("all_gather", 1000, 4, 1, 248, 992),        # one rank: 250 & ~3 = 248 all the same
    ("reduce_scatter", 1024, 4, 8, 32, 1024),
    ("reduce_scatter", 100, 8, 4, 2, 64),        # 12 doubles / 4 = 3, & ~1 = 2; size 2 x 4 x 8
    ("alltoall", 1000, 1, 3, 320, 960),          # 333 & ~15 = 320 per peer
    ("alltoall", 100, 1, 3, 32, 96),             # 33 & ~15 = 32
    ("gather", 8, 4, 8, 0, 0),                   # 2 elements cannot be cut into 8 blocks
    ("scatter", 96, 2, 3, 16, 96),               # 48 halves / 3 = 16, & ~7 = 16
    ("scatter", 100, 2, 3, 16, 96),              # 50 / 3 = 16
    ("broadcast", 10, 8, 4, 1, 8),
    ("reduce", 7, 1, 2, 7, 7),
])
def test_counts_follow_nccl_tests(name, size, itemsize, n, count, size_out):
    c = entry(name).counts(size, itemsize, n)
    assert (c.count, c.size) == (count, size_out)
    kin, kout = entry(name).blocks(n)
    assert (c.send, c.recv) == (kin * count, kout * count)


def test_small_all_gather_sizes_round_to_whole_16_byte_blocks():
    """``all_gather_perf -b 8 -e 128 -f 2 -g 4``: 2, 4, 8 floats give 0 per rank (0, 1, 2 & ~3), 16 and 32 give
    4 and 8: sizes 0, 0, 0, 64, 128 (not 0, 16, 32, 64, 128)."""
    assert [entry("all_gather").counts(s, 4, 4).size for s in (8, 16, 32, 64, 128)] == [0, 0, 0, 64, 128]


@pytest.mark.parametrize("name", sorted(TABLE))
@pytest.mark.parametrize("n", [2, 3, 4, 8, 16])
def test_busbw_factor_matches_published_formula(name, n):
    assert TABLE[name].busbw_factor(n) == pytest.approx(FACTORS[name](n))


def test_bandwidths_reproduce_every_row_of_the_a100_log():
    rows = [ln.split() for ln in FIXTURE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(rows) == 30
    for tok in rows:
        size = int(tok[0])
        for t, alg, bus in ((tok[5], tok[6], tok[7]), (tok[9], tok[10], tok[11])):
            a, b = TABLE["allreduce"].bandwidths(size, float(t), 8)
            # printed time has 4-5 significant digits, bandwidths 2 decimals
            assert a == pytest.approx(float(alg), abs=0.006, rel=2e-3)
            assert b == pytest.approx(float(bus), abs=0.006, rel=2e-3)


def test_zero_time_gives_zero_bandwidth():
    assert TABLE["allreduce"].bandwidths(1024, 0.0, 4) == (0.0, 0.0)
