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
#: ring-graph channels on 2-4 GPUs of a mesh: every directed Hamiltonian cycle, but 2 GPUs' one cycle twice at half
#: speed (RCCL 2.26.6 on 2 x MI355X: ``Pattern 4, nChannels 2, bw 24``, results/scale_2gpu_all_reduce/nccl_debug.log)
SMALL_MESH_RINGS = {2: 2, 3: 2, 4: 6}


def rccl_mesh_rings(gpus_per_node: int) -> int:
    """Ring-graph channels RCCL's search finds on one host of ``gpus_per_node`` GPUs of an xGMI mesh: the 28 rings
    of its 8-GPU rome model (:data:`~.constants.RCCL_GFX942`); on 2-4 GPUs every directed Hamiltonian cycle of the
    complete graph, ``(k - 1)!`` of them (4 GPUs: 6, each arc in two of them, as RCCL 2.26.6 logged;
    :data:`SMALL_MESH_RINGS`).

    >>> [rccl_mesh_rings(k) for k in (2, 3, 4, 8)]
    [2, 2, 6, 28]
    >>> all(SMALL_MESH_RINGS[k] == math.factorial(k - 1) for k in (3, 4))
    True
    """
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
        return min(64, 2 * ring_channels)
    copies = RCCL_GFX950_COPIES if m.arch == "gfx950" else RCCL_COPIES.get(m.arch, {}).get(m.ranks, RCCL_DEFAULT_COPIES)
    return min(RCCL_MAXCHANNELS, copies * ring_channels)


def rccl_channel_cap_gbs(m: NcclMachine, proto: str, channels: int, channel_gbs: float) -> float:
    """Most bus bandwidth (GB/s) ``channels`` RCCL Simple ring channels move on one host of AMD GPUs: each
    channel's workgroup at most ``channel_gbs`` (the fitted ``rccl_channel_gbs``).  Elsewhere no cap.

    >>> from topo_probe import get_preset
    >>> m = NcclMachine.from_topology(get_preset("mi355x"))
    >>> rccl_channel_cap_gbs(m, "Simple", 24, 5.5), rccl_channel_cap_gbs(m, "LL", 24, 5.5)
    (132.0, inf)
    """
    if not m.amd or m.nodes > 1 or proto != "Simple":
        return math.inf
    return channels * channel_gbs


__all__ = ["rccl_mesh_rings", "rccl_coll_channels", "rccl_channel_cap_gbs", "RCCL_MAXCHANNELS", "RCCL_COPIES"]
