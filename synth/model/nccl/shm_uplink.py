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
climbs to the CPU.  Where no GPU both writes and reads host memory (a broadcast or reduce of two ranks) the
link's read-completion rate replaces the fitted host-memory efficiency (:func:`shm_ring_gbs`).

>>> from synth.model.nccl import NcclMachine
>>> m = NcclMachine("2080ti", "sm70", 2, 1, "pcie", 0, pcie_gen=3, p2p=False, gpus_per_uplink=2)
>>> uplink_share(m, "allreduce", p2p=True), uplink_share(m, "broadcast", p2p=True)
(0.5, 1.0)
>>> uplink_share(m.with_(p2p=True), "allreduce", p2p=True), uplink_share(m.with_(gpus_per_uplink=1), "allgather")
(1.0, 1.0)
"""

from __future__ import annotations

from synth.model.nccl.constants import PCIE_X16_GBS
from synth.model.nccl.machine import NcclMachine

#: collectives whose rings carry one chain from a root: a broadcast's sends and a reduce's receives
ROOTED = ("broadcast", "reduce")
#: a root complex returns a GPU's reads of host memory in completions split at its read completion boundary, 64 or
#: 128 bytes (the lower taken), each with 20 bytes of framing, sequence, 3-dword header and LCRC (Intel, "Throughput
#: for Reads", https://www.intel.com/content/www/us/en/docs/programmable/683504/current/throughput-for-reads.html)
RCB_BYTES, CPL_OVERHEAD_BYTES = 64, 20


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


def one_way(m: NcclMachine, coll: str, p2p: bool = True) -> bool:
    """Whether no GPU both writes and reads host memory: a broadcast or reduce of two ranks on one host through SHM
    (the root only writes, the other GPU only reads; on more ranks the chain's inner GPUs do both)."""
    return not (p2p and m.p2p) and coll in ROOTED and m.ranks == 2 and m.nodes == 1


def shm_ring_gbs(m: NcclMachine, coll: str, p2p: bool, ring_gbs: float) -> float:
    """A ring's bus rate through host memory (GB/s) from ``ring_gbs``, the one-GPU link rate
    (:func:`.runtime.ring_capacity_gbs`): shared by the uplink's streams (:func:`uplink_share`); where no GPU both
    writes and reads (:func:`one_way`), the link's read-completion rate instead (x16 data sheet x 64 / 84: the
    receiver's reads come back in 64-byte completions, the root's writes in larger TLPs are not the bound), not the
    fitted host-memory efficiency of GPUs that do both.

    >>> m = NcclMachine("2080ti", "sm70", 2, 1, "pcie", 0, pcie_gen=3, p2p=False, gpus_per_uplink=2)
    >>> shm_ring_gbs(m, "allreduce", True, 7.875), round(shm_ring_gbs(m, "broadcast", True, 7.875), 3)
    (3.9375, 12.0)
    """
    if one_way(m, coll, p2p):
        return PCIE_X16_GBS[m.pcie_gen] * RCB_BYTES / (RCB_BYTES + CPL_OVERHEAD_BYTES) * uplink_share(m, coll, p2p)
    return ring_gbs * uplink_share(m, coll, p2p)


__all__ = ["uplink_streams", "uplink_share", "one_way", "shm_ring_gbs", "ROOTED", "RCB_BYTES", "CPL_OVERHEAD_BYTES"]
