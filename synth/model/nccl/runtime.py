"""How long NCCL's choice really takes: the execution-time model.

NCCL's tuner (:mod:`.tuning`) decides *what* runs with its own rough estimate; this module
predicts the time nccl-tests measures for that choice, with the same structure (latency + bytes /
bandwidth) but physical capacities and the fitted constants of :mod:`.params`:

``T = max(T_host, T_dev)``.  ``T_host`` is the host cost of enqueueing one operation on every GPU
one thread drives (``gpus_per_process / threads_per_process * (host_us + host_us_per_channel * channels)``): nccl-tests
launches back to back, so the host hides under the device unless one thread drives 8 GPUs.
``T_dev = latency + W / B`` with ``W`` the bytes each rank moves on its busiest link (nccl-tests'
bus-bandwidth convention) and ``B`` the achievable bus bandwidth: data-sheet link bandwidth x
efficiency x protocol payload (LL 8 of 16 bytes, LL128 120 of 128), never more than the channels
in use can push (NCCL's llMaxBws / perChMaxRingLL128Bws), across nodes never more than a node's
NICs carry or a ring's CTAs move there, and for Simple never more than ``chunk / net_chunk_us`` per channel.
The size-free terms, ``T_host`` and the latency, are :mod:`.latency`'s; :class:`SizeFreeTerms` memoises the
latency and the GPU links' bus bandwidth (neither reads the byte count) for one model's many sizes.

Units: µs, bytes, GB/s per direction.
"""

from __future__ import annotations

import math

from synth.model.nccl.constants import (
    LL128_DATA_FRACTION,
    LL_DATA_FRACTION,
    NVLINK_BW_PER_LINK,
    busbw_factor,
)
from synth.model.nccl.element_copy import ring_element_copy_factor
from synth.model.nccl.channel_caps import (AMD_REF_CHANNELS, ll128_generation_share, ring_channel_cap_gbs,
                                          tree_ll128_cap_gbs)
from synth.model.nccl.graphs import CommGraphs
from synth.model.nccl.latency import host_time_us, latency_us
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.nvls_pipeline import nvls_loop_fill_us, nvls_tree_chunk_bytes, tree_simple_chunk_bytes
from synth.model.nccl.params import ModelParams
from synth.model.nccl.rccl_channels import rccl_channel_cap_gbs
from synth.model.nccl.net_fill import critical_path_hops, net_chunk_fill_us
from synth.model.nccl.p2p_cta import ring_net_cta_cap_gbs
from synth.model.nccl.ring_steps import ll_chunk_factor, ring_simple_send_share, simple_ring_threads
from synth.model.nccl.pcie_path import nic_efficiency, pcie_stream_gbs
from synth.model.nccl.shm_uplink import shm_stream_gbs
from synth.model.nccl.tuning import TuneTable, nvls_tree_correction
from synth.model.nccl.collnet_versions import collnet_chain_28


#: the algorithms whose NICs carry one steady flow per direction on two nodes, as a ring's (:func:`_net_bus_gbs`)
STEADY_NET_ALGOS = ("nvls_tree",)


def link_kind(m: NcclMachine, p2p: bool) -> str:
    """``nvlink``, ``xgmi``, ``pcie`` or ``shm`` (through host memory: P2P disabled)."""
    if not p2p or not m.p2p:
        return "shm"
    return {"nvswitch": "nvlink", "nvlink": "nvlink", "xgmi": "xgmi", "pcie": "pcie"}[m.intra]


def ring_capacity_gbs(m: NcclMachine, g: CommGraphs, params: ModelParams, p2p: bool = True) -> float:
    """Achievable ring bus bandwidth inside a node (GB/s, all channels busy)."""
    kind = link_kind(m, p2p)
    if kind == "nvlink" and m.intra == "nvswitch" or kind == "xgmi":
        raw = m.links_per_gpu * m.link_gbs        # one xGMI host: what its rings use (5-7 GPUs: 2 links, rccl_channels)
        raw = min(raw, g.ring.n_channels * g.ring.bw_intra) if kind == "xgmi" and m.nodes == 1 else raw
    elif kind == "nvlink":                       # point-to-point mesh: a ring rides one link per hop
        raw = g.ring.n_channels * g.ring.bw_intra * m.link_gbs / NVLINK_BW_PER_LINK.get(m.sm, 20.0)
    else:
        # through host memory (P2P off): a GPU writes what it sends into host memory and reads what it
        # receives from there, each over its own PCIe x16 link, one flow per direction; P2P over PCIe
        # writes into the next GPU over the same links, one flow per direction too.  NCCL's search speeds
        # for such paths (PCI_BW 24 GB/s, AMD_BW 16 or 10 GB/s through a CPU; topo.h) are its tuning
        # estimates, which its 2 channels of a PCIe ring do not stop at; capped by the slowest PCIe link between
        # the GPUs (a narrower GPU link, switch uplink or socket link: :mod:`.pcie_path`, search.cc line 110)
        raw = pcie_stream_gbs(m)
    rate = raw * params.link_efficiency(m.arch, kind)
    return min(rate, m.p2p_write_gbs) if kind == "pcie" and m.p2p_write_gbs > 0 else rate   # NcclMachine docstring


def _proto_fraction(arch: str, proto: str, params: ModelParams) -> float:
    nominal = {"LL": LL_DATA_FRACTION, "LL128": LL128_DATA_FRACTION}.get(proto, 1.0)
    return nominal * params.proto_efficiency(arch, proto)


def _net_bw(m: NcclMachine, params: ModelParams, ring: bool = False) -> float:
    """What a node's NICs deliver (GB/s): line rate of the NICs its GPUs reach (:attr:`NcclMachine.used_net_gbps`:
    at most the GPUs' PCIe x16 links; the efficiency below derates both alike; or the rate they move GPU memory at,
    where the machine states it: :attr:`NcclMachine.gpu_net_gbps`), times the achieved fraction (``ring``: of ring
    channels streaming through them, see :func:`_net_bus_gbs`)."""
    wire = m.gpu_net_gbps
    eff = params.ring_net_efficiency(m.net_kind) if ring else params.net_efficiency(m.net_kind)
    return wire * nic_efficiency(m, params, eff)              # a NIC its PCIe slot limits: .pcie_path


def _intra_bus_gbs(t: TuneTable, coll: str, algo: str, proto: str, channels: int, params: ModelParams) -> float:
    """Bus bandwidth (nccl-tests convention) the node's GPU links allow (GB/s).

    A tree's LL128 chain runs at most at :func:`tree_ll128_cap_gbs`, NCCL's own per-channel tree ceiling; a
    ring's LL128 at the GPU generation's share of its payload rate, by NCCL's per-channel ring figure
    (:func:`ll128_generation_share`; the NICs' side keeps the whole: what limits there is the network)."""
    m, g = t.machine, t.graphs
    if m.gpus_per_node == 1:
        return math.inf
    frac, p2p = _proto_fraction(m.arch, proto, params), not t.env.p2p_off
    ring_cap = shm_stream_gbs(m, coll, ring_capacity_gbs(m, g, params, p2p=p2p), params, p2p)
    share = min(1.0, channels / (min(g.n_channels, AMD_REF_CHANNELS) if m.amd else g.n_channels))
    if algo in ("nvls", "nvls_tree"):
        return t.nvls_bus_gbs(coll) * params.nvls_efficiency * min(1.0, channels / g.nvls_channels)
    if algo == "ring":
        cap = min(ring_channel_cap_gbs(m, proto, channels, g, coll, t.version),
                  rccl_channel_cap_gbs(m, proto, channels, params.rccl_channel_gbs))
        gen = ll128_generation_share(m) if proto == "LL128" else 1.0
        steps = ring_simple_send_share(m, coll, ring_cap / g.n_channels, params, t.version, t.env.p2p_off,
                                       simple_ring_threads(m, g, t.version)) if proto == "Simple" else 1.0
        return min(ring_cap * frac * gen * share * ring_intra_relief(m, p2p) * steps, cap)
    # tree / collnet: a chain inside the node sending up and down at once
    bus = busbw_factor(coll, m.ranks) * ring_cap / 2.0 * frac * share * params.tree_efficiency(proto)
    if algo == "tree" and proto == "LL128":
        bus = min(bus, tree_ll128_cap_gbs(m, g, coll, params) * share)
    return bus


def ring_intra_relief(m: NcclMachine, p2p: bool = True) -> float:
    """How much more bus bandwidth a ring's GPU links allow on several hosts than on one (a ratio).

    On one host every send of the ring rides the GPU links.  On several, each channel's ring
    leaves a host through a NIC once: of a host's ``ppn`` GPUs one sends to the next host, the
    other ``ppn - 1`` over the GPU links, and NCCL's channels start the ring at a different GPU
    each, so every GPU link carries ``(ppn - 1) / ppn`` of what it carries on one host.  Not where
    the GPU links are PCIe (:func:`link_kind` ``pcie`` or ``shm``): a GPU's x16 link also carries its
    NIC hop, into host buffers without GPUDirect RDMA (NVIDIA/nccl v2.6.4-1 src/transport/net.cc lines
    67-73, 90-96, 111, 145: ``ncclCudaHostAlloc`` unless ``useGdr``) or the NIC's DMA of GPU memory with it.

    >>> from topo_probe import cluster, get_preset
    >>> ring_intra_relief(NcclMachine.from_topology(get_preset("dgx-h100")))
    1.0
    >>> ring_intra_relief(NcclMachine.from_topology(cluster("dgx-h100", nodes=2)))
    1.1428571428571428
    """
    ppn = m.gpus_per_node
    return ppn / (ppn - 1) if m.nodes > 1 and ppn > 1 and link_kind(m, p2p) not in ("pcie", "shm") else 1.0


def tree_net_passes(m: NcclMachine, algo: str) -> int:
    """How many times a node's NICs carry the message per direction in NCCL's double binary tree
    (tree, NVLS-tree; nodes are the trees' vertices, each tree carries half the message).

    On two nodes each tree is a chain of two: a node is the root of one tree and the leaf of the
    other, so its NICs carry half + half = the message once per direction (the case NCCL's
    maintainers call ideal for trees).  On more nodes every node is an inner vertex with two
    children in one tree and a leaf in the other: up, it receives two halves and sends one (plus
    one as a leaf), down the reverse, so its NICs carry the message twice per direction.
    CollNet reduces in the network switch and crosses each NIC once.

    >>> from topo_probe import cluster
    >>> [tree_net_passes(NcclMachine.from_topology(cluster("dgx-h100", nodes=k)), "tree") for k in (2, 4)]
    [1, 2]
    """
    return 2 if m.nodes > 2 and algo in ("tree", "nvls_tree") else 1


def _net_bus_gbs(t: TuneTable, coll: str, algo: str, proto: str, params: ModelParams) -> float:
    """Bus bandwidth the NICs of a node allow (GB/s, multi-node only).

    Ring: every channel enters and leaves a node once, through one NIC, and the channels are
    spread evenly over the NICs: each NIC streams one steady flow per direction per channel, at
    the ring's achieved fraction of the line rate (``ring_net_eff``; real H100 InfiniBand rings
    reach 49 of 50 GB/s per NIC on 1, 2, 4 and 8 GPUs per host).  Trees: ``net_eff`` and
    :func:`tree_net_passes` (an inner vertex's NICs carry its two children's and its parent's
    flows, unevenly over the channels), except NVLS-tree on two nodes (``STEADY_NET_ALGOS``): a chain
    of two, one steady flow per NIC and direction as a ring's, which NCCL itself rates at the full
    NIC rate (NVIDIA/nccl v2.29.3-1 src/graph/tuning.cc ncclTopoTuneModel, ``interBw`` doubled for
    ``nNodes <= 2 && NVLS_TREE``): the ring's ``ring_net_eff``."""
    m, g = t.machine, t.graphs
    frac = _proto_fraction(m.arch, proto, params)
    if algo == "ring":
        n_nic = m.visible_nics()[0]
        return _net_bw(m, params, ring=True) * min(g.ring.n_channels, n_nic) / n_nic * frac
    steady = algo in STEADY_NET_ALGOS and m.nodes == 2
    bus = busbw_factor(coll, m.ranks) * _net_bw(m, params, ring=steady) * frac / tree_net_passes(m, algo)
    if algo == "collnet_chain" and proto == "LL" and collnet_chain_28(t.version):
        # NCCL 2.8's CollNet LL at NCCL's own estimate, a sixth of its Simple one: "GDR read is disabled on
        # both sides" (v2.8.4-1 src/graph/tuning.cc line 131), as ring LL runs at its version's estimate
        bus = min(bus, t.bandwidth[(coll, algo, proto)] * busbw_factor(coll, m.ranks))
    return bus


def simple_chunk_bytes(t: TuneTable, algo: str, nbytes: int, channels: int) -> int:
    """Bytes the Simple protocol sends per network message (enqueue.cc): tree: the Simple step (NCCL_BUFFSIZE / 8),
    halved by depth (:func:`tree_simple_chunk_bytes`); NVLS(-tree): the NVLS chunk, cut to 64/32/16 KiB under
    64x/8x/2x (channels x heads) chunks; NVLS-tree: its own rule (:func:`nvls_tree_chunk_bytes`); ring: 2 MiB."""
    m = t.machine
    ops = channels * (t.graphs.nvls.n_channels if t.graphs.nvls else 1)
    if algo == "nvls_tree":
        return nvls_tree_chunk_bytes(t.env.nvlstree_chunk, m.nodes, nbytes, ops)
    if algo == "nvls":
        chunk = 131072
        for mult, size in ((64, 65536), (8, 32768), (2, 16384)):
            if nbytes < mult * ops * chunk and chunk > size:
                chunk = size
        return chunk
    if algo == "ring":
        return 4 * 524288
    depth = m.gpus_per_node - 1 + max(1, int(math.log2(m.nodes)))        # trees.cc depth
    return tree_simple_chunk_bytes(t.env.simple_step_bytes, depth, nbytes / max(1, channels))


def nvls_chunk_overhead_us(t: TuneTable, algo: str, nbytes: int, channels: int, params: ModelParams) -> float:
    """µs the NVLS chunks cost beyond their bytes: every channel works through its share of the
    message one NVLS chunk (:func:`simple_chunk_bytes`) at a time, ``nvls_chunk_us`` each.  On
    8 x H100 (16 channels, 8 heads): 16 MiB is 32 chunks of 32 KiB per channel, 8 GiB 4,096 of 128 KiB.

    >>> from topo_probe import get_preset
    >>> from synth.model.nccl import NcclModel
    >>> t = NcclModel(NcclMachine.from_topology(get_preset("dgx-h100"))).table
    >>> p = ModelParams(nvls_chunk_us=0.5)
    >>> nvls_chunk_overhead_us(t, "nvls", 16 << 20, 16, p), nvls_chunk_overhead_us(t, "nvls", 8 << 30, 16, p)
    (16.0, 2048.0)
    """
    chunk = simple_chunk_bytes(t, algo, nbytes, channels)
    return params.nvls_chunk_us * math.ceil(nbytes / (max(1, channels) * chunk))


def _chunk_rate_gbs(t: TuneTable, coll: str, algo: str, proto: str, channels: int, nbytes: int,
                    params: ModelParams) -> float:
    """Bus bandwidth the network's per-message cost allows (GB/s): ``chunk / alpha`` per channel."""
    m = t.machine
    alpha = params.net_chunk_us(m.net_kind, m.arch)
    if m.nodes == 1 or proto != "Simple" or alpha <= 0.0:
        return math.inf
    chunk = simple_chunk_bytes(t, algo, nbytes, channels)
    return channels * chunk / (1000.0 * alpha) * busbw_factor(coll, m.ranks)


def _transfer_us(t: TuneTable, coll: str, algo: str, proto: str, channels: int, nbytes: int,
                 params: ModelParams, terms: SizeFreeTerms | None = None) -> float:
    """Bandwidth part of the time (µs): the slower of the GPU links and the network (a Blackwell
    NVLS-tree all_reduce of at most 512 MiB at the fraction NCCL itself expects: :func:`nvls_tree_correction`;
    a one-host NVLS all_reduce fills and drains its scatter/reduce/gather loop: :func:`nvls_loop_fill_us`);
    ``terms``: the GPU links' bus bandwidth memoised for ``t`` and ``params`` (None: computed here)."""
    wire = nbytes * busbw_factor(coll, t.machine.ranks) * ll_chunk_factor(t, coll, algo, proto, channels, nbytes)
    bus = (terms.intra_bus_gbs(coll, algo, proto, channels) if terms is not None    # misaligned blocks: element_copy
           else _intra_bus_gbs(t, coll, algo, proto, channels, params))
    t_intra = wire / (1000.0 * bus) * ring_element_copy_factor(t, coll, algo, proto, channels, nbytes, bus, params)
    if algo == "nvls" and coll == "allreduce" and t.machine.nodes == 1 and t.machine.gpus_per_node > 1:
        t_intra += nvls_loop_fill_us(nbytes, channels, t.graphs.nvls.n_channels if t.graphs.nvls else 1,
                                     simple_chunk_bytes(t, algo, nbytes, channels), t_intra)
    if algo in ("nvls", "nvls_tree") and t.machine.gpus_per_node > 1:
        t_intra += nvls_chunk_overhead_us(t, algo, nbytes, channels, params)
    if t.machine.nodes == 1:
        return t_intra
    net_bus = min(_net_bus_gbs(t, coll, algo, proto, params),
                  _chunk_rate_gbs(t, coll, algo, proto, channels, nbytes, params),
                  ring_net_cta_cap_gbs(t.machine, algo, proto, channels, params, coll, t.env.simple_step_bytes))
    return max(t_intra, wire / (1000.0 * net_bus)) / nvls_tree_correction(t.machine, coll, algo, proto, nbytes)


def tree_intra_channel_gbs(t: TuneTable, channels: int) -> float:
    """GB/s one channel of a tree moves over one GPU-to-GPU hop inside a node: NCCL's own speed of the
    tree graph inside the node (``nChannels x bwIntra`` of its search, :mod:`.graphs`) shared by the
    channels in use.  A topology figure of NCCL's, not a fitted one: on 2 x p4d (4 tree graph channels
    of 24 GB/s, 8 channels in use) 12 GB/s.

    >>> from topo_probe import cluster
    >>> from synth.model.nccl import NcclModel
    >>> t = NcclModel(NcclMachine.from_topology(cluster("dgx-a100", nodes=2))).table
    >>> tree_intra_channel_gbs(t, 8) == t.graphs.tree.n_channels * t.graphs.tree.bw_intra / 8
    True
    """
    g = t.graphs.tree
    return g.n_channels * g.bw_intra / max(1, channels)


def pipeline_fill_us(t: TuneTable, algo: str, proto: str, channels: int, nbytes: int, params: ModelParams) -> float:
    """µs a (NVLS-)tree's first Simple chunk takes to cross the hops before every hop streams.

    A tree is a pipeline: each step of NCCL's Simple primitives forwards a chunk only once the whole
    chunk has arrived from the hop before (NVIDIA/nccl v2.27.3-1 src/device/prims_simple.h lines
    193-299: ``waitPeer`` for the whole slice, then ``postPeer``; a tree runs ``ProtoSimple<1, 1>``, one
    slice per chunk, src/device/all_reduce.h), so the last hop starts one chunk time per hop after the
    first.  NCCL's own latency table has no such term (src/graph/tuning.cc v2.27.3-1 line 343: "Add some
    chunk latency, waiting for proper chunk modeling").  The chunk is NCCL's (:func:`simple_chunk_bytes`,
    enqueue.cc), never more than the channel's own bytes (all_reduce.h: ``nelem = min(chunkCount,
    channelCount - elemOffset)``).  A network hop takes it at one channel's share of the node's NICs
    (channels spread evenly over them): on 2 x p5 (32 x 12.5 GB/s EFA, 16 NVLS-tree channels, 512 KiB
    chunks from 2 GiB) about 2 x 512 KiB / 20 GB/s = 52 µs.  A tree's hops inside the nodes, the chain
    of the node's GPUs up and down (``2 x (GPUs per node - 1)``, :func:`~.net_fill.critical_path_hops`), take it at
    :func:`tree_intra_channel_gbs`: no one-host fit holds them (a one-host tree never crosses the network,
    and the one-host logs run rings and NVLS).  An NVLS-tree's node part is one NVLS step (network hops only).

    >>> from topo_probe import cluster
    >>> from synth.model.nccl import NcclModel
    >>> t = NcclModel(NcclMachine.from_topology(cluster("dgx-h100", nodes=2))).table
    >>> p = ModelParams(net_eff={"*": 0.8})
    >>> pipeline_fill_us(t, "nvls_tree", "Simple", 16, 1 << 30, p)      # 2 hops x 128 KiB / (400 x 0.8 / 16 GB/s)
    13.1072
    """
    m = t.machine
    if m.nodes == 1 or proto != "Simple" or algo not in ("tree", "nvls_tree"):
        return 0.0
    chunk = min(simple_chunk_bytes(t, algo, nbytes, channels), math.ceil(nbytes / max(1, channels)))
    rate = _net_bw(m, params) / max(channels, m.visible_nics()[0])        # GB/s of one channel
    intra, inter = critical_path_hops(m, "allreduce", algo)
    fill = inter * chunk / (1000.0 * rate)
    if algo == "tree" and m.gpus_per_node > 1:
        fill += intra * chunk / (1000.0 * tree_intra_channel_gbs(t, channels))
    return fill


class SizeFreeTerms:
    """The terms of :func:`collective_time_us` that do not read the byte count, memoised for one tuning table and one
    set of constants: :func:`~.latency.latency_us` (µs) and the bus bandwidth the GPU links allow
    (:func:`_intra_bus_gbs`, GB/s), per (collective, algorithm, protocol, channels).

    Both read nothing but the table (the machine, NCCL version and environment it was built for, the graphs and
    NCCL's figures derived from them), ``params`` and those four arguments: a memo belongs to the table and params it
    was made for (its owner, :class:`~.tuner.NcclModel`, makes a new one when either is replaced;
    :func:`collective_time_us` refuses it for any other) and keys its values by the rest.  A table is not changed
    once built, and :class:`~.params.ModelParams` is frozen; its tables (dicts) are not changed in place either
    (:meth:`~.params.ModelParams.with_vector` and ``dataclasses.replace`` make new params): one changed in place
    after a model's first call would leave that model's memo stale.
    """

    def __init__(self, table: TuneTable, params: ModelParams):
        self.table, self.params = table, params
        self._latency: dict[tuple[str, str, str, int], float] = {}
        self._intra_bus: dict[tuple[str, str, str, int], float] = {}

    def serves(self, table: TuneTable, params: ModelParams) -> bool:
        """Whether this memo holds ``table``'s terms under ``params`` (the very objects it was made for)."""
        return table is self.table and params is self.params

    def latency_us(self, coll: str, algo: str, proto: str, channels: int) -> float:
        """:func:`~.latency.latency_us` of the table under the params (µs)."""
        key = (coll, algo, proto, channels)
        if key not in self._latency:
            self._latency[key] = latency_us(self.table, coll, algo, proto, self.params, channels)
        return self._latency[key]

    def intra_bus_gbs(self, coll: str, algo: str, proto: str, channels: int) -> float:
        """:func:`_intra_bus_gbs` of the table under the params (GB/s)."""
        key = (coll, algo, proto, channels)
        if key not in self._intra_bus:
            self._intra_bus[key] = _intra_bus_gbs(self.table, coll, algo, proto, channels, self.params)
        return self._intra_bus[key]


def collective_time_us(t: TuneTable, coll: str, algo: str, proto: str, channels: int, nbytes: int,
                       params: ModelParams, terms: SizeFreeTerms | None = None) -> float:
    """Predicted nccl-tests time (µs) of ``coll`` of ``nbytes`` as ``algo``/``proto`` on ``channels`` channels;
    ``terms``: the size-free terms memoised for ``t`` and ``params`` (None: each computed here, no memo)."""
    if terms is not None and not terms.serves(t, params):
        raise ValueError("collective_time_us: the SizeFreeTerms given were made for another table or params")
    t_dev = ((terms.latency_us(coll, algo, proto, channels) if terms is not None
              else latency_us(t, coll, algo, proto, params, channels))
             + _transfer_us(t, coll, algo, proto, channels, nbytes, params, terms)
             + pipeline_fill_us(t, algo, proto, channels, nbytes, params))
    if t.machine.nodes > 1:             # a network hop's whole chunk (net_fill); one host has no NIC rate to ask
        t_dev += net_chunk_fill_us(coll, algo, proto, nbytes, channels, t.machine, _net_bw(t.machine, params, True),
                                   _net_bw(t.machine, params), t.env.simple_step_bytes)
    m = t.machine
    return max(host_time_us(params, m.gpus_per_process, channels, t.version, m.threads_per_process), t_dev)


__all__ = ["link_kind", "ring_intra_relief", "tree_net_passes", "ring_capacity_gbs", "simple_chunk_bytes",
           "nvls_tree_chunk_bytes", "nvls_chunk_overhead_us", "pipeline_fill_us", "tree_intra_channel_gbs",
           "SizeFreeTerms", "collective_time_us"]
