"""``verify(..., loads=...)`` with the loads :func:`synth.ir.verifier.sized_steps` computed while
sizing the steps gives the very report of a plain ``verify`` (violations, loads, rounds), on
valid schedules and on broken ones (too few rounds, a transfer of a chunk not held yet, a chunk
id out of range, a rank pair that is no channel), and on a cluster the cached float routes
(:meth:`synth.ir.cluster_fabric.ClusterChannels.route_floats`) give the loads of the explicit
all-pairs fabric."""

from __future__ import annotations

import random

import pytest

import synth.ir.cluster_fabric as cluster_fabric
from synth.baselines import available_baselines, baseline
from synth.ir.fabric import build_fabric
from synth.ir.schedule import Step, Transfer
from synth.ir.verifier import required_rounds, sized_steps, step_loads, verify
from topo_probe.errors import InvalidArgument
from topo_probe.machines.clusters import cluster
from topo_probe.machines.presets import get_preset


def _same(a, b) -> None:
    assert a.ok == b.ok
    assert [(v.rule, v.message, v.step, v.transfer, v.rank, v.chunk) for v in a.violations] == \
        [(v.rule, v.message, v.step, v.transfer, v.rank, v.chunk) for v in b.violations]
    assert a.loads == b.loads and a.rounds_needed == b.rounds_needed


def _resized(schedule, fabric):
    """``schedule`` with steps from :func:`sized_steps`, and their loads."""
    steps, loads = sized_steps(fabric, [st.transfers for st in schedule.steps])
    return schedule.with_(steps=steps), loads


FABRICS = {"dgx1-v100": lambda: build_fabric(get_preset("dgx1-v100")),
           "2xdgx-h100": lambda: build_fabric(cluster("dgx-h100", 2))}


@pytest.mark.parametrize("name", FABRICS)
@pytest.mark.parametrize("coll", ["allgather", "allreduce", "reduce", "alltoall"])
def test_known_loads_give_the_plain_report(name, coll):
    fabric = FABRICS[name]()
    rng = random.Random(f"{name}-{coll}")
    for base in available_baselines(fabric, coll):
        s, loads = _resized(baseline(base, fabric, coll), fabric)
        assert [st.rounds for st in s.steps] == [required_rounds(fabric, [(t.src, t.dst) for t in st.transfers])
                                                 for st in s.steps]
        assert loads == [step_loads(fabric, [(t.src, t.dst) for t in st.transfers]) for st in s.steps]
        _same(verify(s, fabric, loads=loads), verify(s, fabric))
        assert verify(s, fabric, loads=loads).ok
        # broken copies, each checked with the loads sized for the transfers they hold
        si = rng.randrange(s.num_steps)
        st = s.steps[si]
        ti = rng.randrange(len(st.transfers))
        t = st.transfers[ti]
        fewer = s.with_(steps=s.steps[:si] + (Step(max(1, st.rounds - 1) if st.rounds > 1 else 0, st.transfers),)
                        + s.steps[si + 1:])
        late = s.with_(steps=tuple(reversed(s.steps)))
        outside = Transfer(s.spec.num_chunks + 3, t.src, t.dst, t.op)
        bad_chunk = s.with_(steps=s.steps[:si] + (Step(st.rounds, st.transfers[:ti] + (outside,)
                                                        + st.transfers[ti + 1:]),) + s.steps[si + 1:])
        for broken, known in ((fewer, loads), (late, loads[::-1]), (bad_chunk, loads)):
            plain = verify(broken, fabric)
            assert not plain.ok or broken is late             # one step reversed is the same schedule
            _same(verify(broken, fabric, loads=known), plain)


def test_a_pair_without_channel_is_reported_as_without_loads():
    fabric = build_fabric(get_preset("dgx1-v100"))           # not every GPU pair has an NVLink
    s, loads = _resized(baseline("ring", fabric, "allgather"), fabric)
    t = s.steps[0].transfers[0]
    other = next(j for j in range(s.ranks) if j != t.src and not fabric.has_channel(t.src, j))
    steps = (Step(s.steps[0].rounds, (Transfer(t.chunk, t.src, other),) + s.steps[0].transfers[1:]),) + s.steps[1:]
    broken = s.with_(steps=steps)
    plain = verify(broken, fabric)
    assert plain.violations[0].rule == "no-channel"
    _same(verify(broken, fabric, loads=loads), plain)
    with pytest.raises(InvalidArgument):
        verify(s, fabric, loads=loads[:-1])


@pytest.mark.parametrize("limit", [0, 10, cluster_fabric.FLOATS_LIMIT])
def test_cluster_loads_equal_the_explicit_fabric(monkeypatch, limit):
    monkeypatch.setattr(cluster_fabric, "FLOATS_LIMIT", limit)
    topo = cluster("dgx-a100", 2)
    structured, explicit = build_fabric(topo), build_fabric(topo, structured=False)
    assert structured.shape is not None and explicit.shape is None
    rng = random.Random(7)
    n = structured.num_ranks
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    for _ in range(20):                # below and above ARRAY_SENDS (the array path)
        sends = [rng.choice(pairs) for _ in range(rng.randrange(1, 700))]
        sends += sends[: len(sends) // 3]                                  # repeated channels
        weighted = [(i, j, rng.choice([0.5, 1.0, 3.0, 7])) for i, j in sends]
        for s in (sends, weighted):
            got = structured.load(s)
            assert got == explicit.load(s)
            assert list(got.items()) == list(_one_by_one(structured, s).items())       # bit for bit, in order
    assert len(structured.channels._floats) <= limit


def _one_by_one(fabric, sends):
    """Fabric.load's loop over the sends and their routes, the reference of the array path."""
    out = {}
    for s in sends:
        for r, f in fabric.channels[(s[0], s[1])]:
            out[r] = out.get(r, 0.0) + (s[2] if len(s) > 2 else 1.0) * float(f)
    return out


def test_cluster_loads_by_arrays_on_three_pair_classes():
    """Same host, same leaf and other leaf pairs, every channel once and all at once (the array
    path of Fabric.load), equal the one-by-one sums bit for bit and in order (and the explicit
    fabric's loads); a pair that is no channel raises as on the one-by-one path."""
    from synth.ir.fabric import ARRAY_SENDS
    topo = cluster("dgx-h100", 4, spine_oversubscription=2.0, hosts_per_leaf=2)
    structured, explicit = build_fabric(topo), build_fabric(topo, structured=False)
    n = structured.num_ranks
    sends = [(i, j, 1.0 + (i * j) % 3) for i in range(n) for j in range(n) if i != j]
    assert len(sends) >= ARRAY_SENDS
    got = structured.load(sends)
    assert list(got.items()) == list(_one_by_one(structured, sends).items()) and got == explicit.load(sends)
    assert structured.__dict__.get("_route_arrays") is not None
    with pytest.raises(KeyError):
        structured.load(sends + [(3, 3)])
