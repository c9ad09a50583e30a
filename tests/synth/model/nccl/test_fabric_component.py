"""``machine._fabric_component`` (which GPUs NVLink / xGMI join, the test behind NCCL's ring
peers) against networkx's connected component of the same links, on random meshes."""

import random

import networkx as nx
import pytest
from _random_topologies import PARTIAL_PRESETS, mixed_nvlink_pcie, partial_allocation, uneven_mesh

from synth.model.nccl.machine import _fabric_component


def _reference(topo, start):
    fabric = nx.Graph((u, v) for u, v, d in topo.graph.edges(data=True) if d["kind"] in ("nvlink", "infinity_fabric"))
    return nx.node_connected_component(fabric, start) if start in fabric else {start}


@pytest.mark.parametrize("seed", range(40))
def test_the_component_is_networkx_s(seed):
    rng = random.Random(seed)
    k = rng.randint(2, 8)
    pairs = k * (k - 1) // 2
    topo = (mixed_nvlink_pcie(k, [rng.randint(0, 2) for _ in range(pairs)], sockets=rng.choice([1, 2])) if seed % 3 == 0
            else uneven_mesh(k, [rng.choice([0, 0, 1, 2]) for _ in range(pairs)],
                             kind=rng.choice(["nvlink", "infinity_fabric"])) if seed % 3 == 1
            else partial_allocation(rng.choice(sorted(PARTIAL_PRESETS)), sorted(rng.sample(range(8), k))))
    for g in range(topo.num_gpus):
        start = topo.gpu(g)
        assert _fabric_component(topo.graph, start) == _reference(topo, start)
