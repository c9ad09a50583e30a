"""synth.ir.sum_order: the in-step reduction order, and the rank-consistency checker on hand-built cases."""

import _sum_order_cases as cases
import numpy as np
import pytest

from kernels.backends.executor import run_schedule
from synth.baselines import baseline
from synth.ir.fabric import build_fabric
from synth.ir.schedule import Schedule, Step, Transfer
from synth.ir.sum_order import Expressions, final_expressions, inconsistent_chunks, reduce_order, same_bits_warning
from synth.ir.verifier import check, verify
from topo_probe.errors import TopocollError
from topo_probe.machines.generators import fully_connected


def one_shot(n: int) -> Schedule:
    """The one-shot all-reduce by hand: every rank reduces every peer's chunk in one step."""
    return Schedule("allreduce", n, 1, (Step(1, tuple(Transfer(k, r, d, "reduce") for k in range(n)
                                                      for d in range(n) for r in range(n) if r != d)),))


def test_reduce_order_puts_the_receiver_at_its_rank():
    assert reduce_order(2, [3, 0, 1]) == (0, 1, 2, 3)
    assert reduce_order(0, [1]) == (0, 1)
    assert reduce_order(5, [7, 1]) == (1, 5, 7)


def test_one_shot_is_one_expression_on_every_rank():
    """Hand-written: every rank of a 3- and 4-rank one-shot ends with the left fold in rank order."""
    for n, want in ((3, "((x0 + x1) + x2)"), (4, "(((x0 + x1) + x2) + x3)")):
        state, ex = final_expressions(one_shot(n))
        assert {ex.text(state[(r, k)]) for r in range(n) for k in range(n)} == {want}
        assert inconsistent_chunks(one_shot(n)) == []


def test_two_trees_are_reported_with_their_ranks():
    bad = inconsistent_chunks(cases.two_trees())
    assert [k for k, _ in bad] == [0, 1, 2, 3]
    assert bad[0][1] == {"(((x0 + x1) + x2) + x3)": (0, 2, 3), "(((x1 + x2) + x3) + x0)": (1,)}


def test_ring_allreduce_is_consistent_and_each_chunk_is_one_chain():
    """A ring reduces each chunk once along the ring, then copies it: one expression per chunk,
    a chain of n - 1 nodes, nested n - 1 deep (hand count: 3 for 4 ranks; a pairwise tree is 2)."""
    s = baseline("ring", build_fabric(fully_connected(4)), "allreduce", chunks=1)
    assert inconsistent_chunks(s) == []
    state, ex = final_expressions(s)
    for c in s.spec.chunks():
        text = ex.text(state[(c.post[0], c.id)])
        depth = max(text[:i + 1].count("(") - text[:i + 1].count(")") for i in range(len(text)))
        assert text.count("+") == 3 and depth == 3, text


def test_commutativity_but_not_associativity():
    ex = Expressions()
    a, b, c = ex.leaf(0), ex.leaf(1), ex.leaf(2)
    assert ex.node(a, b) == ex.node(b, a)
    assert ex.node(ex.node(a, b), c) != ex.node(a, ex.node(b, c))


def test_every_committed_all_reduce_schedule_gives_every_rank_one_expression():
    """The preset and solver all-reduces under results/*/schedules/ (ring, tree, one-shot, SAT,
    bwopt, clusters): none leaves two ranks with different reduction trees of a chunk."""
    from _paths import ROOT

    from synth.formats.schedule_file import load_schedule
    paths = sorted(ROOT.glob("results/*/schedules/*allreduce*.json"))
    assert len(paths) >= 40
    bad = {p.name: inconsistent_chunks(load_schedule(p))[:1] for p in paths}
    assert {k: v for k, v in bad.items() if v} == {}
    from synth.ir.sum_order import _surely_consistent
    assert all(_surely_consistent(load_schedule(p)) for p in paths)      # the bulk replay answers every one


def _differing_ranks(out: np.ndarray) -> set[int]:
    """Ranks whose float32 result differs in any bit from the majority's (rank 0's here, by hand)."""
    bits = out.view(np.uint32)
    return {r for r in range(len(out)) if not np.array_equal(bits[r], bits[0])}


@pytest.mark.parametrize("make, other", [(cases.two_trees, {1}), (cases.three_ranks, {1})])
def test_float32_sums_really_differ_where_the_checker_says(make, other):
    """Brute force: the float32 replay (and the host executor, bit for bit) leaves rank 1 with other bits than the
    rest, the ranks the checker names; the warning names them and every chunk (hand-derived in the cases' docstrings)."""
    s = make()
    check(s, build_fabric(fully_connected(s.ranks)))
    x = cases.wide_inputs(s.ranks, 4096)
    out = cases.float32_replay(s, x)
    assert _differing_ranks(out) == other
    recv = [np.zeros(4096, np.float32) for _ in range(s.ranks)]
    run_schedule(s, list(x), recv)
    assert np.array_equal(np.stack(recv).view(np.uint32), out.view(np.uint32))
    bad = inconsistent_chunks(s)
    assert [k for k, _ in bad] == list(range(s.ranks)) and all(other in map(set, g.values()) for _, g in bad)
    chunks = ", ".join(map(str, range(s.ranks - 1))) + f" and {s.ranks - 1}"
    assert same_bits_warning(s, "f.json") == (f"f.json: ranks 0 and 1 may differ in the last bits of chunks {chunks} "
                                               "(float sums in different orders); integers, min and max are exact")


@pytest.mark.parametrize("name", ["ring", "tree", "direct", "oneshot", "rhd"])
def test_baselines_give_every_rank_the_same_float32_bits(name):
    """The float32 replay of each baseline all-reduce on 4 and 5 ranks: identical bits everywhere, and no warning."""
    for n in (4, 5):
        try:
            s = baseline(name, build_fabric(fully_connected(n)), "allreduce")
        except TopocollError:
            continue                                     # not built for this rank count
        out = cases.float32_replay(s, cases.wide_inputs(n, 64 * n * s.chunks_per_rank, seed=n))
        assert _differing_ranks(out) == set() and same_bits_warning(s, "x") is None, (name, n)


def _relabelled(seed: int) -> Schedule:
    """4 ranks, 4 chunks; each chunk, under a random renaming of the ranks, either the two_trees pattern (ranks
    disagree) or a chain p0 -> p1 -> p2 -> p3 of reduces then copies back (they agree), drawn at random."""
    import random
    rng = random.Random(seed)
    steps: list[list[Transfer]] = [[] for _ in range(5)]
    for k in range(4):
        p = rng.sample(range(4), 4)
        if rng.random() < 0.5:
            steps[0] += [Transfer(k, p[r], p[3], "reduce") for r in (2, 0, 1)] + \
                [Transfer(k, p[r], p[1], "reduce") for r in (3, 2)]
            steps[1] += [Transfer(k, p[0], p[1], "reduce"), Transfer(k, p[3], p[0]), Transfer(k, p[3], p[2])]
        else:
            steps[0].append(Transfer(k, p[0], p[1], "reduce"))
            steps[1].append(Transfer(k, p[1], p[2], "reduce"))
            steps[2].append(Transfer(k, p[2], p[3], "reduce"))
            steps[3] += [Transfer(k, p[3], p[0]), Transfer(k, p[3], p[1])]
            steps[4].append(Transfer(k, p[3], p[2]))
    return Schedule("allreduce", 4, 1, tuple(Step(4, tuple(t)) for t in steps if t))


def test_the_bulk_check_never_calls_an_inconsistent_schedule_consistent():
    """Random valid combining schedules (tests/_schedules.py: several sources into one target, both ways at once)
    and random mixes of disagreeing and agreeing chunks: where the bulk replay says "same bits" the expression
    trees agree (it may say "maybe" where they agree too: one expression built in two steps); both outcomes occur.
    The committed schedules all take the bulk answer (the test above and ``test_every_committed_...``)."""
    from _schedules import random_schedule

    from synth.ir.sum_order import _expression_check, _surely_consistent
    seen = set()
    for seed in range(60):
        for s in [random_schedule(coll, 3 + seed % 4, 1 + seed % 2, seed % 3, seed)
                  for coll in ("allreduce", "reducescatter", "reduce")] + [_relabelled(seed)]:
            exact = _expression_check(s) == []
            fast = _surely_consistent(s)
            assert exact or not fast, (s.collective, seed)
            seen.add((exact, fast))
    assert {(True, True), (False, False)} <= seen


def _per_chunk(n: int, steps: list[list[tuple[int, int, str]]]) -> Schedule:
    """An all-reduce on ``n`` ranks whose every chunk runs the same ``(src, dst, op)`` steps."""
    return Schedule("allreduce", n, 1, tuple(Step(n, tuple(Transfer(k, s, d, op) for k in range(n) for s, d, op in st_))
                                             for st_ in steps))


#: hand-built traps for the bulk replay, each where one careless id scheme would call differing ranks agreeing:
#: name -> (schedule, the ranks whose bits differ from rank 0's), the final values by hand (the reference rule:
#: docs/guarantees.md, rank order within a step)
TRAPS = {
    # rank 0 <- 3 and rank 1 <- 2 in one step: x0 + x3 and x1 + x2, two pairs with equal id sums; then copies.
    # Ranks 0, 2: x0 + x3; ranks 1, 3: x1 + x2.
    "equal_pair_sums": (_per_chunk(4, [[(3, 0, "reduce"), (2, 1, "reduce")], [(0, 2, "copy"), (1, 3, "copy")]]),
                        {1, 3}),
    # rank 3 gets x0 first; then rank 0 sums 2 and 1 (listed so), and rank 3 sums 2 and 1 (listed so) in one step:
    # in rank order rank 0 makes ((x0 + x1) + x2), rank 3 ((x1 + x2) + x0); in the transfers' order, own value
    # last, both would be ((x2 + x1) + x0).  Ranks 0, 1: ((x0 + x1) + x2); ranks 2, 3: ((x1 + x2) + x0).
    "rank_order_not_list_order": (_per_chunk(4, [[(0, 3, "copy")],
                                               [(2, 0, "reduce"), (1, 0, "reduce"), (2, 3, "reduce"), (1, 3, "reduce")],
                                               [(0, 1, "copy"), (3, 2, "copy")]]), {2, 3}),
    # rank 3 gets x2 first; then rank 2 takes a copy of x0 and a reduce of x1 (transfers' order: x0 + x1, its own
    # x2 overwritten) while rank 3 sums 0 and 1 into its x2 in rank order: ((x0 + x1) + x2).  Folding rank 2's
    # copy like a reduce would give ((x0 + x1) + x2) too.  Ranks 1, 2: x0 + x1; ranks 0, 3: ((x0 + x1) + x2).
    "copy_among_reduces": (_per_chunk(4, [[(2, 3, "copy")],
                                        [(0, 2, "copy"), (1, 2, "reduce"), (0, 3, "reduce"), (1, 3, "reduce")],
                                        [(3, 0, "copy"), (2, 1, "copy")]]), {1, 2}),
}


@pytest.mark.parametrize("name", sorted(TRAPS))
def test_the_bulk_replay_is_not_fooled_by_ids_that_look_alike(name):
    """Each trap leaves two groups of ranks with different float32 bits (the NumPy replay, independent of the
    checker) and different expressions (by hand, above); the bulk replay must not call them agreeing."""
    from synth.ir.sum_order import _surely_consistent
    s, other = TRAPS[name]
    assert _differing_ranks(cases.float32_replay(s, cases.wide_inputs(4, 4096, seed=3))) == other
    assert not _surely_consistent(s)
    assert [k for k, _ in inconsistent_chunks(s)] == [0, 1, 2, 3]


def test_node_ids_are_equal_exactly_where_the_operand_pairs_are():
    """Brute force over every two nodes: equal ids where the unordered pairs of operands are equal, all at or above
    ``next_id``, and the next free id is ``next_id`` plus the distinct pairs; on pairs drawn from few values
    (repeats) and from many (all distinct: the path that skips the inverse)."""
    from synth.ir.sum_order import _node_ids
    rng = np.random.default_rng(7)
    for values, size in ((3, 40), (10**6, 300), (5, 1), (4, 0)):
        next_id = values + 1
        a, b = rng.integers(0, values, size), rng.integers(0, values, size)
        ids, free = _node_ids(a, b, next_id)
        pairs = [(min(x, y), max(x, y)) for x, y in zip(a.tolist(), b.tolist())]
        assert all((ids[i] == ids[j]) == (pairs[i] == pairs[j]) for i in range(size) for j in range(size))
        assert all(next_id <= i < free for i in ids.tolist()) and free == next_id + len(set(pairs))


def _mixed_last_step() -> Schedule:
    """5 ranks; chunks 0-2: ranks 1 and 3 swap inputs, then add x2 and x4 in opposite orders, then both add x0 in
    step 3, whose other transfers copy chunks 3 and 4 (summed at rank 0 in step 0) out: a step with one write per
    (rank, chunk) mixing copies and reduces.  Rank 1's sum is copied to ranks 0, 2 and 4.  By hand: rank 1 ends
    with (((x1 + x3) + x2) + x4) + x0, rank 3 with (((x1 + x3) + x4) + x2) + x0, in chunks 0, 1 and 2."""
    a, b = range(3), range(3, 5)
    steps = [[Transfer(k, s, d, "reduce") for k in a for s, d in ((3, 1), (1, 3))]
             + [Transfer(k, r, 0, "reduce") for k in b for r in range(1, 5)],
             [Transfer(k, s, d, "reduce") for k in a for s, d in ((2, 1), (4, 3))],
             [Transfer(k, s, d, "reduce") for k in a for s, d in ((4, 1), (2, 3))],
             [Transfer(k, 0, d, "reduce") for k in a for d in (1, 3)]
             + [Transfer(k, 0, d) for k in b for d in range(1, 5)],
             [Transfer(k, 1, d) for k in a for d in (0, 2, 4)]]
    return Schedule("allreduce", 5, 1, tuple(Step(1, tuple(s)) for s in steps), name="mixed_last_step")


def test_a_reduce_in_a_step_that_also_copies_keeps_its_receivers_partial():
    """The bulk replay's path for a step of copies and reduces, one write per (rank, chunk): each reduce combines
    the receiver's partial (were it read as the sender's value alone, ranks 1 and 3 would look alike and the check
    would pass); as the float32 replay says (rank 3 other bits than the rest) and by hand (_mixed_last_step)."""
    s = _mixed_last_step()
    assert verify(s).ok
    assert _differing_ranks(cases.float32_replay(s, cases.wide_inputs(5, 4096, seed=11))) == {3}
    bad = inconsistent_chunks(s)
    assert [k for k, _ in bad] == [0, 1, 2]
    assert bad[0][1] == {"((((x1 + x3) + x2) + x4) + x0)": (0, 1, 2, 4), "((((x1 + x3) + x4) + x2) + x0)": (3,)}
