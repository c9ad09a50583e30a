"""What NCCL did differently before the 2.28 tables the model holds (:mod:`.constants`), by version.

* Ring latencies: NCCL's own ring rows of ``baseLat`` / ``hwLat`` (src/graph/tuning.cc) as of the
  run's version (:data:`~.constants.RING_LAT_BY_VERSION`).  2.5 is the first NCCL with a latency
  table; 2.4 has none and takes 2.5's, written for the same Volta-era ring kernels.  Its ring/Simple
  step on NVLink is 5.7 µs, not 2.28's 3.4: an 8-GPU ring all_reduce's 14 steps cost 88 µs, not 56.
* The choice before NCCL had a tuner (up to 2.4: ``getKernelInfo`` in src/enqueue.cc, ``initTransportsAll``
  / ``ncclTreeThreshold`` / ``ncclThreadThreshold`` in src/init.cc, NVIDIA/nccl v2.4.8-1 7c72dee6): rings
  unless a multi-node all_reduce is under the tree threshold (no trees on one node, nor when one process
  drives every GPU: ``ncclCommInitAll`` disables them); LL while ``nBytes <= nc * nt * nchunksPerLoop *
  threadThreshold`` with LL's threads ``nt`` (64 .. 256) and channels ``nc`` grown by 8 bytes per thread.
  2.4 reads neither ``NCCL_ALGO`` nor ``NCCL_PROTO`` (they came with 2.5's tuner), so they are ignored.
"""

from __future__ import annotations

import math

from synth.model.nccl.constants import (
    ALGOS,
    BASE_LAT,
    HW_LAT,
    RING_LAT_BY_VERSION,
)
from synth.model.nccl.machine import NcclMachine

#: first NCCL with a tuning model (src/graph/tuning.cc ncclSetThresholds, v2.5.6-1)
TUNER_VERSION = (2, 5)
#: v2.4.8-1 src/include/enqueue.h: per-thread bytes before LL adds channels / before it leaves LL
#: (Volta and later; 32 before Volta), NCCL_LL_MIN_NTHREADS; src/include/rings.h getDefaultThreads
LL_CHANNEL_THRESHOLD_24, THREAD_THRESHOLD_24, THREAD_THRESHOLD_PREVOLTA_24, LL_MIN_NTHREADS_24 = 8, 64, 32, 64
NTHREADS_24 = 256


def _row(table: tuple, version: tuple) -> object:
    found = table[0][1:]
    for entry in table:
        if tuple(version) >= entry[0]:
            found = entry[1:]
    return found


def latency_tables(algo: str, version: tuple) -> tuple[tuple, tuple]:
    """``(base, (NVLink, PCI, NET) hops)`` µs per protocol (LL, LL128, Simple) of ``algo`` at NCCL
    ``version``: the ring rows of that version's table, every other algorithm's from 2.28.

    >>> base, hops = latency_tables("ring", (2, 4))
    >>> base[2] + 14 * hops[0][2]        # 8-GPU ring all_reduce, Simple, NVLink (2.5's table)
    88.2
    >>> latency_tables("ring", (2, 28))[1][0], latency_tables("ring", (2, 7))[1][0]
    ((0.6, 1.9, 3.4), (0.47, 1.9, 3.4))
    """
    if algo == "ring":
        base, hops = _row(RING_LAT_BY_VERSION, version)
        return base, hops
    a = ALGOS.index(algo)
    return BASE_LAT[a], (HW_LAT[0][a], HW_LAT[1][a], HW_LAT[2][a])


def tree_threshold_24(m: NcclMachine, n_channels: int) -> float:
    """Bytes up to which NCCL 2.4 runs all_reduce as a tree (init.cc ``ncclTreeThreshold``): 0 on one
    node or when one process drives all GPUs (``ncclCommInitAll``), else where the ring's latency
    (6 µs per rank) stops exceeding the tree's (15 µs per log2 node, 4 per GPU of a node) at NCCL's
    bandwidths (5 GB/s per channel on NVLink, the tree 3/4 of it, twice on 2 nodes).

    >>> from topo_probe import cluster, get_preset
    >>> tree_threshold_24(NcclMachine.from_topology(get_preset("dgx1-v100")), 12)
    0.0
    >>> tree_threshold_24(NcclMachine.from_topology(cluster("dgx1-v100", nodes=2)), 12)   # tree faster
    inf
    >>> round(tree_threshold_24(NcclMachine.from_topology(cluster("dgx1-v100", nodes=4)), 12))
    23040000

    (4 nodes: 60000 x 45000 / 15000 B/µs x (6 x 31 - 15 x 2 - 4 x 7) µs.)
    """
    if m.nodes < 2 or m.gpus_per_process >= m.ranks:
        return 0.0
    nvlink = m.intra in ("nvlink", "nvswitch")
    ring_bw = 5000.0 * n_channels if nvlink else 5000.0
    tree_bw = ring_bw * 3 / 4 * (2 if m.nodes == 2 else 1) if nvlink else ring_bw * 2 / 3
    ring_lat = 6.0 * (m.ranks - 1)
    tree_lat = 15.0 * int(math.log2(m.nodes)) + 4.0 * (m.ranks // m.nodes - 1)
    if ring_lat <= tree_lat:
        return 0.0
    if tree_bw > ring_bw:
        return math.inf
    return ring_bw * tree_bw / (ring_bw - tree_bw) * (ring_lat - tree_lat)


def kernel_info_24(m: NcclMachine, coll: str, nbytes: int, n_channels: int) -> tuple[str, str, int, int]:
    """``(algorithm, protocol, channels, threads)`` NCCL 2.4 runs (enqueue.cc ``getPatternInfo``,
    ``getLoopInfo``, ``getKernelInfo``).  8 x V100 on one node, 12 channels: LL up to 12 x 256 x 8 x 64
    bytes (1.5 MiB) on ``ceil(nBytes / 16 KiB)`` channels, then Simple on all 12.

    >>> from topo_probe import get_preset
    >>> v100 = NcclMachine.from_topology(get_preset("dgx1-v100"))
    >>> [kernel_info_24(v100, "allreduce", n << 10, 12)[1:] for n in (1, 64, 1024, 1536, 2048)]
    [('LL', 1, 64), ('LL', 4, 256), ('LL', 12, 256), ('LL', 12, 256), ('Simple', 12, 257)]
    """
    multi = m.nodes > 1
    tree = coll == "allreduce" and nbytes <= tree_threshold_24(m, n_channels)
    chunks = m.ranks if coll in ("allreduce", "allgather", "reducescatter") and not tree else 1
    thread_thr = (THREAD_THRESHOLD_24 if m.sm >= 70 else THREAD_THRESHOLD_PREVOLTA_24) * (2 if multi else 1)
    per_thread_ll = min(thread_thr, LL_CHANNEL_THRESHOLD_24)
    nt = LL_MIN_NTHREADS_24
    while math.ceil(nbytes / (nt * chunks)) > per_thread_ll and nt * 2 <= NTHREADS_24:
        nt *= 2
    nc = min(max(1, math.ceil(nbytes / (nt * chunks * per_thread_ll))), n_channels)
    algo = "tree" if tree else "ring"
    if nbytes <= nc * nt * chunks * thread_thr * (4 if tree else 1):
        return algo, "LL", nc, nt
    return algo, "Simple", n_channels, NTHREADS_24 + 1


__all__ = ["TUNER_VERSION", "latency_tables", "tree_threshold_24", "kernel_info_24"]
