"""synth.ir.step_columns: a step's transfers as arrays, read once by the verifier's bulk replay and handed, through
a KeptColumns its owner lends, to the same-bits check of the same schedule."""

import collections
import random
from contextlib import contextmanager

import _sum_order_cases as cases
import numpy as np
import pytest
from _schedules import random_schedule
from hypothesis import given, settings
from hypothesis import strategies as st

import synth.ir.step_replay as step_replay
import synth.ir.verifier as verifier
from synth.ir.capacity import required_rounds
from synth.ir.fabric import build_fabric
from synth.ir.schedule import Schedule, Step, Transfer
from synth.ir.step_columns import KeptColumns, keeping_columns, kept_columns, read_columns
from synth.ir.sum_order import _expression_check, _surely_consistent, inconsistent_chunks
from synth.ir.verifier import check, verify
from topo_probe.errors import InvalidArgument
from topo_probe.machines.generators import fully_connected


def _ring_allreduce(n: int) -> Schedule:
    """By hand: chunk c is reduced along c -> c+1 -> ... (n - 1 steps), then copied on around the ring."""
    red = [Step(1, tuple(Transfer(c, (c + s) % n, (c + s + 1) % n, "reduce") for c in range(n))) for s in range(n - 1)]
    cop = [Step(1, tuple(Transfer(c, (c + s) % n, (c + s + 1) % n) for c in range(n))) for s in range(n - 1, 2 * n - 2)]
    return Schedule("allreduce", n, 1, tuple(red + cop))


@contextmanager
def _lent(n: int):
    """A fabric for n ranks (every pair a channel) and the KeptColumns lent to it for the block, as synthesize lends
    its own: the public way a verification keeps columns."""
    fab = build_fabric(fully_connected(n))
    with keeping_columns(fab) as kept:
        yield fab, kept


def _fitted(s: Schedule, fab) -> Schedule:
    """``s`` with each step given the rounds its transfers need on ``fab`` (required_rounds), so that it may pass."""
    return s.with_(steps=tuple(Step(required_rounds(fab, [(t.src, t.dst) for t in st.transfers]), st.transfers)
                               for st in s.steps))


def _fields(cols) -> list[tuple]:
    return list(zip(cols.chunk.tolist(), cols.src.tolist(), cols.dst.tolist(),
                    ["reduce" if r else "copy" for r in cols.is_reduce.tolist()]))


def test_columns_are_the_transfers_fields_in_order():
    """Hand-written transfers: the columns list their chunk, src, dst and whether each reduces, in order."""
    got = read_columns((Transfer(3, 0, 1, "reduce"), Transfer(0, 2, 1), Transfer(7, 1, 0, "reduce")))
    assert [c.tolist() for c in got] == [[3, 0, 7], [0, 2, 1], [1, 1, 0], [True, False, True]]
    assert all(c.dtype == np.int64 for c in got[:3]) and got.is_reduce.dtype == bool
    assert [c.tolist() for c in read_columns((Transfer(1, 0, 1, "reduce"),) * 2)] == [[1, 1], [0, 0], [1, 1],
                                                                                      [True, True]]
    with pytest.raises(ValueError):                       # handed from one reader to another: nobody writes
        got.src[0] = 5


@pytest.mark.parametrize("odd", [Transfer(1.0, 0, 1), Transfer(1.5, 0, 1), Transfer("1", 0, 1), Transfer(1, 0, b"2"),
                                 Transfer(2**70, 0, 1), Transfer(None, 0, 1), Transfer(1, 0, 1, "move"),
                                 Transfer(1, 0, 1, None), Transfer(True, 0, 1), Transfer(1, np.bool_(False), 1),
                                 Transfer(np.uint64(2**63), 0, 1)])
def test_anything_but_integers_and_the_two_ops_is_not_read(odd):
    """A float, string, bytes or bool would pass for an integer in an int64 array (NumPy converts 1.5 and "1" to 1,
    and reads [0, True, 2] as int64), a value past int64 cannot be held, an op other than copy/reduce has no column:
    None, left to the plain replays (which name the transfer)."""
    assert read_columns((Transfer(0, 1, 2, "reduce"), odd, Transfer(2, 2, 0))) is None


def test_numpy_integers_are_read_as_their_values():
    """np.int32 / np.uint8 / np.int64 fields are integers (topo_probe.number_rules.is_int): read as the Python ints they
    equal, beside plain ints."""
    got = read_columns((Transfer(np.int32(3), 0, np.uint8(1)), Transfer(0, np.int64(2), 1, "reduce")))
    assert [c.tolist() for c in got] == [[3, 0], [0, 2], [1, 1], [False, True]]
    assert all(c.dtype == np.int64 for c in got[:3])


def test_a_passing_combining_verification_offers_what_it_read_in_bulk(monkeypatch):
    """A 5-rank ring all-reduce whose steps are all replayed in bulk: the columns offered are each step's transfers
    field by field; a copy-only allgather, a schedule that fails and a verification lent nothing offer none."""
    monkeypatch.setattr(verifier, "CLEAN_STEP_TRANSFERS", 1)
    s = _ring_allreduce(5)
    with _lent(5) as (fab, kept):
        assert verify(s).ok and kept.transfers == 0                           # no fabric: nothing lent
        assert verify(s, fab).ok and kept.transfers == 40
        offered = kept.take(s.steps)
        assert [_fields(c) for c in offered] == [[(t.chunk, t.src, t.dst, t.op) for t in st.transfers]
                                                 for st in s.steps]
        assert kept.take(s.steps) is None and kept.transfers == 0             # given up when taken
        broken = s.with_(steps=s.steps[:-1])                                  # one rank lacks the reduced chunk
        assert not verify(broken, fab).ok and kept.entries == []
    ag = Schedule("allgather", 3, 1, tuple(Step(1, tuple(Transfer(c, (c + h) % 3, (c + h + 1) % 3) for c in range(3)))
                                           for h in range(2)))
    with _lent(3) as (fab, kept):
        assert verify(ag, fab).ok and kept.entries == []


def test_a_second_verification_of_the_same_steps_reads_nothing_again(monkeypatch):
    """Verified twice with one KeptColumns (a builder's check of a schedule, then the pipeline's of the copy
    ``with_`` made of it, sharing its steps): the second replay takes the first one's columns, reads none, still
    passes and offers them again; a copy with a step dropped (other steps) reads all and fails."""
    monkeypatch.setattr(verifier, "CLEAN_STEP_TRANSFERS", 1)
    reads = []

    def spy(transfers):
        reads.append(transfers)
        return read_columns(transfers)
    monkeypatch.setattr(step_replay, "read_columns", spy)
    s = _ring_allreduce(5)
    with _lent(5) as (fab, kept):
        assert verify(s, fab).ok and len(reads) == 8
        assert verify(s.with_(name="copy"), fab).ok and len(reads) == 8 and kept.transfers == 40
        assert not verify(s.with_(steps=s.steps[:-1]), fab).ok and len(reads) == 15
        assert kept.take(s.steps) is not None


def test_columns_are_handed_to_the_very_schedule_only(monkeypatch):
    """An equal schedule made anew (another steps tuple) gets nothing: columns go by identity, never by value."""
    monkeypatch.setattr(verifier, "CLEAN_STEP_TRANSFERS", 1)
    with _lent(4) as (fab, kept):
        assert verify(_ring_allreduce(4), fab).ok
        assert kept.take(_ring_allreduce(4).steps) is None and len(kept.entries) == 1


def test_past_the_limit_the_oldest_are_dropped():
    """Room for 50 transfers: two 5-rank rings (40 transfers each) do not fit, the first is dropped; one bigger than
    the limit is not kept at all and drops nothing."""
    kept = KeptColumns(limit=50)
    a, b, big = _ring_allreduce(5), _ring_allreduce(5), _ring_allreduce(6)                # 40, 40, 60 transfers
    for s in (a, b, big):
        kept.offer(s.steps, [read_columns(st.transfers) for st in s.steps])
    assert [e[0] for e in kept.entries] == [b.steps] and kept.transfers == 40
    assert kept.take(a.steps) is None and kept.take(big.steps) is None and kept.take(b.steps) is not None


def test_a_fabric_is_lent_one_for_the_block_and_check_leaves_columns_there(monkeypatch):
    """keeping_columns lends its fabric a KeptColumns for the block (the same one inside a nested block) and takes
    it back; a check on that fabric leaves its columns there, on another fabric not."""
    monkeypatch.setattr(verifier, "CLEAN_STEP_TRANSFERS", 1)
    fab, other = build_fabric(fully_connected(4)), build_fabric(fully_connected(4))
    s = _ring_allreduce(4).with_(topology_name=fab.topology_name, topology_fingerprint=fab.fingerprint)
    assert kept_columns(fab) is None and kept_columns(None) is None
    with keeping_columns(fab) as kept:
        with keeping_columns(fab) as inner:
            assert inner is kept is kept_columns(fab)
        assert kept_columns(fab) is kept and kept_columns(other) is None
        check(s, other)
        assert kept.entries == []
        check(s, fab)
        assert kept.take(s.steps) is not None
    assert kept_columns(fab) is None


def test_columns_that_do_not_fit_the_schedule_are_refused():
    s = _ring_allreduce(4)
    cols = [read_columns(st.transfers) for st in s.steps]
    with pytest.raises(InvalidArgument, match="columns for 5 steps, the schedule has 6"):
        inconsistent_chunks(s, cols[:5])
    with pytest.raises(InvalidArgument, match="step 2's columns hold 3 transfers, the step 4"):
        inconsistent_chunks(s, cols[:2] + [read_columns(s.steps[2].transfers[:3])] + cols[3:])


def _gatherers(n: int, chunks: int, seed: int) -> Schedule:
    """A random all-reduce whose ranks may end with different trees: per chunk, a random set of gatherers each sum
    every rank's input themselves (in step 0 from the other gatherers, whose inputs are still untouched, and a random
    part of the rest, then the rest in random batches, one batch a step), then the first gatherer's sum is copied
    to every other rank.  Batches split differently give different trees (the way of cases.two_trees)."""
    rng = random.Random(seed)
    steps: dict = collections.defaultdict(list)
    for k in range(n * chunks):
        gath = rng.sample(range(n), rng.randint(1, n))
        rest = [r for r in range(n) if r not in gath]
        for d in gath:
            others = rng.sample(rest, len(rest))
            cut = rng.randint(0, len(others))
            batches, left = [[x for x in gath if x != d] + others[:cut]], others[cut:]
            while left:
                b = rng.randint(1, len(left))
                batches, left = batches + [left[:b]], left[b:]
            for t, batch in enumerate(batches):
                steps[t] += [Transfer(k, r, d, "reduce") for r in batch]
        steps[n] += [Transfer(k, gath[0], r) for r in rest]                 # (n: after every batch)
    return Schedule("allreduce", n, chunks, tuple(Step(1, tuple(rng.sample(steps[t], len(steps[t]))))
                                                  for t in sorted(steps) if steps[t]))


@settings(derandomize=True, max_examples=150, deadline=None)
@given(family=st.sampled_from(("allreduce", "reducescatter", "reduce", "gatherers")), n=st.integers(2, 7),
       chunks=st.integers(1, 3), root=st.integers(0, 6), seed=st.integers(0, 10**6))
def test_handed_columns_give_the_verdict_of_columns_read_afresh(family, n, chunks, root, seed):
    """Random combining schedules (tests/_schedules.py: several sources into one target, both ways at once; and
    _gatherers, whose ranks often disagree): the check on the columns a bulk verification handed over names what
    it names reading them itself, which is what the expression trees (final_expressions, the reference) say."""
    s = _gatherers(n, chunks, seed) if family == "gatherers" else random_schedule(family, n, chunks, root % n, seed)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(verifier, "CLEAN_STEP_TRANSFERS", 1)
        with _lent(n) as (fab, kept):
            s = _fitted(s, fab)
            assert verify(s, fab).ok
    handed = kept.take(s.steps)
    assert handed is not None and all(c is not None for c in handed)
    assert inconsistent_chunks(s, handed) == inconsistent_chunks(s) == _expression_check(s)
    assert _surely_consistent(s, handed) == _surely_consistent(s)


def test_the_gatherers_draw_every_verdict():
    """The random family above reaches each answer: surely the same, maybe (the trees say the same), different."""
    seen = set()
    for seed in range(60):
        s = _gatherers(2 + seed % 6, 1 + seed % 2, seed)
        seen.add((_surely_consistent(s), _expression_check(s) == []))
    assert seen == {(True, True), (False, True), (False, False)}


@pytest.mark.parametrize("case", [cases.two_trees, cases.three_ranks, cases.two_trees_twin])
def test_handed_columns_keep_the_trap_cases_verdicts(case, monkeypatch):
    """The hand-built schedules whose ranks sum in different orders (and the twin whose ranks agree): the same
    chunks and ranks named with handed columns as without, as the float32 replay says (tests/_sum_order_cases.py)."""
    monkeypatch.setattr(verifier, "CLEAN_STEP_TRANSFERS", 1)
    with _lent(case().ranks) as (fab, kept):
        s = _fitted(case(), fab)
        assert verify(s, fab).ok
    handed = kept.take(s.steps)
    got = inconsistent_chunks(s, handed)
    assert got == inconsistent_chunks(s)
    out = cases.float32_replay(s, cases.wide_inputs(s.ranks, 4096, seed=5)).view(np.uint32)
    assert (got == []) == all(np.array_equal(out[r], out[0]) for r in range(s.ranks))
