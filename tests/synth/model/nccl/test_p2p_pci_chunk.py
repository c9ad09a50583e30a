"""Point-to-point sends on a one-host PCIe / host-memory (SHM) communicator, by NCCL's own rules, checked by hand.

Chunk: ``p2pChunkSize`` is ``NCCL_P2P_PCI_CHUNKSIZE`` (128 KiB) unless every GPU pair is NVLink, directly or through
one GPU (NVIDIA/nccl v2.28.9-1 src/init.cc lines 704-718, src/graph/paths.cc lines 939-943; since v2.25.1-1; from
v2.16.2-1 to v2.24.3-1 one NVLink pair is enough, v2.24.3-1 paths.cc lines 831-841), and a one-host part is at
most 32 chunks (src/enqueue.cc lines 894-898), so a send of more than 4 MiB takes two channels.  Rate: a send between
GPUs without P2P goes through the same SHM transport and the same x16 links as an SHM ring
(``runtime.ring_capacity_gbs`` times the uplink share of ``shm_uplink.py``), on one socket."""

from __future__ import annotations

from synth.model.nccl import NcclMachine
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.p2p import p2p_channels, p2p_intra_gbs, p2p_time_us
from synth.model.nccl.p2p_chunk import all_nvlink, local_chunk_bytes
from synth.model.nccl.params import ModelParams
from topo_probe import get_preset

MIB = 1 << 20
#: 2 x RTX 2080 Ti behind one Gen3 switch, no P2P (the AutoDL container of the pcie-1host class)
AUTODL = NcclMachine("2080ti", "sm70", 2, 1, "pcie", 0, pcie_gen=3, p2p=False, gpus_per_uplink=2, sockets=1)


def test_the_chunk_is_nvlinks_only_where_every_pair_is_nvlink():
    # hybrid cube mesh: each GPU's 3 unlinked peers are each linked to one of its 4 linked ones (GPU 0 -> 5 via 1 or
    # 4, 0 -> 6 via 2 or 4, 0 -> 7 via 3 or 4), so NCCL's path is PATH_NVB, below PATH_PIX: all NVLink
    dgx1 = NcclMachine.from_topology(get_preset("dgx1-v100"))
    h100 = NcclMachine.from_topology(get_preset("dgx-h100"))
    assert all_nvlink(dgx1) and all_nvlink(h100) and not all_nvlink(AUTODL)
    assert [local_chunk_bytes(m, (2, 28)) for m in (AUTODL, dgx1, h100)] == [128 << 10, 512 << 10, 512 << 10]
    assert local_chunk_bytes(AUTODL, (2, 14)) == 512 << 10          # no NCCL_P2P_PCI_CHUNKSIZE before 2.16
    assert [local_chunk_bytes(dgx1, v) for v in ((2, 14), (2, 22), (2, 28))] == [512 << 10] * 3


def test_a_mixed_host_is_all_nvlink_by_its_nearest_pair_before_2_25_and_by_its_farthest_since():
    # 4 PCIe GPUs, two NVLink bridges (0-1, 2-3): 0 -> 2 has no direct link and no GPU linked to both (0's only
    # NVLink peer is 1, and 1-2 is not linked), so its path is PCIe (PATH_PIX or beyond).  2.16 - 2.24 take the
    # smallest path over all pairs: 0 -> 1 is PATH_NVL < PATH_PIX, so NVLink's 512 KiB.  2.25 on take the largest:
    # 0 -> 2 >= PATH_PIX, so PCIe's 128 KiB.
    bridged = ((0, 4, 0, 0), (4, 0, 0, 0), (0, 0, 0, 4), (0, 0, 4, 0))
    mixed = NcclMachine("bridged", "sm86", 4, 1, "nvlink", 4, link_gbs=14.0625, link_matrix=bridged)
    assert all_nvlink(mixed, (2, 22)) and not all_nvlink(mixed, (2, 28))
    assert [local_chunk_bytes(mixed, v) for v in ((2, 14), (2, 22), (2, 24), (2, 25), (2, 28))] == \
        [512 << 10, 512 << 10, 512 << 10, 128 << 10, 128 << 10]


def test_a_pcie_part_doubles_its_channels_past_32_chunks_of_128_kib():
    g = comm_graphs(AUTODL, version=(2, 28))
    # 4 MiB = 32 x 128 KiB: one part on one channel; 8 MiB: 8 MiB > 4 MiB, doubled to two parts of 4 MiB
    assert [p2p_channels(AUTODL, g, s * MIB, (2, 28)) for s in (1, 4, 8, 32)] == [1, 1, 2, 2]
    assert p2p_channels(AUTODL, g, 8 * MIB, (2, 14)) == 1            # 512 KiB chunks: parts up to 16 MiB


def test_an_shm_alltoall_moves_at_the_shm_rings_rate():
    p = ModelParams(link_eff={("*", "shm"): 0.5}, p2p_latency_us=5.0, host_us=0.0, host_us_per_channel=0.0)
    g = comm_graphs(AUTODL, version=(2, 28))
    rate = 15.75 * 0.5 / 2                      # Gen3 x16 data sheet x SHM efficiency, two GPUs on one uplink
    assert abs(p2p_intra_gbs(AUTODL, g, p) - rate) < 1e-9
    t, ch = p2p_time_us(AUTODL, g, "alltoall", 1 << 30, p, version=(2, 28))
    assert ch == 2 and abs(t - (5.0 + (1 << 29) / (1000.0 * rate))) < 1e-6      # half the bytes go to the peer


def test_an_amd_host_without_p2p_keeps_the_search_speed():
    # RCCL's SHM transport was not read: an AMD host sends at its ring graph's speed x SHM efficiency x uplink share
    amd = NcclMachine("mi210-pcie", "gfx90a", 2, 1, "pcie", 0, pcie_gen=4, p2p=False, sockets=1)
    p = ModelParams(link_eff={("*", "shm"): 0.5})
    g = comm_graphs(amd, version=(2, 28))
    assert abs(p2p_intra_gbs(amd, g, p) - g.ring.n_channels * g.ring.bw_intra * 0.5) < 1e-9
