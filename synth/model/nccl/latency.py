"""What a collective costs whatever its size: the host's enqueue time and the device latency (µs).

The size-free half of :mod:`.runtime`'s ``T = max(T_host, latency + W / B)``: ``T_host`` is the host cost of
enqueueing one operation on every GPU one thread drives (:func:`host_time_us`); the device latency is NCCL's (or
RCCL's) latency table, scaled by the fitted real/table ratio of the architecture and protocol, over the hops on the
collective's critical path, plus the transport's extra µs per inter-node hop (:func:`latency_us`,
:func:`hop_latencies_us`).  Neither depends on the byte count, so :class:`.runtime.SizeFreeTerms` memoises
:func:`latency_us` per model.

Units: µs.
"""

from __future__ import annotations

from synth.model.nccl.constants import (
    ALGOS,
    HW_LAT,
    HW_NET,
    HW_NVLINK,
    HW_PCI,
    NCCL_VERSION,
    PROTOS,
    RCCL_BASE_LAT,
    RCCL_GFX942,
)
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.net_fill import critical_path_hops, pays_rooted_fill, rooted_chain_hops
from synth.model.nccl.params import ModelParams
from synth.model.nccl.tuning import TuneTable
from synth.model.nccl.versions import latency_tables, net_latency_algo


#: the first NCCL that no longer launches a process's GPUs together: up to 2.8, a process driving several
#: GPUs launched them with one cudaLaunchCooperativeKernelMultiDevice call (src/enqueue.cc
#: ``ncclLaunchCooperativeKernelMultiDevice``, NVIDIA/nccl v2.4.8-1 .. v2.8.4-1)
COOP_LAUNCH_UNTIL = (2, 9)


def host_time_us(params: ModelParams, gpus_per_process: int, channels: int, version: tuple = NCCL_VERSION,
                 threads_per_process: int = 1) -> float:
    """Host µs to enqueue one collective on the GPUs one thread of a process drives (nccl-tests ``-g``: each of its
    ``-t`` threads enqueues and launches its own in parallel, v2.19.6 src/common.cu lines 548-619 and 1725-1768; NCCL's
    group is per thread, NVIDIA/nccl v2.28.9-1 src/group.cc line 22, launched in turn, lines 259-315), and before NCCL
    2.9 the cooperative multi-device launch of all the process's GPUs, every thread's (``coop_launch_us``, only when a
    process drives several: v2.8.4-1 src/init.cc lines 595-600 count one pid's ranks, enqueue.cc lines 204-212).

    >>> p = ModelParams(host_us=4.0, host_us_per_channel=0.0, coop_launch_us=10.0)
    >>> host_time_us(p, 8, 1), host_time_us(p, 8, 1, (2, 4)), host_time_us(p, 1, 1, (2, 4))
    (32.0, 42.0, 4.0)
    >>> host_time_us(p, 8, 1, (2, 28), 2), host_time_us(p, 8, 1, (2, 28), 8), host_time_us(p, 8, 1, (2, 4), 8)
    (16.0, 4.0, 14.0)
    """
    coop = params.coop_launch_us if gpus_per_process > 1 and tuple(version) < COOP_LAUNCH_UNTIL else 0.0
    return gpus_per_process // threads_per_process * (params.host_us + params.host_us_per_channel * channels) + coop


def hop_latencies_us(m: NcclMachine, algo: str, proto: str, params: ModelParams, p2p_off: bool = False,
                     version: tuple = NCCL_VERSION, coll: str = "") -> tuple[float, float, float]:
    """``(base, intra-node hop, inter-node hop)`` µs of ``algo``/``proto`` on ``m``: NCCL's (or
    RCCL's) tables (the ring rows of NCCL ``version``'s, :func:`~.versions.latency_tables`) scaled by
    the fitted real/table ratio of the architecture and protocol; an inter-node hop is the table's
    network hop plus the transport's fitted extra (NCCL from 2.23 with one GPU a node: the tree's row but for a ring
    ``coll`` broadcast / reduce, :func:`~.versions.net_latency_algo`).  The cost model of our schedules takes its launch
    and per-step costs from here too (:mod:`synth.model.physics`).

    >>> from topo_probe import get_preset
    >>> from synth.model.nccl.params import ModelParams
    >>> v100 = NcclMachine.from_topology(get_preset("dgx1-v100"))
    >>> p = ModelParams()
    >>> hop_latencies_us(v100, "ring", "Simple", p), hop_latencies_us(v100, "ring", "Simple", p, version=(2, 4))
    ((8.4, 3.4, 14.0), (8.4, 5.7, 6.6))
    """
    p = PROTOS.index(proto)
    intra_hw = HW_NVLINK if (not p2p_off and m.p2p and m.intra != "pcie") else HW_PCI
    scale = params.latency_scale(m.arch, proto)
    algo = algo if algo != "pat" else "ring"
    base_row, hops = latency_tables(algo, version)
    net_algo = algo if m.amd else net_latency_algo(algo, m.gpus_per_node, version, coll)  # ppn 1: tuning.cc l. 236
    net_rows = latency_tables(net_algo, version)[1]
    if m.amd:
        hop = RCCL_GFX942["hw_lat_xgmi"]["tree" if algo == "tree" else "ring"][p]
        base = RCCL_BASE_LAT[p]
    else:
        base, hop = base_row[p], hops[intra_hw][p]
    return base * scale, hop * scale, net_rows[HW_NET][p] + params.net_latency_us(m.net_kind, proto, m.arch)


def latency_us(t: TuneTable, coll: str, algo: str, proto: str, params: ModelParams, channels: int = 0) -> float:
    """Device latency (µs): NCCL's (or RCCL's) tables, scaled by the fitted real/table ratio, plus the transport's
    extra µs per inter-node hop (:func:`hop_latencies_us`), which a rooted ring pays as its chunk fill instead; a
    one-channel rooted ring pays one hop of its chain (:func:`~.net_fill.rooted_chain_hops`)."""
    m = t.machine
    n_intra, n_inter = rooted_chain_hops(coll, algo, channels, m, *critical_path_hops(m, coll, algo))
    if algo in ("nvls", "nvls_tree"):
        p = PROTOS.index(proto)
        lat = HW_LAT[HW_NVLINK][ALGOS.index("nvls")][p] * params.lat_scale.get(
            ("*", "NVLS"), params.latency_scale(m.arch, proto))
        net = hop_latencies_us(m, algo, proto, params, t.env.p2p_off, t.version, coll)[2]
    else:
        base, hop, net = hop_latencies_us(m, algo, proto, params, t.env.p2p_off, t.version, coll)
        lat = base + n_intra * hop
    own = params.net_lat_own_us(m.net_kind, proto, m.arch) * pays_rooted_fill(coll, algo, proto, m)
    return lat + n_inter * (net - own)


__all__ = ["COOP_LAUNCH_UNTIL", "host_time_us", "hop_latencies_us", "latency_us"]
