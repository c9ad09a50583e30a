"""synth.ir.sum_order: the in-step reduction order, and the rank-consistency checker on hand-built cases."""

from synth.baselines import baseline
from synth.ir.fabric import build_fabric
from synth.ir.schedule import Schedule, Step, Transfer
from synth.ir.sum_order import Expressions, final_expressions, inconsistent_chunks, reduce_order
from topo_probe.machines.generators import fully_connected


def one_shot(n: int) -> Schedule:
    """The one-shot all-reduce by hand: every rank reduces every peer's chunk in one step."""
    return Schedule("allreduce", n, 1, (Step(1, tuple(Transfer(k, r, d, "reduce") for k in range(n)
                                                      for d in range(n) for r in range(n) if r != d)),))


def two_trees() -> Schedule:
    """4 ranks, each chunk: rank 3 sums its peers in one step, ((x0 + x1) + x2) + x3; rank 1 sums
    ranks 2 and 3 in step 1, ((x1 + x2) + x3), then rank 0 in step 2; ranks 0 and 2 copy rank 3's."""
    s1, s2 = [], []
    for k in range(4):
        s1 += [Transfer(k, r, 3, "reduce") for r in (2, 0, 1)] + [Transfer(k, r, 1, "reduce") for r in (3, 2)]
        s2 += [Transfer(k, 0, 1, "reduce"), Transfer(k, 3, 0), Transfer(k, 3, 2)]
    return Schedule("allreduce", 4, 1, (Step(1, tuple(s1)), Step(1, tuple(s2))))


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
    bad = inconsistent_chunks(two_trees())
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
