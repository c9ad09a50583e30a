"""cluster() (topo_probe/machines/clusters.py): a leaf's host count worked out once per cluster."""

from __future__ import annotations

from topo_probe.machines import clusters
from topo_probe.machines.clusters import cluster


def test_hosts_per_leaf_is_worked_out_once_per_cluster(monkeypatch):
    """cluster() checked the leaf size before building (the loader's size limits) and again while building."""
    calls = []
    real = clusters._hosts_per_leaf
    monkeypatch.setattr(clusters, "_hosts_per_leaf", lambda *a: calls.append(a) or real(*a))
    t = cluster("dgx-h100", 5, spine_oversubscription=2.0, hosts_per_leaf=2)
    assert calls == [(2, 8)]                    # 2 hosts a leaf, 8 NICs a host (one shared leaf per group)
    assert sorted(n for n in t.graph if n.startswith("leaf")) == ["leaf0", "leaf1", "leaf2"]   # by hand: 5 / 2 up
