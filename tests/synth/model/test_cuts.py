"""Lower bounds on clusters of identical hosts: symmetry-reduced max-flows (synth.model.cuts) against
the explicit fabric and hand counts."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from synth.ir.fabric import build_fabric
from synth.model.bounds import lower_bounds
from synth.model.cuts import _series_reduce, rank_representatives, targets_by_symmetry
from topo_probe.machines.clusters import cluster

ROOTED = ("broadcast", "reduce", "gather", "scatter")
SHAPES = [("dgx-h100", dict(nodes=3, rail_optimized=True)),
          ("dgx1-v100", dict(nodes=3)),
          ("dgx-h100", dict(nodes=5, spine_oversubscription=3, hosts_per_leaf=2))]


@pytest.mark.parametrize("preset,kw", SHAPES)
@pytest.mark.parametrize("coll", ["allgather", "reducescatter", "allreduce", "alltoall", "broadcast", "gather"])
def test_symmetric_bounds_equal_the_explicit_ones(preset, kw, coll):
    topo = cluster(preset, **kw)
    root = 3 if coll in ROOTED else None
    ref = lower_bounds(build_fabric(topo, structured=False), coll, root)
    got = lower_bounds(build_fabric(topo), coll, root)
    assert (got.bandwidth_rounds_per_block, got.latency_steps, got.latency_us, got.pairs) == \
           (ref.bandwidth_rounds_per_block, ref.latency_steps, ref.latency_us, ref.pairs)
    assert got.phased_rounds_per_block == ref.phased_rounds_per_block


@pytest.mark.parametrize("hosts", [8, 64])
def test_host_cut_binds_on_large_dgx_h100_clusters(hosts):
    """By hand: a host receives the n - 8 blocks of the other hosts through 8 NICs of 50 GB/s
    (2 chunks per 25 GB/s round each): (n - 8) / 16 = (hosts - 1) / 2 rounds per block, more
    than a GPU's (n - 1) / (18 + 2) once hosts >= 5; alltoall: 8 (n - 8) blocks leave a host."""
    fab = build_fabric(cluster("dgx-h100", hosts, rail_optimized=True))
    n = 8 * hosts
    ag = lower_bounds(fab, "allgather")
    assert ag.bandwidth_rounds_per_block == Fraction(hosts - 1, 2)
    assert lower_bounds(fab, "reducescatter").bandwidth_rounds_per_block == Fraction(hosts - 1, 2)
    assert lower_bounds(fab, "allreduce").phased_rounds_per_block == Fraction(hosts - 1, n)
    assert lower_bounds(fab, "alltoall").bandwidth_rounds_per_block == Fraction(8 * (n - 8), 16)


def test_representatives_cover_every_rank_once_per_orbit():
    fab = build_fabric(cluster("dgx-h100", 5, spine_oversubscription=2, hosts_per_leaf=2))
    # groups of 2, 2 and 1 hosts: one host of a 2-group and the lone host
    assert rank_representatives(fab) == list(range(8)) + list(range(32, 40))
    t = targets_by_symmetry(fab, 3)
    assert [r // 8 for r in t] == [0] * 7 + [1] * 8 + [2] * 8 + [4] * 8


@pytest.mark.parametrize("seed", range(6))
def test_series_reduction_keeps_every_cut(seed):
    """Random graphs with pass-through and dead-end switches: every GPU-to-GPU min cut is the
    same after reduction (networkx max-flow on both)."""
    import networkx as nx
    rng = np.random.default_rng(seed)
    gpus = [f"g{i}" for i in range(4)]
    nodes = gpus + [f"s{i}" for i in range(6)]
    caps = {}
    for _ in range(16):
        u, v = rng.choice(nodes, 2, replace=False)
        caps[(str(u), str(v))] = Fraction(int(rng.integers(1, 5)), int(rng.integers(1, 3)))
    reduced = dict(caps)
    _series_reduce(reduced, set(gpus))

    def cut(c, a, b):
        g = nx.DiGraph()
        g.add_nodes_from(gpus)
        g.add_edges_from((u, v, {"capacity": float(x)}) for (u, v), x in c.items())
        return nx.maximum_flow_value(g, a, b)
    for a in gpus:
        for b in gpus:
            if a != b:
                assert cut(caps, a, b) == pytest.approx(cut(reduced, a, b))

