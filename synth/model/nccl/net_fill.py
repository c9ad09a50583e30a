"""The chunk each network hop stores and forwards, and the µs the first one takes to cross them (the fill).

NCCL's network proxy posts a step to the network only once the GPU has written all of it (with GPU Direct RDMA an
LL128 step too), and the receiving proxy hands it to the next GPU only once all of it has arrived (NVIDIA/nccl
v2.8.4-1 src/transport/net.cc lines 286-327, ``sendProxy``: ``ncclNetIsend`` of the whole ``sizesFifo`` slot after
the GPU's tail passed it; lines 401-428, ``recvProxy``: tail posted after ``ncclNetTest`` completes and the GDR
flush).  A chunk thus crosses each network hop whole, at one channel's share of the node's NICs, before the next hop
can start on it; the later chunks follow in its wake at the bandwidth the transfer term charges.  Inside a node the
LL128 lines are forwarded as they arrive (per-line flags), so only the network hops count for LL128; a tree's
Simple fill, whose GPU-to-GPU hops count too, is :func:`.runtime.pipeline_fill_us`.

* Rooted rings (broadcast, reduce: one step per chunk, src/include/collectives.h lines 71-74), Simple, LL128 and LL
  (its proxy checks every line's flags of a step before it sends it, net.cc lines 309-316):
  ``nodes - 1`` network hops of the chain; the chunk is one step's data or the channel's share
  (:func:`rooted_chunk_bytes`).  The fill replaces the fitted network-hop extra for those hops.
* Trees, LL128: ``2 log2(nodes)`` network hops (up and down, :func:`critical_path_hops`); the chunk is enqueue.cc's
  (:func:`tree_ll128_chunk_bytes`).

Units: bytes, µs, GB/s.
"""

from __future__ import annotations

import math

from synth.model.nccl.constants import SIMPLE_STEP_BYTES, coll_steps

#: bytes of one LL128 step (lines and flags): the LL128 buffer (init.cc line 408: 120 elements x 640 threads x
#: 8 steps x 8 bytes, devcomm.h lines 69-70) over its 8 steps; 15 of every 16 words are data (lines 66-67)
LL128_STEP_BYTES = 120 * 640 * 8
LL128_STEP_DATA_BYTES = LL128_STEP_BYTES * 15 // 16
#: bytes of one LL step's lines: the LL buffer (v2.8.4-1 src/init.cc line 407: 8 lines x 512 threads x 8 steps x 16
#: bytes, devcomm.h lines 52-53) over its 8 steps; half of every 16-byte line is data, half flags
LL_STEP_BYTES = 8 * 512 * 16
#: the LL128 rooted chunk's granule: ``NCCL_LL128_SHMEM_ELEMS_PER_THREAD`` 8 x 640 threads x 8 bytes x 15/16
#: (devcomm.h line 76; broadcast.h line 119 ``minChunkSize``)
LL128_MIN_CHUNK_BYTES = 8 * 640 * 8 * 15 // 16
#: the rooted rings
ROOTED_COLLS = ("broadcast", "reduce")


def rooted_chunk_bytes(proto: str, nbytes: int, channels: int, step_bytes: int = SIMPLE_STEP_BYTES) -> int:
    """Bytes of the chunk a rooted ring's channel forwards per step: one step's data, or the channel's share when
    it holds less.  Simple: v2.8.4-1 src/collectives/device/broadcast.h lines 22-37 (``chunkSize = stepSize *
    BROADCAST_CHUNKSTEPS``, ``realChunkSize = min(chunkSize, DIVUP(size - gridOffset, nChannels))``; v2.27.3-1
    src/device/broadcast.h lines 37-40 ``nelem = min(chunkCount, channelCount - elemOffset)``); LL128: lines
    118-133 (``chunkSize = min(DIVUP(size - gridOffset, nChannels * minChunkSize) * minChunkSize, chunkSize)``).

    >>> rooted_chunk_bytes("Simple", 1 << 20, 8), rooted_chunk_bytes("Simple", 32 << 20, 8)
    (131072, 524288)
    >>> rooted_chunk_bytes("LL128", 1 << 20, 8), rooted_chunk_bytes("LL128", 32 << 20, 8), rooted_chunk_bytes("LL128", 8, 8)
    (153600, 576000, 8)
    >>> rooted_chunk_bytes("Simple", 32 << 20, 8, step_bytes=1 << 20)      # NCCL_BUFFSIZE=8 MiB: 1 MiB steps
    1048576
    >>> rooted_chunk_bytes("LL", 1 << 20, 8), rooted_chunk_bytes("LL", 1 << 17, 8)   # lines: twice the data
    (65536, 32768)

    LL (bytes of lines, twice the data): one step's 32 KiB of data or the channel's share (lines 56-70:
    ``chunkSize = stepLines * sizeof(uint64_t) / sizeof(T)``, the last chunk ``lastChunkSize``, enqueue.cc lines
    398-403); the proxy sends a step's lines only once every line's flags are set (net.cc lines 309-316).
    """
    share = -(-nbytes // max(1, channels))
    if proto == "LL":
        return 2 * min(LL_STEP_BYTES // 2, share)
    if proto == "LL128":
        return min(LL128_STEP_DATA_BYTES, -(-share // LL128_MIN_CHUNK_BYTES) * LL128_MIN_CHUNK_BYTES, nbytes)
    return min(step_bytes, share)


def tree_ll128_chunk_bytes(nbytes: int, channels: int, nodes: int, ppn: int) -> int:
    """Data bytes of a tree's LL128 chunk: one LL128 step (614,400 bytes of lines), halved while a channel holds fewer
    than ``nsteps x 64 / ppn`` of them (while above 128 KiB: down to 76,800), then fewer than ``nsteps x 16 / ppn``
    (while above 32 KiB: down to 19,200), ``nsteps =
    1 + log2(nodes) + ppn / 10`` (v2.8.4-1 src/enqueue.cc lines 404-411; the same rule at v2.27.3-1 lines
    2034-2042), never more than the channel's share (all_reduce.h ``nelem = min(chunkSize, size - offset)``).

    >>> tree_ll128_chunk_bytes(32 << 20, 8, 16, 8), tree_ll128_chunk_bytes(2 << 20, 8, 16, 8)     # 76,800 / 19,200 B
    (72000, 18000)
    """
    nsteps = 1 + int(math.log2(max(1, nodes))) + 0.1 * ppn
    chunk = LL128_STEP_BYTES
    while nbytes // (channels * chunk) < nsteps * 64 / ppn and chunk > 131072:
        chunk //= 2
    while nbytes // (channels * chunk) < nsteps * 16 / ppn and chunk > 32768:
        chunk //= 2
    return min(chunk * 15 // 16, -(-nbytes // max(1, channels)))


def pays_rooted_fill(coll: str, algo: str, proto: str, m=None) -> bool:
    """Whether ``coll`` run as ``algo``/``proto`` (on machine ``m``, an :class:`~.machine.NcclMachine`: several
    hosts, not RCCL) is a rooted ring whose network hops store and forward its chunks; the execution model
    charges that fill in place of the fitted network-hop extra."""
    on_machine = m is None or (m.nodes > 1 and not m.amd)
    return on_machine and algo == "ring" and proto in ("Simple", "LL128", "LL") and coll in ROOTED_COLLS


def rooted_chain_pipelined(coll: str, algo: str, channels: int, m=None) -> bool:
    """Whether nccl-tests' back-to-back calls of a rooted ring (broadcast, reduce) overlap along its chain, so that a
    call costs one hop of it rather than all of them: one channel, NVIDIA's NCCL.

    NCCL's own tuner charges a rooted ring one hop of its chain where every channel's ring orders the ranks alike and
    the whole chain otherwise (NVIDIA/nccl v2.8.4-1 src/graph/tuning.cc lines 141-147: ``ringGraph->sameChannels``);
    one channel is always alike.  Why: a rank's kernel returns once its own sends are posted, a send waiting only for a
    free slot of the successor's ``NCCL_STEPS`` (v2.8.4-1 src/collectives/device/prims_ll.h ``waitSend`` lines 55-69,
    destructor lines 240-244; Simple: primitives.h lines 99-112, 321-324), and the next call's kernel on a rank waits
    only for that rank's previous one (one stream), so each rank starts call k+1 once it has forwarded call k and the
    root, whose clock nccl-tests reads (NVIDIA/nccl-tests 0b30de5 src/common.cu ``BenchTime`` lines 399-421), runs
    ahead.  Rings that order the ranks differently (``sameChannels`` 0 on ABCI's and Voltage Park's multi-NIC graphs,
    search.cc lines 414-420, 717-723) couple a rank late on one ring to the next call of a ring it leads.  The
    restriction to one channel comes from the logs, not the source: one host's multi-channel rooted rows, whose rings
    are alike, pay the chain (ABCI, DGX-2; the tuner's ``sameChannels`` half, tried and not kept: docs/nccl-model.md).
    Known miss: ABCI's one-host one-channel broadcast rows at 4-64 KiB become 9-46 % too fast (their ~7.5 µs floor is
    the same on 1 to 16 hosts).  Not on RCCL (its kernels are not followed here).

    >>> rooted_chain_pipelined("broadcast", "ring", 1), rooted_chain_pipelined("broadcast", "ring", 2)
    (True, False)
    >>> rooted_chain_pipelined("allreduce", "ring", 1), rooted_chain_pipelined("reduce", "tree", 1)
    (False, False)
    """
    return coll in ROOTED_COLLS and algo == "ring" and channels == 1 and (m is None or not m.amd)


def rooted_chain_hops(coll: str, algo: str, channels: int, m, n_intra: int, n_inter: int) -> tuple[int, int]:
    """``(intra-node, inter-node)`` hops whose latency a call of ``coll`` pays: the whole chain's ``(n_intra,
    n_inter)``, or one hop of it, the slowest (a network hop where there is one: the tuner's ``hwLat[hw[a]]``, the
    network's on several hosts, NVIDIA/nccl v2.8.4-1 src/graph/tuning.cc lines 106, 141-144), where the chain
    pipelines across calls (:func:`rooted_chain_pipelined`).

    >>> from types import SimpleNamespace
    >>> m16, m1 = SimpleNamespace(amd=False, nodes=16), SimpleNamespace(amd=False, nodes=1)
    >>> rooted_chain_hops("broadcast", "ring", 1, m16, 113, 15), rooted_chain_hops("broadcast", "ring", 8, m16, 113, 15)
    ((0, 1), (113, 15))
    >>> rooted_chain_hops("broadcast", "ring", 1, m1, 8, 0)
    (1, 0)
    """
    if not rooted_chain_pipelined(coll, algo, channels, m):
        return n_intra, n_inter
    return (0, 1) if n_inter else (min(1, n_intra), 0)


def rooted_net_fill_us(coll: str, proto: str, nbytes: int, channels: int, nodes: int, channel_net_gbs: float,
                       step_bytes: int = SIMPLE_STEP_BYTES) -> float:
    """µs a rooted ring's first chunk (:func:`rooted_chunk_bytes`) spends crossing the ``nodes - 1`` network hops of
    its chain at ``channel_net_gbs`` (GB/s one channel gets of the node's NICs).

    >>> rooted_net_fill_us("broadcast", "Simple", 4 << 20, 8, 16, 4.0)       # 15 hops x 512 KiB at 4 GB/s
    1966.08
    >>> rooted_net_fill_us("allreduce", "Simple", 4 << 20, 8, 16, 4.0), rooted_net_fill_us("broadcast", "LL", 1, 8, 1, 4.0)
    (0.0, 0.0)
    """
    if coll not in ROOTED_COLLS or nodes < 2 or proto not in ("Simple", "LL128", "LL"):
        return 0.0
    return (nodes - 1) * rooted_chunk_bytes(proto, nbytes, channels, step_bytes) / (1000.0 * channel_net_gbs)


def tree_ll128_net_fill_us(nbytes: int, channels: int, nodes: int, ppn: int, channel_net_gbs: float) -> float:
    """µs a tree's first LL128 chunk (:func:`tree_ll128_chunk_bytes`) spends crossing the ``2 log2(nodes)`` network
    hops up and down the tree at ``channel_net_gbs``.  16 x 8 A100 at 32 MiB on 8 channels, 4.14 GB/s a channel:
    8 hops x 72,000 B = 139 µs.

    >>> round(tree_ll128_net_fill_us(32 << 20, 8, 16, 8, 4.14), 1), tree_ll128_net_fill_us(1 << 20, 8, 1, 8, 4.14)
    (139.1, 0.0)
    """
    if nodes < 2:
        return 0.0
    hops = 2 * int(math.log2(nodes))
    return hops * tree_ll128_chunk_bytes(nbytes, channels, nodes, ppn) / (1000.0 * channel_net_gbs)


def critical_path_hops(m, coll: str, algo: str) -> tuple[int, int]:
    """(intra-node hops, inter-node hops) on the critical path of ``coll`` run as ``algo`` on machine ``m`` (an
    :class:`~.machine.NcclMachine`), as NCCL counts them."""
    log_nodes = int(math.log2(m.nodes)) if m.nodes > 1 else 0
    if algo in ("ring", "pat"):
        inter = 0 if m.nodes == 1 else (2 * (m.nodes - 1) if coll == "allreduce" else m.nodes - 1)
        return coll_steps(coll, m.ranks) - inter, inter
    if algo in ("nvls", "nvls_tree"):
        return 1, (2 * log_nodes if algo == "nvls_tree" else (1 if m.nodes > 1 else 0))
    return 2 * (m.gpus_per_node - 1), 2 * log_nodes


def net_chunk_fill_us(coll: str, algo: str, proto: str, nbytes: int, channels: int, m, ring_gbs: float,
                      tree_gbs: float, step_bytes: int = SIMPLE_STEP_BYTES) -> float:
    """The fill this module charges ``coll`` run as ``algo``/``proto`` on ``channels`` channels of machine ``m`` (an
    :class:`~.machine.NcclMachine`; 0 if none): a rooted ring's at a channel's share of ``ring_gbs``, a tree's
    LL128 at its share of ``tree_gbs`` (GB/s a node's NICs move for a ring and a tree).  Not on RCCL, whose LL128
    buffer differs (ROCm/rccl 0cbce2a7 src/include/device.h lines 87-88: 28 elements x 256 threads) and is not
    followed here."""
    if m.nodes < 2 or m.amd:
        return 0.0
    per = max(channels, m.visible_nics()[0])                 # channels spread evenly over the NICs
    if pays_rooted_fill(coll, algo, proto, m):
        hops = 1 if rooted_chain_pipelined(coll, algo, channels, m) else m.nodes - 1  # pipelined: one hop (approximate)
        return rooted_net_fill_us(coll, proto, nbytes, channels, hops + 1, ring_gbs / per, step_bytes)
    if algo == "tree" and proto == "LL128":
        return tree_ll128_net_fill_us(nbytes, channels, m.nodes, m.gpus_per_node, tree_gbs / per)
    return 0.0

__all__ = ["LL128_MIN_CHUNK_BYTES", "LL128_STEP_BYTES", "LL128_STEP_DATA_BYTES", "ROOTED_COLLS", "critical_path_hops",
           "net_chunk_fill_us", "pays_rooted_fill", "rooted_chain_hops", "rooted_chain_pipelined", "rooted_chunk_bytes",
           "rooted_net_fill_us", "tree_ll128_chunk_bytes", "tree_ll128_net_fill_us"]
