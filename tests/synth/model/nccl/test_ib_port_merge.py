"""NCCL before 2.20 searches every InfiniBand/RoCE port as a network device of its own (no port merging).

Reference, by hand from NCCL's source, for 2 x OCI BM.GPU4.8 (8 x A100 on NVSwitch, 8 dual-port ConnectX with
16 x 100 Gb/s ports per host: oracle-quickstart/oci-hpc-oke manifests/topology/BM.GPU4.8.xml):

* NVIDIA/nccl v2.19.3-1 src/transport/net_ib.cc lines 222-244: one device per port, 12.5 GB/s each.
  v2.20.3-1 lines 166-181 and 272-294: the two ports of a NIC (same PCI path, sys_image_guid, link layer) are
  one device of 25 GB/s, so 8 devices.
* v2.19.3-1 src/graph/search.cc lines 839 and 848-1030: the ring takes the highest ``speedArrayInter`` value a
  port carries, 12 GB/s, one channel per port: 16 channels (at most MAXCHANNELS/2 = 16; each GPU's 12 NVLinks
  of 20 GB/s, topo.h line 16, allow 20); under 25 GB/s no ``ncclTopoDupChannels``.  The tree (at most the ring's 16
  channels) raises ``bwIntra`` in pass 2 while ``bwIntra < 2 x bwInter`` and the NVLinks hold it:
  16 x 15 = 240 GB/s fits, 16 x 18 does not -> 16 x 15/12.
* v2.19.3-1 src/graph/tuning.cc lines 174-201: tree Simple algbw = min(16 x 15 x 0.92, 16 x 23.6) x 0.5 =
  110.4 GB/s, ring Simple 16 x 12 x 16/30 = 102.4; no tree correction from 512 MiB (line 417), so tree
  Simple at 1 GiB.  With 2.20's 8 merged devices of 25 GB/s: ring 8 x 24 (102.4 again), tree
  min(8 x 30 x 0.92, 8 x 23.6) x 0.5 = 94.4 < 102.4 -> ring.
"""

import pytest

from synth.model.nccl import NcclMachine
from synth.model.nccl.channel_counts import search_nics
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.tuning import TuneTable
from topo_probe import cluster


@pytest.fixture(scope="module")
def oci():
    topo = cluster("dgx-a100", nodes=2, nics_per_node=16, nic_gbps=12.5)
    return NcclMachine.from_topology(topo, net_kind="roce").with_(cpu_vendor="amd")


def test_every_port_is_searched_before_2_20(oci):
    assert search_nics(oci, (2, 19)) == (16, 12.5)
    assert search_nics(oci, (2, 20)) == (8, 25.0)


def test_graphs_match_nccl_2_19_search_by_hand(oci):
    g = comm_graphs(oci, version=(2, 19))
    assert (g.ring.n_channels, g.ring.bw_intra, g.ring.bw_inter) == (16, 12.0, 12.0)
    assert (g.tree.n_channels, g.tree.bw_intra, g.tree.bw_inter) == (16, 15.0, 12.0)
    merged = comm_graphs(oci, version=(2, 20))
    assert (merged.ring.n_channels, merged.ring.bw_intra) == (8, 24.0)


def test_tuning_picks_tree_at_1gib_on_2_19_and_ring_on_2_20(oci):
    old, new = TuneTable.build(oci, version=(2, 19)), TuneTable.build(oci, version=(2, 20))
    assert old.bandwidth[("allreduce", "tree", "Simple")] == pytest.approx(110.4)
    assert old.bandwidth[("allreduce", "ring", "Simple")] == pytest.approx(102.4)
    assert new.bandwidth[("allreduce", "tree", "Simple")] == pytest.approx(94.4)
    assert old.choose("allreduce", 1 << 30)[:2] == ("tree", "Simple")
    assert new.choose("allreduce", 1 << 30)[:2] == ("ring", "Simple")


def test_other_transports_and_one_nic_per_gpu_keep_the_fused_view(oci):
    assert search_nics(oci.with_(net_kind="efa"), (2, 19)) == (8, 25.0)
    eight = oci.with_(nics_per_node=8, nic_gbps=25.0)
    assert search_nics(eight, (2, 19)) == eight.visible_nics()
