"""Tree LL128's share of the tree bandwidth across hosts, by release (NVIDIA/nccl src/graph/tuning.cc): ``nNodes ==
1 ? 7.0/9.0 : 0.915`` in 2.7-2.9 (v2.7.3-1 line 120, v2.8.3-1 line 129, v2.9.9-1 line 131), ``120.0/128.0`` from
v2.10.3-1 (line 132); the cap beside it is ``ll128MaxBwPerCh[coll] x nChannels`` (16.9 for all_reduce in 2.8-2.9,
20.0 from 2.10)."""

from __future__ import annotations

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from topo_probe import cluster

V4 = NcclMachine.from_topology(cluster("dgx1-v100", nodes=4))


@pytest.mark.parametrize("version, share", [((2, 8, 3), 0.915), ((2, 9, 9), 0.915), ((2, 10, 3), 120 / 128)])
def test_four_dgx1_tree_ll128(version, share):
    """4 x DGX-1: 4 tree channels x 12 GB/s (bwInter, > 2 nodes) = 48; all_reduce tree ``min(48 x .92 = 44.16, 4 x
    perChMaxTreeBw 10.0 (Volta, > 2 nodes) = 40)`` = 40; LL128 ``min(40 x share, 4 x 16.9 or 20)``: 36.6 in 2.8-2.9,
    37.5 from 2.10 (the per-channel cap, 67.6 / 80, does not bind); algbw half of it (tree)."""
    m = NcclModel(V4, version=version)
    g = m.table.graphs.tree
    assert (g.n_channels, g.bw_inter) == (4, 12.0)
    assert m.table.bandwidth[("allreduce", "tree", "LL128")] == pytest.approx(40 * share / 2)
