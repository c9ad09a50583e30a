"""Bandwidths and latencies of one (algorithm, protocol) in NCCL's tuning model, in two views:

* ``nccl`` — NCCL's own latency tables: used to *choose* like NCCL;
* ``real`` — the latencies the machine shows (fitted per architecture and NIC kind, with host
  launch costs): used to *predict*.

Bandwidths are the machine's in both (fitted link speeds, the NICs as the bottleneck between
nodes, NVLS efficiency): NCCL's graph search measures its channels' bandwidth on the machine, so
its choice between algorithms follows what the hardware delivers.

Both follow the structure of NCCL's ``ncclTopoTuneModel`` (see :mod:`.constants` for the tables
and their sources): ``time = latency + bytes / (1000 * algorithm bandwidth)`` with GB/s and µs.
"""

from __future__ import annotations

import math

from synth.model.nccl.constants import (
    BASE_LAT_US,
    HW_LAT_US,
    LL_MAX_BW,
    NCCL_NVLINK_GBPS,
    PER_CH_RING_LL128,
    PER_CH_TREE,
    PER_CH_TREE_LL128,
    PROTOCOLS,
    RCCL_BASE_LAT_US,
    RCCL_XGMI_HOP_US,
    ModelParams,
)
from synth.model.nccl.machine import NcclMachine

#: NCCL's treeCorrectionFactor [protocol][log2(bytes / 64)], 64 B to 256 MB (tuning.cc)
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}


def channels(m: NcclMachine, min_ch: int | None = None, max_ch: int | None = None) -> int:
    """Channels NCCL's ring graph search finds: 16 on Hopper NVSwitch boxes, 8 on earlier ones, one per NVLink or
    xGMI link otherwise (at most 32), 2 on PCIe; at least two per NIC across nodes; clamped by
    ``NCCL_MIN_NCHANNELS`` / ``NCCL_MAX_NCHANNELS``."""
    if m.intra == "nvswitch":
        ch = 16 if m.family in ("hopper", "blackwell") else 8
    elif m.intra in ("nvlink", "xgmi"):
        ch = max(2, min(32, m.links_per_gpu))
    else:
        ch = 2
    if m.nodes > 1:
        ch = max(ch, min(32, 2 * m.nics_per_node))
    if min_ch is not None:
        ch = max(ch, min_ch)
    if max_ch is not None:
        ch = min(ch, max_ch)
    return max(1, ch)


def intra_gbps(m: NcclMachine, params: ModelParams, p2p: bool = True) -> float:
    """A GPU's intra-node bandwidth (GB/s per direction) that NCCL's rings can use."""
    pcie = params.link_gbps[("pcie", f"gen{m.pcie_gen}")]
    if not p2p or not m.p2p or m.intra == "pcie":
        return pcie if (p2p and m.p2p) else pcie / 2      # shared memory through the host: two PCIe trips
    kind = "infinity_fabric" if m.intra == "xgmi" else "nvlink"
    per_link = params.link_gbps.get((kind, m.arch), NCCL_NVLINK_GBPS.get(m.arch, 20.0))
    return m.links_per_gpu * per_link


def net_gbps(m: NcclMachine, params: ModelParams) -> float:
    """A node's network bandwidth (GB/s per direction, all its NICs)."""
    return max(1, m.nics_per_node) * m.nic_gbps * params.net_efficiency[m.net_kind] if m.nic_gbps > 0 else 0.0


def bus_bandwidth(m: NcclMachine, algo: str, params: ModelParams, p2p: bool = True) -> float:
    """``busBw`` of ``algo`` before protocol refinements (GB/s): the GPU's intra-node bandwidth,
    and across nodes what the NICs allow (a ring crosses each node's NICs with every byte of
    its traffic; a tree moves each byte across them once each way)."""
    intra = intra_gbps(m, params, p2p)
    if m.nodes == 1:
        return intra
    net = net_gbps(m, params)
    if algo in ("tree", "collnet_direct", "collnet_chain"):
        return min(intra, 2.0 * net)      # a tree moves each byte across a node's NICs once each way
    if algo == "nvls_tree":
        return min(intra, net / params.nvls_efficiency)
    return min(intra, net)


def _refine(m: NcclMachine, coll: str, algo: str, proto: str, bw: float, nch: int) -> float:
    """NCCL's protocol refinements of ``busBw`` (tuning.cc, 'Various model refinements')."""
    fam = m.family
    ll_max = LL_MAX_BW[fam] if m.nodes == 1 else (39.0 if m.nodes <= 2 else 20.4)
    if algo == "ring" and proto == "LL":
        return min(ll_max, bw * (0.25 if m.nodes > 1 or coll in ("allreduce", "reduce") else 1 / 3))
    if algo == "ring" and proto == "LL128":
        return min(bw * (0.7 if m.gpus_per_node < 2 else 0.92), nch * PER_CH_RING_LL128[fam])
    if algo == "two_shot":                     # all-pairs kernels: LL carries a flag per 8 bytes
        return bw * {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}[proto]
    if algo == "tree":
        bw = min(bw * 0.92, nch * PER_CH_TREE[fam])
        if proto == "LL":
            return min(bw / 3.8, ll_max)
        if proto == "LL128":
            return min(bw * (7 / 9 if m.nodes == 1 else 120 / 128), nch * PER_CH_TREE_LL128[fam])
    return bw


def refined_bus_bandwidth(m: NcclMachine, coll: str, algo: str, proto: str, params: ModelParams,
                          nch: int, p2p: bool = True) -> float:
    """``busBw`` after NCCL's protocol refinements (GB/s), before the bus -> algorithm ratio."""
    return _refine(m, coll, algo, proto, bus_bandwidth(m, algo, params, p2p), nch)


def algo_bandwidth(m: NcclMachine, coll: str, algo: str, proto: str, params: ModelParams,
                   nch: int, p2p: bool = True) -> float:
    """Algorithm bandwidth (GB/s): refined busBw times NCCL's bus -> algorithm ratio."""
    bw = refined_bus_bandwidth(m, coll, algo, proto, params, nch, p2p)
    n = m.ranks
    if algo in ("ring", "pat"):
        steps = 2 * (n - 1) if coll == "allreduce" else n - 1 if coll in ("allgather", "reducescatter") else n
        return bw * n / steps
    if algo in ("nvls", "nvls_tree"):
        return bw * params.nvls_efficiency
    if algo == "one_shot":                     # every rank reads each peer's whole buffer over its link
        return bw / max(1, m.links_per_gpu)
    if algo == "two_shot":                     # all-pairs reduce-scatter, then all-pairs all-gather
        return bw / max(1, m.links_per_gpu) * n / 2
    return bw * 0.5


def pipeline_stages(m: NcclMachine, algo: str) -> int:
    """Links a chunk crosses one after the other before the pipeline is full: 1 for rings (every
    step moves 1/n of a channel's data, so a ring has no fill beyond its latency), up and down
    the tree for trees (GPUs of a node in a chain, then log2(nodes) network levels), the switch
    reduction and broadcast for NVLS."""
    levels = (m.gpus_per_node - 1) + math.ceil(math.log2(m.nodes)) if m.nodes > 1 else m.gpus_per_node - 1
    if algo == "tree":
        return 2 * max(1, levels)
    if algo == "nvls":
        return 2
    if algo == "nvls_tree":
        return 2 + 2 * math.ceil(math.log2(max(2, m.nodes)))
    if algo in ("collnet_direct", "collnet_chain"):
        return 2 + (m.gpus_per_node - 1 if algo == "collnet_chain" else 1)
    return 1


def fill_us(m: NcclMachine, algo: str, proto: str, nbytes: float, busbw: float, nch: int,
            params: ModelParams) -> float:
    """Pipeline fill of a chunked algorithm (µs): before the last stage starts, the first chunk
    of each channel crosses ``stages - 1`` links, each at the channel's share of the refined bus
    bandwidth ``busbw``; a chunk is ``params.chunk_bytes[proto]`` or the channel's whole share
    when that is smaller."""
    stages = pipeline_stages(m, algo)
    if stages <= 1 or busbw <= 0:
        return 0.0
    chunk = min(nbytes / max(1, nch), params.chunk_bytes[proto])
    return (stages - 1) * chunk * nch / (1000.0 * busbw)


def tree_correction(algo: str, proto: str, nbytes: float) -> float:
    """NCCL's static tree correction for medium sizes (1.0 outside 64 B .. 256 MB)."""
    if algo != "tree":
        return 1.0
    k = int(math.log2(max(1, int(nbytes) >> 6))) if nbytes >= 64 else 0
    table = TREE_CORRECTION[proto]
    return table[k] if k < len(table) else 1.0


def latency_us(m: NcclMachine, coll: str, algo: str, proto: str, view: str, params: ModelParams) -> float:
    """NCCL's latency of ``algo`` / ``proto`` (µs), plus host launch costs in the ``real`` view."""
    p = PROTOCOLS.index(proto)
    hw = "pci" if m.intra == "pcie" or not m.p2p else "nvlink"
    launch = params.launch_us + (m.gpus_per_process - 1) * params.launch_per_gpu_us if view == "real" else 0.0
    if algo in ("one_shot", "two_shot"):     # RCCL's all-pairs kernels: one or two rounds to every peer
        return params.one_shot_us * (1 if algo == "one_shot" else 2) + launch
    base, intra = BASE_LAT_US[algo][p], HW_LAT_US[hw][algo][p]
    if m.amd and algo in ("ring", "tree"):
        base, intra = RCCL_BASE_LAT_US[p], RCCL_XGMI_HOP_US[p]
    if view == "real" and algo in ("ring", "tree", "pat") and hw == "nvlink":
        base = params.base_us[proto]
        intra = params.hop_us.get((m.arch, proto), intra) * (28.0 / 3.4 if algo == "tree" and proto == "Simple" else 1.0)
    inter = HW_LAT_US["net"][algo][p] * (params.net_latency_scale[m.net_kind] if view == "real" else 1.0)
    if m.nodes > 1 and proto == "LL":
        intra *= 1.8
    n, nodes, ppn = m.ranks, m.nodes, m.gpus_per_node
    if algo == "ring":
        steps = 2 * (n - 1) if coll == "allreduce" else n - 1 if coll in ("allgather", "reducescatter") else n
        inter_steps = (2 * nodes if nodes > 1 else 0) if coll == "allreduce" else nodes - 1
        lat = base + (steps - inter_steps) * intra + inter_steps * inter
    elif algo == "tree":
        lat = base + 2 * ((ppn - 1) * intra + math.log2(nodes) * inter)
    elif algo == "nvls":
        lat = intra + (inter if nodes > 1 else 0.0)
    elif algo == "nvls_tree":
        lat = base + intra + 2 * math.log2(nodes) * inter
    elif algo == "collnet_direct":
        lat = base + 2 * (min(1, ppn - 1) * intra + (ppn - 1) * 0.4) + inter
    elif algo == "collnet_chain":
        lat = base + 2 * (ppn - 1) * intra + inter
    else:                                    # pat: log2(nodes) network rounds
        lat = base + math.log2(max(2, nodes)) * inter
    return lat + launch


__all__ = ["pipeline_stages", "fill_us", "channels", "intra_gbps", "net_gbps", "bus_bandwidth", "algo_bandwidth", "latency_us",
           "tree_correction", "TREE_CORRECTION"]
