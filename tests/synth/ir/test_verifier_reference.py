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
from synth.ir.verifier import verify
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


@pytest.mark.parametrize("coll", ALL)
@pytest.mark.parametrize("topo", ["ring", "mesh", "none"])
def test_reports_equal_the_plain_replay(coll, topo):
    n = 6
    fabric = {"ring": lambda: build_fabric(ring(n)), "mesh": lambda: build_fabric(fully_connected(n)),
              "none": lambda: None}[topo]()
    rng = random.Random(f"{coll}-{topo}")
    for seed in range(6):
        s = random_schedule(coll, n, rng.choice([1, 2]), rng.randrange(n), seed)
        cases = [s] + [_mutate(s, rng) for _ in range(8)]
        for case in cases:
            assert _report(verify(case, fabric)) == _report(reference.verify(case, fabric))
