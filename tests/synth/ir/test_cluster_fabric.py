"""Cluster fabrics from route templates (synth.ir.cluster_shape, synth.ir.cluster_fabric) against
the explicit all-pairs construction of synth.ir.fabric.build_fabric(structured=False)."""

from __future__ import annotations

import pytest

from synth.ir.cluster_shape import cluster_shape
from synth.ir.fabric import build_fabric
from topo_probe.machines.clusters import cluster
from topo_probe.machines.presets import get_preset

CASES = [
    ("dgx-h100", dict(nodes=3)),
    ("dgx-h100", dict(nodes=3, rail_optimized=True)),
    ("dgx-a100", dict(nodes=2, rail_optimized=True)),
    ("dgx1-v100", dict(nodes=3)),
    ("pcie-8gpu-2socket", dict(nodes=2, rail_optimized=True)),
    ("mi300x", dict(nodes=2)),
    ("dgx-h100", dict(nodes=4, spine_oversubscription=2, hosts_per_leaf=2)),
    ("dgx-h100", dict(nodes=5, rail_optimized=True, spine_oversubscription=3, hosts_per_leaf=2)),
    ("dgx-a100", dict(nodes=3, nics_per_node=2, nic_gbps=50.0)),
    ("dgx-h100", dict(nodes=2, nics_per_node=1, nic_gbps=50.0, rail_optimized=True)),
    ("h100x4", dict(nodes=3, nics_per_node=4, rail_optimized=True)),
    ("h100x4", dict(nodes=3, nics_per_node=2, spine_oversubscription=2, hosts_per_leaf=1)),
]


def _topology(name: str, kw: dict):
    base = get_preset("dgx-h100").subset([0, 1, 2, 3], "h100x4") if name == "h100x4" else get_preset(name)
    return cluster(base, **kw)


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items())}"
                                                for n, kw in CASES])
def test_templates_equal_the_explicit_fabric(name, kw):
    topo = _topology(name, kw)
    ref = build_fabric(topo, structured=False)
    fab = build_fabric(topo)
    assert fab.shape is not None and ref.shape is None
    assert (fab.num_ranks, fab.hosts, fab.unit_gbps, fab.fingerprint) == (ref.num_ranks, ref.hosts, ref.unit_gbps,
                                                                          ref.fingerprint)
    assert fab.resources == ref.resources
    assert len(fab.channels) == len(ref.channels) and set(fab.channels) == set(ref.channels)
    for key, route in ref.channels.items():
        assert sorted(fab.channels[key]) == route
        assert sorted(fab.path_latency_us[key]) == sorted(ref.path_latency_us[key])
    for i in (0, fab.num_ranks - 1):
        assert fab.neighbours_out(i) == ref.neighbours_out(i)


def test_channels_mapping_behaves_like_a_dict():
    fab = build_fabric(cluster("dgx1-v100", 2))
    ch = fab.channels
    assert (0, 1) in ch and (0, 5) not in ch          # GPUs 0 and 5 have no NVLink: no channel
    for bad in [(0, 0), (0, 16), (-1, 3), (0.0, 1), "x", (1,)]:
        assert bad not in ch
        with pytest.raises(KeyError):
            ch[bad]
    assert ch.get((0, 5)) is None and ch.get((0, 8)) is not None
    assert sum(1 for _ in ch) == len(ch)


def test_shape_of_a_cluster_and_pair_classes():
    topo = cluster("dgx-h100", 5, rail_optimized=True, spine_oversubscription=2, hosts_per_leaf=2)
    s = cluster_shape(topo)
    assert (s.hosts, s.gpus_per_host, s.groups) == (5, 8, (0, 0, 1, 1, 2))
    assert [s.pair_class(0, h) for h in range(5)] == ["host", "group", "other", "other", "other"]
    assert s.attach[3]["nic2"] == "leaf1.rail2"
    assert s.classes_present() == ["host", "group", "other"]


def test_irregular_topologies_are_routed_explicitly():
    topo = cluster("dgx-h100", 3)
    topo.graph.edges["h1.gpu0", "h1.pcie0"]["bandwidth_gbps"] = 10.0    # one host differs
    assert cluster_shape(topo) is None
    fab = build_fabric(topo)
    assert fab.shape is None and len(fab.channels) == 24 * 23
    assert cluster_shape(get_preset("dgx-h100")) is None                 # one host


def test_a_thousand_gpus_build_without_routing_every_pair():
    fab = build_fabric(cluster("dgx-h100", 128, rail_optimized=True))
    assert fab.num_ranks == 1024 and len(fab.channels) == 1024 * 1023
    two = build_fabric(cluster("dgx-h100", 2, rail_optimized=True), structured=False)
    assert len(fab.resources) == 64 * len(two.resources)      # the same links per host as 2 hosts have
    route = dict(fab.channels[(3, 1000)])          # rank 1000 = host 125, GPU 0: rail 3 to rail 0
    assert route[("h0.gpu3", "h0.pcie3")] == 1 and route[("netswitch0", "h125.nic0")] == 1 / 2
