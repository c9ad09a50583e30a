"""NCCL's per-generation tuner rows by release (NVIDIA/nccl src/graph/tuning.cc ``ncclTopoTuneModel``), worked by
hand from the source lines and checked through the tuner table (algorithm bandwidth: bus x ``nRanks / nsteps`` for
rings, x .5 for trees).  The graphs (channels x GB/s) are the inputs, asserted first.

* ``perChMaxTreeBws[compCapIndex][index2]``: two rows (Volta, Ampere) indexed by ``compCap80`` in v2.8.3-1 ..
  v2.14.3-1 (line 100 / 104), three from v2.15.1-1 with an exact 80 / 90 index (line 111) and a Hopper row equal to
  Ampere's (24.0, 23.6, 17.8, lines 88-92), Hopper (38.7, 41.4, 33.0) with ``minCompCap >= 90`` from v2.17.1-1 (lines
  91-95, 115), 36.0 on > 2 nodes from v2.18.3-1 (line 105).
* Ring and tree LL128 per channel: ``ll128MaxBwPerCh = 20.0`` for every GPU in v2.10.3-1 .. v2.16.5-1 (line 73 /
  81), ``{20, 20, 36.7}[compCapIndex]`` in v2.17.1-1 (line 84), the tables (tree Hopper 36.7 / 36.7 / 29.0) from
  v2.18.3-1 (lines 92-101).
* The graph's bus bandwidth: v2.7.3-1 line 110 ``if (compCap80) busBw *= 0.92`` (v2.7.5-1 line 112: ``min(busBw,
  235)`` instead).
"""

from __future__ import annotations

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from topo_probe import cluster, get_preset

H100 = NcclMachine.from_topology(get_preset("dgx-h100"))
A100 = NcclMachine.from_topology(get_preset("dgx-a100"))
V100 = NcclMachine.from_topology(get_preset("dgx1-v100"))
RING8 = 8 / 14                       # all_reduce on 8 ranks: nRanks / (2 (nRanks - 1))


def _bw(m: NcclMachine, version: tuple, algo: str, proto: str, coll: str = "allreduce") -> float:
    return NcclModel(m, version=version).table.bandwidth[(coll, algo, proto)]


def _graph(m: NcclMachine, algo: str) -> tuple:
    g = getattr(NcclModel(m, version=(2, 16)).table.graphs, algo)
    return g.n_channels, g.bw_intra, g.bw_inter


@pytest.mark.parametrize("version, per_ch", [((2, 15, 1), 24.0), ((2, 16, 5), 24.0), ((2, 17, 1), 38.7)])
def test_hopper_tree_row_by_version(version, per_ch):
    """8 x H100, one host: 12 tree channels x 30 = 360, x .92 = 331.2; 2.15-2.16's Hopper row is Ampere's, 24 x 12 =
    288 binds (144 algbw), 2.17's 38.7 x 12 = 464.4 does not.  The old model read 2.28's Hopper row at every version."""
    assert _graph(H100, "tree") == (12, 30.0, 30.0)
    assert _bw(H100, version, "tree", "Simple") == pytest.approx(min(360 * 0.92, 12 * per_ch) / 2)


@pytest.mark.parametrize("version, per_ch", [((2, 12, 12), 10.0), ((2, 16, 5), 10.0), ((2, 17, 1), 17.8)])
def test_sm86_reads_volta_tree_row_before_2_17(version, per_ch):
    """An 8.6 GPU (``perChMaxTreeBws[compCap80]`` to 2.14, exact 80 / 90 in 2.15-2.16: not Ampere) reads the Volta
    row before 2.17, Ampere's from 2.17 (``minCompCap >= 80``): on 4 hosts 6 channels x 24 (bwInter) = 144 x .92 =
    132.5 against 6 x 10.0 = 60 (Volta) or 6 x 17.8 = 106.8 (Ampere, the old model's row at every version)."""
    a86 = NcclMachine.from_topology(cluster("dgx-a100", nodes=4)).with_(arch="sm86")
    g = NcclModel(a86, version=version).table.graphs.tree
    assert (g.n_channels, g.bw_inter) == (6, 24.0)
    assert _bw(a86, version, "tree", "Simple") == pytest.approx(min(6 * 24 * 0.92, 6 * per_ch) / 2)


@pytest.mark.parametrize("version, tree_bus", [((2, 17, 1), 8 * 33.0), ((2, 18, 3), 8 * 36.0)])
def test_hopper_tree_four_hosts(version, tree_bus):
    """4 x 8 H100: 8 channels x 45 (bwInter on > 2 nodes) = 360, x .92 = 331.2; Hopper's > 2-node tree figure is
    33.0 in 2.17 (264) and 36.0 from 2.18.3 (288).  Tree LL128 (x 120/128 across hosts): 2.17 caps it at 36.7 a
    channel (293.6, not binding: 247.5), 2.18.3's table at 29.0 (232, binding).  Old model: 288 and 232 at both."""
    h4 = NcclMachine.from_topology(cluster("dgx-h100", nodes=4))
    assert _graph(h4, "tree") == (8, 45.0, 45.0)
    assert _bw(h4, version, "tree", "Simple") == pytest.approx(tree_bus / 2)
    ll128_cap = 8 * (36.7 if version < (2, 18, 3) else 29.0)
    assert _bw(h4, version, "tree", "LL128") == pytest.approx(min(tree_bus * 120 / 128, ll128_cap) / 2)


@pytest.mark.parametrize("version, per_ch", [((2, 15, 1), 20.0), ((2, 16, 5), 20.0), ((2, 17, 1), 36.7)])
def test_hopper_ring_ll128_scalar_before_2_17(version, per_ch):
    """8 x H100 ring LL128: min(360 x .92 = 331.2, 12 x per channel): 20 for every GPU before 2.17 (240, binding),
    36.7 from 2.17 (440.4).  The old model took 36.7 at every version."""
    assert _graph(H100, "ring") == (12, 30.0, 30.0)
    assert _bw(H100, version, "ring", "LL128") == pytest.approx(min(360 * 0.92, 12 * per_ch) * RING8)


def test_hopper_tree_ll128_two_hosts_2_16():
    """2 x 8 H100 on 2.16: 8 x 45 = 360 x .92 = 331.2, min Hopper-as-Ampere 23.6 x 8 = 188.8; LL128: min(188.8 x
    120/128 = 177, 20 x 8 = 160) = 160.  The old model: min(331.2, 41.4 x 8) x 120/128 = 310.5 vs 36.7 x 8 = 293.6."""
    h2 = NcclMachine.from_topology(cluster("dgx-h100", nodes=2))
    assert _graph(h2, "tree") == (8, 45.0, 45.0)
    assert _bw(h2, (2, 16, 5), "tree", "LL128") == pytest.approx(160.0 / 2)


@pytest.mark.parametrize("version, bus", [((2, 7, 3), 240 * 0.92), ((2, 7, 5), 235.0), ((2, 18, 1), 240.0)])
def test_ampere_bus_rule_2_7_3(version, bus):
    """DGX A100 ring all_reduce Simple: 12 x 20 = 240; 2.7.3 takes 92 % (220.8), 2.7.5 caps at 235, 2.18 neither."""
    assert _graph(A100, "ring") == (12, 20.0, 20.0)
    assert _bw(A100, version, "ring", "Simple") == pytest.approx(bus * RING8)


class TestPre28TreeSeveralHosts:
    """NCCL 2.5-2.7's tree on several hosts (v2.5.6-1 line 109: ``min(busBw*.9, nNodes > 1 ? 70 : 90)``; v2.6.4-1
    line 112: 80 on > 2 nodes, else 110; v2.7.3-1 lines 115-120: Ampere LL128 105 / 130, LL / 3.8, LL128
    ``min(x .915 across hosts, ll128MaxBwPerCh[allreduce] 16.7 x channels x 7/9)``); bwIntra on <= 2 nodes, bwInter
    on more (v2.7.3-1 line 108)."""

    V2 = NcclMachine.from_topology(cluster("dgx1-v100", nodes=2))
    V4 = NcclMachine.from_topology(cluster("dgx1-v100", nodes=4))
    A4 = NcclMachine.from_topology(cluster("dgx-a100", nodes=4))

    def _tree(self, m, version):
        return [_bw(m, version, "tree", p) for p in ("LL", "LL128", "Simple")]

    @pytest.mark.parametrize("version, bus", [((2, 5), (70 / 3, 70 * 7 / 9, 70)),
                                              ((2, 6), (86.4 / 3, None, 86.4)),
                                              ((2, 7), (86.4 / 3.8, 16.7 * 4 * 7 / 9, 86.4))])
    def test_two_dgx1(self, version, bus):
        """2 x DGX-1: 4 channels x 24 (bwIntra) = 96, x .9 = 86.4: 70 caps it in 2.5, 110 does not in 2.6-2.7 (2.6
        keeps LL128 off across hosts whose NIC is not behind the GPU's own switch, ``typeInter <= LINK_PCI``)."""
        assert _graph(self.V2, "tree") == (4, 24.0, 12.0)
        got = self._tree(self.V2, version)
        assert [g for g, b in zip(got, bus) if b is not None] == pytest.approx([b / 2 for b in bus if b is not None])

    @pytest.mark.parametrize("version, bus", [((2, 5), (43.2 / 3, 43.2 * 7 / 9, 43.2)),
                                              ((2, 7), (43.2 / 3.8, 43.2 * 0.915, 43.2))])
    def test_four_dgx1(self, version, bus):
        """4 x DGX-1: 4 x 12 (bwInter) = 48 x .9 = 43.2, under every cap; 2.7's LL128 43.2 x .915 = 39.5 < 51.96."""
        assert self._tree(self.V4, version) == pytest.approx([b / 2 for b in bus])

    def test_four_dgx_a100_2_7_5(self):
        """4 x DGX A100 on 2.7.5: 8 x 24 = 192 (under 235) x .9 = 172.8; > 2 nodes: 80 (LL 80 / 3.8, Simple 80),
        Ampere LL128 105: min(105 x .915 = 96.075, 16.7 x 8 x 7/9 = 103.9)."""
        assert _graph(self.A4, "tree") == (8, 30.0, 24.0)
        assert self._tree(self.A4, (2, 7, 5)) == pytest.approx([80 / 3.8 / 2, 105 * 0.915 / 2, 80 / 2])
