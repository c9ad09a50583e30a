"""The p2p chunk of a one-host communicator: NVLink's 512 KiB or PCIe's 128 KiB, by NCCL version.

NCCL sizes a point-to-point step (``p2pChunkSize``) once per communicator: ``NCCL_P2P_NET_CHUNKSIZE`` (128 KiB)
across hosts, ``NCCL_P2P_NVL_CHUNKSIZE`` (512 KiB) where ``ncclTopoPathAllNVLink`` says so, else
``NCCL_P2P_PCI_CHUNKSIZE`` (128 KiB) (NVIDIA/nccl v2.28.9-1 src/init.cc lines 704-718, ``computeBuffSizes``; the
same three-way rule since v2.16.2-1, the first tag with ``P2P_PCI_CHUNKSIZE``, src/init.cc lines 475 and 491-493).
What "all NVLink" means changed (src/graph/paths.cc ``ncclTopoPathAllNVLink``):

* v2.16.2-1 .. v2.24.3-1, the *nearest* GPU pair (v2.24.3-1 lines 831-841)::

      minPath = std::min(minPath, paths[j].type);
      return minPath >= PATH_PIX ? 0 : 1;

  so one NVLink pair anywhere on the host gives every send 512 KiB;
* since v2.25.1-1, the *farthest* pair (v2.25.1-1 lines 859-864; v2.28.9-1 lines 925-943, ``ncclTopoGetGpuMaxPath``)::

      NCCLCHECK(ncclTopoGetGpuMaxPath(system, GPU, &maxPath));
      *allNvLink = maxPath >= PATH_PIX ? 0 : 1;

  so every pair must be NVLink.

A pair counts as NVLink where its path is below ``PATH_PIX``: ``PATH_NVL`` (directly linked, or through NVSwitches)
or ``PATH_NVB``, a route through one intermediate GPU over NVLink on both legs (v2.28.9-1 src/graph/paths.cc lines
69-71, "allow routing through a GPU only as 1 hop", and 98-99, "Set 1 hop NVLink as NVB"; the same rule as
``topo_probe``'s ``Topology.path_class``).  So a DGX-1's hybrid cube mesh, whose 12 unlinked pairs each share a
linked neighbour, is all NVLink and keeps 512 KiB at every version.  Before v2.16.2-1 a one-host step is
``buffSizes[NCCL_PROTO_SIMPLE]/NCCL_STEPS`` = 4 MiB / 8 = 512 KiB (v2.15.5-1 src/enqueue.cc lines 612-613).  A
one-host send splits into parts of at most 32 chunks (src/enqueue.cc line 895, ``maxPartSize = stepSize*32``), so
on a 128 KiB host a part doubles its channels past 4 MiB, not 16 MiB.  Units: bytes.

Not read: RCCL (AMD machines keep 512 KiB, as before), ``NCCL_NVB_DISABLE``, the ARM Simple buffer before v2.16 (1
MiB: a 128 KiB step), and ``NCCL_P2P_DISABLE`` on an NVLink host (its paths go through the CPU; the model's p2p
channels do not see that variable).

>>> from synth.model.nccl.machine import NcclMachine
>>> m = NcclMachine("2080ti", "sm70", 2, 1, "pcie", 0, pcie_gen=3, p2p=False)
>>> local_chunk_bytes(m, (2, 28)), local_chunk_bytes(m, (2, 14))
(131072, 524288)
"""

from __future__ import annotations

from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.p2p_mesh import mesh_links, nvb_intermediate

#: NCCL_P2P_NVL_CHUNKSIZE's default (bytes, src/init.cc)
P2P_NVL_CHUNK_BYTES = 1 << 19
#: NCCL_P2P_PCI_CHUNKSIZE's default (bytes, v2.28.9-1 src/init.cc line 705) and the first NCCL that has it (v2.16.2-1)
P2P_PCI_CHUNK_BYTES, P2P_PCI_CHUNK_SINCE = 1 << 17, (2, 16)
#: the first NCCL whose ``ncclTopoPathAllNVLink`` asks every GPU pair (the farthest path), not the nearest (v2.25.1-1)
P2P_ALL_PAIRS_SINCE = (2, 25)


def nvlink_pairs(m: NcclMachine) -> list[bool]:
    """For each ordered pair of distinct GPUs of the communicator on ``m``'s host, whether NCCL's path between them
    is below ``PATH_PIX`` (module docstring): P2P on and an NVSwitch host, or a mesh pair linked directly
    (``PATH_NVL``) or through one GPU linked to both (``PATH_NVB``, :func:`.p2p_mesh.nvb_intermediate`), on the
    communicator's block of the link matrix (:func:`.p2p_mesh.mesh_links`).  Without P2P NCCL routes GPU pairs
    through the CPU: none is."""
    if not m.p2p or m.intra not in ("nvswitch", "nvlink"):
        return []
    links = mesh_links(m)
    if links is None:                                                   # NVSwitch (or an unstated mesh): all NVL
        return [True]
    n = len(links)
    return [links[i][j] > 0 or nvb_intermediate(links, i, j) is not None for i in range(n) for j in range(n) if i != j]


def all_nvlink(m: NcclMachine, version: tuple = P2P_ALL_PAIRS_SINCE) -> bool:
    """NCCL's ``isAllNvlink`` on ``m`` under ``version``: every GPU pair NVLink (NVL or NVB) since v2.25.1-1, any
    one pair from v2.16.2-1 to v2.24.3-1 (the module docstring)."""
    pairs = nvlink_pairs(m)
    if tuple(version) < P2P_ALL_PAIRS_SINCE:
        return any(pairs)
    return bool(pairs) and all(pairs)


def local_chunk_bytes(m: NcclMachine, version: tuple) -> int:
    """``p2pChunkSize`` (bytes) of a one-host communicator on ``m`` under NCCL ``version`` (module docstring)."""
    if m.amd or tuple(version) < P2P_PCI_CHUNK_SINCE or all_nvlink(m, version):
        return P2P_NVL_CHUNK_BYTES
    return P2P_PCI_CHUNK_BYTES


__all__ = ["P2P_ALL_PAIRS_SINCE", "P2P_NVL_CHUNK_BYTES", "P2P_PCI_CHUNK_BYTES", "P2P_PCI_CHUNK_SINCE", "all_nvlink",
           "local_chunk_bytes", "nvlink_pairs"]
