"""Verifier: hand-written schedules pass; mutations are rejected with the precise rule and location;
property test: whatever the verifier accepts is correct under an independent NumPy execution."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from _replay import replays_correctly  # noqa: E402
from _topologies import DGX1_LINKS as DGX1  # noqa: E402
from _topologies import dgx1_hand
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.ir.collectives import Chunk, CollectiveSpec
from synth.ir.fabric import build_fabric
from synth.ir.schedule import Schedule, Step, Transfer
import synth.ir.verifier as verifier_module
from synth.ir.verifier import RULES, check, required_rounds, verify
from topo_probe.errors import ScheduleInvalid
from topo_probe.topology.model import Topology


@pytest.fixture(autouse=True, scope="module", params=["one by one", "bulk"])
def replay_mode(request):
    """Every test twice: as the verifier runs (small steps replayed transfer by transfer) and with
    every step first tried in bulk (:mod:`synth.ir.step_replay`), which must reject the same."""
    with pytest.MonkeyPatch.context() as mp:
        if request.param == "bulk":
            mp.setattr(verifier_module, "CLEAN_STEP_TRANSFERS", 1)
        yield request.param


# ---------------------------------------------------------------- hand-built topologies
def ring_topology(n: int) -> Topology:
    t = Topology(f"ring{n}")
    for i in range(n):
        t.add_gpu(i)
    for i in range(n):
        t.add_link(f"gpu{i}", f"gpu{(i + 1) % n}", kind="nvlink", bandwidth_gbps=25.0)
    return t


def dgx1_topology() -> Topology:
    return dgx1_hand()


RING4 = build_fabric(ring_topology(4))
DGXF = build_fabric(dgx1_topology())


def sched(coll: str, n: int, steps, fabric=None, root=None, C=1) -> Schedule:
    return Schedule(coll, n, C, tuple(Step(r, tuple(Transfer(*t) for t in ts)) for r, ts in steps), root=root,
                    topology_name=fabric.topology_name if fabric else "",
                    topology_fingerprint=fabric.fingerprint if fabric else "")


# ---------------------------------------------------------------- hand-written correct schedules
def ring_allgather(n=4, fabric=RING4) -> Schedule:
    # chunk r travels r -> r+1 -> ... ; at step s it leaves rank r+s
    return sched("allgather", n, [(1, [(r, (r + s) % n, (r + s + 1) % n) for r in range(n)]) for s in range(n - 1)],
                 fabric)


def ring_reducescatter(n=4, fabric=RING4) -> Schedule:
    # chunk d (ends at rank d) starts at d+1 and is reduced into each next rank
    return sched("reducescatter", n, [(1, [(d, (d + 1 + s) % n, (d + 2 + s) % n, "reduce") for d in range(n)])
                                      for s in range(n - 1)], fabric)


def ring_allreduce(n=4, fabric=RING4) -> Schedule:
    rs = ring_reducescatter(n, fabric).steps
    ag = ring_allgather(n, fabric).steps
    return Schedule("allreduce", n, 1, rs + ag, topology_name=fabric.topology_name,
                    topology_fingerprint=fabric.fingerprint)


def dgx1_two_step_allgather(C: int = 1) -> tuple[Schedule, list[dict]]:
    """Step 0: every GPU sends its chunk to its 4 NVLink neighbours.  Step 1: every GPU gets each
    of the 3 chunks of its non-neighbours from a common neighbour (diameter 2), picking the
    relay whose link is least loaded; the C chunks of a rank travel together.  Rounds = max over
    links of ceil(chunks / NVLinks), counted here from the link matrix, independently of Fabric."""
    n = 8
    step0 = [(r * C + c, r, j) for r in range(n) for j in range(n) if DGX1[r][j] for c in range(C)]
    count: dict[tuple[int, int], int] = {}
    step1 = []
    for d in range(n):
        for o in range(n):
            if o == d or DGX1[d][o]:
                continue
            relays = [x for x in range(n) if DGX1[x][d] and DGX1[o][x]]
            x = min(relays, key=lambda x: ((count.get((x, d), 0) + 1) / DGX1[x][d], x))
            count[(x, d)] = count.get((x, d), 0) + 1
            step1 += [(o * C + c, x, d) for c in range(C)]
    count = {k: v * C for k, v in count.items()}
    r0 = max(math.ceil(C / DGX1[i][j]) for (_, i, j) in step0)
    r1 = max(math.ceil(c / DGX1[x][d]) for (x, d), c in count.items())
    loads = [{(i, j): C for (_, i, j) in step0}, count]
    return sched("allgather", n, [(r0, step0), (r1, step1)], DGXF, C=C), loads


def test_hand_written_schedules_pass():
    for s, f in [(ring_allgather(), RING4), (ring_reducescatter(), RING4), (ring_allreduce(), RING4),
                 (dgx1_two_step_allgather()[0], DGXF), (dgx1_two_step_allgather(2)[0], DGXF),
                 (dgx1_two_step_allgather(3)[0], DGXF)]:
        rep = verify(s, f)
        assert rep.ok, rep.violations[:3]
        check(s, f)
        check(s)  # without a fabric too


@pytest.mark.parametrize("C, rounds", [(1, (1, 1)), (2, (2, 2)), (3, (3, 3))])
def test_dgx1_two_step_loads_match_link_count(C, rounds):
    s, loads = dgx1_two_step_allgather(C)
    rep = verify(s, DGXF)
    assert tuple(st_.rounds for st_ in s.steps) == rounds  # single-NVLink edges carry C chunks per step
    for si, expect in enumerate(loads):
        got = {(int(u[3:]), int(v[3:])): load for (u, v), load in rep.loads[si].items()}
        assert got == pytest.approx({k: float(v) for k, v in expect.items()})
        need = max(math.ceil(c / DGX1[i][j]) for (i, j), c in expect.items())
        assert rep.rounds_needed[si] == need


def test_rounds_needed_equals_brute_force_on_random_sends():
    rng = np.random.default_rng(7)
    pairs = [(i, j) for i in range(8) for j in range(8) if DGX1[i][j]]
    for _ in range(50):
        sends = [pairs[k] for k in rng.integers(0, len(pairs), size=int(rng.integers(1, 40)))]
        counts: dict = {}
        for p in sends:
            counts[p] = counts.get(p, 0) + 1
        assert required_rounds(DGXF, sends) == max(math.ceil(c / DGX1[i][j]) for (i, j), c in counts.items())


# ---------------------------------------------------------------- mutations: precise rule and location
def mutate(s: Schedule, si: int, transfers=None, rounds=None) -> Schedule:
    steps = list(s.steps)
    old = steps[si]
    steps[si] = Step(old.rounds if rounds is None else rounds,
                     old.transfers if transfers is None else tuple(transfers))
    return s.with_(steps=tuple(steps))


def first(s, f=None) -> ScheduleInvalid:
    with pytest.raises(ScheduleInvalid) as ei:
        check(s, f)
    return ei.value


def test_dropped_transfer_is_not_held_at_the_next_hop():
    s = ring_allgather()
    t = s.steps[1].transfers
    bad = mutate(s, 1, t[:2] + t[3:])  # chunk 2 no longer goes 3 -> 0 in step 1
    e = first(bad, RING4)
    assert (e.rule, e.step, e.transfer, e.rank, e.chunk) == ("not-held", 2, 2, 0, 2)
    assert str(e) == "step 2, transfer 2 (chunk 2, rank 0 -> 1): rank 0 does not hold chunk 2 yet (rule: not-held)"


def test_dropped_last_transfer_breaks_postcondition():
    s = ring_allgather()
    bad = mutate(s, 2, s.steps[2].transfers[1:])  # chunk 0 never reaches rank 3
    e = first(bad, RING4)
    assert (e.rule, e.step, e.rank, e.chunk) == ("postcondition", None, 3, 0)
    assert "rank 3 lacks chunk 0" in str(e)


def test_swapped_steps():
    s = ring_allgather()
    bad = s.with_(steps=(s.steps[1], s.steps[0], s.steps[2]))
    e = first(bad)
    assert (e.rule, e.step, e.transfer, e.rank, e.chunk) == ("not-held", 0, 0, 1, 0)


def test_over_capacity_when_rounds_reduced():
    s, _ = dgx1_two_step_allgather(2)
    bad = mutate(s, 1, rounds=s.steps[1].rounds - 1)
    assert verify(bad).ok  # fine without a fabric
    e = first(bad, DGXF)
    assert (e.rule, e.step, e.transfer) == ("over-capacity", 1, None)
    rep = verify(bad, DGXF)
    # every resource over its 1-round capacity is named, with load and capacity
    over = {(u, v) for (u, v), load in rep.loads[1].items() if load > DGXF.capacity((u, v), 1)}
    assert len(rep.violations) == len(over) >= 1
    u, v = sorted(over)[0]
    load = rep.loads[1][(u, v)]
    assert f"resource {u}->{v} carries {load:g} chunks" in str(e)
    assert f"capacity {DGXF.capacity((u, v), 1):g}" in str(e)


def test_double_reduction():
    s = ring_reducescatter()
    # step 1 again reduces chunk 0's partial of rank 1 (holds {1}) into rank 2, which got it in step 0
    bad = mutate(s, 1, s.steps[1].transfers + (Transfer(0, 1, 2, "reduce"),))
    e = first(bad)
    assert (e.rule, e.step, e.transfer, e.rank, e.chunk) == ("double-count", 1, 4, 2, 0)
    assert "contributions [1]" in str(e)


def test_two_overlapping_reduces_in_one_step():
    # rank 1 and rank 3 both send chunk 0 partials containing rank 2's... build directly
    s = sched("reduce", 4, [(1, [(0, 2, 1, "reduce")]),
                            (1, [(0, 1, 0, "reduce"), (0, 2, 0, "reduce")])], root=0)
    e = first(s)
    assert (e.rule, e.step, e.transfer, e.rank, e.chunk) == ("double-count", 1, 1, 0, 0)
    assert "another reduce" in str(e)


def test_disjoint_concurrent_reduces_are_fine():
    """Ranks 1 and 2 reduce their own (disjoint) contributions to chunk 0 into root 0 in the same
    step: by hand the root ends with x0 + x1 + x2, which the NumPy replay computes too, and the
    verifier accepts it; without rank 2's reduce the root lacks x2 and the verifier refuses."""
    s = sched("reduce", 3, [(1, [(0, 1, 0, "reduce"), (0, 2, 0, "reduce")])], root=0)
    rep = verify(s)
    assert rep.ok and rep.violations == [], [v.message for v in rep.violations]
    check(s)
    assert all(replays_correctly(s, seed) for seed in range(5))
    short = sched("reduce", 3, [(1, [(0, 1, 0, "reduce")])], root=0)
    assert not replays_correctly(short)
    assert first(short).rule == "postcondition"


def test_transfer_across_non_channel():
    s = ring_allgather()
    bad = mutate(s, 0, s.steps[0].transfers + (Transfer(0, 0, 2),))
    e = first(bad, RING4)
    assert (e.rule, e.step, e.transfer, e.rank, e.chunk) == ("no-channel", 0, 4, 0, 0)
    assert verify(bad).ok  # without a fabric the extra copy is harmless


def test_copy_overwrites_partial():
    s = ring_reducescatter()
    t = list(s.steps[1].transfers)
    t[0] = Transfer(t[0].chunk, t[0].src, t[0].dst, "copy")  # chunk 0: 2 -> 3 copies {1,2} over {3}
    e = first(mutate(s, 1, t))
    assert (e.rule, e.step, e.transfer, e.rank, e.chunk) == ("overwrite-loses", 1, 0, 3, 0)
    assert "contributions [3]" in str(e)


def test_allreduce_gather_phase_copy_over_own_partial_is_fine_but_partial_over_full_is_not():
    s = ring_allreduce()
    check(s)
    # after the reduce-scatter half rank 0 holds chunk 0 reduced and rank 1 its own partial {1}:
    # copying that stale partial back onto rank 0 loses contributions 0, 2, 3
    bad = s.with_(steps=s.steps[:3] + (Step(1, (Transfer(0, 1, 0),)),) + s.steps[3:])
    e = first(bad)
    assert (e.rule, e.step, e.transfer, e.rank, e.chunk) == ("overwrite-loses", 3, 0, 0, 0)
    assert "contributions [0, 2, 3]" in str(e)


def test_dropped_reduce_gives_partial_postcondition():
    s = ring_reducescatter()
    # drop the first hop of chunk 0 (1 -> 2): rank 2 then forwards only its own contribution
    bad = mutate(s, 0, s.steps[0].transfers[1:])
    rep = verify(bad)
    assert [v.rule for v in rep.violations] == ["postcondition"]
    assert (rep.violations[0].rank, rep.violations[0].chunk) == (0, 0)
    assert "contributions [1] are missing" in rep.violations[0].message


def test_write_conflict_and_op_mismatch():
    s = ring_allgather()
    bad = mutate(s, 0, s.steps[0].transfers + (Transfer(3, 3, 0),))  # rank 0 gets chunk 3 twice
    e = first(bad)
    assert (e.rule, e.step, e.transfer, e.rank, e.chunk) == ("write-conflict", 0, 4, 0, 3)
    bad = mutate(s, 0, (Transfer(0, 0, 1, "reduce"),) + s.steps[0].transfers[1:])
    e = first(bad)
    assert (e.rule, e.step, e.transfer, e.chunk) == ("op-mismatch", 0, 0, 0)


def test_reduce_into_empty(monkeypatch):
    # no built-in combining collective has a rank without a contribution: patch one in
    orig = CollectiveSpec.chunks

    def chunks(self):
        return [Chunk(c.id, (0, 1), c.post) for c in orig(self)]
    monkeypatch.setattr(CollectiveSpec, "chunks", chunks)
    s = sched("reduce", 3, [(1, [(0, 0, 2, "reduce")])], root=2)
    e = first(s)
    assert (e.rule, e.step, e.transfer, e.rank, e.chunk) == ("reduce-into-empty", 0, 0, 2, 0)


def test_wrong_topology_and_bad_transfers():
    s = ring_allgather().with_(topology_fingerprint="0123456789abcdef")
    e = first(s, RING4)
    assert e.rule == "wrong-topology" and "0123456789abcdef" in str(e)
    rep = verify(ring_allgather().with_(topology_fingerprint=""), DGXF)
    assert [v.rule for v in rep.violations] == ["wrong-topology"] and "4 ranks" in rep.violations[0].message
    check(ring_allgather().with_(topology_fingerprint=""), RING4)  # unknown fingerprint: not checked
    e = first(mutate(ring_allgather(), 0, [Transfer(9, 0, 1)]))
    assert (e.rule, e.step, e.transfer) == ("bad-transfer", 0, 0)
    e = first(mutate(ring_allgather(), 1, rounds=0))
    assert (e.rule, e.step) == ("bad-rounds", 1)


def test_every_rule_has_a_distinct_name():
    assert len(set(RULES)) == len(RULES)


def test_broadcast_and_empty_schedules():
    check(sched("broadcast", 1, [], root=0))
    e = first(sched("broadcast", 2, [], root=0))
    assert e.rule == "postcondition" and "with no steps" in str(e)


# ---------------------------------------------------------------- property: accepted => correct
def numpy_execution_correct(s: Schedule, seed: int) -> bool:
    """Execute ``s`` on random integers with NumPy (see tests/_replay.py)."""
    return replays_correctly(s, seed)


POOL = {"ag": ring_allgather(), "rs": ring_reducescatter(), "ar": ring_allreduce(),
        "dgx": dgx1_two_step_allgather()[0]}


@settings(derandomize=True, max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(POOL)), ops=st.lists(
    st.tuples(st.sampled_from(["drop", "move"]), st.integers(0, 10**6), st.integers(0, 10**6),
              st.integers(0, 10**6)), min_size=1, max_size=4), seed=st.integers(0, 2**32 - 1))
def test_random_drop_or_move_is_rejected_or_correct(name, ops, seed):
    s = POOL[name]
    steps = [list(st_.transfers) for st_ in s.steps]
    for op, a, b, c in ops:
        si = a % len(steps)
        if not steps[si]:
            continue
        t = steps[si].pop(b % len(steps[si]))
        if op == "move":
            steps[c % len(steps)].append(t)
    mutated = s.with_(steps=tuple(Step(st_.rounds, tuple(ts)) for st_, ts in zip(s.steps, steps)))
    rep = verify(mutated)
    assert numpy_execution_correct(s, seed)  # the original is right under the reference too
    if rep.ok:
        assert numpy_execution_correct(mutated, seed)
    else:
        assert rep.violations[0].rule in RULES
        with pytest.raises(ScheduleInvalid) as ei:
            check(mutated)
        assert ei.value.rule == rep.violations[0].rule and str(ei.value) == rep.violations[0].message


@pytest.mark.parametrize("field,ti", [("chunk", 1), ("src", 1), ("dst", 0)])
@pytest.mark.parametrize("odd", [True, np.bool_(True), 1.0, "1"])
def test_a_field_equal_to_1_but_not_an_integer_is_a_bad_transfer(field, ti, odd):
    """The ring allgather's step 0 transfers 0 and 1 are (0, 0, 1) and (1, 1, 2): a field 1 written as True (NumPy
    reads ``[0, True]`` as int64), 1.0 or "1" is refused by the one integer rule (topo_probe.number_rules.is_int), in
    bulk and one by one, naming step, transfer, field and value; as np.int64(1) it is the same schedule and passes."""
    good = ring_allgather()
    ts = list(good.steps[0].transfers)
    assert [(t.chunk, t.src, t.dst) for t in ts[:2]] == [(0, 0, 1), (1, 1, 2)] and getattr(ts[ti], field) == 1
    e = first(mutate(good, 0, ts[:ti] + [replace(ts[ti], **{field: odd})] + ts[ti + 1:]))
    assert (e.rule, e.step, e.transfer) == ("bad-transfer", 0, ti)
    assert f"step 0, transfer {ti}: {field} {odd!r} is not an integer" in str(e)
    check(mutate(good, 0, ts[:ti] + [replace(ts[ti], **{field: np.int64(1)})] + ts[ti + 1:]), RING4)
