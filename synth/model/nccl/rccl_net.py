"""RCCL across hosts on part of an AMD Instinct host: its tuning model 0, its graph search and its tuner's pick.

RCCL matches a host against its "rome models" (ROCm/rccl src/graph/rome_models.cc ``parseRome4P2H``: the model's
``nGpus``, ``nNics``, ``nLinks`` must equal the system's, and every model of an xGMI mesh host is 8 GPUs) and only a
match sets ``system->tuning`` (5 via ``tuning=5`` on gfx942; 6 for any matched gfx950: code index file 2196204885
near char 97000).  A run on fewer of a host's GPUs (``HIP_VISIBLE_DEVICES=0-3``, one GPU per host) matches no model
and keeps ``rcclTuningModel[0]`` (src/graph/tuning.cc ``tuning_model_0``, code index file 2336120413 from char 5500):
NCCL-like network latencies and bandwidth ratios, per-size correction factors, and no ``llProtoRanges`` (so no
protocol override).  RCCL 2.26.6 printed exactly that table on 2 x 1 MI355X (Ahalperin/amd-dev 58a032f7
results/scale_2x1gpu_all_reduce/nccl_debug.log, rows relabelled Broadcast, Reduce, AllGather, ReduceScatter,
AllReduce): allreduce tree LL 35.6 µs / 1.9 GB/s, tree Simple 58.6 / 43.7, ring LL 35.6 / 1.6, ring Simple
58.6 / 40.0, LL128 0, and none of its lines logged "Found matching Rome model" (the 2 x 8 runs did: model index 40).
With those figures its ``ncclTopoGetAlgoTime`` picks what that log's ``AllReduce: N Bytes -> Algo`` lines say: tree
LL to 4 KiB, tree Simple 8 KiB-256 KiB and 1-8 MiB, ring Simple at 512 KiB and from 16 MiB
(``test_rccl_net.py`` recomputes it).  Units: µs, GB/s, bytes.
"""

from __future__ import annotations

import math

from synth.model.nccl.channel_counts import dup_channels
from synth.model.nccl.constants import NET_OVERHEAD_US, PCI_BW_BY_GEN, PROTOS, RCCL_BASE_LAT, RCCL_GFX950, coll_steps
from synth.model.nccl.machine import NcclMachine

#: RCCL's search speeds on AMD GPUs (ROCm/rccl 0cbce2a7 src/graph/search.cc:900-904, ``speedArrayInter``)
RCCL_SPEEDS_INTER = (48.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12)
#: GPUs of every rome model of an xGMI mesh host (rome_models.cc ``.nGpus = 8``; the 16-GPU ones are not xGMI meshes)
ROME_MODEL_GPUS = 8


def _rows(text: str) -> tuple[tuple[float, ...], ...]:
    """Rows of numbers, one row per line (the correction tables below, as tuning.cc prints them)."""
    return tuple(tuple(float(v) for v in line.split()) for line in text.strip().splitlines())


#: ``tuning_model_0`` (tuning.cc, file 2336120413 chars 5500-8700), per (algorithm, protocol LL/LL128/Simple):
#: ``hw_lat`` NVLINK (xGMI), PCI and NET rows, ``bw_ratio`` for 2 nodes / more, ``tree_corr`` / ``ring_corr`` the
#: ``treeCorrectionFactor`` / ``ringCorrectionFactor`` rows indexed by log2(bytes / 64), 0-26
RCCL_TUNING_MODEL_0 = {
    "hw_lat": {"xgmi": {"tree": (0.8, 1.4, 2.5), "ring": (0.8, 2.2, 3.6)},
               "pci": {"tree": (2.2, 2.2, 5.7), "ring": (2.2, 2.2, 5.7)},
               "net": {"tree": (11.8, 18.2, 20.8), "ring": (9.5, 19.8, 15.1)}},
    "bw_ratio": ({"tree": (0.04, 0.22, 0.91), "ring": (0.04, 0.34, 1.00)},
                 {"tree": (0.04, 0.22, 0.95), "ring": (0.04, 0.34, 1.00)}),
    "tree_corr": _rows("""
        0.1 0.2 0.1 0.1 0.9 0.3 0.4 0.1 0.2 0.4 0.2 0.1 0.3 0.3 0.2 0.2 0.2 0.1 0.1 0.1 0.1 0.1 0.1 0.1 0.1 0.1 0.1
        0.1 0.3 1.0 0.1 0.5 1.0 0.9 1.0 1.0 1.0 0.3 0.1 0.4 0.5 0.5 0.4 0.4 0.3 0.3 0.2 0.2 0.2 0.2 0.2 0.2 0.2 0.2
        0.2 1.0 0.1 0.1 0.7 0.2 0.4 0.1 0.1 0.3 0.4 0.3 0.6 0.8 1.0 1.0 1.0 1.0 0.9 0.8 0.8 0.8 0.8 0.8 0.9 0.9 0.9"""),
    "ring_corr": _rows("""
        0.1 0.1 0.1 0.1 0.1 0.2 0.4 0.2 0.3 0.5 0.3 0.1 0.5 0.5 0.3 0.2 0.2 0.1 0.1 0.1 0.1 0.1 0.1 0.1 0.1 0.1 0.1
        0.1 0.1 0.1 0.1 0.1 0.1 0.1 0.1 0.1 0.3 1.0 1.0 1.0 1.0 1.0 1.0 0.8 0.7 0.5 0.4 0.4 0.3 0.3 0.3 0.3 0.3 0.3
        1.0 0.8 0.2 1.0 1.0 0.3 1.0 0.1 0.1 0.2 0.2 0.1 0.5 1.0 0.8 0.8 1.0 0.9 1.0 1.0 1.0 1.0 1.0 1.0 1.0 1.0 1.0"""),
}
#: RCCL's threads per channel (its tuning table prints ``Max NThreads 256`` for every protocol on gfx950: tuning.cc
#: ``getNthreads(..., NCCL_MAX_NTHREADS)`` with RCCL's NCCL_MAX_NTHREADS 256), from which its small-message channel
#: reduction starts (enqueue.cc, NCCL's thread thresholds 8/8/64: :meth:`.tuning.TuneTable.channels`).  RCCL 2.26.6 on
#: 2 x 1 MI355X (8 channels) logged tree Simple on 2, 4 and 8 channels at 32, 64 and 128 KiB
RCCL_NTHREADS = 256


def rccl_partial_host(m: NcclMachine) -> bool:
    """Whether RCCL runs ``m`` across hosts with ``rcclTuningModel[0]``: AMD GPUs on several hosts, fewer per host
    than a rome model has (:data:`ROME_MODEL_GPUS`), so no model matches.  Only gfx950 is followed (the RCCL 2.26
    logs that show it); gfx942 keeps the model's earlier rules.

    >>> from topo_probe import cluster
    >>> m = NcclMachine.from_topology(cluster("mi355x", nodes=2))
    >>> [rccl_partial_host(m.with_(ranks=2 * k)) for k in (1, 2, 4, 8)]
    [True, True, True, False]
    """
    return m.amd and m.arch == "gfx950" and m.nodes > 1 and m.gpus_per_node < ROME_MODEL_GPUS


def rccl_net_graph(m: NcclMachine) -> tuple[int, float, float]:
    """``(channels, ring GB/s per channel, tree bwIntra)`` RCCL's search finds across hosts on part of a host.

    Pass 1 (search.cc ``ncclTopoCompute``): from the first of :data:`RCCL_SPEEDS_INTER` at most the GPU's path to
    its NIC (``maxBw``: the NIC and the GPU's PCIe link), as many channels as the NICs carry (each channel enters and
    leaves a host through one NIC) and the GPU's own links (``totalBw``: its xGMI links to the GPUs in use at RCCL's
    48 GB/s each, or its PCIe link alone), stopping once channels x speed reach ``totalBw``; then
    ``ncclTopoDupChannels`` doubles a graph of 25 GB/s or more (search.cc:885-897).  Pass 2 raises a tree's
    ``bwIntra`` while it is under twice ``bwInter`` and the GPUs' links allow it (one GPU per host: nothing limits
    it).  RCCL 2.26.6 printed ``nChannels 2, bw 24`` on 2 x 2 MI355X with one NIC in use and ``bw 48/20`` for the
    tree of 2 x 1 (its ring at 20, not 24: why, its logs do not say), and 8 channels at 20 on 2 x 4 with four NICs,
    where this search stops at 3 x 48 = 144 GB/s,
    the xGMI links' total, and doubles them to 6 at 24.

    >>> from topo_probe import cluster
    >>> m = NcclMachine.from_topology(cluster("mi355x", nodes=2, nics_per_node=1))
    >>> rccl_net_graph(m.with_(ranks=2)), rccl_net_graph(m.with_(ranks=4))
    ((2, 24.0, 48.0), (2, 24.0, 24.0))
    """
    n_nic, nic = m.visible_nics()
    pcie = PCI_BW_BY_GEN[m.pcie_gen]
    total = pcie if m.gpus_per_node == 1 else m.links_per_gpu * RCCL_GFX950["xgmi_gbs"]
    max_bw = min(nic, pcie)
    best = (0, 0.0)
    for s in RCCL_SPEEDS_INTER:
        if s > max_bw + 1e-9:
            continue
        n = min(32, int(total / s + 1e-9), n_nic * int(nic / s + 1e-9))
        if n * s > best[0] * best[1] + 1e-9:
            best = (n, s)
        if n and n * s >= total - 1e-9:
            break
        if best[0] and s / best[1] <= 0.49:
            break
    n, bw = dup_channels(*(best if best[0] else (1, RCCL_SPEEDS_INTER[-1])), 90, 32)
    intra_cap = math.inf if m.gpus_per_node == 1 else total / n
    intra = bw
    for v in sorted(RCCL_SPEEDS_INTER):
        if intra < v <= intra_cap + 1e-9 and intra < 2 * bw:
            intra = v
    return n, bw, intra


def _log_index(nbytes: int) -> int:
    return min(26, max(0, int(math.log2(nbytes >> 6)) if nbytes >= 64 else 0))


def rccl_net_estimate_us(m: NcclMachine, coll: str, algo: str, proto: str, nbytes: int) -> float:
    """RCCL's own estimate (µs) of ``algo``/``proto`` across hosts with ``rcclTuningModel[0]`` (tuning.cc
    ``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``; ``inf`` where RCCL gives it no bandwidth: LL128, off on
    gfx950, and trees but for allreduce).  The latency's shape is NCCL 2.23's, which RCCL 2.26 (the logs') carries
    and the mirrored RCCL commit (NCCL 2.21.5-based) does not: a tree's network hop where one GPU per host
    (NVIDIA/nccl v2.23.4-1 src/graph/tuning.cc line 236) and ``2 * (nNodes - 1)`` network steps of a ring
    all_reduce (line 258); it reproduces the table RCCL 2.26.6 printed on 2 x 1 MI355X.

    >>> from topo_probe import cluster
    >>> m = NcclMachine.from_topology(cluster("mi355x", nodes=2, nics_per_node=1)).with_(ranks=2)
    >>> [round(rccl_net_estimate_us(m, "allreduce", a, p, 0), 1) for a in ("tree", "ring") for p in ("LL", "Simple")]
    [35.6, 58.6, 35.6, 58.6]
    """
    if proto == "LL128" or (algo == "tree" and coll != "allreduce"):
        return math.inf
    t0, p = RCCL_TUNING_MODEL_0, PROTOS.index(proto)
    n, ring_bw, tree_intra = rccl_net_graph(m)
    ppn, ranks = m.gpus_per_node, m.ranks
    ratio = t0["bw_ratio"][0 if m.nodes <= 2 else 1][algo][p]
    bw_per = (tree_intra if algo == "tree" else ring_bw) if m.nodes <= 2 else ring_bw
    steps = coll_steps(coll, ranks)
    bw = n * bw_per * ratio * (0.5 if algo == "tree" else ranks / steps)
    intra_row = t0["hw_lat"]["xgmi" if ppn > 1 else "pci"][algo][p]
    inter = t0["hw_lat"]["net"]["tree" if ppn == 1 else algo][p]
    lat = RCCL_BASE_LAT[p]
    if algo == "tree":
        lat += 2 * ((ppn - 1) * intra_row + int(math.log2(m.nodes)) * inter)
    elif coll in ("broadcast", "reduce"):
        lat += t0["hw_lat"]["net"]["ring"][p]
    else:
        intra = max(intra_row, NET_OVERHEAD_US[m.cpu_vendor] * (3 if proto == "Simple" else 1))
        n_inter = 2 * (m.nodes - 1) if coll == "allreduce" else m.nodes - 1
        lat += (steps - n_inter) * intra + n_inter * inter
    corr = t0["tree_corr" if algo == "tree" else "ring_corr"][p][_log_index(nbytes)]
    return lat + nbytes / (1000.0 * bw * corr)


def rccl_net_choose(m: NcclMachine, coll: str, nbytes: int, allowed) -> tuple[str, str]:
    """RCCL's ``(algorithm, protocol)`` across hosts on part of a host: the least :func:`rccl_net_estimate_us` of
    the pairs ``allowed(algo, proto)`` permits (NCCL_ALGO / NCCL_PROTO).  Where none of them has a figure (a tree
    forced on a collective but allreduce, LL128 forced), a ring as on every other machine: with the first permitted
    protocol, or Simple where no ring is permitted.

    >>> from topo_probe import cluster
    >>> m = NcclMachine.from_topology(cluster("mi355x", nodes=2, nics_per_node=1)).with_(ranks=2)
    >>> [rccl_net_choose(m, "allreduce", 1 << k, lambda a, p: True) for k in (12, 16, 19, 20, 24)]
    [('tree', 'LL'), ('tree', 'Simple'), ('ring', 'Simple'), ('tree', 'Simple'), ('ring', 'Simple')]
    """
    pairs = [(a, p) for a in ("tree", "ring") for p in PROTOS if allowed(a, p)]
    est = {ap: rccl_net_estimate_us(m, coll, ap[0], ap[1], nbytes) for ap in pairs}
    finite = [ap for ap in pairs if math.isfinite(est[ap])]
    if finite:
        return min(finite, key=est.__getitem__)
    return next((ap for ap in pairs if ap[0] == "ring"), ("ring", "Simple"))


__all__ = ["RCCL_NTHREADS", "RCCL_TUNING_MODEL_0", "RCCL_SPEEDS_INTER", "rccl_partial_host", "rccl_net_graph",
           "rccl_net_estimate_us", "rccl_net_choose"]
