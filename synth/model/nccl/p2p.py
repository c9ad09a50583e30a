"""Point-to-point collectives: nccl-tests ``sendrecv``, ``alltoall`` (and ``gather`` / ``scatter``).

NCCL runs them as grouped ``ncclSend`` / ``ncclRecv``, with no ring, tree or tuner table: each
peer pair gets its own channels (src/graph/paths.cc ``ncclTopoComputeP2pChannels``: 2 per NVLink;
across the network ``NCCL_NCHANNELS_PER_NET_PEER``, 2 by default).  Intra-node traffic rides
NVLink / xGMI (or host memory with ``NCCL_P2P_DISABLE=1``), inter-node traffic the GPU's share of
the node's NICs; both directions overlap.  Units: bytes, µs, GB/s per direction.
"""

from __future__ import annotations

from synth.model.nccl.graphs import CommGraphs
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.params import ModelParams
from synth.model.nccl.runtime import host_time_us


def p2p_intra_gbs(m: NcclMachine, g: CommGraphs, params: ModelParams, p2p_disable: bool = False) -> float:
    """Bandwidth one GPU sends to its node peers, all together (GB/s)."""
    if m.gpus_per_node == 1:
        return float("inf")
    if p2p_disable or not m.p2p or m.intra == "pcie":
        kind = "shm" if (p2p_disable or not m.p2p) else "pcie"
        return g.ring.n_channels * g.ring.bw_intra * params.link_efficiency(m.arch, kind)
    links = max(sum(row) for row in m.link_matrix) if m.link_matrix else m.links_per_gpu
    return links * m.link_gbs * params.p2p_nvlink_efficiency


def p2p_inter_gbs(m: NcclMachine, g: CommGraphs, params: ModelParams, peers: int) -> float:
    """Bandwidth one GPU gets to ``peers`` remote ranks through the network (GB/s)."""
    nic_share = m.node_net_gbps / m.gpus_per_node * params.net_efficiency(m.net_kind)
    return min(nic_share, peers * g.net_channels_per_peer * params.p2p_net_channel_gbs)


def p2p_time_us(m: NcclMachine, g: CommGraphs, coll: str, nbytes: int, params: ModelParams,
                p2p_disable: bool = False) -> tuple[float, int]:
    """Predicted nccl-tests time (µs) of a point-to-point collective and the channels it uses.

    ``sendrecv``: every rank sends ``nbytes`` to the next rank (a pair crossing nodes when there
    are several nodes sets the time).  ``alltoall``: ``nbytes`` per rank split evenly over all
    ranks.  ``gather`` / ``scatter``: the root's traffic, the same as one rank's in alltoall.
    """
    n, ppn = m.ranks, m.gpus_per_node
    if coll == "sendrecv":
        intra_b, inter_b, peers = (0.0, float(nbytes), 1) if m.nodes > 1 else (float(nbytes), 0.0, 0)
        channels = g.net_channels_per_peer if m.nodes > 1 else g.p2p_channels_per_peer
    else:
        per_peer = nbytes / n
        intra_b, inter_b, peers = per_peer * (ppn - 1), per_peer * (n - ppn), n - ppn
        channels = g.n_channels
    t_intra = intra_b / (1000.0 * p2p_intra_gbs(m, g, params, p2p_disable)) if intra_b else 0.0
    t_inter = inter_b / (1000.0 * p2p_inter_gbs(m, g, params, peers)) if inter_b else 0.0
    t_dev = params.p2p_latency_us + max(t_intra, t_inter)
    return max(host_time_us(params, m.gpus_per_process, channels), t_dev), channels


__all__ = ["p2p_time_us", "p2p_intra_gbs", "p2p_inter_gbs"]
