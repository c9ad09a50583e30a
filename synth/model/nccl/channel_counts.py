"""NCCL's rules on how many ring channels a graph and a communicator get, around the graph search of
:mod:`.graphs`: ``ncclTopoDupChannels`` (NVIDIA/nccl src/graph/search.cc), which doubles a fast graph's
channels on one host or several, ``ncclTopoPostset``'s doubling on hosts of fewer than 8 GPUs
(src/graph/connect.cc), NCCL 2.4's one ring on a host without NVLink (src/misc/rings.cu), the
``totalBw`` a host's only GPU searches against (search.cc ``getTotalBw``), and :func:`mesh_peer_channels`, the
p2p channels per local peer on a point-to-point NVLink mesh (src/graph/paths.cc ``ncclTopoGetNchannels``: the
links joining each pair, not the GPU's).
Units: channels; GB/s per channel (``bw``) or per GPU (``totalBw``).

NCCL's own debug log of one H100 per host, two hosts (xxrjun/nccl-tests-cluster c3756a6d
benchmarks/cluster00/nccl-tests-pairs/with-debug/logs/nccl_N2_G1_cnode4-005_cnode4-006_debug.log, NCCL 2.28.3;
tests/fixtures/real_logs/h100_2gpu_2node_alltoall_sendrecv_1gpn_cnode4.txt quotes it): "2 channels of 24 GB/s",
the 1 x 48 GB/s the search finds through the GPU's one NIC, duplicated.
"""

from __future__ import annotations

from synth.model.nccl.constants import MAXCHANNELS, NCCL_VERSION, PCI_BW_BY_GEN
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.p2p_mesh import nvb_intermediate

EPS = 1e-6
#: the first NCCL whose InfiniBand/RoCE transport fuses the ports of one NIC into one network device
#: (NVIDIA/nccl v2.20.3-1 src/transport/net_ib.cc lines 166-181 and 272-294, ``NCCL_IB_MERGE_NICS``)
IB_MERGE_NICS_VERSION = (2, 20)
#: the first NCCL whose ``ncclTopoGetNchannels`` counts an NVB path's bandwidth as it does an NVL path's
#: (NVIDIA/nccl v2.30.7-1 src/graph/paths.cc line 933; v2.30.4-1 and earlier: NVL only)
NVB_PEER_CHANNELS_VERSION = (2, 30, 7)


def dup_channels(n: int, bw: float, sm: int, max_ch: int, version: tuple = NCCL_VERSION) -> tuple[int, float]:
    """``(channels, GB/s each)`` after ncclTopoDupChannels doubles a graph of ``n`` channels at ``bw``, at most
    ``max_ch``, halving their speed: from 2.18.3 unless under 25 GB/s or, above sm80, under 50 GB/s on more than
    4 channels (NVIDIA/nccl v2.26.6-1 src/graph/search.cc lines 898-909, called at line 1096 for every graph
    pass 1 finds, on one host or several); before 2.18 rings of 25 GB/s up to sm80 and of 50 GB/s up to
    sm90 (v2.17.1-1 search.cc line 897; v2.18.1-1 line 954 still has it, the model switches at 2.18).

    >>> dup_channels(1, 48.0, 90, 16), dup_channels(8, 45.0, 90, 16), dup_channels(4, 48.0, 90, 16, (2, 17))
    ((2, 24.0), (8, 45.0), (4, 48.0))
    """
    if tuple(version) < (2, 18):
        if not ((sm <= 80 and bw >= 25.0) or (sm <= 90 and bw >= 50.0)):
            return n, bw
    elif bw < 25.0 or (sm > 80 and bw < 50.0 and n > 4):
        return n, bw
    dup = min(2 * n, max_ch)
    return dup, bw / -(-dup // n)


#: the first NCCL with the graph search (src/graph/search.cc, v2.5.6-1); before it src/misc/rings.cu built the rings
RING_SEARCH_VERSION = (2, 5)


def legacy_one_host_channels(m: NcclMachine, nvlink_ring: bool, n_channels: int, version: tuple = NCCL_VERSION) -> int:
    """The channels of a one-host communicator before NCCL 2.5 (``n_channels`` from 2.5 on): a ring without NVLink
    is one ring.  NVIDIA/nccl v2.4.2-1 src/transport/p2p.cu ``p2pComputeRingsPci`` (lines 318-361) returns 1
    when it builds a new ring (line 358, ``if (connect == 0) return 1``), ``shmGetRings`` (src/transport/shm.cu
    line 70) asks for one ring; src/misc/rings.cu duplicates rings only "in case of multinode+NVLink" (lines
    345-352) and raises them to ``NCCL_MIN_NRINGS``' default, 1 after Kepler (lines 375-380; the model has no Kepler).

    >>> from topo_probe import get_preset
    >>> m = NcclMachine.from_topology(get_preset("l40s-8gpu-pcie"))
    >>> legacy_one_host_channels(m, False, 2, (2, 4, 2)), legacy_one_host_channels(m, False, 2, (2, 8, 3))
    (1, 2)
    """
    if tuple(version) >= RING_SEARCH_VERSION or m.nodes > 1 or nvlink_ring:
        return n_channels
    return 1


def lone_gpu_total_gbs(m: NcclMachine, per_link_gbs: float) -> float:
    """NCCL's ``totalBw`` for a host's only GPU (GB/s): the larger of its PCIe link and its NVLinks together,
    each at NCCL's per-link figure ``per_link_gbs`` (:func:`.graphs.nvlink_per_link_gbs`; NVIDIA/nccl v2.28.9-1
    src/graph/search.cc ``getTotalBw``, lines 29-37), not a path through a CPU.

    >>> from topo_probe import cluster
    >>> m = NcclMachine.from_topology(cluster("dgx-h100", nodes=2)).with_(ranks=2)
    >>> lone_gpu_total_gbs(m, 20.6), lone_gpu_total_gbs(m, 0.0)
    (370.8, 48.0)
    """
    nvl = m.links_per_gpu * per_link_gbs if m.intra in ("nvswitch", "nvlink") else 0.0
    return max(PCI_BW_BY_GEN[m.pcie_gen], nvl)


def few_ppn_channels(m: NcclMachine, ring_bw: float, n_channels: int, version: tuple = NCCL_VERSION) -> int:
    """The communicator's channels after NCCL doubles them on hosts of fewer than 8 GPUs (connect.cc
    ``ncclTopoPostset``, "4 compute channels per search channel ... on <8 PPN", v2.18.1-1 on): several
    nodes, the ring graph's ``bwIntra`` (``ring_bw``, after :func:`dup_channels`) over 45 GB/s, sm90 (sm90+ from 2.27), under 16
    channels (2.18-2.20: twice them within MAXCHANNELS).  8 x H100 search at 45 GB/s (16 kept); 4 at 48,
    which the search's own duplication makes 8 at 24 (16 channels, no doubling); NCCL's tuning still counts
    the graph's channels.

    >>> from topo_probe import cluster
    >>> from synth.model.nccl.graphs import comm_graphs
    >>> m = NcclMachine.from_topology(cluster("dgx-h100", nodes=2))
    >>> four = m.with_(ranks=8)                      # 4 GPUs on each of the 2 hosts
    >>> [comm_graphs(x, version=(2, 28)).n_channels for x in (m, four)]
    [16, 16]
    >>> comm_graphs(four, version=(2, 17)).n_channels
    8
    """
    version = tuple(version)
    arch_ok = m.sm >= 90 if version >= (2, 27) else m.sm == 90
    room = n_channels < 16 if version >= (2, 21) else 2 * n_channels <= MAXCHANNELS
    if version >= (2, 18) and arch_ok and m.nodes > 1 and ring_bw > 45.0 + EPS and room:
        return min(MAXCHANNELS, 2 * n_channels)
    return n_channels


def search_nics(m: NcclMachine, version: tuple = NCCL_VERSION) -> tuple[int, float]:
    """``(count, GB/s each)`` of the network devices a host offers NCCL's graph search: the machine's fused
    view (:meth:`NcclMachine.visible_nics`, at most one per GPU) from NCCL 2.20 on, where the InfiniBand/RoCE
    transport merges the ports of one NIC (same PCI path, ``sys_image_guid`` and link layer) into one device
    of their summed speed (NVIDIA/nccl v2.20.3-1 src/transport/net_ib.cc ``ncclIbFindMatchingDev`` lines
    166-181, the merge and ``speed +=`` at lines 272-294).  Before 2.20 every port is a device of its own at
    the port's speed (v2.19.3-1 net_ib.cc lines 222-244: one ``ncclIbDevs`` entry per active port, reported as
    such by ``ncclIbGetProperties``), so the search puts one channel on each: 2 x OCI BM.GPU4.8 (8 dual-port
    ConnectX, 16 x 100 Gb/s ports; oracle-quickstart/oci-hpc-oke manifests/topology/BM.GPU4.8.xml) on NCCL
    2.19 searches 16 ports of 12.5 GB/s, on 2.20 8 devices of 25.  RCCL and the other transports keep the
    fused view.

    >>> from topo_probe import cluster
    >>> oci = NcclMachine.from_topology(cluster("dgx-a100", nodes=2, nics_per_node=16, nic_gbps=12.5)).with_(net_kind="roce")
    >>> search_nics(oci, (2, 19)), search_nics(oci, (2, 20))
    ((16, 12.5), (8, 25.0))
    """
    n_nic, nic = m.visible_nics()
    if (tuple(version) < IB_MERGE_NICS_VERSION and not m.amd and m.net_kind in ("ib", "roce")
            and m.used_nics > n_nic):
        return m.used_nics, m.nic_gbps
    return n_nic, nic


def mesh_peer_channels(m: NcclMachine, version: tuple = NCCL_VERSION) -> int | None:
    """The fewest p2p channels NCCL gives a peer on the same host of a point-to-point NVLink mesh (``intra``
    ``nvlink`` with a ``link_matrix``; None otherwise): src/graph/paths.cc ``ncclTopoGetNchannels`` (NVIDIA/nccl
    v2.22.3-1 lines 706-712, v2.26.2-1 lines 770-776) gives ``2 * max(1, path bw / NVLink bw)`` over an NVL path,
    the links joining that pair on a mesh (every link of the GPU only through NVSwitch), 2 over any other path, and
    ``ncclTopoComputeP2pChannels`` (v2.22.3-1 lines 749-761, v2.26.2-1 lines 813-825) keeps the minimum over peers.
    4 x H100 joined by 6 links a pair print "16 p2p channels per peer", pow2Up(12), not 2 x 18
    (tests/fixtures/real_logs/h100_4gpu_1node_all_reduce_snellius_nvlink.txt, NCCL 2.22.3).
    From :data:`NVB_PEER_CHANNELS_VERSION` an NVB path (one intermediate GPU, :func:`.p2p_mesh.nvb_intermediate`)
    counts its bandwidth too (v2.30.7-1 paths.cc line 933, ``PATH_NVL || PATH_NVB``): the narrower leg's links.
    Before NCCL 2.7 there are no per-peer p2p channels (neither function exists before v2.7.3-1), so the figure is
    moot there.

    >>> from topo_probe import get_preset
    >>> m = NcclMachine.from_topology(get_preset("dgx-h100")).with_(ranks=4)
    >>> mesh = ((0, 6, 6, 6), (6, 0, 6, 6), (6, 6, 0, 6), (6, 6, 6, 0))
    >>> mesh_peer_channels(m), mesh_peer_channels(m.with_(intra="nvlink", link_matrix=mesh))
    (None, 12)
    >>> mesh_peer_channels(m.with_(intra="nvlink", link_matrix=((0, 2, 0), (2, 0, 1), (0, 1, 0)), ranks=3))
    2
    >>> ring = m.with_(intra="nvlink", link_matrix=((0, 2, 0, 2), (2, 0, 2, 0), (0, 2, 0, 2), (2, 0, 2, 0)))
    >>> mesh_peer_channels(ring, (2, 30, 4)), mesh_peer_channels(ring, (2, 30, 7))
    (2, 4)
    """
    if m.intra != "nvlink" or not m.link_matrix or m.gpus_per_node < 2:
        return None
    n = min(m.gpus_per_node, len(m.link_matrix))
    links = tuple(tuple(row[:n]) for row in m.link_matrix[:n])

    def width(i: int, j: int) -> int:
        if links[i][j] or tuple(version) < NVB_PEER_CHANNELS_VERSION:
            return links[i][j]
        k = nvb_intermediate(links, i, j)
        return 0 if k is None else min(links[i][k], links[k][j])

    return min((2 * width(i, j) or 2 for i in range(n) for j in range(n) if i != j), default=2)


__all__ = ["IB_MERGE_NICS_VERSION", "NVB_PEER_CHANNELS_VERSION", "mesh_peer_channels", "dup_channels",
           "lone_gpu_total_gbs", "few_ppn_channels", "search_nics"]
