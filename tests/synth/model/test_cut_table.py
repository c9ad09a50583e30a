"""The enumeration bound's cut table (synth.model.cut_table, synth.model.cuts): every row against
a max-flow of its own subset, host swaps against the capacity graph, the vectorised best ratio
against the plain loop over rows it replaced, and one table per fabric for all collectives."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from synth.ir.fabric import build_fabric
from synth.model import cuts
from synth.model.bounds import lower_bounds
from synth.model.cut_table import CutTable, best_ratio, host_swaps, index_swaps, maxflow_table
from synth.model.physics import cost_params_for
from topo_probe.machines.clusters import cluster, with_nics
from topo_probe.machines.generators import add_pcie_tree, line

COLLECTIVES = ("allgather", "reducescatter", "allreduce", "alltoall", "gather", "scatter")


def _uneven_host():
    """Three GPUs no two of which are twins (links of 25 and 50 GB/s, two PCIe sockets), two NICs."""
    t = line(3, bandwidth_gbps=25.0)
    t.add_link("gpu1", "gpu2", kind="nvlink", bandwidth_gbps=50.0, latency_us=0.7)
    add_pcie_tree(t, [[[["gpu0", "gpu1"]]], [[["gpu2"]]]], pcie_gbps=32.0, inter_socket_gbps=40.0)
    return with_nics(t, 2, 50.0)


@pytest.mark.parametrize("hosts,kw", [(2, dict(rail_optimized=True)), (3, {}),
                                      (4, dict(spine_oversubscription=2, hosts_per_leaf=2))])
def test_every_row_is_the_max_flow_of_its_subset(hosts, kw):
    """Rows shared through host swaps (and those computed) equal a fresh max-flow of the row's
    own GPU subset, in and out; on the leaf-spine cluster (hosts 0, 1 on one leaf, 2, 3 on the
    other) the swaps of host 0 with 2 or 3 are refused: they move host 0's leaf links."""
    fabric = build_fabric(cluster(_uneven_host(), hosts, **kw))
    g = cuts._Graph(fabric)
    assert not g.switches_are_stars() and all(len(c) == 1 for c in cuts._twin_classes(g))
    perms = host_swaps(g.names, g.cap, g.n)
    assert len(perms) == {2: 1, 3: 2, 4: 1}[hosts]
    table = cuts._tables(g, fabric)
    n = g.n
    for k, vec in enumerate(table.vecs.tolist()):
        inside = {i for i in range(n) if vec[i]}
        assert Fraction(int(table.cut[k]), g.denom) == cuts._in_cut(g, inside), inside
        assert Fraction(int(table.out[k]), g.denom) == cuts._in_cut(g, set(range(n)) - inside), inside


def test_host_swaps_map_the_capacity_graph_onto_itself():
    """By hand on 2 x dgx-h100 rail: the one swap is GPU i <-> i + 8, and moving one capacity
    makes it no automorphism."""
    g = cuts._Graph(build_fabric(cluster("dgx-h100", 2, rail_optimized=True)))
    assert host_swaps(g.names, g.cap, g.n) == [list(range(8, 16)) + list(range(8))]
    (u, v), c = next(iter(g.cap.items()))
    assert host_swaps(g.names, {**g.cap, (u, v): c + 1}, g.n) == []


def test_index_swaps_are_the_swaps_within_each_socket_and_share_only_equal_cuts():
    """By hand on 2 x dgx-h100 rail: GPUs i and j (and i + 8, j + 8) swap where both sit on one
    CPU socket (0-3 or 4-7: 2 x 6 swaps), not across (the sockets' PCIe trees differ); moving one
    capacity of GPU 1's makes the swaps that move GPU 1 no automorphism.  The table that shares
    cuts through them is the table of one max-flow per row."""
    g = cuts._Graph(build_fabric(cluster("dgx-h100", 2, rail_optimized=True)))
    swaps = index_swaps(g.names, g.cap, g.n)
    pairs = sorted(tuple(i for i in range(8) if p[i] != i) for p in swaps)
    assert pairs == sorted(itertools.chain(itertools.combinations(range(4), 2), itertools.combinations(range(4, 8), 2)))
    for p in swaps:
        assert all(p[i + 8] == p[i] + 8 for i in range(8))
    (u, v), c = next((e, c) for e, c in g.cap.items() if e[0] == 1)
    assert len(index_swaps(g.names, {**g.cap, (u, v): c + 1}, g.n)) == 12 - 3
    classes = cuts._twin_classes(g)
    shared = maxflow_table(g, classes, host_swaps(g.names, g.cap, g.n) + swaps)
    alone = maxflow_table(g, classes, [])
    assert np.array_equal(shared.cut, alone.cut) and np.array_equal(shared.out, alone.out)


def _loop(table: CutTable, out: bool, n: int, num, allow, denom):
    """The plain loop over rows the vectorised search replaced (first row with the largest ratio)."""
    best, arg = None, None
    for k, vec in enumerate(map(tuple, table.vecs.tolist())):
        cut = int((table.out if out else table.cut)[k])
        s = sum(vec)
        if 0 < s < n and (allow is None or allow[k]):
            if best is None or num(s) * best[1] > best[0] * cut:
                best, arg = (num(s), cut), vec
    return Fraction(best[0] * denom, best[1]), arg


@pytest.mark.parametrize("seed", range(6))
def test_best_ratio_is_the_loops_answer(seed):
    """Random tables with many ties (cuts from a few values): the same value and the same first row."""
    rng = np.random.default_rng(seed)
    n = 6
    vecs = np.array(list(itertools.product(range(2), repeat=n)), dtype=np.int64)
    cut = rng.choice([3, 6, 9, 12, 1000003], size=len(vecs)).astype(np.int64)
    table = CutTable([[i] for i in range(n)], vecs, cut, len(vecs) - 1 - np.arange(len(vecs)))
    allow = vecs[:, seed % n] >= 1
    for out, num, al in [(False, lambda s: n - s, None), (True, lambda s: n - s, allow),
                         (False, lambda s: s * (n - s), None)]:
        got = best_ratio(table, out, n, num, al, 7, lambda vec: vec)
        assert got == _loop(table, out, n, num, al, 7)


@pytest.mark.parametrize("coll", COLLECTIVES)
def test_tables_against_the_dinkelbach_bound(coll):
    """Independent method: the enumeration over the (shared, symmetry-reduced) table gives the
    bound Dinkelbach's max-flow iteration finds (exact for these collectives but alltoall,
    which that method only bounds from below)."""
    fabric = build_fabric(cluster(_uneven_host(), 3))
    root = 1 if coll in ("gather", "scatter") else None
    enum = lower_bounds(fabric, coll, root, method="enumeration").bandwidth_rounds_per_block
    flow = lower_bounds(fabric, coll, root, method="maxflow")
    assert enum == flow.bandwidth_rounds_per_block if flow.exact else enum >= flow.bandwidth_rounds_per_block


def test_one_table_per_fabric_and_capacities(monkeypatch):
    """Every collective's bound, nominal and effective, reads two tables (it used to build one per
    collective and capacity: 14 on 2 x dgx-h100 rail), with the values of fresh fabrics."""
    topo = cluster(_uneven_host(), 2, rail_optimized=True)
    fabric = build_fabric(topo)
    params = cost_params_for(fabric)
    built = []
    real = cuts._cut_table
    monkeypatch.setattr(cuts, "_cut_table", lambda *a, **k: built.append(1) or real(*a, **k))
    got = {}
    for coll in COLLECTIVES:
        b = lower_bounds(fabric, coll, 0 if coll in ("gather", "scatter") else None)
        got[coll] = (b.bandwidth_rounds_per_block, b.rounds_per_block(params), b.witness)
    assert len(built) == 2
    for coll in COLLECTIVES:                   # a fresh fabric each: nothing shared
        b = lower_bounds(build_fabric(topo), coll, 0 if coll in ("gather", "scatter") else None)
        assert got[coll] == (b.bandwidth_rounds_per_block, b.rounds_per_block(params), b.witness)
