"""Point-to-point collectives: nccl-tests ``sendrecv``, ``alltoall`` (and ``gather`` / ``scatter``).

NCCL runs them as grouped ``ncclSend`` / ``ncclRecv``, with no ring, tree or tuner table: each peer pair gets its own
channels (src/graph/paths.cc ``ncclTopoComputeP2pChannels``: 2 per NVLink; across the network
``NCCL_NCHANNELS_PER_NET_PEER``, 2 by default).  Intra-node traffic rides NVLink / xGMI (or host memory with
``NCCL_P2P_DISABLE=1``), inter-node traffic the GPU's share of the node's NICs; both directions overlap.  Units:
bytes, µs, GB/s per direction.

A send to a peer on the same NVLink node does not use all its channels at once: NCCL starts from ``nChannelsMin`` (the
peer's channels halved until every rank's fit in ``p2pnChannels``) and doubles while a channel's part exceeds 32 chunks
(512 KiB, or 128 KiB where a pair is not NVLink: :mod:`.p2p_chunk`; src/enqueue.cc ``addP2pToPlan``,
``scheduleP2pTasksToPlan``; src/graph/paths.cc ``ncclTopoComputeP2pChannels``), and each channel moves at most what a
channel of NCCL's ring graph carries (its ``bwIntra``).  So an 8-GPU ``sendrecv`` of 128 MiB runs on 8 channels and one
of 256 MiB on 16 (:func:`p2p_channels`). Across hosts the chunk is 128 KiB for every peer and a part half a chunk to one
chunk (:func:`part_channels`, :func:`net_part_channels`).  Small sends to a peer on the same host use LL
(:func:`p2p_uses_ll`); a send across hosts never does by default: NCCL gives p2p network connections shared Simple
buffers and no LL buffer unless ``NCCL_ALLOC_P2P_NET_LL_BUFFERS=1`` (src/transport/net.cc ``sendProxyConnect`` /
``recvProxyConnect``: "Only allocate dedicated buffers for ring/tree, not for p2p"; src/init.cc default 0, v2.14.3-1 ..
v2.30.7-1), and ``addP2pToPlan`` takes LL only where every part's connector has an LL buffer.
"""

from __future__ import annotations

from synth.model.nccl.constants import ALGOS, HW_LAT, HW_NET, LL_DATA_FRACTION, NCCL_VERSION, PROTOS, \
    SIMPLE_STEP_BYTES
from synth.model.nccl.channel_caps import ll_cta_gbs
from synth.model.nccl.graphs import CommGraphs, p2p_total_channels, pow2_up
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.params import ModelParams
from synth.model.nccl.p2p_chunk import local_chunk_bytes
from synth.model.nccl.p2p_cta import P2P_CTA_WARPS, P2P_HOST_SPLIT_SINCE, group_ctas, p2p_cta_gbs, p2p_extra_batches, \
    p2p_host_warps, p2p_warps
from synth.model.nccl.p2p_mesh import mesh_p2p_us
from synth.model.nccl.pcie_path import nic_efficiency, pcie_rate_gbs, pcie_stream_gbs
from synth.model.nccl.rccl_channels import rccl_channel_cap_gbs
from synth.model.nccl.ring_steps import nvlink_p2p, p2p_read_mode, p2p_simple_fill, xgmi_p2p
from synth.model.nccl.latency import host_time_us
from synth.model.nccl.runtime import ring_capacity_gbs
from synth.model.nccl.shm_uplink import uplink_share

#: NCCL_P2P_NET_CHUNKSIZE / NCCL_P2P_PCI_CHUNKSIZE's default (bytes): one p2p step of every send of a
#: communicator spanning hosts (src/init.cc ``computeBuffSizes``: ``nNodes > 1`` picks it for all peers)
P2P_NET_CHUNK_BYTES = 1 << 17
#: NCCL_P2P_LL_THRESHOLD's default (bytes per channel; src/enqueue.cc)
P2P_LL_THRESHOLD_BYTES = 1 << 14
#: first NCCL whose p2p sends may use LL (``NCCL_P2P_LL_THRESHOLD`` in src/enqueue.cc of v2.14.3-1, not v2.13.4-1)
P2P_LL_SINCE = (2, 14)
#: from 2.22 (src/enqueue.cc ``addP2pToPlan``, v2.22.3-1) a part across hosts is at least half a chunk and the
#: LL threshold scales with the peer's channels (``nChannelsMax``); from 2.29 with the part's own channels
P2P_NET_PARTS_SINCE, P2P_LL_PART_CHANNELS_SINCE = (2, 22), (2, 29)
#: first NCCL whose p2p kernel gives a send/recv work one more sending warp than receiving ones (src/device/sendrecv.h
#: ``nRecvWarpPerWork``, first in v2.22.3-1 lines 98-105; from v2.12.7-1 to v2.21.5-1 src/enqueue.cc (``enqueueSegOp``,
#: then ``finishWorkP2p``) sized the send and recv elements itself, 9 and 8 warps: :func:`.p2p_cta.p2p_host_warps`)
P2P_WARP_SPLIT_SINCE = (2, 22)


def part_channels(nbytes: int, n_min: int, n_max: int, chunk: int, multi_node: bool,
                  version: tuple = NCCL_VERSION) -> int:
    """Channels NCCL splits one send of ``nbytes`` over (src/enqueue.cc ``addP2pToPlan``, NVIDIA/nccl
    v2.22.3-1 .. v2.30.7-1; ``calcP2pChunkSize`` before): start from ``min(n_min, bytes / minPart)``
    and double while a part exceeds ``maxPart`` and the channels stay within ``n_max``.  One host:
    parts of chunk/8 .. 32 chunks; across hosts (from 2.22) chunk/2 .. one chunk.

    >>> [part_channels(s << 10, 4, 4, 1 << 17, True) for s in (16, 64, 128, 256, 512, 1024)]
    [1, 1, 2, 4, 4, 4]
    >>> [part_channels(s << 20, 4, 16, 1 << 19, False) for s in (1, 64, 128, 256)]
    [4, 4, 8, 16]
    """
    if nbytes <= 0:
        return 1
    net_parts = multi_node and tuple(version) >= P2P_NET_PARTS_SINCE
    min_part = chunk // 2 if net_parts else chunk // 8
    max_part = chunk if multi_node else chunk * 32
    n = max(1, min(n_min, -(-nbytes // min_part)))
    part = max(min_part, -(-nbytes // n))
    while part > max_part and n <= n_max // 2:
        n *= 2
        part = -(-nbytes // n)
    return n


def p2p_uses_ll(nbytes: int, n_part: int, n_max: int, version: tuple = NCCL_VERSION) -> bool:
    """Whether NCCL sends ``nbytes`` to a peer with LL, not Simple (src/enqueue.cc): up to
    ``NCCL_P2P_LL_THRESHOLD`` (16 KiB) from 2.14, that times the peer's channels from 2.22 and times
    the part's channels from 2.29 (v2.29.2-1 ``bytes <= nChannels[dir] * ncclParamP2pLLThreshold()``).

    >>> [p2p_uses_ll(s << 10, 1, 4, v) for s in (16, 32) for v in ((2, 18), (2, 28), (2, 29))]
    [True, True, True, False, True, False]
    """
    version = tuple(version)
    if version < P2P_LL_SINCE or nbytes <= 0:
        return False
    per = n_part if version >= P2P_LL_PART_CHANNELS_SINCE else n_max if version >= P2P_NET_PARTS_SINCE else 1
    return nbytes <= per * P2P_LL_THRESHOLD_BYTES


def _per_peer_bounds(m: NcclMachine, g: CommGraphs, per_peer_max: int) -> tuple[int, int]:
    """``(nChannelsMin, nChannelsMax)`` of ``scheduleP2pTasksToPlan``: the peer's channels, and those
    halved until every rank's fit in the p2p channels (``p2pnChannels``, a power of two)."""
    total = p2p_total_channels(g.n_channels, m.amd and m.intra == "xgmi")
    n_max = min(pow2_up(per_peer_max), total)
    n_min = n_max
    while n_min * m.ranks > total and n_min > 1:
        n_min //= 2
    return n_min, n_max


def p2p_channels(m: NcclMachine, g: CommGraphs, nbytes: int, version: tuple = NCCL_VERSION) -> int:
    """Channels NCCL gives one send of ``nbytes`` to a peer in the same node (see the module
    docstring).  Across hosts every peer's channels are at most the network peers' (src/graph/paths.cc
    ``ncclTopoComputeP2pChannelsPerPeer`` takes the least over all peers) and its chunk is the net one.

    >>> from synth.model.nccl.graphs import comm_graphs
    >>> from topo_probe import get_preset
    >>> m = NcclMachine.from_topology(get_preset("dgx-a100"), gpus_per_process=8)
    >>> [p2p_channels(m, comm_graphs(m), s << 20) for s in (1, 128, 256, 512, 1024)]
    [4, 8, 16, 32, 32]
    """
    multi = m.nodes > 1
    n_min, n_max = local_channel_bounds(m, g)
    chunk = P2P_NET_CHUNK_BYTES if multi else local_chunk_bytes(m, version)      # PCIe / SHM: 128 KiB, p2p_chunk.py
    return part_channels(nbytes, n_min, n_max, chunk, multi, version)


def local_channel_bounds(m: NcclMachine, g: CommGraphs) -> tuple[int, int]:
    """:func:`_per_peer_bounds` of a peer on the same host (across hosts no more than a network peer's)."""
    per = min(g.p2p_channels_per_peer, g.net_channels_per_peer) if m.nodes > 1 else g.p2p_channels_per_peer
    return _per_peer_bounds(m, g, per)


def net_part_channels(m: NcclMachine, g: CommGraphs, nbytes: int, version: tuple = NCCL_VERSION) -> int:
    """Channels NCCL gives one send of ``nbytes`` to a peer on another host: :func:`part_channels`
    with the net chunk (128 KiB) and ``net_channels_per_peer``.  On 2 x 8 H100 under 2.29 (4 channels a
    peer, 16 p2p channels: 16 ranks start a part on 16 / 16 = 1) a part doubles its channels past 128
    KiB: 128 KiB runs on 1, 256 KiB on 2, 512 KiB and more on all 4.

    >>> from synth.model.nccl.graphs import comm_graphs
    >>> from topo_probe import cluster
    >>> m = NcclMachine.from_topology(cluster("dgx-h100", nodes=2))
    >>> g = comm_graphs(m, version=(2, 29))
    >>> [net_part_channels(m, g, s << 10, (2, 29)) for s in (64, 128, 256, 512, 4096)], g.net_channels_per_peer
    ([1, 1, 2, 4, 4], 4)
    """
    n_min, n_max = _per_peer_bounds(m, g, g.net_channels_per_peer)
    return part_channels(nbytes, n_min, n_max, P2P_NET_CHUNK_BYTES, True, version)


def alltoall_channels(m: NcclMachine, g: CommGraphs, per_peer: int) -> int:
    """Channels one rank's alltoall launch touches (its host enqueue cost grows with them).

    NCCL schedules a grouped send/recv round by round, one round per peer, each part on the
    channels the part needs (src/enqueue.cc ``scheduleP2pTasksToPlan``: a peer in the node gets
    :func:`p2p_channels` of its part, one across the network ``NCCL_NCHANNELS_PER_NET_PEER``),
    and the kernel is launched on the channels that got work, never more than the communicator
    has.  So 8 ranks' alltoall of 8 KiB runs 7 one-channel rounds, not all 112 channels of an
    MI355X communicator.

    >>> from synth.model.nccl.graphs import comm_graphs
    >>> from topo_probe import get_preset
    >>> m = NcclMachine.from_topology(get_preset("mi355x"), gpus_per_process=8)
    >>> g = comm_graphs(m)
    >>> [alltoall_channels(m, g, s) for s in (1024, 2 << 20, 64 << 20)], g.n_channels
    ([7, 56, 56], 112)
    """
    ppn, n = m.gpus_per_node, m.ranks
    used = (ppn - 1) * p2p_channels(m, g, per_peer) + (n - ppn) * g.net_channels_per_peer
    return max(1, min(g.n_channels, used))


def read_mode_share(m: NcclMachine, version: tuple = NCCL_VERSION, p2p_disable: bool = False) -> float:
    """Share of a write-mode p2p channel's rate a send moves when NCCL reads over NVLink (Ampere:
    :data:`.ring_steps.P2P_READ_SM`).  In read mode the Simple buffer sits at the sender (src/transport/p2p.cc
    ``p2pSendSetup`` lines 372-379, p2p connections included: they have no graph) and the receiver's warps pull
    each chunk across NVLink; in write mode the sender's warps push it.  From 2.22 a work has one receiving warp
    fewer than sending ones (:func:`p2p_warps`): 9 of 10 on a 640-thread CTA; from 2.12 to 2.21 the host gave a
    work's receive 8 warps and its send 9 (:func:`.p2p_cta.p2p_host_warps`, src/enqueue.cc ``finishWorkP2p``,
    in 2.12 ``enqueueSegOp``).  The share is recv / send: the model's reading of the warp split, kept from 2.22's
    9/10 (it takes the copy to be warp-bound and applies that to a link bound), not a figure the source gives.  In
    read mode the sender's warps copy nothing (v2.20.5-1 src/device/prims_simple.h line 153, ``DirectRead``: an
    empty send), so recv / 10 (0.8 for 2.12-2.21) is another reading; the one table that reads it (2 x A100
    sendrecv at 2.20.5) passes under either (8/9: 12.1 % median, 18.6 % worst; 0.8: 7.1 %, 20.8 %) and cannot
    choose.  So 8 x A100 sends at 0.9 (2.12-2.21: 0.889) of what the same links would carry written, 8 x H100
    (write mode) at the whole.  2.11 and earlier: not modelled (the whole taken); v2.11.4-1
    src/collectives/device/sendrecv.h line 25 splits a work's 640 threads (enqueue.cc line 862) into 304
    receiving and 336 sending (0.905 under this reading).  (A CTA shared by works of at most 4 warps each splits
    them evenly; the model takes one work per CTA.)

    >>> from topo_probe import get_preset
    >>> a100, h100 = (NcclMachine.from_topology(get_preset(p)) for p in ("dgx-a100", "dgx-h100"))
    >>> read_mode_share(a100, (2, 28)), round(read_mode_share(a100, (2, 12)), 4), read_mode_share(a100, (2, 11))
    (0.9, 0.8889, 1.0)
    >>> read_mode_share(h100, (2, 28))
    1.0
    """
    if not p2p_read_mode(m, p2p_disable) or tuple(version) < P2P_HOST_SPLIT_SINCE:
        return 1.0
    send, recv = p2p_warps(P2P_CTA_WARPS) if tuple(version) >= P2P_WARP_SPLIT_SINCE else p2p_host_warps(2)
    return recv / send


def p2p_link_efficiency(m: NcclMachine, params: ModelParams) -> float:
    """Fraction of a GPU-GPU link's data-sheet rate point-to-point sends reach: the share
    ``p2p_link_share`` of what the architecture's collectives reach on the same links
    (``link_eff[arch, nvlink|xgmi]``).  Sends and rings cross the same NVLink / xGMI ports with the
    same SMs copying, so what a generation gains on its links (NVLink 4 over 3) shows in both: one
    share, not one p2p efficiency fitted on A100 and lent to every generation.

    >>> from synth.model.nccl import DEFAULT_PARAMS
    >>> from topo_probe import get_preset
    >>> a100, h100 = (NcclMachine.from_topology(get_preset(p)) for p in ("dgx-a100", "dgx-h100"))
    >>> e = [p2p_link_efficiency(m, DEFAULT_PARAMS) for m in (a100, h100)]
    >>> ratio = DEFAULT_PARAMS.link_efficiency("sm90", "nvlink") / DEFAULT_PARAMS.link_efficiency("sm80", "nvlink")
    >>> abs(e[1] / e[0] - ratio) < 1e-12
    True
    """
    kind = "xgmi" if m.intra == "xgmi" else "nvlink"
    return params.p2p_link_share * params.link_efficiency(m.arch, kind)


def p2p_intra_gbs(m: NcclMachine, g: CommGraphs, params: ModelParams, p2p_disable: bool = False,
                  version: tuple = NCCL_VERSION) -> float:
    """Bandwidth one GPU sends to its node peers, all together (GB/s); over NVLink in read mode
    :func:`read_mode_share` of it.  NVIDIA without P2P on one socket: an SHM ring's rate (NVIDIA/nccl v2.28.9-1
    src/transport/shm.cc lines 171-175, 205-209: the same SHM connections, the same x16 links).  Else NCCL's search
    speed, a tuning estimate (the one-socket guard: the model's pcie-8gpu-2socket test bound, not NCCL; RCCL unread),
    at most what the GPU's PCIe path carries (:func:`.pcie_path.pcie_stream_gbs` x ``link_eff``): every send leaves
    over that path, and NCCL's search takes a channel's bandwidth from each link it crosses (search.cc line 110)."""
    if m.gpus_per_node == 1:
        return float("inf")
    if p2p_disable or not m.p2p or m.intra == "pcie":
        kind = "shm" if (p2p_disable or not m.p2p) else "pcie"
        share = uplink_share(m, "p2p", kind != "shm")                      # GPUs behind one switch: shm_uplink.py
        if kind == "shm" and m.sockets == 1 and not m.amd:     # an SHM ring's transport and x16 links: its rate
            return ring_capacity_gbs(m, g, params, p2p=False) * share
        eff = params.link_efficiency(m.arch, kind)
        return min(g.ring.n_channels * g.ring.bw_intra, pcie_stream_gbs(m)) * eff * share
    links = max(sum(row) for row in m.link_matrix) if m.link_matrix else m.links_per_gpu
    return links * m.link_gbs * p2p_link_efficiency(m, params) * read_mode_share(m, version, p2p_disable)


def mesh_send_us(m: NcclMachine, params: ModelParams, coll: str, per_peer: float,
                 version: tuple = NCCL_VERSION) -> float | None:
    """Device µs of a one-host p2p collective's sends on a point-to-point NVLink mesh (None elsewhere): each pair
    over the path NCCL's P2P transport takes, a direct NVLink, from 2.8 the two NVLink legs through one
    intermediate GPU (``PATH_NVB``: the FIFO is the receiver's buffer, in the memory of the intermediate of the
    path receiver -> sender, NVIDIA/nccl v2.28.9-1 src/transport/p2p.cc ``p2pRecvSetup`` line 468,
    ``p2pSendConnect`` lines 490-500), else PCIe; the busiest link sets the time (:func:`.p2p_mesh.mesh_p2p_us`).
    Rates: the links' data-sheet bandwidths times the shared efficiencies (:func:`p2p_link_efficiency`;
    ``link_eff[arch, pcie]``), a direct pair in read mode :func:`read_mode_share` of it."""
    nvl = m.link_gbs * p2p_link_efficiency(m, params)
    pcie = pcie_rate_gbs(m, params)                                       # x16 rate, path-capped: .pcie_path
    return mesh_p2p_us(m, coll, per_peer, nvl, pcie, version, read_mode_share(m, version))


def p2p_inter_gbs(m: NcclMachine, g: CommGraphs, params: ModelParams, peers: int, part_ch: int | None = None) -> float:
    """Bandwidth one GPU gets to ``peers`` remote ranks through the network (GB/s): its share of the
    node's NICs, at most ``p2p_net_channel_gbs`` per channel a peer's part runs on (``part_ch``,
    :func:`net_part_channels`; all ``net_channels_per_peer`` when not given).  A NIC that streams to one
    peer (sendrecv) does so as a ring channel does (``ring_net_eff``); one that talks to many at once
    (alltoall) as a tree's does (``net_eff``: the real 2-host H100 alltoall reaches 0.81 of the line rate)."""
    eff = params.ring_net_efficiency(m.net_kind) if peers == 1 else params.net_efficiency(m.net_kind)
    nic_share = m.gpu_net_gbps / m.gpus_per_node * nic_efficiency(m, params, eff)    # PCIe slot: .pcie_path
    return min(nic_share, peers * (part_ch or g.net_channels_per_peer) * params.p2p_net_channel_gbs)


def p2p_net_hop_us(m: NcclMachine, params: ModelParams) -> float:
    """µs a send to a peer on another host adds before its first byte lands: one network hop of the
    Simple protocol (every such send uses it: the module docstring), as a collective's hop costs it:
    NCCL's table latency (``hwLat[NET][ring][Simple]``, 14 µs) plus the transport's fitted extra
    (``net_lat[transport, Simple]``) and, the send being one message, a network plugin's share of its
    latency (EFA: :meth:`.params.ModelParams.net_message_hop_us`)."""
    simple = HW_LAT[HW_NET][ALGOS.index("ring")][PROTOS.index("Simple")]
    return simple + params.net_message_hop_us(m.net_kind, "Simple", m.arch)


def _channel_cap_gbs(m: NcclMachine, g: CommGraphs, params: ModelParams, channels: int) -> float:
    """GB/s ``channels`` p2p channels move over NVLink: each at most what a channel of NCCL's ring
    graph carries (its ``bwIntra``, times the NVLink efficiency) and what its CTA moves (:mod:`.p2p_cta`)."""
    link = g.ring.bw_intra * params.link_efficiency(m.arch, "nvlink")
    return channels * min(link, p2p_cta_gbs(m.arch, params, m.gpu_name))


def _remote_gbs(m: NcclMachine, g: CommGraphs, params: ModelParams, per_peer: int, peers: int,
                 version: tuple, p2p_disable: bool = False) -> float:
    """GB/s of one GPU's sends of ``per_peer`` bytes to each of ``peers`` remote ranks: each part on
    :func:`net_part_channels`, Simple at every size.  A host's peers share their parts' channels
    (:func:`group_ctas`); with PXN (on by default where every GPU of the node is NVLink-connected:
    src/enqueue.cc ``pxnUsed``, src/graph/search.cc ``NCCL_P2P_PXN_LEVEL`` 2) each of those CTAs writes
    into the NVLink peer on the destination's rail, so it moves at most a ring channel's NVLink rate."""
    ch = net_part_channels(m, g, per_peer, version)
    gbs = p2p_inter_gbs(m, g, params, peers, ch)
    if peers > 1 and m.gpus_per_node > 1 and nvlink_p2p(m, p2p_disable):
        gbs = min(gbs, _channel_cap_gbs(m, g, params, group_ctas(g, ch, m.nodes - 1)))
    return gbs


def _local_gbs(m: NcclMachine, g: CommGraphs, params: ModelParams, per_peer: int, peers: int,
               version: tuple) -> float:
    """GB/s of one GPU's NVLink sends of ``per_peer`` bytes to each of ``peers`` peers on its host: each part's
    channels (:func:`p2p_channels`) at a ring channel's rate, on one host every peer on its own channels while the
    p2p channels last, across hosts the host's peers on the same ones (:func:`group_ctas`); LL below the threshold
    (:func:`p2p_uses_ll`) carries half data a line, times the fitted LL efficiency, as the collectives' LL does;
    Simple in read mode :func:`read_mode_share` (LL's buffer is the receiver's: it writes)."""
    ch = p2p_channels(m, g, per_peer, version)
    ll = p2p_uses_ll(per_peer, ch, local_channel_bounds(m, g)[1], version)
    ctas = group_ctas(g, ch, 1 if m.nodes > 1 else peers)
    frac = LL_DATA_FRACTION * params.proto_efficiency(m.arch, "LL") if ll else 1.0
    if ll:      # an LL channel at most at its CTA's LL rate (Blackwell NVLink: channel_caps.ll_cta_gbs)
        return min(_channel_cap_gbs(m, g, params, ctas) * frac, ctas * ll_cta_gbs(m))
    return _channel_cap_gbs(m, g, params, ctas) * read_mode_share(m, version)


def p2p_protocol(m: NcclMachine, g: CommGraphs, coll: str, nbytes: int, p2p_disable: bool = False,
                 version: tuple = NCCL_VERSION) -> str:
    """The protocol a point-to-point collective's sends run: ``LL`` when every peer is on the host
    and each send is under the LL threshold (:func:`p2p_uses_ll`), else ``Simple`` (sends across
    hosts never use LL: the module docstring).

    >>> from synth.model.nccl.graphs import comm_graphs
    >>> from topo_probe import get_preset
    >>> m = NcclMachine.from_topology(get_preset("hgx-b200"))
    >>> g = comm_graphs(m, version=(2, 28))
    >>> [p2p_protocol(m, g, "alltoall", s << 20, version=(2, 28)) for s in (1, 1024)]
    ['LL', 'Simple']
    """
    if m.nodes > 1 or not nvlink_p2p(m, p2p_disable):
        return "Simple"
    per_peer = int(nbytes) if coll == "sendrecv" else int(nbytes) // m.ranks
    ll = p2p_uses_ll(per_peer, p2p_channels(m, g, per_peer, version), local_channel_bounds(m, g)[1], version)
    return "LL" if ll else "Simple"


def p2p_time_us(m: NcclMachine, g: CommGraphs, coll: str, nbytes: int, params: ModelParams, p2p_disable: bool = False,
                version: tuple = NCCL_VERSION, step_bytes: int = SIMPLE_STEP_BYTES) -> tuple[float, int]:
    """Predicted nccl-tests time (µs) of a point-to-point collective and the channels it uses.

    ``sendrecv``: every rank sends ``nbytes`` to the next rank (a pair crossing nodes when there
    are several nodes sets the time).  ``alltoall``: ``nbytes`` per rank split evenly over all
    ranks.  ``gather`` / ``scatter``: the root's traffic, the same as one rank's in alltoall.
    Each peer's part runs on the channels NCCL gives it (:func:`p2p_channels`,
    :func:`net_part_channels`); a rank's peers run at once, on one host each on its own channels
    (``ncclP2pChannelBaseForRound``: the round's bit-reversed index), across hosts a host's peers on
    shared ones (:func:`group_ctas`).  A Simple NVLink part of k chunks (``p2pChunkSize``, at most ``step_bytes``,
    NCCL_BUFFSIZE / 8: src/init.cc v2.28.7-1 line 721; the parts' channels keep the default chunk) also pays the
    receiver's local copy of its last chunk (:func:`.ring_steps.p2p_simple_fill`), the NVLink mesh's too, and so
    does RCCL's on one xGMI host (:func:`.ring_steps.xgmi_p2p`; not across hosts: ``rcclSetP2pNetChunkSize``, not
    modelled).  A one-host NVIDIA alltoall pays the fixed µs again for each extra work batch of its busiest channel,
    an assumed cost (:func:`.p2p_cta.p2p_extra_batches`, from 2.28).
    """
    n, ppn = m.ranks, m.gpus_per_node
    intra_gbs, inter_gbs = p2p_intra_gbs(m, g, params, p2p_disable, version), float("inf")
    if coll == "sendrecv":
        intra_b, inter_b, peers = (0.0, float(nbytes), 1) if m.nodes > 1 else (float(nbytes), 0.0, 0)
        channels = g.p2p_channels_per_peer
        if m.nodes == 1 and nvlink_p2p(m, p2p_disable):
            channels = p2p_channels(m, g, nbytes, version)
            intra_gbs = min(intra_gbs, _local_gbs(m, g, params, nbytes, 1, version))
        elif m.nodes > 1:
            inter_gbs = _remote_gbs(m, g, params, nbytes, 1, version)
            channels = net_part_channels(m, g, nbytes, version)
    else:
        per_peer = nbytes / n
        intra_b, inter_b, peers = per_peer * (ppn - 1), per_peer * (n - ppn), n - ppn
        channels = alltoall_channels(m, g, int(per_peer))
        if intra_b and nvlink_p2p(m, p2p_disable):
            intra_gbs = min(intra_gbs, _local_gbs(m, g, params, int(per_peer), ppn - 1, version))
        elif intra_b and m.nodes == 1 and not p2p_disable:     # RCCL: a p2p channel is one workgroup, as a ring's
            intra_gbs = min(intra_gbs, rccl_channel_cap_gbs(m, "Simple", channels, params.rccl_channel_gbs))
        if inter_b:
            inter_gbs = _remote_gbs(m, g, params, int(per_peer), peers, version, p2p_disable)
    per = int(nbytes) if coll == "sendrecv" else int(nbytes // n)       # a Simple p2p part's FIFO fill:
    ch_part = p2p_channels(m, g, per, version)
    chunk = P2P_NET_CHUNK_BYTES if m.nodes > 1 else local_chunk_bytes(m, version)
    simple = nvlink_p2p(m, p2p_disable) or (xgmi_p2p(m, p2p_disable) and m.nodes == 1)      # RCCL: one host
    simple = simple and not p2p_uses_ll(per, ch_part, local_channel_bounds(m, g)[1], version)   # LL: no FIFO copy
    groups = ppn - 1 if coll != "sendrecv" and m.nodes == 1 else 1
    ch_gbs = intra_gbs / group_ctas(g, ch_part, groups, m.amd and m.intra == "xgmi")
    fill = p2p_simple_fill(m, params, per / ch_part, min(chunk, step_bytes), ch_gbs, version) if simple else 1.0
    t_intra = intra_b / (1000.0 * intra_gbs) if intra_b else 0.0
    if intra_b and not p2p_disable:                 # a mesh: its busiest link, over NCCL's paths (p2p_mesh.py)
        t_intra = max(t_intra, mesh_send_us(m, params, coll, per, version) or 0.0)
    t_intra *= fill
    t_inter = inter_b / (1000.0 * inter_gbs) if inter_b else 0.0
    if inter_b and m.intra == "pcie":   # both parts leave over the GPU's PCIe path (search.cc 110); in an alltoall
        # every GPU sends at once, so at its share of a link the host's GPUs cross to their NIC (.pcie_share); a
        # sendrecv's crossing GPU and a gather/scatter's root are the only ones of their host streaming to the NIC
        path_gbs = pcie_rate_gbs(m, params, to_nic=coll == "alltoall")
        t_inter = max(t_inter, (intra_b + inter_b) / (1000.0 * path_gbs))
    # ASSUMED, unsourced: each extra work batch costs the whole call's fixed µs again (p2p_cta.p2p_extra_batches)
    extra = p2p_extra_batches(m, coll, ch_part, p2p_total_channels(g.n_channels), version)
    t_dev = params.p2p_latency_us * (1 + extra) + (p2p_net_hop_us(m, params) if inter_b else 0.0) \
        + max(t_intra, t_inter)
    return max(host_time_us(params, m.gpus_per_process, channels, version, m.threads_per_process), t_dev), channels


__all__ = ["p2p_time_us", "p2p_protocol", "part_channels", "local_channel_bounds", "p2p_uses_ll", "net_part_channels",
           "alltoall_channels", "p2p_net_hop_us", "p2p_intra_gbs", "p2p_link_efficiency", "p2p_inter_gbs",
           "p2p_channels", "mesh_send_us", "p2p_warps", "read_mode_share"]
