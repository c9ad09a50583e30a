"""The tuned verifier's report (violations with messages and locations, loads, rounds) equals
the plain replay it was tuned from (``_verifier_reference``) on random valid schedules of all
eight collectives and on mutated copies of them (dropped, duplicated, retargeted, reordered and
retyped transfers, out-of-range chunks and ranks, non-channels, too few rounds)."""

from __future__ import annotations

import random

import pytest
from _schedules import ALL, random_schedule

from synth.ir.fabric import build_fabric
from synth.ir.schedule import Step, Transfer
import synth.ir.step_replay as step_replay
import synth.ir.verifier as verifier
from synth.ir.verifier import verify
from topo_probe.machines.clusters import cluster
from topo_probe.machines.generators import fully_connected, ring

import _verifier_reference as reference


def _report(r):
    return (r.ok, [(v.rule, v.message, v.step, v.transfer, v.rank, v.chunk) for v in r.violations],
            r.loads, r.rounds_needed)


def _mutate(s, rng: random.Random):
    steps = [list(st.transfers) for st in s.steps]
    rounds = [st.rounds for st in s.steps]
    for _ in range(rng.randint(1, 3)):
        si = rng.randrange(len(steps))
        if not steps[si]:
            continue
        ti = rng.randrange(len(steps[si]))
        t = steps[si][ti]
        kind = rng.randrange(9)
        if kind == 0:
            del steps[si][ti]
        elif kind == 1:
            steps[si].insert(rng.randrange(len(steps[si]) + 1), t)
        elif kind == 2:
            steps[si][ti] = Transfer(t.chunk, t.src, rng.randrange(s.ranks), t.op)
        elif kind == 3:
            steps[si][ti] = Transfer(t.chunk, t.src, t.dst, "copy" if t.op == "reduce" else "reduce")
        elif kind == 4:
            steps[si][ti] = Transfer(rng.choice([-1, s.spec.num_chunks, rng.randrange(s.spec.num_chunks)]),
                                     t.src, t.dst, t.op)
        elif kind == 5:
            steps[si][ti] = Transfer(t.chunk, rng.choice([-1, s.ranks, t.dst]), t.dst, rng.choice([t.op, "move"]))
        elif kind == 6:
            j = rng.randrange(len(steps))
            steps[si], steps[j] = steps[j], steps[si]
        elif kind == 7:
            rounds[si] = rng.choice([0, max(1, rounds[si] - 1)])
        else:
            other = rng.randrange(len(steps))
            steps[other].append(Transfer(t.chunk, rng.randrange(s.ranks), t.dst, rng.choice(["copy", "reduce"])))
    return s.with_(steps=tuple(Step(r, tuple(ts)) for r, ts in zip(rounds, steps)))


@pytest.mark.parametrize("bulk", [False, True])
@pytest.mark.parametrize("coll", ALL)
@pytest.mark.parametrize("topo", ["ring", "mesh", "none", "cluster"])
def test_reports_equal_the_plain_replay(coll, topo, bulk, monkeypatch):
    """On the cluster (16 ranks, 2 hosts) steps load more than ARRAY_LOADS resources: the
    capacity tests run on arrays.  ``bulk``: every step is first tried by
    :func:`synth.ir.step_replay.replay_clean_step` (which must take the valid ones)."""
    taken = []
    if bulk:
        real = step_replay.replay_clean_step
        monkeypatch.setattr(verifier, "CLEAN_STEP_TRANSFERS", 1)
        monkeypatch.setattr(step_replay, "replay_clean_step", lambda *a: _count(taken, real, a))
    n = 16 if topo == "cluster" else 6
    fabric = {"ring": lambda: build_fabric(ring(n)), "mesh": lambda: build_fabric(fully_connected(n)),
              "none": lambda: None, "cluster": lambda: build_fabric(cluster("dgx-h100", 2))}[topo]()
    rng = random.Random(f"{coll}-{topo}")
    for seed in range(6):
        s = random_schedule(coll, n, rng.choice([1, 2]), rng.randrange(n), seed)
        cases = [s] + [_mutate(s, rng) for _ in range(8)]
        for case in cases:
            assert _report(verify(case, fabric)) == _report(reference.verify(case, fabric))
    assert not bulk or (False in taken and (True in taken or topo == "ring"))   # ring: random pairs, few channels


def _count(taken: list, real, args):
    got = real(*args)
    taken.append(got is not None)
    return got


def _with_extra(s, odd):
    steps = list(s.steps)
    steps[0] = Step(steps[0].rounds + 1, steps[0].transfers + (odd,))
    return s.with_(steps=tuple(steps))


def test_bulk_replay_leaves_odd_values_to_the_plain_replay(monkeypatch):
    """Chunks or ranks too big for int64, and unknown ops, in big steps: the report of the plain replay.  A chunk or
    rank that is a float or a bool (1.0, 1.5, True) is not an integer: a bad transfer, left out of the state and the
    loads as the plain replay leaves an out-of-range one (chunk 99), with its own message."""
    monkeypatch.setattr(verifier, "CLEAN_STEP_TRANSFERS", 1)
    fabric = build_fabric(fully_connected(6))
    s = random_schedule("allgather", 6, 1, 0, 3)
    for odd in (Transfer(1, 1, 2, "move"), Transfer(1, 1, 2, "reduce"), Transfer(2**70, 1, 2)):
        case = _with_extra(s, odd)
        assert _report(verify(case, fabric)) == _report(reference.verify(case, fabric))
    at = len(s.steps[0].transfers)
    for odd, text in ((Transfer(1.0, 1, 2), "chunk 1.0"), (Transfer(1.5, 1, 2), "chunk 1.5"),
                      (Transfer(1, True, 2), "src True"), (Transfer(1, 1, 2.0), "dst 2.0")):
        ok, violations, loads, rounds = _report(reference.verify(_with_extra(s, Transfer(99, 1, 2)), fabric))
        ours = f"step 0, transfer {at}: {text} is not an integer (rule: bad-transfer)"
        want = [("bad-transfer", ours, 0, at, None, None) if v[:4:2] == ("bad-transfer", 0) and v[3] == at else v
                for v in violations]
        assert want != violations and _report(verify(_with_extra(s, odd), fabric)) == (ok, want, loads, rounds)


def test_capacity_tests_on_arrays_equal_the_loop(monkeypatch):
    """rounds_for_loads and over_capacity on arrays (many loaded resources) give the loop's
    answers, loads right at and around the capacities of 1 to 4 rounds included."""
    import synth.ir.capacity as verifier
    fabric = build_fabric(cluster("dgx-h100", 2))
    rng = random.Random(5)
    names = list(fabric.resources)
    cases = []
    for _ in range(60):
        picked = rng.sample(names, rng.randrange(verifier.ARRAY_LOADS, len(names)))
        loads = {}
        top = rng.randint(1, 4)
        for r in picked:
            k = rng.randint(1, top)
            cap = fabric.capacity(r, k)
            loads[r] = rng.choice([cap, cap + 1e-9, cap + 2e-9, cap - 1e-12, cap * rng.random(), cap + 1e-6])
        cases.append(loads)
    got = [(verifier.rounds_for_loads(fabric, c), [verifier.over_capacity(fabric, c, k) for k in (1, 2, 3)])
           for c in cases]
    monkeypatch.setattr(verifier, "ARRAY_LOADS", 10**9)
    plain = [(verifier.rounds_for_loads(fabric, c), [verifier.over_capacity(fabric, c, k) for k in (1, 2, 3)])
             for c in cases]
    assert got == plain
    assert len({g[0] for g in got}) > 1
