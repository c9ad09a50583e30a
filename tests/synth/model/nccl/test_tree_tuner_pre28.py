"""NCCL 2.5-2.7's tree bandwidth estimate (NVIDIA/nccl src/graph/tuning.cc, before 2.8's perChMaxTreeBws and
llMaxBws): ``busBw = min(busBw*.9, maxTreeBw)``, maxTreeBw 90 on one node, 70 on several (v2.5.6-1 line 109), 110 /
80 from v2.6.4-1 (line 112) and in 2.7 (v2.7.8-1 lines 115-118: Ampere LL128 130 / 105); LL x 1/3 (v2.5.6-1 line 110,
v2.6.4-1 line 113), x 1/3.8 in 2.7 (line 119); LL128 x 7/9 (lines 111, 114), in 2.7 ``min(x 7/9 on one node,
ll128MaxBwPerCh[coll] x channels x 7/9)`` (line 120; all_reduce 16.7 GB/s per channel in v2.7.3-1).  Tree's algorithm
bandwidth is half the bus figure (``ratio = .5``).  Every number is worked by hand from those lines."""

from __future__ import annotations

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from topo_probe import get_preset

V100 = NcclMachine.from_topology(get_preset("dgx1-v100"))
A100 = NcclMachine.from_topology(get_preset("dgx-a100"))


def _tree(m: NcclMachine, version: tuple) -> list[float]:
    t = NcclModel(m, version=version).table
    return [t.bandwidth[("allreduce", "tree", p)] for p in ("LL", "LL128", "Simple")]


@pytest.mark.parametrize("version, bus", [((2, 5), (90 / 3, 90 * 7 / 9, 90)),
                                          ((2, 6), (108 / 3, 108 * 7 / 9, 108)),
                                          ((2, 7), (108 / 3.8, 16.7 * 6 * 7 / 9, 108))])
def test_dgx1_tree_by_version(version, bus):
    """DGX-1: 6 tree channels x 20 GB/s = 120, x .9 = 108: capped at 90 in 2.5, not in 2.6-2.7; in 2.7 LL128's
    per-channel ceiling 16.7 x 6 x 7/9 = 77.9 binds (108 x 7/9 = 84).  The old model: min(120 x .92, 6 x 26.5) and
    LL min(/ 3.8, 39) at every version."""
    t = NcclModel(V100, version=version).table
    assert (t.graphs.tree.n_channels, t.graphs.tree.bw_intra) == (6, 20.0)
    assert _tree(V100, version) == pytest.approx([b / 2 for b in bus])


def test_dgx_a100_tree_2_7_ll128_ampere_cap():
    """DGX A100 on 2.7.5: 12 x 20 = 240, the 235 cap, x .9 = 211.5; maxTreeBw 110, but 130 for Ampere LL128: LL
    110 / 3.8, LL128 min(130 x 7/9, 16.7 x 12 x 7/9) = 101.1, Simple 110."""
    assert _tree(A100, (2, 7, 5)) == pytest.approx([110 / 3.8 / 2, 130 * 7 / 9 / 2, 110 / 2])
