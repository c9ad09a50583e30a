"""The p2p chunk of a one-host communicator: NVLink's 512 KiB only where every GPU pair is NVLink.

NCCL sizes a point-to-point step (``p2pChunkSize``) once per communicator: ``NCCL_P2P_NET_CHUNKSIZE`` (128 KiB)
across hosts, ``NCCL_P2P_NVL_CHUNKSIZE`` (512 KiB) when every GPU pair's path is NVLink, else
``NCCL_P2P_PCI_CHUNKSIZE`` (128 KiB) (NVIDIA/nccl v2.28.9-1 src/init.cc lines 704-718, ``computeBuffSizes``;
``isAllNvlink`` is src/graph/paths.cc lines 939-943, ``ncclTopoPathAllNVLink``: no GPU pair at ``PATH_PIX`` or
beyond; the same three-way rule since v2.16.5-1 src/init.cc lines 491-493).  A one-host send then splits into parts
of at most 32 chunks (src/enqueue.cc line 895, ``maxPartSize = stepSize*32``), so on a PCIe or host-memory (SHM)
host a part doubles its channels past 4 MiB, not 16 MiB.  Units: bytes.

Not read: RCCL (AMD machines keep NVLink's rule, as before), and ``NCCL_P2P_DISABLE`` on an NVLink host (its paths
go through the CPU, so NCCL takes the PCIe chunk; the model's p2p channels do not see that variable).

>>> from synth.model.nccl.machine import NcclMachine
>>> m = NcclMachine("2080ti", "sm70", 2, 1, "pcie", 0, pcie_gen=3, p2p=False)
>>> local_chunk_bytes(m, (2, 28)), local_chunk_bytes(m, (2, 14))
(131072, 524288)
"""

from __future__ import annotations

from synth.model.nccl.machine import NcclMachine

#: NCCL_P2P_NVL_CHUNKSIZE's default (bytes, src/init.cc)
P2P_NVL_CHUNK_BYTES = 1 << 19
#: NCCL_P2P_PCI_CHUNKSIZE's default (bytes, v2.28.9-1 src/init.cc line 705) and the first NCCL that has it (v2.16.5-1)
P2P_PCI_CHUNK_BYTES, P2P_PCI_CHUNK_SINCE = 1 << 17, (2, 16)


def all_nvlink(m: NcclMachine) -> bool:
    """Whether every GPU pair of ``m``'s host is joined by NVLink with P2P on (NCCL's ``isAllNvlink``): an NVSwitch
    host, or a mesh whose link matrix links every pair."""
    if not m.p2p or m.intra not in ("nvswitch", "nvlink"):
        return False
    rows = m.link_matrix or ()
    return all(k > 0 for i, row in enumerate(rows) for j, k in enumerate(row) if i != j)


def local_chunk_bytes(m: NcclMachine, version: tuple) -> int:
    """``p2pChunkSize`` (bytes) of a one-host communicator on ``m`` under NCCL ``version`` (module docstring)."""
    if m.amd or tuple(version) < P2P_PCI_CHUNK_SINCE or all_nvlink(m):
        return P2P_NVL_CHUNK_BYTES
    return P2P_PCI_CHUNK_BYTES


__all__ = ["P2P_NVL_CHUNK_BYTES", "P2P_PCI_CHUNK_BYTES", "P2P_PCI_CHUNK_SINCE", "all_nvlink", "local_chunk_bytes"]
