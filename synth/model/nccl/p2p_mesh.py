"""Point-to-point sends on an NVLink mesh without NVSwitch (DGX-1, 4-GPU boards): each pair's path and each link's load.

NCCL reaches a GPU pair without a direct NVLink through one intermediate GPU when both legs are NVLink: the path
search allows "routing through a GPU only as 1 hop" and marks it ``PATH_NVB`` (NVIDIA/nccl v2.28.9-1
src/graph/paths.cc lines 69-71 and 98-99; unless ``NCCL_NVB_DISABLE=1``, default 0, line 34).  The path's
first hop names the intermediate (``ncclTopoCheckP2p``, lines 307-316: ``path->count == 2``).  The bytes go
through the *receiver's* buffer: ``p2pRecvSetup`` (src/transport/p2p.cc line 437, ``p2pGetInfo(comm, myInfo,
peerInfo, ...)`` with ``myInfo`` the receiver) takes the intermediate of the path receiver -> sender and allocates
the ``ncclRecvMem`` with its FIFOs there (line 468: ``info->rank = intermediateRank``, line 476
``ncclProxyConnect(..., 0, info->rank, ...)``), and ``p2pSendConnect`` maps that buffer and points the sender's
``conn.buffs`` into it (lines 490 ``p2pMap(..., comm->peerInfo+info->rank, ...)``, 493 ``buff =
(char*)(remDevMem+1)``, 500 ``send->conn.buffs[p] = buff``).  The sender's own setup (``p2pSendSetup`` lines
402-416, the intermediate of sender -> receiver) only places the small ``ncclSendMem`` (head, ptrExchange; line
377 ``sendSize = sizeof(struct ncclSendMem)``, plus the SIMPLE buffer in read mode only, line 379).  No GPU
copies anything on the way: the sender's warps write each chunk into the FIFO in the intermediate GPU's memory
over their link to it, the receiver's warps read it from there over theirs.  So a send of B bytes loads B on the
link sender -> intermediate and B on intermediate -> receiver, beside whatever those links carry for their own
pairs.  Read mode is ``PATH_NVL`` only (paths.cc line 368), so an NVB send always writes.

Which intermediate: ``ncclTopoSetPaths(base)`` searches breadth-first outward from ``base`` and sets every
node's path *to* it (paths.cc lines 36-60), and the path receiver -> sender has the sender as ``base``: the
search visits the sender's neighbours in the order of its links, which NCCL keeps sorted by bandwidth, most first
(src/graph/topo.cc lines 164-185, NVLinks to one peer aggregated); a later neighbour k replaces an earlier one
only with a strictly wider path (paths.cc line 73), the path's width being the narrower leg's (line 67).  So k
is the first of the sender i's neighbours, by i's link count to it, of the widest ``min(links i-k, links k-j)``;
among equal link counts NCCL goes by NVML's link order, which a link matrix does not record: taken here by lower
GPU index, an assumption (a tie decides, e.g., which link a DGX-1 ``sendrecv`` loads twice).  Only the
communicator's GPUs exist in NCCL's topology (src/graph/topo.cc ``ncclTopoAddNvLinks``: a link to a GPU not in
the system is dropped), so the mesh is the first ``gpus_per_node`` GPUs' block of the link matrix.

Versions: NVB paths and the intermediate rank came with NVIDIA/nccl v2.8.3-1 (v2.8.3-1 src/graph/paths.cc lines
64 and 93; src/transport/p2p.cc lines 175 and 218, ``bootstrapRemAlloc(..., intermediateRank, ...)``);
``NCCL_NVB_DISABLE`` with v2.9.9-1, default 0 to v2.30.7-1.  Before 2.8 an unlinked pair is not P2P over
NVLink: the model sends it out of the sender's PCIe x16 link and into the receiver's.  Not read: ``NCCL_NVB_DISABLE=1``.
Units: bytes, µs, GB/s.
"""

from __future__ import annotations

from synth.model.nccl.machine import NcclMachine

#: the first NCCL with PATH_NVB and the P2P transport's intermediate rank (v2.8.3-1)
NVB_SINCE = (2, 8)


def mesh_links(m: NcclMachine) -> tuple | None:
    """NVLink counts between the communicator's GPUs of one host: the link matrix's first ``gpus_per_node`` rows
    and columns (None off a point-to-point NVLink mesh or without P2P)."""
    if m.intra != "nvlink" or not m.link_matrix or not m.p2p:
        return None
    n = min(m.gpus_per_node, len(m.link_matrix))
    return tuple(tuple(row[:n]) for row in m.link_matrix[:n])


def nvb_intermediate(links: tuple, i: int, j: int) -> int | None:
    """The GPU whose memory holds the FIFO of a send ``i -> j`` without a direct NVLink (module docstring): the
    receiver's buffer, on the intermediate of NCCL's path ``j -> i``, searched outward from the sender ``i``: among
    the GPUs linked to both, the widest ``min(links[i][k], links[k][j])``, the first in ``i``'s link order (most
    links first; equal counts by lower GPU index, standing in for NVML's link order).  None where no GPU is linked
    to both (no NVB path).

    >>> dgx1 = ((0, 2, 1, 1, 2, 0, 0, 0), (2, 0, 1, 2, 0, 1, 0, 0), (1, 1, 0, 2, 0, 0, 2, 0),
    ...         (1, 2, 2, 0, 0, 0, 0, 1), (2, 0, 0, 0, 0, 2, 1, 1), (0, 1, 0, 0, 2, 0, 1, 2),
    ...         (0, 0, 2, 0, 1, 1, 0, 2), (0, 0, 0, 1, 1, 2, 2, 0))
    >>> [nvb_intermediate(dgx1, 0, j) for j in (5, 6, 7)]
    [4, 4, 4]
    """
    order = sorted((k for k in range(len(links)) if k not in (i, j) and links[i][k] > 0),
                   key=lambda k: (-links[i][k], k))
    best, width = None, 0
    for k in order:
        w = min(links[i][k], links[k][j])
        if w > width:
            best, width = k, w
    return best


def mesh_flows(coll: str, n: int, root: int = 0) -> list[tuple[int, int]]:
    """Ordered GPU pairs ``(src, dst)`` a one-host p2p collective sends between: nccl-tests ``sendrecv`` rank r to
    r + 1, ``alltoall`` every pair, ``scatter`` the root to every other rank, ``gather`` every other rank to it."""
    if coll == "sendrecv":
        return [(r, (r + 1) % n) for r in range(n)]
    if coll == "scatter":
        return [(root, j) for j in range(n) if j != root]
    if coll == "gather":
        return [(j, root) for j in range(n) if j != root]
    return [(i, j) for i in range(n) for j in range(n) if i != j]


def mesh_p2p_us(m: NcclMachine, coll: str, per_peer: float, nvl_gbs: float, pcie_gbs: float,
                version: tuple, read_share: float = 1.0) -> float | None:
    """Device µs of a one-host p2p collective's sends on a point-to-point NVLink mesh (None elsewhere): every
    pair of :func:`mesh_flows` sends ``per_peer`` bytes at once over its path, a direct NVLink, the two legs
    through :func:`nvb_intermediate` (from v2.8), else out of the sender's PCIe x16 link and into the receiver's; the
    busiest link, in one direction, sets the time.
    ``nvl_gbs``: one NVLink's achieved GB/s per direction; a direct pair in read mode moves ``read_share`` of it
    (an NVB send writes); ``pcie_gbs``: the x16 link's.  Where a tie in link counts picks the intermediate the
    figure rests on the lower-index stand-in for NVML's order: a DGX-1 ``sendrecv`` (7 -> 0 through 3, so link
    3 -> 0 carries 3 -> 4's bytes too: 2 parts; through 4, 1 part), not its ``alltoall``/``scatter``/``gather``.

    >>> from synth.model.nccl.machine import NcclMachine
    >>> m = NcclMachine("x", "sm70", 3, 1, "nvlink", 2, link_matrix=((0, 1, 0), (1, 0, 1), (0, 1, 0)))
    >>> mesh_p2p_us(m, "alltoall", 1e6, 20.0, 5.0, (2, 8)), mesh_p2p_us(m, "alltoall", 1e6, 20.0, 5.0, (2, 7))
    (100.0, 200.0)
    """
    links = mesh_links(m)
    if links is None:
        return None
    nvb = tuple(version) >= NVB_SINCE
    load: dict = {}                 # (a, b): bytes on NVLink a -> b, weighted by the share moved; (a,), (-b-1,): PCIe
    for i, j in mesh_flows(coll, len(links)):
        k = None if links[i][j] or not nvb else nvb_intermediate(links, i, j)
        legs = [((i, j), per_peer / read_share)] if links[i][j] else \
            [((i, k), per_peer), ((k, j), per_peer)] if k is not None else [((i,), per_peer), ((-j - 1,), per_peer)]
        for key, nbytes in legs:
            load[key] = load.get(key, 0.0) + nbytes
    worst = 0.0
    for key, nbytes in load.items():
        gbs = pcie_gbs if len(key) == 1 else links[key[0]][key[1]] * nvl_gbs
        worst = max(worst, nbytes / (gbs * 1000.0))
    return worst


__all__ = ["NVB_SINCE", "mesh_flows", "mesh_links", "mesh_p2p_us", "nvb_intermediate"]
