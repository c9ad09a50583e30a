"""NCCL's own tuning table: latency (µs) and algorithm bandwidth (GB/s) of every (collective,
algorithm, protocol), and its pick.

Follows ``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime`` (NCCL 2.28 src/graph/tuning.cc) and the
channel reduction of ``topoGetAlgoInfo`` (src/enqueue.cc): NCCL estimates ``time = latency + nBytes
/ (1000 * algbw)`` for every enabled (algorithm, protocol), takes the smallest, then lowers the
channels while ``nBytes < nChannels * nThreads * threadThreshold``.  These are NCCL's estimates,
used to *choose*; :mod:`.runtime` predicts how long the choice really takes.

>>> from topo_probe import get_preset
>>> t = TuneTable.build(NcclMachine.from_topology(get_preset("dgx-h100")))
>>> t.choose("allreduce", 8 << 30)[:3], t.choose("allreduce", 1024)[:2]
(('nvls', 'Simple', 16), ('ring', 'LL'))
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from synth.ir.collectives import check_collective_gpus
from synth.model.nccl.constants import (
    FEATURE_VERSION,
    HW_NET,
    HW_NVLINK,
    HW_PCI,
    MAX_NTHREADS,
    NCCL_MAX_NVLS_ARITY,
    NET_OVERHEAD_US,
    NCCL_VERSION,
    NVLS_EFFICIENCY,
    NVLS_TREE_CORRECTION_COLUMNS,
    NVLS_TREE_CORRECTION_SM,
    NVLS_TREE_CORRECTION_VERSION,
    PROTOS,
    THREAD_THRESHOLD,
    TREE_CORRECTION,
    coll_steps,
    compcap_index,
    ll_max_bw_gbs,
    ll_row_index,
)
from synth.model.nccl.rccl_net import RCCL_NTHREADS, rccl_partial_host
from synth.model.nccl.ring_steps import simple_ring_threads
from synth.model.nccl.env import NcclEnv
from synth.model.nccl.graphs import CommGraphs, Graph, comm_graphs
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.net_transport import tuner_inter_latency_us
from synth.model.nccl.collnet_versions import (
    COLLNET_BW_28,
    COLLNET_LL_SHARE_28,
    collnet_algorithms,
    collnet_chain_28,
    collnet_rules,
)
from synth.model.nccl.versions import (
    NTHREADS_24,
    TUNER_VERSION,
    kernel_info_24,
    latency_tables,
    net_latency_algo,
    legacy_latency_rules,
    ll128_default_on,
    ll128_ring_bus_cap_gbs,
    ll128_ring_factor,
    per_channel_tables,
    ring_ll_factor,
    tree_ll128_factor,
)
from synth.model.nccl.per_channel import (
    TREE_PER_CH_SINCE,
    graph_bus_gbs,
    ll_max_bws_row,
    ring_ll128_per_channel_gbs,
    tree_bus_pre28,
    tree_ll128_per_channel_gbs,
    tree_per_channel_gbs,
)

#: the collectives NCCL's tuner covers and the algorithms it considers for each (tuning.cc)
NCCL_COLLS = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
ALGOS_FOR = {"broadcast": ("ring",), "reduce": ("ring",),
             "allgather": ("ring", "nvls", "collnet_direct", "pat"),
             "reducescatter": ("ring", "nvls", "collnet_direct", "pat"),
             "allreduce": ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree")}


def _graph_for(g: CommGraphs, algo: str) -> Graph | None:
    return {"tree": g.tree, "ring": g.ring, "pat": g.ring, "nvls": g.nvls, "nvls_tree": g.nvls,
            "collnet_direct": g.collnet, "collnet_chain": g.collnet}[algo]


@dataclass
class TuneTable:
    """NCCL's per-(collective, algorithm, protocol) latency (µs) and algbw (GB/s)."""

    machine: NcclMachine
    env: NcclEnv
    graphs: CommGraphs
    latency: dict
    bandwidth: dict
    version: tuple = NCCL_VERSION

    def __post_init__(self) -> None:
        """Refuse a machine of fewer than 2 ranks as the CLIs do (:func:`synth.ir.collectives.check_collective_gpus`):
        its bus-bandwidth ratio ``n / coll_steps`` would divide by zero."""
        check_collective_gpus(self.machine.name, self.machine.ranks)

    @classmethod
    def build(cls, m: NcclMachine, env: NcclEnv | None = None, version: tuple = NCCL_VERSION) -> "TuneTable":
        """Fill NCCL's table for ``m`` under ``env`` (NCCL ``version`` gates LL128, NVLS, NVLSTree, PAT)."""
        env = env or NcclEnv()
        g = comm_graphs(m, env, tuple(version))
        t = cls(m, env, g, {}, {}, tuple(version))
        for coll in NCCL_COLLS:
            for algo in ALGOS_FOR[coll]:
                graph = _graph_for(g, algo)
                for proto in PROTOS:
                    key = (coll, algo, proto)
                    ok = graph is not None and t._algo_ok(coll, algo) and t._proto_ok(coll, proto, graph)
                    t.bandwidth[key] = t._bus_bw(coll, algo, proto, graph) * t._ratio(coll, algo) if ok else 0.0
                    t.latency[key] = t._latency(coll, algo, proto, graph) if graph else 0.0
        return t

    # -- bandwidth ------------------------------------------------------------------------
    def _nvls_bw(self, coll: str, algo: str, graph: Graph) -> float:
        m = self.machine
        cc, idx2 = ll_row_index(m.sm, self.version), min(m.nodes, 3) - 1     # compCapIndex (per_channel)
        n = graph.n_channels
        intra = graph.bw_intra * NVLS_EFFICIENCY[cc] * (n - 1) / n
        intra *= 2.0 if coll == "allreduce" else (m.gpus_per_node - 1) / m.gpus_per_node
        inter = graph.bw_inter * (2 if (m.nodes <= 2 and algo == "nvls_tree") else 1)
        cap = per_channel_tables(self.version)[1][cc][idx2] if algo == "nvls_tree" else math.inf
        return min(intra, inter, cap)

    def _bus_bw(self, coll: str, algo: str, proto: str, graph: Graph) -> float:
        """busBw after NCCL's 'various model refinements' (GB/s, before the bus -> alg ratio)."""
        m = self.machine
        if algo in ("nvls", "nvls_tree"):
            ok = proto == "Simple" and graph.n_channels >= 2
            return graph.n_channels * self._nvls_bw(coll, algo, graph) if ok else 0.0
        chain_28 = algo == "collnet_chain" and collnet_chain_28(self.version)
        if algo in ("collnet_direct", "collnet_chain", "pat") and proto != "Simple" and not (chain_28 and proto == "LL"):
            return 0.0
        idx1, idx2 = ll_max_bws_row(m, self.version), min(m.nodes, 3) - 1
        n, v = graph.n_channels, self.version
        bus = n * (graph.bw_intra if (m.nodes <= 2 or algo.startswith("collnet")) else graph.bw_inter)
        bus = graph_bus_gbs(bus, m.sm, v)                           # 2.7.3 Ampere x .92; 2.7.5-2.17 at most 235
        if algo == "ring" and proto == "LL":                         # llMaxBws from 2.8 only
            bus = min(ll_max_bw_gbs(idx1, idx2, v), bus * ring_ll_factor(coll, m.nodes, v))
        elif algo == "ring" and proto == "LL128":
            bus = min(bus * ll128_ring_factor(m.gpus_per_node, v),
                      ll128_ring_bus_cap_gbs(coll, n, ring_ll128_per_channel_gbs(coll, m.sm, m.nodes, v), v))
        elif algo == "tree" and v < TREE_PER_CH_SINCE:           # 2.5-2.7 (2.4 takes 2.5's)
            bus = tree_bus_pre28(bus, proto, coll, m, n, v)
        elif algo == "tree":
            if coll == "allreduce":
                bus = min(bus * 0.92, n * tree_per_channel_gbs(m.sm, m.nodes, v))
            if proto == "LL":
                bus = min(bus / 3.8, ll_max_bw_gbs(idx1, idx2, v))
            elif proto == "LL128":
                bus = min(bus * tree_ll128_factor(m.nodes, v),
                          n * tree_ll128_per_channel_gbs(coll, m.sm, m.nodes, v))
        elif algo == "pat":
            bus *= 0.75
        elif chain_28:                                               # 2.8's one CollNet (tuning.cc l. 130-131)
            bus *= COLLNET_BW_28 * (COLLNET_LL_SHARE_28 if proto == "LL" else 1.0)
        elif algo == "collnet_direct" and coll in ("allgather", "reducescatter"):
            bus = m.gpus_per_node * min(graph.bw_intra, graph.bw_inter * 0.9)
        elif algo.startswith("collnet"):                             # 2.9 on, by version (collnet_versions)
            rules = collnet_rules(v)
            if algo == "collnet_chain":
                return bus * rules.chain_factor
            bus *= rules.direct_factor
            if rules.direct_per_nic:                                 # GPUs per NIC
                factor = m.gpus_per_node / n
                bus /= factor - (factor - 1) / 2
            bus *= rules.direct_hopper if m.sm >= 90 else 1.0
        return bus

    def _ratio(self, coll: str, algo: str) -> float:
        """NCCL's bus -> algorithm bandwidth ratio."""
        if algo != "ring" and coll in ("allgather", "reducescatter"):
            return 1.0
        if algo in ("ring", "nvls", "nvls_tree"):
            n = self.machine.ranks
            return n / coll_steps(coll, n)
        return 0.5

    # -- enable flags ---------------------------------------------------------------------
    def _proto_ok(self, coll: str, proto: str, graph: Graph) -> bool:
        env, m = self.env, self.machine
        if env.proto_set(coll):
            return env.proto_allowed(coll, proto)
        if proto != "LL128":
            return True
        if self.version < FEATURE_VERSION["LL128"] or m.amd:
            return False
        return ll128_default_on(m.sm, graph.type_inter, self.version, graph.type_intra)

    def _algo_ok(self, coll: str, algo: str) -> bool:
        m, env = self.machine, self.env
        # NCCL_ALGO's "CollNet" (read as collnet_direct) names 2.8's one CollNet, the chain
        named = "collnet_direct" if algo == "collnet_chain" and collnet_chain_28(self.version) else algo
        if not env.algo_allowed(coll, named) or self.version < FEATURE_VERSION.get(algo, (0, 0)):
            return False
        if algo == "nvls_tree" and m.nodes == 1:
            return False
        if (algo in ("nvls", "nvls_tree") and coll != "allreduce" and m.gpus_per_node > NCCL_MAX_NVLS_ARITY
                and self.version >= (2, 27)):       # enqueue.cc (v2.27.3+): no NVLS gather/scatter past 32 GPUs
            return False
        if algo.startswith("collnet") and algo not in collnet_algorithms(self.version):
            return False
        rules = collnet_rules(self.version)
        if algo == "collnet_direct" and (coll in ("allgather", "reducescatter") and not rules.gather_scatter
                                         or rules.direct_needs_nvswitch and m.intra != "nvswitch"):
            return False
        collnet = m.collnet and env.collnet_enable == 1
        if not collnet and (algo.startswith("collnet") or (algo == "nvls" and m.nodes > 1)):
            return False
        if algo == "pat":
            return env.pat_enable != 0 and m.gpus_per_node == 1 and not m.amd
        return True

    # -- latency --------------------------------------------------------------------------
    def _latency(self, coll: str, algo: str, proto: str, graph: Graph) -> float:
        m = self.machine
        p = PROTOS.index(proto)
        nodes, ranks, ppn = m.nodes, m.ranks, m.gpus_per_node
        intra_hw = HW_NVLINK if graph.type_intra == "NVL" else HW_PCI
        base, hops = latency_tables(algo, self.version, tuner=True)   # the table of this NCCL version
        intra = hops[intra_hw][p]
        inter = latency_tables(net_latency_algo(algo, ppn, self.version), self.version, tuner=True)[1][HW_NET][p]
        inter = tuner_inter_latency_us(inter, m.reported_plugin_latency_us, proto, self.version)   # latencyInter
        lat = base[p]
        legacy = legacy_latency_rules(self.version)
        if legacy and nodes > 1 and proto == "LL":
            intra *= 1.8                                             # 2.8-2.17: LL's hops across nodes
        if algo == "ring":
            if coll in ("broadcast", "reduce"):
                # one hop when every channel has the same ring, else nsteps hops, Simple's at the tree's row
                # (v2.8.4-1 src/graph/tuning.cc lines 144-150; v2.27.3-1 lines 339-345): graph->sameChannels
                hw = intra_hw if nodes == 1 else HW_NET
                if graph.same_channels:
                    return lat + hops[hw][p]
                step = latency_tables("tree", self.version, tuner=True)[1][hw][p] if proto == "Simple" else hops[hw][p]
                return lat + coll_steps(coll, ranks) * step
            over = NET_OVERHEAD_US[m.cpu_vendor] * (3 if proto == "Simple" else 1)
            intra = max(intra, over) if (nodes > 1 and not legacy) else intra
            n_inter = 0 if nodes == 1 else (2 * (nodes - 1) if coll == "allreduce" else nodes - 1)
            return lat + (coll_steps(coll, ranks) - n_inter) * intra + n_inter * inter
        log_nodes = int(math.log2(nodes))
        if algo == "tree":
            return lat + 2 * ((ppn - 1) * intra + log_nodes * inter)
        rules = collnet_rules(self.version)                           # CollNet's latency by version
        if algo == "collnet_direct" and rules.direct_arity_us is not None:
            return lat + 2 * (min(1, ppn - 1) * intra + (ppn - 1) * rules.direct_arity_us) + inter
        if algo.startswith("collnet"):                                # the chain (and 2.9's direct)
            chain_inter = rules.chain_inter or collnet_chain_28(self.version)
            return lat + 2 * (ppn - 1) * intra + (inter if chain_inter or algo == "collnet_direct" else 0.0)
        if algo == "nvls":
            return intra + (inter if nodes > 1 else 0)
        if algo == "nvls_tree":
            return lat + intra + 2 * log_nodes * inter
        return lat + log_nodes * inter / 3.5 + ranks * 2.8          # pat

    def nvls_bus_gbs(self, coll: str) -> float:
        """NCCL's intra-node NVLS estimate as an nccl-tests bus bandwidth (GB/s); 0 without NVLS.
        Its graph is the node's NVLink one (:func:`~.graphs.nvls_node_graph`): on several nodes
        NCCL's own NVLS graph runs at a NIC's speed, a tuning estimate, not the NVLink rate."""
        g = self.graphs.nvls_node if self.graphs.nvls is not None else None
        if g is None or g.n_channels < 2 or coll not in ("allreduce", "allgather", "reducescatter"):
            return 0.0
        cc, ppn, n = compcap_index(self.machine.sm), self.machine.gpus_per_node, self.machine.ranks
        intra = g.bw_intra * NVLS_EFFICIENCY[cc] * (g.n_channels - 1) / g.n_channels
        intra *= 2.0 if coll == "allreduce" else (ppn - 1) / ppn
        factor = 2.0 * (n - 1) / n if coll == "allreduce" else (n - 1) / n
        return g.n_channels * intra * self._ratio(coll, "nvls") * factor

    # -- selection ------------------------------------------------------------------------
    def algo_time_us(self, coll: str, algo: str, proto: str, nbytes: int) -> float:
        """NCCL's estimate (µs) for one (algorithm, protocol); ``inf`` when disabled."""
        bw = self.bandwidth.get((coll, algo, proto), 0.0)
        if bw <= 0:
            return math.inf
        lat = self.latency[(coll, algo, proto)]
        log_size = int(math.log2(nbytes >> 6)) if nbytes >= 64 else -1
        if algo == "tree" and coll == "allreduce" and 0 <= log_size < 23:
            bw *= TREE_CORRECTION[PROTOS.index(proto)][log_size]
        if self.version >= NVLS_TREE_CORRECTION_VERSION:
            bw *= nvls_tree_correction(self.machine, coll, algo, proto, nbytes)
        m = self.machine
        if algo == "ring" and proto == "Simple" and m.nodes > 1 and coll == "allreduce":
            if legacy_latency_rules(self.version):                    # 2.8-2.17's "plateau effect of ring"
                lat *= 1.9 if nbytes >= m.ranks / 16.0 * 65536 else 1.0
            elif nbytes / (self.graphs.n_channels * m.ranks) >= 64:
                lat *= 1.9 if m.sm < 80 else 1.4                      # NCCL's "plateau effect of ring"
        return lat + nbytes / (1000.0 * bw)

    def enabled(self, coll: str) -> list[tuple[str, str]]:
        """``(algorithm, protocol)`` pairs NCCL compares for ``coll`` (bandwidth > 0)."""
        return [(a, p) for a in ALGOS_FOR[coll] for p in PROTOS if self.bandwidth.get((coll, a, p), 0.0) > 0]

    def choose(self, coll: str, nbytes: int) -> tuple[str, str, int, int, float]:
        """NCCL's pick: ``(algorithm, protocol, channels, threads, estimated µs)``; before NCCL had a
        tuner (2.4), its fixed rules (:func:`~.versions.kernel_info_24`) with this table's estimate."""
        if self.version < TUNER_VERSION:
            algo, proto, nc, nt = kernel_info_24(self.machine, coll, nbytes, self.graphs.n_channels,
                                                 self.env.tree_threshold)
            return algo, proto, nc, nt, self.algo_time_us(coll, algo, proto, nbytes)
        best = (math.inf, "ring", "Simple")
        for algo, proto in self.enabled(coll):
            t = self.algo_time_us(coll, algo, proto, nbytes)
            if t < best[0]:
                best = (t, algo, proto)
        t, algo, proto = best
        nc, nt = self.channels(algo, proto, nbytes, coll)
        return algo, proto, nc, nt, t

    def channels(self, algo: str, proto: str, nbytes: int, coll: str = "allreduce") -> tuple[int, int]:
        """Channels and threads after NCCL's small-message reduction (enqueue.cc) for ``coll``; RCCL across
        hosts on part of a host starts from its 256 threads per channel (:data:`.rccl_net.RCCL_NTHREADS`), and
        RCCL never halves the threads (only the channels).  The cut starts from the tuner's ``maxThreads[algo][proto]``
        (NVIDIA/nccl v2.28.9-1 src/enqueue.cc line 1866), which for ring Simple is the slow-ring default
        (:func:`.ring_steps.simple_ring_threads`: 256 where ``bwIntra x nChannels <= PCI_BW``, src/graph/tuning.cc
        line 231); 2.5 kept one Simple count for ring and tree (v2.5.6-1 enqueue.cc line 266 ``maxThreads[protocol]``,
        tuning.cc line 81).

        >>> from topo_probe import cluster
        >>> from synth.model.nccl import NcclMachine, NcclModel
        >>> m = NcclMachine.from_topology(cluster("mi355x", nodes=2, nics_per_node=1)).with_(ranks=2)
        >>> NcclModel(m, version=(2, 26)).table.channels("tree", "LL", 256)
        (1, 256)
        """
        g, m = self.graphs, self.machine
        if self.version < TUNER_VERSION:                         # 2.4: LL's own channels, else all
            _, p, nc, nt = kernel_info_24(m, coll, nbytes, g.n_channels, self.env.tree_threshold)
            return (nc, nt) if proto == p == "LL" else (g.n_channels, NTHREADS_24 + (proto == "Simple"))
        if algo in ("nvls", "nvls_tree"):
            return (g.nvls_channels if m.nodes == 1 or algo == "nvls_tree"
                    else min(g.nvls_channels, g.n_channels)), 640
        nc, nt = g.n_channels, RCCL_NTHREADS if rccl_partial_host(m) else MAX_NTHREADS[proto]
        if proto == "Simple" and (algo == "ring" or (algo == "tree" and self.version < (2, 6))) \
                and not rccl_partial_host(m):
            nt = simple_ring_threads(m, g, self.version)
        thresh = THREAD_THRESHOLD[proto] * (m.ranks if (algo == "ring" and proto == "LL") else 1)
        chain_28 = algo == "collnet_chain" and collnet_chain_28(self.version)
        if chain_28:        # v2.8.4-1 enqueue.cc getAlgoInfo: "one channel for up and one channel for down", no cut
            nc = max(1, nc // 2)
        while nbytes < nc * nt * thresh and nc >= 2 and not chain_28:
            nc -= 1
        while nbytes < nc * nt * thresh and nt % 128 == 0 and not m.amd:  # RCCL 0cbce2a7 enqueue.cc 1678-1686:
            nt //= 2                                                         # "do not reduce threads count on VEGA"
        return nc, nt


def nvls_tree_correction(m: NcclMachine, coll: str, algo: str, proto: str, nbytes: int) -> float:
    """The fraction of its NVLS-tree bandwidth NCCL expects at ``nbytes`` (1.0 where it expects all):
    from NCCL 2.29.2 its ``ncclTopoGetAlgoTime`` (tuning.cc) scales NVLS-tree all_reduce on Blackwell
    with an x86 CPU by the trees' medium-size correction factor, up to 512 MiB.  The execution model
    (:mod:`.runtime`) applies it at every version: it describes the hardware, not NCCL's choice.

    >>> from topo_probe import cluster
    >>> b200x2 = NcclMachine.from_topology(cluster("hgx-b200", nodes=2))
    >>> [nvls_tree_correction(b200x2, "allreduce", "nvls_tree", "Simple", n << 20) for n in (8, 32, 512, 1024)]
    [0.8, 0.7, 0.9, 1.0]
    """
    log_size = int(math.log2(nbytes >> 6)) if nbytes >= 64 else -1
    if (algo != "nvls_tree" or coll != "allreduce" or m.sm < NVLS_TREE_CORRECTION_SM or m.cpu_arch != "x86"
            or not 0 <= log_size < NVLS_TREE_CORRECTION_COLUMNS):
        return 1.0
    return TREE_CORRECTION[PROTOS.index(proto)][log_size]


__all__ = ["TuneTable", "NCCL_COLLS", "ALGOS_FOR", "NCCL_VERSION", "nvls_tree_correction"]
