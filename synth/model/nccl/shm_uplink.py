"""GPUs behind one PCIe switch share its uplink to the CPU when NCCL moves their data through host memory.

With P2P off NCCL's SHM transport puts every connection's buffers in host memory: by default the
receiver's (``NCCL_SHM_LOCALITY`` = 2, ``SHM_RECV_SIDE``) and with no copy engine
(``NCCL_SHM_USE_CUDA_MEMCPY`` = 0: the log line ``via SHM/direct/direct``), so the sending GPU's kernel
writes each step into host memory and the receiving GPU's kernel reads it from there (NVIDIA/nccl
v2.28.9-1 src/transport/shm.cc lines 65-70, the parameters, and 171-173, 205-207: ``conn.buffs`` of both
ends point into the host buffer).  A GPU under a PCIe switch reaches host memory only through the
switch's one uplink, so the uplink carries, per direction, the streams of every GPU behind it that
sends (up) and receives (down): in a ring all_reduce, all_gather or reduce_scatter and in point-to-point
exchanges every GPU does both, so ``k`` GPUs behind one switch each get ``1 / k`` of what one GPU gets
over its own x16 link.  A broadcast or reduce chain has ``ranks - 1`` senders and receivers, so on two
GPUs one stream per direction crosses the uplink.  NCCL's own topology search charges the same
sharing: a path's bandwidth is taken off every link it crosses, the uplink included (v2.28.9-1
src/graph/search.cc ``followPath``, lines 79-117), but the model times rings at the GPU link's rate, not the
search's speed (:func:`.runtime.ring_capacity_gbs`).  The uplink is taken as a x16 link of the GPUs' generation, as the
presets model it.  P2P over PCIe (kind ``pcie``) is not touched: between GPUs of one switch it never
climbs to the CPU.  Not charged: GPUs with hardware P2P that ``NCCL_P2P_DISABLE`` sends through host memory (the
count is read from the topology only where it has no P2P).

>>> from synth.model.nccl import NcclMachine
>>> m = NcclMachine("2080ti", "sm70", 2, 1, "pcie", 0, pcie_gen=3, p2p=False, gpus_per_uplink=2)
>>> uplink_share(m, "allreduce", p2p=True), uplink_share(m, "broadcast", p2p=True)
(0.5, 1.0)
>>> uplink_share(m.with_(p2p=True), "allreduce", p2p=True), uplink_share(m.with_(gpus_per_uplink=1), "allgather")
(1.0, 1.0)
"""

from __future__ import annotations

from synth.model.nccl.machine import NcclMachine

#: collectives whose rings carry one chain from a root: a broadcast's sends and a reduce's receives
ROOTED = ("broadcast", "reduce")


def uplink_streams(m: NcclMachine, coll: str) -> int:
    """Streams per direction one switch uplink carries, per GPU's stream (1 where each GPU has its own link).

    >>> from synth.model.nccl import NcclMachine
    >>> m = NcclMachine("l40s", "sm89", 8, 1, "pcie", 0, p2p=False, gpus_per_uplink=4)
    >>> uplink_streams(m, "allreduce"), uplink_streams(m, "broadcast"), uplink_streams(m.with_(ranks=2), "broadcast")
    (4, 4, 1)
    """
    k = m.shared_uplink_gpus
    return min(k, m.ranks - 1) if coll in ROOTED else k


def uplink_share(m: NcclMachine, coll: str, p2p: bool = True) -> float:
    """The share of a GPU's own x16 link rate a host-memory (SHM) stream keeps behind a shared switch uplink
    (1.0 unless NCCL runs SHM between the host's GPUs: P2P off, ``p2p`` False, or a machine without P2P)."""
    if p2p and m.p2p:
        return 1.0
    return 1.0 / max(1, uplink_streams(m, coll))


def shm_stream_gbs(m: NcclMachine, coll: str, ring_cap_gbs: float, p2p: bool = True) -> float:
    """GB/s per direction one GPU's stream of ``coll`` keeps inside the host: ``ring_cap_gbs`` (the GPU link's rate,
    :func:`.runtime.ring_capacity_gbs`) times :func:`uplink_share`, except for a two-rank rooted chain through host
    memory on a host whose one-way pinned host copy rate is stated (``host_copy_gbs``), which moves at that rate.

    A broadcast's root only sends (``directSend`` / ``directCopySend``) and the rank before the root only receives
    (``directRecv``); a reduce's first rank only sends and its root only receives (``recvReduceCopy``) (NVIDIA/nccl
    v2.28.9-1 src/device/broadcast.h lines 42-52, src/device/reduce.h lines 32-44), and through SHM the sender's kernel
    writes and the receiver's kernel reads pinned host memory (src/misc/shmutils.cc line 119 ``cudaHostRegister`` of the
    /dev/shm segment; shm.cc lines 171-173, 205-207).  On two ranks no rank does both, so each GPU's link carries one
    direction, the case bandwidthTest measures; with more ranks the middle ones read and write at once (the ring's
    rate).  The rule was written after seeing the one table it moves (the AutoDL 2 x RTX 2080 Ti broadcast and
    reduce), whose source post states the figure (bandwidthTest -g 2: 12.2 GB/s host-to-device, 13.2 device-to-host).

    >>> m = NcclMachine("2080ti", "sm70", 2, 1, "pcie", 0, pcie_gen=3, p2p=False, gpus_per_uplink=2, host_copy_gbs=12.2)
    >>> shm_stream_gbs(m, "broadcast", 7.875), shm_stream_gbs(m, "allreduce", 7.875)
    (12.2, 3.9375)
    >>> shm_stream_gbs(m.with_(ranks=4), "reduce", 7.875), shm_stream_gbs(m.with_(host_copy_gbs=0.0), "reduce", 7.875)
    (3.9375, 7.875)
    """
    one_way = coll in ROOTED and m.ranks == 2 and m.nodes == 1 and m.host_copy_gbs > 0 and not (p2p and m.p2p)
    return m.host_copy_gbs if one_way else ring_cap_gbs * uplink_share(m, coll, p2p)


__all__ = ["shm_stream_gbs", "uplink_streams", "uplink_share", "ROOTED"]
