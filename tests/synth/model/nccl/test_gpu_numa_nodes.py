"""GPUs on several NUMA nodes of one socket (AMD NPS=4) meet in NCCL's topology through the 16 GB/s
link NCCL puts between CPU nodes, as across sockets (``NcclMachine.gpu_numa_nodes``).

NVIDIA/nccl v2.29.3-1: one CPU node per NUMA node (src/graph/topo.cc lines 524-529, ``numaid``), every pair
joined by a ``LINK_SYS`` at ``AMD_BW`` 16 GB/s (topo.cc lines 265-277, topo.h line 24).  A Blackwell ring is
searched from ``sm100SpeedArrayIntra``, whose lowest speed is 18 GB/s (search.cc line 986), above 16: no ring
is found, NCCL falls back to one channel in GPU order (lines 1219-1236) and ``ncclTopoPostset`` doubles it
(src/graph/connect.cc line 452): 2 channels.  On the source host's sibling a0007 a 2-GPU run across two dies
prints the same fallback (mghpcc/aicr-benchmarks out-1node-a0007/a0007-diag-a0007-335360, a sendrecv on devices
0 and 1, dies 1 and 2, P2P on: "Could not find a path for pattern 4, falling back to simple order", "nChannels 1,
bw 0.100000/0.100000, type SYS/SYS", "Channel 00/02").  NCCL's ring bw is 0.1 GB/s; the model keeps its lowest
speed, 18 GB/s, which feeds its tuner and LL cap: below 1 MiB its LL picks differ from NCCL's Simple (nccl-model.md,
the gpu_numa_nodes paragraph); from 1 MiB up they agree.  On one NUMA node the
paths are PHB at 48 GB/s (Gen5 x16; the a0007 log: "CPU/0-1 (2/48.0/PHB)") and the search finds 2 rings at 24 GB/s,
4 channels."""

from __future__ import annotations

from synth.model.nccl import NcclMachine
from synth.model.nccl.graphs import comm_graphs, intra_capacity_gbs

#: the 4 x RTX PRO 6000 host of socket 0 of a0008: sm120, PCIe Gen5, one AMD socket, P2P off (SHM)
HOST = NcclMachine(name="4x RTX PRO 6000", arch="sm120", ranks=4, nodes=1, intra="pcie", links_per_gpu=0,
                    pcie_gen=5, cpu_vendor="amd", sockets=1, p2p=False)


def test_one_numa_node_keeps_the_pcie_rating_and_four_channels():
    g = comm_graphs(HOST, version=(2, 29, 3))
    assert intra_capacity_gbs(HOST, p2p=False) == 48.0            # Gen5 x16, a0007's "CPU/0-1 (2/48.0/PHB)"
    # speeds <= 48: 45, 40, 30 fit one ring each; 24 fits two (48 GB/s in all, the best): 2 x 2 channels
    assert (g.ring.n_channels, g.ring.bw_intra, g.n_channels) == (2, 24.0, 4)


def test_gpus_on_four_numa_nodes_cross_the_16_gbs_cpu_link_and_get_two_channels():
    m = HOST.with_(gpu_numa_nodes=4)
    g = comm_graphs(m, version=(2, 29, 3))
    assert intra_capacity_gbs(m, p2p=False) == 16.0               # min(48, AMD_BW 16): "GPU/0-42000 (5/16.0/SYS)"
    assert (g.ring.n_channels, g.ring.type_intra) == (1, "SYS")   # no sm100 speed fits 16 GB/s: one ring
    assert g.n_channels == 2                                       # doubled by ncclTopoPostset: "Channel 00/02"
    assert g.ring.bw_intra == 18.0  # NCCL prints 0.1; the model keeps its lowest speed
