"""The exact resource loads behind :func:`synth.solve.bwopt.bandwidth_term.bandwidth_term`, summed
per (resource, fraction) in integers, equal the transfer-by-transfer Fraction sums, on a cluster
(shared route fractions), a single host with split routes and a hand-made fabric with float
fractions."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from synth.baselines import available_baselines, baseline
from synth.ir.fabric import build_fabric
from synth.solve.bwopt import bandwidth_term as bt
from topo_probe.machines.clusters import cluster
from topo_probe.machines.presets import get_preset


def _reference(fabric, transfers) -> dict:
    load: dict = {}
    for t in transfers:
        for r, f in fabric.channels[(t.src, t.dst)]:
            load[r] = load.get(r, Fraction(0)) + Fraction(f)
    return load


@pytest.mark.parametrize("make", [lambda: cluster("dgx-h100", 2), lambda: get_preset("dgx1-v100"),
                                  lambda: cluster("dgx-a100", 4, spine_oversubscription=3.0, hosts_per_leaf=2)])
def test_loads_equal_the_transfer_by_transfer_sums(make):
    """Below and above ARRAY_PAIRS distinct channels (the route arrays of a cluster)."""
    fabric = build_fabric(make())
    for coll in ("allgather", "alltoall", "reduce"):
        for name in available_baselines(fabric, coll):
            s = baseline(name, fabric, coll)
            every = [t for st in s.steps for t in st.transfers]
            got = bt._loads(fabric, every)
            assert got == _reference(fabric, every)
            assert all(type(v) is Fraction for v in got.values())
            assert bt._loads(fabric, s.steps[0].transfers) == _reference(fabric, s.steps[0].transfers)


def test_float_fractions_of_a_hand_made_fabric():
    fabric = build_fabric(get_preset("dgx1-v100"))
    rng = random.Random(3)
    fabric.channels = {k: [(r, rng.choice([0.5, 0.25, 1])) for r, _ in v] for k, v in fabric.channels.items()}
    s = baseline("ring", build_fabric(get_preset("dgx1-v100")), "allgather")
    every = [t for st in s.steps for t in st.transfers]
    assert bt._loads(fabric, every) == _reference(fabric, every)


def test_the_array_path_runs_on_a_big_cluster_step():
    fabric = build_fabric(cluster("dgx-a100", 4, spine_oversubscription=3.0, hosts_per_leaf=2))
    s = baseline("direct", fabric, "alltoall")
    every = [t for st in s.steps for t in st.transfers] * 3
    assert len({(t.src, t.dst) for t in every}) >= bt.ARRAY_PAIRS
    assert bt._loads(fabric, every) == _reference(fabric, every)
    assert fabric.__dict__.get("_route_arrays") is not None
