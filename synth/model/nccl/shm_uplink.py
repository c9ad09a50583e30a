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

from synth.model.nccl.pcie_path import pcie_rate_gbs
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.params import ModelParams

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


def shm_stream_gbs(m: NcclMachine, coll: str, ring_cap_gbs: float, params: ModelParams, p2p: bool = True) -> float:
    """GB/s per direction one GPU's stream of ``coll`` keeps inside the host: ``ring_cap_gbs`` (the GPU link's rate,
    :func:`.runtime.ring_capacity_gbs`) times :func:`uplink_share`, except for a two-rank rooted chain through host
    memory on one host and one socket, which streams one way per link: the GPU's PCIe x16 rate (``PCIE_X16_GBS``,
    15.75 GB/s on Gen3) times ``link_eff[*/pcie]`` (0.8, hand-set: the default of :class:`.params.ModelParams`, not
    in the fitter's ``FIT_SPEC``, carried unchanged into ``fitted_params.json``), in place of the ring's SHM figure
    ``link_eff[*/shm]`` (0.5, hand-set, a ring's: every ring rank reads and writes host memory at once).

    A broadcast's root only sends (``directSend`` / ``directCopySend``) and the rank before the root only receives
    (``directRecv``); a reduce's first rank only sends and its root only receives (``recvReduceCopy``) (NVIDIA/nccl
    v2.28.9-1 src/device/broadcast.h lines 42-52, src/device/reduce.h lines 32-44).  Through SHM the sender's kernel
    writes and the receiver's kernel reads pinned host memory (shm.cc lines 171-173, 205-207): one process's ranks
    (host and pid hashes equal) take the legacy path, a /dev/shm segment pinned with ``cudaHostRegister`` (shm.cc
    lines 147-150; src/misc/shmutils.cc line 119), separate processes ``ncclCuMemHostAlloc`` (shm.cc lines 528-545).
    PCIe is full duplex, so the source alone does not halve a ring rank's rate; the restriction to two ranks (with
    more the middle ranks read and write at once: the ring's figure) comes from the logs: the AutoDL 2 x RTX 2080 Ti
    ring streams 3.2-4.0 GB/s where its broadcast streams 11.1 one way, and there the limiting link is the PCIe
    switch's shared uplink, one stream each way.  Across sockets the sender's writes cross the CPU link, which
    nothing here measures, so a machine of more than one socket (the default 2) keeps the ring's figure.  The rule was
    written after seeing the AutoDL broadcast and reduce tables.

    >>> from synth.model.nccl import DEFAULT_PARAMS as P
    >>> m = NcclMachine("2080ti", "sm70", 2, 1, "pcie", 0, pcie_gen=3, p2p=False, gpus_per_uplink=2, sockets=1)
    >>> round(shm_stream_gbs(m, "broadcast", 7.875, P), 2), shm_stream_gbs(m, "allreduce", 7.875, P)
    (12.6, 3.9375)
    >>> shm_stream_gbs(m.with_(ranks=4), "reduce", 7.875, P), shm_stream_gbs(m.with_(sockets=2), "reduce", 7.875, P)
    (3.9375, 7.875)
    """
    one_way = coll in ROOTED and m.ranks == 2 and m.nodes == 1 and m.sockets == 1 and not (p2p and m.p2p)
    if one_way:
        return pcie_rate_gbs(m, params)                                       # x16 rate, path-capped: .pcie_path
    return ring_cap_gbs * uplink_share(m, coll, p2p)


__all__ = ["shm_stream_gbs", "uplink_streams", "uplink_share", "ROOTED"]
