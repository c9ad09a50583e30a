"""``Fabric.channel_latency_us`` on a cluster reads a per-class table: the same value as the
slowest of the channel's path latencies, for every rank pair, and KeyError where there is no channel."""

import pytest

from synth.ir.fabric import build_fabric
from topo_probe.machines.clusters import cluster


@pytest.mark.parametrize("kw", [dict(), dict(rail_optimized=True), dict(spine_oversubscription=2.0, hosts_per_leaf=2)])
def test_every_pair_matches_the_slowest_path(kw):
    fabric = build_fabric(cluster("dgx-a100", nodes=4, **kw))
    assert fabric.shape is not None
    n = fabric.num_ranks
    for i in range(n):
        for j in range(n):
            if i == j:
                with pytest.raises(KeyError):
                    fabric.channel_latency_us(i, j)
                continue
            assert fabric.channel_latency_us(i, j) == max(fabric.path_latency_us[(i, j)])
    for bad in ((-1, 0), (0, n), (n, 1)):
        with pytest.raises(KeyError):
            fabric.channel_latency_us(*bad)
