"""What one point-to-point channel's CTA moves over NVLink, by the SM clock, the bound that rate puts on a
ring's channels across hosts (:func:`ring_net_cta_cap_gbs`), and the work batches it runs in turn
(:func:`p2p_channel_batches`).

A p2p channel is one CTA: NCCL's p2p kernel runs one block a channel (NCCL_MAX_NTHREADS 640 threads,
src/include/device.h; src/enqueue.cc ``scheduleP2pTasksToPlan``), whose warps split between the send and
the receive of that channel's work (src/device/sendrecv.h ``RunWorkBatch<ncclFuncSendRecv>::run``: one
more sending warp than receiving ones, v2.22.3-1 lines 98-105), each side driving its ``Primitives`` one
chunk step at a time (src/device/prims_simple.h ``genericOp``).  So a channel moves what one SM's
load/store units push through NVLink, not what its share of the links would carry, and, as a ring
channel's local copy does (:mod:`.ring_steps`), that follows the SM clock.  ``p2p_cta_gbs`` (fitted, one
constant) is the rate at H100 SXM5's boost clock; a GPU of another architecture takes it times its boost
clock over H100's (:func:`.constants.sm_clock_ghz`: the part's where its name says, else the architecture's).
The real logs' per-channel rates, over their
clocks: A100 ~13 GB/s a channel (read mode, 9/10 of a written one) / 1.41 GHz, H100 ~20.5 / 1.98, B200
~21 / 1.98 GHz: 10.3, 10.4, 10.6 GB/s per GHz.  Units: GB/s per channel.
"""

from __future__ import annotations

import math

from synth.model.nccl.constants import LL128_DATA_FRACTION, LL_DATA_FRACTION, SIMPLE_STEP_BYTES, at_sm_clock
from synth.model.nccl.graphs import CommGraphs, p2p_total_channels
from synth.model.nccl.versions_patch import P2P_EPOCH_BARE_PATCH, P2P_EPOCH_RELEASE, since


#: warps of a p2p kernel's CTA: NCCL_MAX_NTHREADS 640 / 32 (src/include/device.h line 88; src/enqueue.cc
#: ``scheduleP2pTasksToPlan`` line 1045, NVIDIA/nccl v2.28.9-1)
P2P_CTA_WARPS = 640 // 32


def p2p_warps(n_warps: int) -> tuple[int, int]:
    """``(sending, receiving)`` warps NCCL gives one send/recv work on ``n_warps`` warps (src/device/sendrecv.h
    ``RunWorkBatch<ncclFuncSendRecv>::run``, NVIDIA/nccl v2.28.9-1 lines 103-110: one more sender than
    receivers above 4 warps, "a balanced number of reading and writing threads even if that leaves warps unused").

    >>> p2p_warps(20), p2p_warps(16), p2p_warps(4)
    ((10, 9), (8, 7), (2, 2))
    """
    recv = n_warps // 2 if n_warps <= 4 else (n_warps - 1) // 2
    return (recv if n_warps <= 4 else recv + 1), recv


#: first NCCL read for the host's split of a p2p work's warps (src/enqueue.cc ``finishWorkP2p``: v2.13.4-1 lines
#: 206-220, v2.14.3-1 177-193, v2.20.5-1 117-133, v2.21.5-1 the same; v2.12.12-1 runs the same loop in
#: ``enqueueSegOp``, lines 946-956, v2.12.7-1 939-948; from v2.22.3-1 the kernel splits them, :func:`p2p_warps`)
P2P_HOST_SPLIT_SINCE = (2, 12)


def p2p_host_warps(n_elems: int = 2, n_warps: int = P2P_CTA_WARPS) -> tuple[int, int]:
    """``(sending, receiving)`` warps NCCL 2.12-2.21 gives a p2p work whose CTA holds ``n_elems`` elements (a
    sendrecv's one receive and one send: 2).  ``finishWorkP2p`` (NVIDIA/nccl v2.20.5-1 src/enqueue.cc lines 117-133;
    v2.13.4-1 206-220; v2.12.12-1 ``enqueueSegOp`` 946-956) rounds the elements up to a power of two of groups,
    doubles ``nWarp`` while ``nWarp x nGroup <= 20 / 2`` and gives odd elements one warp more; receives sit at even
    elements, sends at odd (``appendWorkElemP2p`` v2.20.5-1 lines 168-169, v2.13.4-1 ``p2pTailElem`` 256-257,
    v2.12.12-1 ``getSegment`` line 903: ``start = subType == Recv ? 0 : 1``), and the kernel runs even groups as
    receives (src/device/sendrecv.h line 78; v2.12.12-1 src/collectives/device/sendrecv.h lines 70-71).  640
    threads, 2 elements: 8 receiving warps, 9 sending.  The source gives these warp counts only; that a read-mode
    send moves recv / send = 8/9 of a written one is the model's reading (:func:`.p2p.read_mode_share`), inherited
    from 2.22's 9/10.

    >>> p2p_host_warps(2), p2p_host_warps(4), p2p_host_warps(8)
    ((9, 8), (5, 4), (3, 2))
    """
    groups = 1
    while groups < n_elems:
        groups *= 2
    warps = 1
    while warps * groups <= n_warps // 2:
        warps *= 2
    return (warps + 1 if warps >= 2 else warps), warps


def p2p_cta_gbs(arch: str, params, gpu_name: str = "") -> float:
    """GB/s one p2p channel's CTA moves on ``arch`` (the part ``gpu_name``): ``params.p2p_cta_gbs`` times the boost
    clock over H100's (:func:`.constants.sm_clock_ghz`).

    >>> from synth.model.nccl.params import ModelParams
    >>> [round(p2p_cta_gbs(a, ModelParams(p2p_cta_gbs=20.0)), 2) for a in ("sm90", "sm100", "sm80")]
    [20.0, 20.0, 14.24]
    """
    return at_sm_clock(params.p2p_cta_gbs, arch, gpu_name)


#: steps of one Simple slice, by collective (v2.24.3-1 .. v2.29.2-1 src/include/collectives.h: BROADCAST_SLICESTEPS and
#: REDUCE_SLICESTEPS 1; ALLREDUCE, ALLGATHER and REDUCESCATTER_SLICESTEPS NCCL_STEPS/4 = 2, the default below)
SLICE_STEPS = {"broadcast": 1, "reduce": 1}


def ring_net_cta_cap_gbs(m, algo: str, proto: str, channels: int, params, coll: str = "allgather",
                         step_bytes: int = SIMPLE_STEP_BYTES) -> float:
    """Most bus bandwidth (GB/s, nccl-tests convention) a ring across hosts moves on ``channels`` channels when
    each channel's CTA moves at most :func:`p2p_cta_gbs` (payload: LL 8 of 16 bytes, LL128 120 of 128); unbounded
    for other algorithms, on one host and on AMD GPUs (RCCL's network channels are not modelled per CTA).

    A ring channel is one CTA (NVIDIA/nccl v2.24.3-1 src/enqueue.cc lines 1428-1431: one block a channel; src/device/
    common.h lines 322-330: a block's channel), which runs its chunk's steps one after another through one
    ``Primitives`` (src/device/all_gather.h lines 13-70) whose Simple loop handles one slice at a time (src/device/
    prims_simple.h lines 235-305, ``#pragma unroll 1``: wait for the peers, copy, barrier, post), and a slice it
    posts to a network connection (``ConnFifoEnabled``: a proxy's FIFO) first waits for a system-scope fence (lines
    180-187, ``fence_acq_rel_sys``), as a point-to-point send's CTA does on the same primitives.  The bus bandwidth
    of a ring is what each channel carries over each hop, so the channels' CTAs bound it at ``channels`` x the
    CTA's rate.  The rate is the model's one per-CTA constant, fitted on point-to-point logs (:func:`p2p_cta_gbs`:
    20.5 GB/s at H100's clock), not a figure of NCCL's: the real H100 InfiniBand rings of 8 GPUs and 8 x 400 Gb/s
    NICs per host, 16 channels, stop at 323 GB/s busbw (4 and 10 hosts, all_gather and reduce_scatter; the bound,
    with the slice cost below: 16 x 19.4 = 310), below their NICs' 8 x 48 = 384, while 24 channels reach the NICs
    (2 hosts, NCCL_MIN_CTAS=24: 392 GB/s) and 4, 2 and 1 GPUs a host (12 GB/s a channel) never meet the bound.
    On one host no H100 ring meets it (24 channels at 15 GB/s each), and 8 x B200's NVLink rings run 21.6 GB/s a
    channel, 7 % above it: it is kept to the network.

    Simple: each slice also costs the CTA the model's per-message network cost (``net_chunk_us``, fitted on the
    in-sample InfiniBand all_reduce logs), once per slice in its serial loop: a slice is one network message (the
    proxy posts one isend a slice, src/transport/net.cc lines 1182 and 1439, ``sub->transmitted += sliceSteps``),
    and the CTA posts it to, and waits for its slot from, step counters in host memory (the connection's
    ``sendMem`` / ``recvMem``, net.cc lines 771-772, mapped from host memory; prims_simple.h lines 116-130, 180-187:
    a volatile read, then a system-scope fence and a store, per slice).  So a channel moves
    ``slice / (slice / rate + net_chunk_us)``, the slice being :data:`SLICE_STEPS` x the step (``step_bytes``, the
    run's :attr:`.env.NcclEnv.simple_step_bytes`, 512 KiB by default): broadcast and reduce, 512 KiB slices by
    default, pay it twice as often as all_gather's 1 MiB (the Voltage Park 4 x 8 H100 hosts: broadcast 286 GB/s
    busbw, all_gather 324 at 8 GiB).  The cost is InfiniBand's ``net_chunk`` on every transport: what a plugin adds
    per message (EFA's, TCPXO's) is the proxy's, which NCCL_STEPS = 8 slots in flight overlap with the CTA's
    work (prims_simple.h ``waitPeer``), not the CTA's own.  The bound is generic (one CTA a channel on every NVIDIA
    GPU); the logs that bind it are Hopper's, and Blackwell's rings across hosts take it by the same clock (no ring
    table of Blackwell across hosts checks that yet).

    >>> from topo_probe import cluster
    >>> from synth.model.nccl.machine import NcclMachine
    >>> from synth.model.nccl.params import ModelParams
    >>> m = NcclMachine.from_topology(cluster("dgx-h100", nodes=4))
    >>> [round(ring_net_cta_cap_gbs(m, "ring", p, 16, ModelParams(p2p_cta_gbs=20.0)), 1) for p in ("Simple", "LL")]
    [320.0, 160.0]
    >>> p = ModelParams(p2p_cta_gbs=20.0, net_chunk={"ib": 2.0})     # a 1 MiB slice: 52.4288 + 2 µs a channel
    >>> [round(ring_net_cta_cap_gbs(m, "ring", "Simple", 16, p, c), 1) for c in ("allgather", "broadcast")]
    [308.2, 297.3]
    >>> ring_net_cta_cap_gbs(m, "tree", "Simple", 16, ModelParams())
    inf
    """
    if algo != "ring" or m.nodes == 1 or m.amd:
        return math.inf
    payload = {"LL": LL_DATA_FRACTION, "LL128": LL128_DATA_FRACTION}.get(proto, 1.0)
    rate = p2p_cta_gbs(m.arch, params, m.gpu_name)                              # GB/s = 1000 bytes per µs
    if proto == "Simple":
        slice_bytes = SLICE_STEPS.get(coll, 2) * step_bytes
        rate = slice_bytes / (slice_bytes / (1000.0 * rate) + params.net_chunk_us("ib", m.arch)) / 1000.0
    return max(1, channels) * rate * payload


#: NCCL_MAX_DEV_WORK_P2P_PER_BATCH: p2p works one batch of a channel holds (src/include/device.h, v2.22.3-1 ..
#: v2.30.7-1; v2.28.7-1 line 364)
P2P_PER_BATCH = 8
#: first NCCL (major, minor) whose p2p base is the round's bit-reversed index (src/include/channel.h v2.28.3-1 lines
#: 19-30), from which the model charges a one-host alltoall's work batches.  Which rounds share a batch follows
#: the release: from 2.28.7 a batch keeps to one epoch of 8 rounds (src/enqueue.cc v2.28.7-1 lines 131-138, v2.28.9-1
#: too; v2.28.3-1 ``addWorkBatchToPlan`` lacks the rule, so 2.28.3 runs 64 ranks' works in 1 batch a channel):
#: :data:`~.versions_patch.P2P_EPOCH_RELEASE`, a bare (2, 28) ASSUMED 2.28.7
#: (:data:`~.versions_patch.P2P_EPOCH_BARE_PATCH`).  The only validated table with more than 8 ranks on one host
#: (gb300_64gpu_16node_alltoall_oci_nvl72, one NVLink domain) records 2.28.7; the 2.28.3 logs
#: (h100_*_alltoall_sendrecv_*_cnode4) are 2-host, where the batches are not charged.
P2P_BATCHES_SINCE = (2, 28)


def p2p_channel_batches(ranks: int, parts: int, p2p_channels: int, version: tuple) -> int:
    """Work batches the busiest p2p channel runs one after another in a one-host alltoall of ``ranks`` ranks, each
    peer's send and receive on ``parts`` channels of the ``p2p_channels`` (``p2pnChannels``, a power of two).

    NCCL schedules one round per peer (src/enqueue.cc ``scheduleP2pTasksToPlan``, round 0 the rank itself) and puts
    part ``p`` of round ``r`` on channel ``(base + p) & (p2pnChannels - 1)`` (src/include/device.h
    ``ncclP2pChannelForPart``), ``base`` the round, from 2.28 bit-reversed over ``log2(p2pnChannels)`` bits
    (src/include/channel.h ``ncclP2pChannelBaseForRound``, one-node branch), so rounds ``r`` and ``r + p2pnChannels``
    share their channels.  A channel appends a work to its open batch unless that batch holds 8 works, the same round,
    or (from 2.28.7) a round of another epoch of 8 rounds (``addWorkBatchToPlan``, v2.28.7-1 lines 110-138); the
    CTA runs its batches in turn (src/device/common.h ``ncclKernelMain`` lines 385-399: run, sync, load the next).
    64 ranks on 32 channels, one part each: rounds r and r + 32 lie 4 epochs apart, so every channel runs 2 batches
    (2.27: 1, both works in one batch).

    >>> p2p_channel_batches(64, 1, 32, (2, 28)), p2p_channel_batches(64, 1, 32, (2, 27))
    (2, 1)
    >>> p2p_channel_batches(64, 2, 32, (2, 28)), p2p_channel_batches(8, 4, 32, (2, 28))
    (4, 1)
    >>> p2p_channel_batches(64, 1, 32, (2, 28, 3)), p2p_channel_batches(64, 1, 32, (2, 28, 7))
    (1, 2)
    """
    bits = max(0, p2p_channels.bit_length() - 1)
    reverse = tuple(version) >= P2P_BATCHES_SINCE
    epochs = since(version, P2P_EPOCH_RELEASE, P2P_EPOCH_BARE_PATCH)
    open_batch: dict[int, list[int]] = {}
    batches: dict[int, int] = {}
    for rnd in range(ranks):
        base = int(format(rnd % (1 << bits), f"0{bits}b")[::-1], 2) if reverse and bits else rnd
        for part in range(min(parts, p2p_channels)):
            ch = (base + part) & (p2p_channels - 1)
            cur = open_batch.get(ch)
            if cur is None or len(cur) == P2P_PER_BATCH or rnd in cur or \
                    (epochs and cur[0] // P2P_PER_BATCH != rnd // P2P_PER_BATCH):
                open_batch[ch], batches[ch] = [rnd], batches.get(ch, 0) + 1
            else:
                cur.append(rnd)
    return max(batches.values(), default=1)


def p2p_extra_batches(m, coll: str, parts: int, p2p_channels: int, version: tuple) -> int:
    """Work batches beyond the first that the busiest p2p channel runs (:func:`p2p_channel_batches` less one) in an
    NVIDIA one-host alltoall / gather / scatter from 2.28 (:data:`P2P_BATCHES_SINCE`); 0 otherwise: ``sendrecv`` (one
    peer), several hosts (channel.h's other branch, not modelled) and RCCL (``m.amd``) pay the fixed µs once.

    The caller charges each extra batch ``p2p_latency_us`` again: an ASSUMPTION, neither measured nor sourced.  That
    constant is hand-set (10 µs, not fitted), unsourced, and stands for a whole call's fixed cost, launch included,
    while in NCCL another batch is no new launch: it is one more pass of ``ncclKernelMain``'s loop
    (src/device/common.h v2.28.7-1 lines 385-399: ``__syncthreads``, then ``loadWorkBatchToShmem`` of the next batch,
    ``__syncthreads``), and the works of one batch run at once, each on its share of the CTA's warps
    (src/device/sendrecv.h v2.28.7-1 lines 103-120, ``nWarpPerWork = nWarps/nWorks``).  What that pass costs has not
    been measured; the one table it moves (GB300, 64 ranks) is still some 10 µs slower than the model at
    512 KiB - 2 MiB (docs/nccl-model.md).
    """
    if coll == "sendrecv" or m.nodes != 1 or m.amd or tuple(version) < P2P_BATCHES_SINCE:
        return 0
    return p2p_channel_batches(m.ranks, parts, p2p_channels, version) - 1


def group_ctas(g: CommGraphs, part_ch: int, groups: int, rccl: bool = False) -> int:
    """CTAs that carry ``groups`` groups of parts on ``part_ch`` channels each, at most the p2p channels: a part's
    channel is ``(base + part) & (nP2pChannels-1)`` (v2.28.7-1 src/include/device.h lines 270-272), so on one host
    (``groups`` = the peers, each its own base) 63 peers of 64 ranks share NCCL's 32.  Across hosts ``groups`` is
    hosts: NCCL schedules a host's peers as one group of rounds (src/init.cc p2pSchedule: node delta, then local
    delta), all 8 rounds of a group on the same channels (src/include/channel.h ``ncclP2pChannelBaseForRound``: one
    base per ``NCCL_MAX_DEV_WORK_P2P_PER_BATCH`` rounds when ``nNodes > 1``, v2.22.3-1 .. v2.30.7-1; before,
    ``ncclChannelComputeBase``: node delta + local step / 8, v2.21.5-1) and in one work batch a channel, whose warps
    they split (src/device/sendrecv.h ``nWarpPerWork``).  ``rccl``: RCCL's p2p channels (:func:`.p2p_total_channels`,
    callers pass ``m.amd and m.intra == "xgmi"`` as ``p2p._per_peer_bounds`` does); on 2 nodes or fewer RCCL puts part
    p of round r on ``(base x nChannelsMax + p) & (nP2pChannels-1)``, base r on one host (Ahalperin/amd-dev 0d4f8c1
    rccl/src/include/device.h lines 282-291, channel.h lines 19-29): each peer its own channels while they last.

    >>> from synth.model.nccl.graphs import comm_graphs
    >>> from synth.model.nccl.machine import NcclMachine
    >>> from topo_probe import cluster
    >>> g = comm_graphs(NcclMachine.from_topology(cluster("dgx-h100", nodes=2)))
    >>> [group_ctas(g, 2, k) for k in (1, 3, 15)], g.n_channels
    ([2, 6, 16], 16)
    """
    return max(1, min(p2p_total_channels(g.n_channels, rccl), groups * part_ch))


__all__ = ["P2P_CTA_WARPS", "P2P_PER_BATCH", "SLICE_STEPS", "group_ctas", "p2p_cta_gbs", "p2p_channel_batches",
           "p2p_extra_batches", "p2p_host_warps", "p2p_warps", "ring_net_cta_cap_gbs", "P2P_HOST_SPLIT_SINCE"]
