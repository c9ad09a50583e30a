"""Point-to-point collectives: nccl-tests ``sendrecv``, ``alltoall`` (and ``gather`` / ``scatter``).

NCCL runs them as grouped ``ncclSend`` / ``ncclRecv``, with no ring, tree or tuner table: each
peer pair gets its own channels (src/graph/paths.cc ``ncclTopoComputeP2pChannels``: 2 per NVLink;
across the network ``NCCL_NCHANNELS_PER_NET_PEER``, 2 by default).  Intra-node traffic rides
NVLink / xGMI (or host memory with ``NCCL_P2P_DISABLE=1``), inter-node traffic the GPU's share of
the node's NICs; both directions overlap.  Units: bytes, µs, GB/s per direction.

A send to a peer on the same NVLink node does not use all its channels at once: NCCL starts
from ``nChannelsMin`` (the peer's channels halved until every rank's fit in ``p2pnChannels``)
and doubles while a channel's part exceeds 32 NVLink chunks (src/enqueue.cc ``addP2pToPlan``,
``scheduleP2pTasksToPlan``; src/graph/paths.cc ``ncclTopoComputeP2pChannels``), and each channel
moves at most what a channel of NCCL's ring graph carries (its ``bwIntra``).  So an 8-GPU
``sendrecv`` of 128 MiB runs on 8 channels and one of 256 MiB on 16 (:func:`p2p_channels`).
"""

from __future__ import annotations

from synth.model.nccl.constants import ALGOS, HW_LAT, HW_NET, NCCL_VERSION, PCIE_X16_GBS, PROTOS
from synth.model.nccl.graphs import CommGraphs, pow2_up
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.params import ModelParams
from synth.model.nccl.runtime import host_time_us

#: NCCL_P2P_NVL_CHUNKSIZE's default (bytes): one p2p step over NVLink (src/init.cc)
P2P_NVL_CHUNK_BYTES = 1 << 19
#: NCCL_MAX_P2P_NCHANNELS's default (MAXCHANNELS)
MAX_P2P_CHANNELS = 32


def p2p_channels(m: NcclMachine, g: CommGraphs, nbytes: int) -> int:
    """Channels NCCL gives one send of ``nbytes`` to a peer in the same node (see the module
    docstring).

    >>> from synth.model.nccl.graphs import comm_graphs
    >>> from topo_probe import get_preset
    >>> m = NcclMachine.from_topology(get_preset("dgx-a100"), gpus_per_process=8)
    >>> [p2p_channels(m, comm_graphs(m), s << 20) for s in (1, 128, 256, 512, 1024)]
    [4, 8, 16, 32, 32]
    """
    pre = min(g.n_channels, MAX_P2P_CHANNELS)
    total = pow2_up(pre)
    per_peer = min(pow2_up(min(pre, g.p2p_channels_per_peer)), total)
    n_min = per_peer
    while n_min * m.ranks > total and n_min > 1:
        n_min //= 2
    min_part, max_part = P2P_NVL_CHUNK_BYTES // 8, P2P_NVL_CHUNK_BYTES * 32
    n = max(1, min(n_min, -(-nbytes // min_part)))
    part = max(min_part, -(-nbytes // n))
    while part > max_part and n <= per_peer // 2:
        n *= 2
        part = -(-nbytes // n)
    return n


def alltoall_channels(m: NcclMachine, g: CommGraphs, per_peer: int) -> int:
    """Channels one rank's alltoall launch touches (its host enqueue cost grows with them).

    NCCL schedules a grouped send/recv round by round, one round per peer, each part on the
    channels the part needs (src/enqueue.cc ``scheduleP2pTasksToPlan``: a peer in the node gets
    :func:`p2p_channels` of its part, one across the network ``NCCL_NCHANNELS_PER_NET_PEER``),
    and the kernel is launched on the channels that got work, never more than the communicator
    has.  So 8 ranks' alltoall of 8 KiB runs 7 one-channel rounds, not all 56 channels of an
    MI355X communicator.

    >>> from synth.model.nccl.graphs import comm_graphs
    >>> from topo_probe import get_preset
    >>> m = NcclMachine.from_topology(get_preset("mi355x"), gpus_per_process=8)
    >>> g = comm_graphs(m)
    >>> [alltoall_channels(m, g, s) for s in (1024, 2 << 20, 64 << 20)], g.n_channels
    ([7, 28, 28], 56)
    """
    ppn, n = m.gpus_per_node, m.ranks
    used = (ppn - 1) * p2p_channels(m, g, per_peer) + (n - ppn) * g.net_channels_per_peer
    return max(1, min(g.n_channels, used))


def p2p_intra_gbs(m: NcclMachine, g: CommGraphs, params: ModelParams, p2p_disable: bool = False) -> float:
    """Bandwidth one GPU sends to its node peers, all together (GB/s)."""
    if m.gpus_per_node == 1:
        return float("inf")
    if p2p_disable or not m.p2p or m.intra == "pcie":
        kind = "shm" if (p2p_disable or not m.p2p) else "pcie"
        return g.ring.n_channels * g.ring.bw_intra * params.link_efficiency(m.arch, kind)
    links = max(sum(row) for row in m.link_matrix) if m.link_matrix else m.links_per_gpu
    return links * m.link_gbs * params.p2p_nvlink_efficiency




def mesh_alltoall_us(m: NcclMachine, params: ModelParams, per_peer: float) -> float | None:
    """Device µs of one GPU's alltoall sends on a point-to-point NVLink mesh (None elsewhere).

    NCCL's P2P transport uses NVLink only to a directly linked peer (src/graph/paths.cc: a
    ``PATH_NVL`` needs a direct link; it never forwards through another GPU); every other peer is
    reached through PCIe and the host.  So a DGX-1 GPU sends 4 of its 7 peers' parts over its
    NVLinks (each peer's part over the links to that peer) and 3 over its PCIe x16 link, and the
    slower of the two sets the time.  Rates: the links' data-sheet bandwidths times the shared
    efficiencies (``p2p_nvlink_efficiency``; ``link_eff[arch, pcie]``).
    """
    if m.intra != "nvlink" or not m.link_matrix or not m.p2p:
        return None
    nvl_rate = m.link_gbs * params.p2p_nvlink_efficiency * 1000.0          # bytes/µs per link
    pcie_rate = PCIE_X16_GBS.get(m.pcie_gen, 31.5) * params.link_efficiency(m.arch, "pcie") * 1000.0
    worst = 0.0
    for row in m.link_matrix:
        linked = [k for k in row if k > 0]
        far = len(row) - 1 - len(linked)
        t_nvl = max([per_peer / (k * nvl_rate) for k in linked] + [per_peer * len(linked) / (sum(linked) * nvl_rate)]
                    if linked else [0.0])
        worst = max(worst, t_nvl, far * per_peer / pcie_rate)
    return worst


def p2p_inter_gbs(m: NcclMachine, g: CommGraphs, params: ModelParams, peers: int) -> float:
    """Bandwidth one GPU gets to ``peers`` remote ranks through the network (GB/s): its share of the
    node's NICs, at most ``p2p_net_channel_gbs`` per channel
    (:func:`synth.model.nccl.graphs.net_channels_per_peer`).  A NIC that streams to one peer (sendrecv)
    does so as a ring channel does (``ring_net_eff``); one that talks to many at once (alltoall) as a
    tree's does (``net_eff``: the real 2-host H100 alltoall reaches 0.81 of the line rate)."""
    eff = params.ring_net_efficiency(m.net_kind) if peers == 1 else params.net_efficiency(m.net_kind)
    nic_share = m.used_net_gbps / m.gpus_per_node * eff
    return min(nic_share, peers * g.net_channels_per_peer * params.p2p_net_channel_gbs)


def p2p_net_hop_us(m: NcclMachine, params: ModelParams) -> float:
    """µs a send to a peer on another host adds before its first byte lands: one network hop of
    the Simple protocol (sends above ``NCCL_P2P_LL_THRESHOLD``, 16 KiB, use it), as a collective's
    hop costs it: NCCL's table latency (``hwLat[NET][ring][Simple]``, 14 µs) plus the transport's
    fitted extra (``net_lat[transport, Simple]``)."""
    return HW_LAT[HW_NET][ALGOS.index("ring")][PROTOS.index("Simple")] + params.net_latency_us(m.net_kind, "Simple")


def p2p_time_us(m: NcclMachine, g: CommGraphs, coll: str, nbytes: int, params: ModelParams,
                p2p_disable: bool = False, version: tuple = NCCL_VERSION) -> tuple[float, int]:
    """Predicted nccl-tests time (µs) of a point-to-point collective and the channels it uses.

    ``sendrecv``: every rank sends ``nbytes`` to the next rank (a pair crossing nodes when there
    are several nodes sets the time).  ``alltoall``: ``nbytes`` per rank split evenly over all
    ranks.  ``gather`` / ``scatter``: the root's traffic, the same as one rank's in alltoall.
    """
    n, ppn = m.ranks, m.gpus_per_node
    intra_gbs = p2p_intra_gbs(m, g, params, p2p_disable)
    if coll == "sendrecv":
        intra_b, inter_b, peers = (0.0, float(nbytes), 1) if m.nodes > 1 else (float(nbytes), 0.0, 0)
        channels = g.net_channels_per_peer if m.nodes > 1 else g.p2p_channels_per_peer
        if m.nodes == 1 and m.arch.startswith("sm") and m.intra in ("nvswitch", "nvlink") and m.p2p \
                and not p2p_disable:
            channels = p2p_channels(m, g, nbytes)
            intra_gbs = min(intra_gbs, channels * g.ring.bw_intra * params.link_efficiency(m.arch, "nvlink"))
    else:
        per_peer = nbytes / n
        intra_b, inter_b, peers = per_peer * (ppn - 1), per_peer * (n - ppn), n - ppn
        channels = alltoall_channels(m, g, int(per_peer))
    t_intra = intra_b / (1000.0 * intra_gbs) if intra_b else 0.0
    if coll != "sendrecv" and intra_b and not p2p_disable:
        mesh = mesh_alltoall_us(m, params, intra_b / (ppn - 1))
        t_intra = t_intra if mesh is None else mesh
    t_inter = inter_b / (1000.0 * p2p_inter_gbs(m, g, params, peers)) if inter_b else 0.0
    t_dev = params.p2p_latency_us + (p2p_net_hop_us(m, params) if inter_b else 0.0) + max(t_intra, t_inter)
    return max(host_time_us(params, m.gpus_per_process, channels, version), t_dev), channels


__all__ = ["p2p_time_us", "alltoall_channels", "p2p_net_hop_us", "p2p_intra_gbs", "p2p_inter_gbs", "p2p_channels", "mesh_alltoall_us"]
