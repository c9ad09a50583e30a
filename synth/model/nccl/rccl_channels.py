"""RCCL's rings and channels on one host of AMD Instinct GPUs joined by an xGMI mesh, and what a channel moves.

RCCL runs every ring channel as one workgroup.  Its graph search lays rings over the mesh's links and
``ncclTopoPostset`` (ROCm/rccl 0cbce2a7 src/graph/connect.cc:628-660) copies them ``nc`` times, up to
``MAXCHANNELS`` = 128 on one host (src/include/device.h:65; src/init.cc:1471-1502 picks ``nc``: 2 by default,
4 for 4 ranks of gfx94x).  RCCL 2.26.6 (ROCm 7.0.2) printed on one MI355X host (Ahalperin/amd-dev 58a032f7
results/scale_*gpu_all_reduce/nccl_debug.log): 8 GPUs ``Pattern 4, nChannels 28, bw 12`` and ``112 coll
channels``; GPUs 0-3 ``Pattern 4, nChannels 6, bw 24`` and ``24 coll channels`` (its rings are the six directed
Hamiltonian cycles of the 4-GPU mesh, ``Ring 0..5``: each arc carries two of them, 48 / 2 = 24 GB/s), so gfx950
copies the graph four times on one host (RCCL 2.26.6's release notes, github.com/ROCm/rccl/releases/tag/rocm-7.0.0:
"Set a default of 112 channels for a single node with 8 * gfx950").  Units: GB/s per direction, channels.
"""

from __future__ import annotations

import math

from synth.model.nccl.constants import RCCL_GFX942
from synth.model.nccl.machine import NcclMachine

#: RCCL's MAXCHANNELS (ROCm/rccl 0cbce2a7 src/include/device.h:65)
RCCL_MAXCHANNELS = 128
#: communicator channels per ring-graph channel on one host: ``nc`` = 2 (src/init.cc:1471 of 0cbce2a7, the
#: MI300X rome-model rings 28 -> 56), on gfx94x 16 for 2 ranks and 4 for 4 ranks (init.cc:1496-1501, "NCCL_MIN_NCHANNELS
#: =32 / 24"); 4 on gfx950 under RCCL 2.26.6 (its logs: 28 -> 112, 6 -> 24, 2 -> 8)
RCCL_COPIES = {"gfx942": {2: 16, 4: 4}}
RCCL_GFX950_COPIES, RCCL_DEFAULT_COPIES = 4, 2
#: ring-graph channels on 2-4 GPUs of a mesh: every directed Hamiltonian cycle, ``(k - 1)!`` of them, each at the
#: link's 48 GB/s over the cycles an arc carries; ``ncclTopoDupChannels`` (ROCm/rccl 0cbce2a7 src/graph/search.cc
#: 885-897) then doubles a graph whose per-channel speed is at least 25 GB/s: 2 GPUs' one cycle at 48 -> 2 at 24 (RCCL
#: 2.26.6 on 2 x MI355X: ``Pattern 4, nChannels 2, bw 24``, results/scale_2gpu_all_reduce/nccl_debug.log), 3 GPUs' two
#: at 48 -> 4 at 24, 4 GPUs' six at 24 (each arc on two) stay six
SMALL_MESH_RINGS = {2: 2, 3: 4, 4: 6}
#: ring-graph channels on one host of 5-7 GPUs with xGMI links, where no 8-GPU rome model matches: RCCL marks such a
#: host "Rome 4P2H" anyway (ROCm/rccl 0cbce2a7 src/graph/rome_models.cc:1949-1950, RCCL 2.26.6 Ahalperin/amd-dev
#: 0d4f8c1 rccl/src/graph/rome_models.cc:2052-2053: ``if (ngpus > 4 && romeTopo.nLinks) system->type |=
#: RCCL_TOPO_4P2H_ROME``) and ``ncclTopoCompute`` then limits a one-host ring search to 2 channels (0cbce2a7
#: src/graph/search.cc:989-992, 0d4f8c1 rccl/src/graph/search.cc:1073-1076 ``graph->maxChannels = 2``); two
#: arc-disjoint Hamiltonian cycles at 48 GB/s (AMD speedArrayIntra[0], search.cc:965; ccMin 60, topo.cc:408) fill
#: them on the retry without sameChannels (48 + 48 > one 48 GB/s link, so each GPU sends on 2 links)
PARTIAL_MESH_RINGS = 2


def rccl_mesh_rings(gpus_per_node: int) -> int:
    """Ring-graph channels RCCL's search finds on one host of ``gpus_per_node`` GPUs of an xGMI mesh: the 28 rings
    of its 8-GPU rome model (:data:`~.constants.RCCL_GFX942`); on 2-4 GPUs every directed Hamiltonian cycle of the
    complete graph, ``(k - 1)!`` of them, doubled while a channel would run at 25 GB/s or more
    (:data:`SMALL_MESH_RINGS`; 4 GPUs: 6, each arc in two of them, as RCCL 2.26.6 logged).  5-7 GPUs match no rome
    model, and RCCL caps their ring search at 2 channels (:data:`PARTIAL_MESH_RINGS`).

    >>> [rccl_mesh_rings(k) for k in (2, 3, 4, 5, 6, 7, 8)]
    [2, 4, 6, 2, 2, 2, 28]
    >>> speed = {k: 48.0 / math.factorial(k - 2) for k in (2, 3, 4)}   # each arc carries (k - 2)! of the cycles
    >>> [math.factorial(k - 1) * (2 if speed[k] >= 25.0 else 1) for k in (2, 3, 4)]
    [2, 4, 6]
    """
    if 4 < gpus_per_node < 8:
        return PARTIAL_MESH_RINGS
    return SMALL_MESH_RINGS.get(gpus_per_node, RCCL_GFX942["rings"])


def rccl_coll_channels(m: NcclMachine, ring_channels: int) -> int:
    """The communicator's ring channels on ``m`` (one host: :data:`RCCL_COPIES` copies of the ring graph, at most
    :data:`RCCL_MAXCHANNELS`; across hosts, as before, twice the graph up to 64).

    >>> from topo_probe import get_preset
    >>> m = NcclMachine.from_topology(get_preset("mi355x"))
    >>> [rccl_coll_channels(x, rccl_mesh_rings(x.gpus_per_node)) for x in (m, m.with_(ranks=4))]
    [112, 24]
    >>> x = NcclMachine.from_topology(get_preset("mi300x"))
    >>> [rccl_coll_channels(y, rccl_mesh_rings(y.gpus_per_node)) for y in (x, x.with_(ranks=4), x.with_(ranks=2))]
    [56, 24, 32]
    """
    if m.nodes > 1:
        return min(64, (RCCL_GFX950_COPIES if m.arch == "gfx950" else 2) * ring_channels)
    copies = RCCL_GFX950_COPIES if m.arch == "gfx950" else RCCL_COPIES.get(m.arch, {}).get(m.ranks, RCCL_DEFAULT_COPIES)
    return min(RCCL_MAXCHANNELS, copies * ring_channels)


def rccl_env_channels(m: NcclMachine, n_ch: int, min_channels: int | None, max_channels: int | None,
                      min_ctas: int | None = None, max_ctas: int | None = None) -> int:
    """The communicator's channels after ``NCCL_MIN_NCHANNELS`` / ``NCCL_MAX_NCHANNELS`` and ``NCCL_MIN_CTAS`` /
    ``NCCL_MAX_CTAS`` as RCCL applies them (ROCm/rccl 0cbce2a7 src/graph/connect.cc 629-707): at most ``MAXCHANNELS``
    (128) on one host, 64 across hosts; a minimum above 64 is capped at 64 across hosts and ignored with fewer than
    8 ranks, one above the maximum ignored; then ``min(maxNchannels, nChannels, maxCTAs)``, copied up to
    ``max(minNchannels, minCTAs)``.

    >>> from topo_probe import get_preset
    >>> m = NcclMachine.from_topology(get_preset("mi300x"))
    >>> rccl_env_channels(m, 56, 112, None), rccl_env_channels(m.with_(ranks=4), 24, 112, None)
    (112, 24)
    >>> rccl_env_channels(m.with_(nodes=2), 56, 112, None), rccl_env_channels(m, 56, None, 16)
    (64, 16)
    >>> rccl_env_channels(m, 56, None, None, max_ctas=8), rccl_env_channels(m, 56, None, None, min_ctas=64)
    (8, 64)
    """
    top = RCCL_MAXCHANNELS if m.nodes == 1 else 64
    lo = min(64, min_channels or 0) if m.nodes > 1 else (min_channels or 0)
    if (m.ranks < 8 and lo > 64) or lo > top:
        lo = 0                                              # RCCL: "... is ignored", minimum back to 2
    hi = min(max_channels or top, max_ctas or top)
    return min(top, max(min(n_ch, hi), lo, min_ctas or 0, 1))


def rccl_channel_cap_gbs(m: NcclMachine, proto: str, channels: int, channel_gbs: float) -> float:
    """Most bus bandwidth (GB/s) ``channels`` RCCL Simple ring channels move on one host of AMD GPUs: each
    channel's workgroup at most ``channel_gbs`` (the hand-set ``rccl_channel_gbs``).  Across hosts on gfx950 too,
    whose channel counts there follow RCCL's rule (:func:`rccl_coll_channels`, :mod:`.rccl_net`: 4 copies of the
    ring graph, at most 64) but not always its graph (2 x 4 MI355X: the model's search finds 6 rings, RCCL logged
    8, so 24 channels where RCCL ran 32 at a lower rate per channel, half its NIC paths without GPU Direct RDMA,
    which the model does not know: its prediction there is right partly for that wrong reason); gfx942 across hosts
    keeps twice its 28 rings, not RCCL's count, and no cap.  Elsewhere no cap.

    >>> from topo_probe import get_preset
    >>> m = NcclMachine.from_topology(get_preset("mi355x"))
    >>> rccl_channel_cap_gbs(m, "Simple", 24, 5.5), rccl_channel_cap_gbs(m, "LL", 24, 5.5)
    (132.0, inf)
    """
    if not m.amd or (m.nodes > 1 and m.arch != "gfx950") or proto != "Simple":
        return math.inf
    return channels * channel_gbs


def rccl_p2p_channels_per_peer(m: NcclMachine, n_channels: int, net_per_peer: int) -> int:
    """Channels RCCL gives each peer of a send/recv on gfx942 / gfx950 hosts of an xGMI mesh (``p2pnChannelsPerPeer``).

    ROCm/rccl src/graph/paths.cc (0cbce2a7, RCCL 2.21.5: lines 842-844 and 896-911; RCCL 2.26.6, Ahalperin/amd-dev
    0d4f8c1 rccl/src/graph/paths.cc ``ncclTopoGetNchannels`` / ``ncclTopoComputeP2pChannels``): a peer over xGMI
    gets 4 channels per link's worth of path bandwidth (``4 * max(1, path->bw / ncclTopoXGMISpeed)``; 2 on other
    AMD GPUs), a peer on another host ``NCCL_NCHANNELS_PER_NET_PEER``'s 2 (``net_per_peer``); the least over all
    peers, at most ``p2pnChannels`` (the communicator's channels), to a power of two, and doubled when every rank is
    on one host ("Doubling P2P channels per peer on single node").  A mesh joins each GPU pair by one link.  RCCL
    2.26.6 logged ``8 p2p channels per peer`` on 2 and on 4 MI355X of one host and ``2 p2p channels per peer`` on
    2 x 1 and 2 x 2 (Ahalperin/amd-dev 58a032f7 results/scale_{2gpu,4gpu,2x1gpu,2x2gpu}_alltoall/nccl_debug.log).

    >>> from topo_probe import get_preset
    >>> m = NcclMachine.from_topology(get_preset("mi355x"))
    >>> [rccl_p2p_channels_per_peer(m.with_(ranks=k), n, 2) for k, n in ((2, 8), (4, 24), (8, 112))]
    [8, 8, 8]
    >>> rccl_p2p_channels_per_peer(m.with_(nodes=2, ranks=4), 8, 2)
    2
    """
    per_link = 4 if m.arch in ("gfx942", "gfx950") else 2
    lowest = min(n_channels, RCCL_MAXCHANNELS, per_link) if m.gpus_per_node > 1 else min(n_channels, RCCL_MAXCHANNELS)
    if m.nodes > 1:
        lowest = min(lowest, net_per_peer)
    per = 1 << max(0, lowest - 1).bit_length()
    return min(RCCL_MAXCHANNELS, per * (2 if m.nodes == 1 and m.arch in ("gfx942", "gfx950") else 1))


__all__ = ["rccl_mesh_rings", "rccl_coll_channels", "rccl_env_channels", "rccl_channel_cap_gbs", "RCCL_MAXCHANNELS",
           "RCCL_COPIES", "PARTIAL_MESH_RINGS", "rccl_p2p_channels_per_peer"]
