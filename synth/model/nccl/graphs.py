"""What NCCL's topology search (src/graph/search.cc) finds on a machine, in closed form.

NCCL tries per-channel speeds from a fixed table (``speedArrayIntra/Inter``), highest first,
keeps the graph with the largest ``nChannels * speed`` and moves to the next speed only while
``next / best > 0.49`` (``ncclTopoCompute``); rings of 25 GB/s or more are then duplicated
(``ncclTopoDupChannels``) and ``ncclTopoPostset`` (connect.cc) gives the communicator twice the
channels of its ring and tree graphs.  NVLS graphs put two loads on the head GPU
(``ncclTopoSearchTryNvls``).  RCCL builds the 8 x MI300X rings from its rome model (28 rings,
``rome_model_79``).  Bandwidths are GB/s per channel.

>>> from topo_probe import get_preset
>>> g = comm_graphs(NcclMachine.from_topology(get_preset("dgx-h100")))
>>> (g.ring.n_channels, g.ring.bw_intra, g.n_channels, g.nvls.n_channels, g.nvls.bw_intra)
(12, 30.0, 24, 8, 40.0)
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

from synth.model.nccl.constants import (
    MAX_DEV_WORK_P2P_PER_BATCH,
    MAXCHANNELS,
    NCCL_VERSION,
    NVLINK_BW_PER_LINK,
    NCCL_MAX_NVLS_ARITY,
    NVLS_NCHANNELS,
    NVLS_NCHANNELS_SM100,
    NVLS_NCHANNELS_SM100_NVL,
    P2P_PER_CHANNEL_NET_BW,
    PCI_BW_BY_GEN,
    SPEEDS_INTER,
    SPEEDS_INTRA,
)
from synth.model.nccl.env import NcclEnv
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.nic_path import cpu_link_gbs, net_path_gbs
from synth.model.nccl.channel_counts import (dup_channels, few_ppn_channels, legacy_one_host_channels,
                                             lone_gpu_total_gbs, mesh_peer_channels, search_nics)
from synth.model.nccl.rccl_channels import (rccl_coll_channels, rccl_env_channels, rccl_mesh_rings,
                                             rccl_p2p_channels_per_peer)
from synth.model.nccl.rccl_net import rccl_net_graph, rccl_partial_host
from synth.model.nccl.versions_patch import nvls_supported

EPS = 1e-6
#: steps one ring search at one speed may take (NCCL 2.30.7 src/graph/search.cc NCCL_SEARCH_TIMEOUT, 1 << 14)
SEARCH_STEPS = 1 << 14


@dataclass(frozen=True)
class Graph:
    """One NCCL graph: channels, per-channel bandwidth (GB/s) inside and across nodes, path types (``type_intra``
    ``LOC`` (a node's only GPU)/``NVL``/``PCI``/``SYS``; ``type_inter`` ``NONE`` or :data:`.nic_path.NIC_PATHS`)."""

    n_channels: int
    bw_intra: float
    bw_inter: float
    type_intra: str
    type_inter: str
    same_channels: bool = True   # graph->sameChannels: every channel follows channel 0's GPU order


@dataclass(frozen=True)
class CommGraphs:
    """Graphs and channel counts of one communicator."""

    ring: Graph
    tree: Graph
    nvls: Graph | None
    collnet: Graph | None
    n_channels: int              # comm->nChannels (ring/tree) after postset and the environment
    nvls_channels: int           # CTAs an NVLS collective runs on
    p2p_channels_per_peer: int   # paths.cc: 2 per NVLink
    net_channels_per_peer: int   # channels per network peer (:func:`net_channels_per_peer`)
    #: the NVLS graph of the node's NVLink fabric alone (:func:`nvls_node_graph`)
    nvls_node: Graph | None = None


def _speeds(sm: int, inter: bool) -> tuple[float, ...]:
    table = SPEEDS_INTER if inter else SPEEDS_INTRA
    return table[100] if sm >= 100 else table[90] if sm >= 90 else table[0]


def nvlink_per_link_gbs(m: NcclMachine) -> float:
    """Per-link bandwidth NCCL assumes (topo.h); RCCL rates xGMI by its link speed."""
    return m.link_gbs if m.amd else NVLINK_BW_PER_LINK.get(m.sm, NVLINK_BW_PER_LINK[80])


def _pcie_ring_bw(m: NcclMachine) -> float:
    bw = PCI_BW_BY_GEN[m.pcie_gen]       # the link between CPU nodes (sockets, NUMA nodes) as today's NCCL rates it
    return min(bw, cpu_link_gbs(m, NCCL_VERSION)) if m.sockets > 1 or m.gpu_numa_nodes > 1 else bw


@functools.lru_cache(maxsize=256)     # a pure function of hashable arguments: each command asks it again
def mesh_rings(links, per_link: float, speed: float, max_rings: int, tries: int = 64) -> int:
    """How many rings at ``speed`` GB/s fit on a point-to-point link mesh (``links[i][j]`` link
    counts as a tuple of tuples, ``per_link`` GB/s each): Hamiltonian cycles found by a bounded depth-first search,
    repeated with seeded neighbour orders, the largest set kept (as NCCL's search does).  All tries
    together take at most :data:`SEARCH_STEPS` steps, as one search of NCCL's at one speed
    (NCCL 2.30.7 src/graph/search.cc ``NCCL_SEARCH_TIMEOUT``), so a large sparse mesh without
    rings at a speed costs milliseconds, not minutes.

    >>> from topo_probe.machines.presets import DGX1_LINKS
    >>> mesh_rings(DGX1_LINKS, 20.0, 20.0, 16), mesh_rings(DGX1_LINKS, 20.0, 40.0, 16)
    (6, 2)
    """
    n = len(links)
    best = 0
    steps = [SEARCH_STEPS]
    for seed in range(tries):
        rng = random.Random(seed)
        cap = [[links[i][j] * per_link for j in range(n)] for i in range(n)]
        found = 0
        while found < max_rings and steps[0] > 0:
            path = _hamiltonian(cap, speed, n, rng if seed else None, steps)
            if path is None:
                break
            for a, b in zip(path, path[1:] + path[:1]):
                cap[a][b] -= speed
            found += 1
        best = max(best, found)
        if best >= max_rings or steps[0] <= 0:
            break
    return best


def _hamiltonian(cap, speed: float, n: int, rng, steps: list[int]) -> list[int] | None:
    budget = [5000]                      # bounded search: NCCL's search has a time budget too

    def extend(path: list[int], used: set[int]) -> list[int] | None:
        budget[0] -= 1
        steps[0] -= 1
        if budget[0] < 0 or steps[0] < 0:
            return None
        if len(path) == n:
            return path if cap[path[-1]][path[0]] >= speed - EPS else None
        last = path[-1]
        nxt = [j for j in range(n) if j not in used and cap[last][j] >= speed - EPS]
        if rng is not None:
            rng.shuffle(nxt)
        else:
            nxt.sort(key=lambda j: -cap[last][j])
        for j in nxt:
            got = extend(path + [j], used | {j})
            if got:
                return got
        return None

    return extend([0], {0}) if n > 1 else [0]


def intra_capacity_gbs(m: NcclMachine, p2p: bool = True) -> float:
    """Bandwidth NCCL's search can spread over rings inside a node (GB/s per GPU)."""
    if not p2p or not m.p2p or m.gpus_per_node == 1:
        return _pcie_ring_bw(m)
    if m.intra in ("nvswitch", "xgmi"):
        return m.links_per_gpu * nvlink_per_link_gbs(m)
    if m.intra == "nvlink" and m.link_matrix:
        return max(sum(row) for row in m.link_matrix) * nvlink_per_link_gbs(m)
    if m.intra == "nvlink":
        return m.links_per_gpu * nvlink_per_link_gbs(m)
    return _pcie_ring_bw(m)


def _search(speeds, max_bw: float, total_bw: float, count_at, max_ch: int) -> tuple[int, float]:
    """NCCL's pass 1: highest speed first, keep the best nChannels * speed."""
    idx = next((i for i, s in enumerate(speeds) if s <= max_bw + EPS), len(speeds) - 1)
    best = (0, 0.0)
    while True:
        s = speeds[idx]
        n = count_at(s)
        if n * s > best[0] * best[1] + EPS:
            best = (n, s)
        if n and (n >= max_ch or n * s >= total_bw - EPS):
            break
        if idx + 1 < len(speeds) and (best[0] == 0 or speeds[idx + 1] / best[1] > 0.49):
            idx += 1
            continue
        break
    return best if best[0] else (1, speeds[-1])   # NCCL: 0.1 GB/s (search.cc 1219-1236), LL below 1 MiB differs


def _ring_graph(m: NcclMachine, p2p: bool, version: tuple = NCCL_VERSION) -> Graph:
    lone = m.gpus_per_node == 1 and m.nodes > 1 and not m.amd
    cap = lone_gpu_total_gbs(m, nvlink_per_link_gbs(m)) if lone else intra_capacity_gbs(m, p2p)
    nvl = p2p and m.p2p and m.intra != "pcie" and m.gpus_per_node > 1
    # a node's only GPU: NCCL's typeIntra is PATH_LOC (NVIDIA/nccl search.cc, v2.16.5-1 line 748; v2.25.1-1 954-966)
    type_intra = "LOC" if lone else "NVL" if nvl else "PCI" if p2p and m.p2p else "SYS"
    max_ch = MAXCHANNELS // 2
    if rccl_partial_host(m):                             # RCCL's search across hosts on part of a host
        n, s, _ = rccl_net_graph(m)
        return Graph(n, s, s, type_intra, "PXB")
    if m.amd and m.intra == "xgmi" and nvl:
        rings = rccl_mesh_rings(m.gpus_per_node) if m.nodes == 1 else rccl_mesh_rings(8)
        per_ring = min(cap / rings, nvlink_per_link_gbs(m))        # a ring crosses one link a hop (5-7 GPUs: 2 rings)
        return Graph(rings, per_ring, per_ring, "NVL", "PXB" if m.nodes > 1 else "NONE")
    if m.nodes > 1:
        n_nic, nic = search_nics(m, version)       # before NCCL 2.20 every IB/RoCE port on its own
        max_bw = min(nic, net_path_gbs(m, version))
        # SYS: every channel crosses the host's one socket link each way (topo.cc 262-275), whichever GPU it starts at
        link = cpu_link_gbs(m, version) if m.net_path == "SYS" else float("inf")
        n, s = _search(_speeds(m.sm, True), max_bw, cap, lambda s: min(max_ch, int(cap / s + EPS), n_nic * int(
            nic / s + EPS), int(min(link / s + EPS, max_ch))), max_ch)
        # graph->sameChannels: NCCL searches first with every channel replaying channel 0's GPU order (v2.8.4-1
        # src/graph/search.cc lines 414-420, 662; v2.24.3-1 lines 657-665, 952-953), so every channel starts at the
        # same GPU and can only use the NIC beside it (typeInter PIX/PXB; a NIC is skipped once its width is used,
        # line 402); a ring graph needing several NICs is found by the retry without it (lines 717-723; v2.24.3-1
        # lines 1031-1038), which keeps sameChannels 0
        same = n <= int(nic / s + EPS)
        if not m.amd:                                    # RCCL: not followed here
            n, s = dup_channels(n, s, m.sm, max_ch, version)
        return Graph(n, s, s, type_intra, m.net_path, same)
    if m.intra == "nvlink" and nvl and m.link_matrix:
        per = nvlink_per_link_gbs(m)
        n, s = _search(_speeds(m.sm, False), 2 * per, cap, lambda s: mesh_rings(m.link_matrix, per, s, max_ch), max_ch)
    else:
        n, s = _search(_speeds(m.sm, False), cap, cap, lambda s: min(max_ch, int(cap / s + EPS)), max_ch)
    n, s = dup_channels(n, s, m.sm, max_ch, version)
    return Graph(n, s, s, type_intra, "NONE")


def _tree_graph(m: NcclMachine, ring: Graph, p2p: bool) -> Graph:
    cap = intra_capacity_gbs(m, p2p)
    n = ring.n_channels
    if m.nodes == 1:
        speeds = _speeds(m.sm, False)
        s = next((v for v in speeds if n * v <= cap + EPS), speeds[-1])
        return Graph(n, s, s, ring.type_intra, "NONE")
    if rccl_partial_host(m):                             # RCCL's own pass 2, over RCCL's speeds
        _, _, intra = rccl_net_graph(m)
        return Graph(n, intra, ring.bw_inter, ring.type_intra, ring.type_inter)
    intra = ring.bw_inter
    for v in sorted(_speeds(m.sm, True)):     # pass 2: raise bwIntra while it stays < 2 x bwInter
        if intra < v <= cap / n + EPS and intra < 2 * ring.bw_inter:
            intra = v
    return Graph(n, intra, ring.bw_inter, ring.type_intra, ring.type_inter)


def _nvls_graph(m: NcclMachine, env: NcclEnv, node_only: bool = False, version: tuple = NCCL_VERSION) -> Graph | None:
    if not (m.nvls and m.intra == "nvswitch" and m.sm >= 90 and env.nvls_enable != 0 and not env.p2p_off and m.p2p
            and nvls_supported(m.gpus_per_node, version)):          # ncclNvlsInit's GPU count, by version
        return None
    cap = intra_capacity_gbs(m)
    one_node = m.nodes == 1 or node_only
    # search.cc ncclTopoCompute: at most NCCL_MAX_NVLS_ARITY heads; on one node all of them are used
    heads = min(NCCL_MAX_NVLS_ARITY, m.gpus_per_node) if one_node else min(m.gpus_per_node,
                                                                           max(1, m.visible_nics()[0]))

    def fits(s):          # ncclTopoSearchTryNvls: every channel loads each GPU once, its head twice
        return (heads + 1) * s <= cap + EPS
    if one_node:
        speeds = _speeds(m.sm, False)
        intra = next((s for s in speeds if fits(s)), speeds[-1])
        inter = max(s for s in speeds if s < 2 * intra + EPS)     # pass 2 raises bwInter
        return Graph(heads, intra, inter, "NVL", "NONE")
    nic = min(m.visible_nics()[1], PCI_BW_BY_GEN[m.pcie_gen])
    speeds = _speeds(m.sm, True)
    intra = next((s for s in speeds if s <= nic + EPS and fits(s)), speeds[-1])
    inter = max((s for s in speeds if s <= nic + EPS and s < 2 * intra + EPS), default=speeds[-1])
    return Graph(heads, intra, inter, "NVL", "PXN")


def nvls_node_graph(m: NcclMachine, env: NcclEnv | None = None, version: tuple = NCCL_VERSION) -> Graph | None:
    """The NVLS graph the node's NVLink fabric alone allows (what NCCL's search finds on one node).

    On several nodes NCCL searches the NVLS graph at the network's speeds (``speedArrayInter``, no
    faster than a NIC), so its ``bwIntra`` is a NIC's rate: a tuning estimate.  The NVLS reduction
    inside a node still runs over NVLink through the NVSwitch whatever the NICs, so the execution
    model takes its intra-node rate from this graph (8 x B200: 8 heads of 80 GB/s, not 48).

    >>> from topo_probe import cluster
    >>> nvls_node_graph(NcclMachine.from_topology(cluster("hgx-b200", nodes=2))).bw_intra
    80.0
    """
    return _nvls_graph(m, env or NcclEnv(), node_only=True, version=version)


def nvls_ctas(m: NcclMachine, env: NcclEnv, version: tuple = NCCL_VERSION) -> int:
    """CTAs an NVLS collective runs on (NVIDIA/nccl src/transport/nvls.cc): 16 on sm90; on sm100 32
    (NCCL 2.25-2.26), from 2.27 (ncclNvlsInit, 72d24320) 24 inside one NVLink domain and 32 across
    nodes, from 2.30 (ncclNvlsTreeSm100Tuning, 5067397c) 24 on more than two nodes with 48-96 GB/s
    NICs or 8 GPUs per node on faster ones; ``NCCL_MAX_CTAS`` / ``NCCL_MAX_NCHANNELS`` cap them,
    ``NCCL_MIN_CTAS`` raises them (init.cc).

    >>> from topo_probe import cluster, get_preset
    >>> b200 = NcclMachine.from_topology(get_preset("hgx-b200"))
    >>> [nvls_ctas(b200, NcclEnv(), v) for v in ((2, 26), (2, 28))]
    [32, 24]
    >>> [nvls_ctas(NcclMachine.from_topology(cluster("hgx-b200", nodes=k)), NcclEnv(), (2, 30)) for k in (2, 4)]
    [32, 24]
    """
    n = NVLS_NCHANNELS
    if m.sm >= 100:
        nic = m.visible_nics()[1] if m.nodes > 1 else 0.0
        n = NVLS_NCHANNELS_SM100_NVL if (m.nodes == 1 and tuple(version) >= (2, 27)) else NVLS_NCHANNELS_SM100
        if (tuple(version) >= (2, 30) and m.nodes > 2
                and (48.0 <= nic < 96.0 or (nic >= 96.0 and m.gpus_per_node <= 8))):
            n = NVLS_NCHANNELS_SM100_NVL
    n = min(n, env.max_channels or n, env.max_ctas or n)
    if env.min_ctas:
        n = min(MAXCHANNELS, max(n, env.min_ctas))
    return n


def _collnet_graph(m: NcclMachine, ring: Graph, env: NcclEnv) -> Graph | None:
    if not (m.collnet and env.collnet_enable == 1 and m.nodes > 1):
        return None
    n_nic, nic = m.visible_nics()
    return Graph(max(1, n_nic), ring.bw_intra, min(nic, ring.bw_inter), ring.type_intra, ring.type_inter)


def pow2_up(x: int) -> int:
    """The least power of two >= ``x`` (NCCL's ``pow2Up``; 1 for ``x <= 1``)."""
    return 1 << max(0, int(x) - 1).bit_length()


def p2p_total_channels(n_channels: int, rccl: bool = False) -> int:
    """NCCL's ``p2pnChannels`` (paths.cc ``ncclTopoComputeP2pChannels``): the communicator's channels, at
    most MAXCHANNELS, to a power of two.  RCCL's (``rccl``): at most its MAXCHANNELS 128, to a power of two, at
    most ``4*CHANNEL_LIMIT`` = 64 (ROCm/rccl 0cbce2a7 src/graph/paths.cc:880-912, src/include/device.h:65-66; RCCL
    2.26.6 the same; it logged 8, 32 and 32 p2p channels on 2 and 4 MI355X of a host and on 2 x 4).

    >>> [p2p_total_channels(n) for n in (8, 12, 64)], [p2p_total_channels(n, True) for n in (8, 24, 112)]
    ([8, 16, 32], [8, 32, 64])
    """
    if rccl:
        return min(pow2_up(min(n_channels, 128)), 4 * 16)
    return pow2_up(min(n_channels, MAXCHANNELS))


def net_channels_per_peer(m: NcclMachine, n_channels: int, version: tuple = NCCL_VERSION,
                          override: int | None = None, local: int | None = None) -> int:
    """Channels NCCL gives a send to a peer on another host (src/graph/paths.cc, by version).
    ``NCCL_NCHANNELS_PER_NET_PEER`` (``override``) wins.  Before 2.20: 2.  From 2.20: 2, halved while
    ``2 x ranks > 4 x`` :func:`p2p_total_channels`.  From 2.29: one channel per ``P2P_PER_CHANNEL_NET_BW``
    (14 GB/s) of the GPU's own NIC (at least one per NIC), to a power of two, halved while every peer's
    channels, ``NCCL_MAX_DEV_WORK_P2P_PER_BATCH`` (8) peers to a channel and round, exceed the p2p
    channels; a peer on the same host with fewer (``local``: 2 over PCIe, 2 per NVLink) lowers it first.

    >>> from topo_probe import cluster
    >>> m = NcclMachine.from_topology(cluster("dgx-h100", nodes=2))
    >>> [net_channels_per_peer(m.with_(ranks=8 * k, nodes=k), 16, (2, 29)) for k in (2, 4, 8, 16)]
    [4, 4, 2, 1]
    >>> [net_channels_per_peer(m.with_(ranks=8 * k, nodes=k), 16, (2, 28)) for k in (2, 4, 8, 16)]
    [2, 2, 1, 1]
    """
    if override:
        return override
    if version < (2, 20):
        return 2
    p2p_total = p2p_total_channels(n_channels)
    if version < (2, 29):
        per = 2
        while per * m.ranks > p2p_total * 4 and per > 1:
            per //= 2
        return per
    _, nic = m.visible_nics()
    net_bw = min(nic, PCI_BW_BY_GEN.get(m.pcie_gen, PCI_BW_BY_GEN[4]))       # the GPU's path to its NIC
    per = max(1, -(-int(net_bw) // P2P_PER_CHANNEL_NET_BW)) if nic > 0 else 2
    if local and m.gpus_per_node > 1:
        per = min(per, local)
    per = pow2_up(per)
    if m.nodes > 1:
        batches = -(-m.ranks // MAX_DEV_WORK_P2P_PER_BATCH)
        while per * batches > p2p_total and per > 1:
            per //= 2
    return per


def comm_graphs(m: NcclMachine, env: NcclEnv | None = None, version: tuple = NCCL_VERSION) -> CommGraphs:
    """All graphs NCCL builds for ``m`` under ``env``, and its channel counts (``NCCL_MIN_NCHANNELS``
    / ``NCCL_MAX_NCHANNELS`` and ``NCCL_MIN_CTAS`` / ``NCCL_MAX_CTAS`` clamp the ring/tree channels;
    the maxima also the NVLS CTAs, ``NCCL_MIN_CTAS`` raises them)."""
    env = env or NcclEnv()
    p2p = not env.p2p_off
    ring = _ring_graph(m, p2p, tuple(version))
    tree = _tree_graph(m, ring, p2p)
    n_ch = few_ppn_channels(m, ring.bw_intra, min(MAXCHANNELS, 2 * min(ring.n_channels, tree.n_channels)), version)
    n_ch = legacy_one_host_channels(m, ring.type_intra == "NVL", n_ch, version)       # NCCL 2.4's rings.cu
    if m.amd and m.intra == "xgmi":                        # RCCL: its rings, copied, and its env rules
        n_ch = rccl_env_channels(m, rccl_coll_channels(m, ring.n_channels), env.min_channels, env.max_channels,
                                 env.min_ctas, env.max_ctas)
    else:
        top, lo = 2 * MAXCHANNELS, max(env.min_channels or 0, env.min_ctas or 0)
        n_ch = min(top, max(min(n_ch, env.max_channels or top, env.max_ctas or top), lo, 1))
    nvls_ch = nvls_ctas(m, env, version)
    per_peer = max(1, min(n_ch, mesh_peer_channels(m, version)
                          or 2 * max(1, int(intra_capacity_gbs(m) / nvlink_per_link_gbs(m) + EPS))))
    local = 2 if (m.intra == "pcie" or not p2p or not m.p2p) else per_peer
    net_peer = net_channels_per_peer(m, n_ch, tuple(version), env.net_channels_per_peer, local)
    if m.amd and m.intra == "xgmi" and p2p:                 # RCCL's own per-peer rule (paths.cc)
        per_peer = rccl_p2p_channels_per_peer(m, n_ch, net_peer)
    return CommGraphs(ring, tree, _nvls_graph(m, env, version=version), _collnet_graph(m, ring, env), n_ch, nvls_ch,
                      per_peer, net_peer, nvls_node_graph(m, env, version))


__all__ = ["Graph", "CommGraphs", "comm_graphs", "few_ppn_channels", "net_channels_per_peer", "p2p_total_channels",
           "pow2_up", "intra_capacity_gbs", "mesh_rings", "nvls_node_graph", "nvls_ctas", "nvlink_per_link_gbs"]
