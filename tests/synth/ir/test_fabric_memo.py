"""Results derived from a fabric are kept on that fabric object (Fabric.memo): two fabrics of one
topology with different round units share a fingerprint but not their bounds, rings or cut tables.
Ring plans are also shared by fabrics of the same structure (synth.ir.shared_results, tested in
tests/synth/baselines/test_shared_rings.py), but each fabric still holds its own plan object."""

import gc
import weakref

from synth.baselines.ringsearch import find_rings
from synth.ir.fabric import build_fabric
from synth.solve.bounds_cache import fabric_bounds
from synth.solve.cluster.delivery_bound import delivery_bound
from topo_probe.machines.clusters import cluster
from topo_probe.machines.generators import ring


def test_a_fabric_with_another_round_unit_gets_its_own_delivery_bound():
    """Rounds per block scale with the round's unit: a round of 50 GB/s moves a chunk over a
    25 GB/s link in two rounds, so the bound doubles (by hand).  A cache keyed by the topology's
    fingerprint returned the 25 GB/s fabric's bound for the 50 GB/s one."""
    topo = cluster("dgx-a100", nodes=2)
    f25 = build_fabric(topo)
    f50 = build_fabric(topo, unit_gbps=2 * f25.unit_gbps)
    assert f25.fingerprint == f50.fingerprint
    b25 = delivery_bound(f25, "allgather")
    b50 = delivery_bound(f50, "allgather")
    assert b25 > 0 and abs(b50 - 2 * b25) < 1e-9 * b50
    assert delivery_bound(f25, "allgather") == b25                  # each fabric keeps its own


def test_derived_results_live_and_die_with_their_fabric():
    f = build_fabric(ring(5))
    rings = find_rings(f)
    bounds = fabric_bounds(f, "allgather")
    assert find_rings(f) is rings and fabric_bounds(f, "allgather") is bounds
    g = build_fabric(ring(5))
    assert find_rings(g) is not rings and g.memo("rings") is not f.memo("rings")
    kept = weakref.ref(rings), weakref.ref(bounds)
    del f, rings, bounds
    gc.collect()
    assert [r() for r in kept] == [None, None]          # nothing outside the fabric held its results
