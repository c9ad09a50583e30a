"""synth.model.cluster_latency: the dense Dijkstra behind the cluster latency bounds against
networkx."""

from __future__ import annotations

import numpy as np
import pytest

from synth.model.cluster_latency import dense_dijkstra


def test_dense_dijkstra_matches_networkx():
    import networkx as nx
    rng = np.random.default_rng(3)
    W = np.where(rng.random((30, 30)) < 0.2, rng.random((30, 30)) * 5, np.inf)
    np.fill_diagonal(W, np.inf)
    g = nx.DiGraph()
    g.add_nodes_from(range(30))
    g.add_weighted_edges_from((i, j, W[i, j]) for i in range(30) for j in range(30) if np.isfinite(W[i, j]))
    want = nx.single_source_dijkstra_path_length(g, 0)
    got = dense_dijkstra(W, 0)
    assert {i: got[i] for i in range(30) if np.isfinite(got[i])} == pytest.approx(want)
