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
* The tuner's bandwidth refinements before 2.21 (``ncclTopoTuneModel``, src/graph/tuning.cc, read at
  NVIDIA/nccl tags v2.8.4-1 .. v2.21.5-1; :func:`ring_ll_factor`, :func:`ll128_ring_per_channel_gbs`,
  :mod:`.per_channel`: the generation rows and caps): ring LL at a quarter of the graph's bandwidth
  (a third for one-node collectives other than all_reduce / reduce) up to 2.20, half from 2.21; Ampere's
  bus bandwidth capped at 235 GB/s up to 2.17; in 2.8-2.9 a ring LL128 channel at a per-collective rate
  (16.9 GB/s for all_reduce, not 20) and Ampere trees at 22.5 / 16 GB/s per channel on 2 / more nodes.
  On 8 x A100 (24 channels, 12 x 21 GB/s graph) NCCL 2.8 thus expects LL at 58.75 GB/s, not 87.7, and
  leaves it for LL128 at 2 MiB (not 4), LL128 for Simple at 16 MiB (not 32).  Ring LL takes 2.8's rule from
  2.7, a quarter for every collective in 2.5-2.6 (and 2.4); other refinements before 2.8 keep 2.28's.
* After 2.28.3 (:func:`per_channel_tables`, :func:`latency_tables`): Blackwell's ring LL128 and (more than
  two nodes) NVLS-tree per-channel rates and the NVLS-tree network hop, by release (2.28.7, 2.28.9, 2.29,
  2.29.7, 2.30: :mod:`.versions_patch`, where a bare (major, minor) is that minor's first release).
* NVLS's GPU count (:func:`.versions_patch.nvls_supported`): from 2.18 up to 2.28.3 ``ncclNvlsInit`` wants three
  GPUs a node, from 2.28.7 two.
"""

from __future__ import annotations

import functools
import math

from synth.model.nccl.constants import (
    ALGOS,
    BASE_LAT,
    HW_LAT,
    HW_NET,
    PER_CH_MAX_NVLS_TREE,
    PER_CH_MAX_RING_LL128,
    RING_LAT_BY_VERSION,
    TREE_LAT_28,
    TREE_LAT_28_VERSIONS,
    compcap_index,
)
from synth.model.nccl.collnet_versions import collnet_chain_28, collnet_latency_rows
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.versions_patch import (
    BLACKWELL_NVLS_TREE_BY_RELEASE,
    BLACKWELL_RING_LL128_BY_RELEASE,
    NVLS_TREE_NET_HOP_BY_RELEASE,
    row_from,
)

#: first NCCL with a tuning model (src/graph/tuning.cc ncclSetThresholds, v2.5.6-1)
TUNER_VERSION = (2, 5)
#: v2.4.8-1 src/include/enqueue.h: per-thread bytes before LL adds channels / before it leaves LL
#: (Volta and later; 32 before Volta), NCCL_LL_MIN_NTHREADS; src/include/rings.h getDefaultThreads
LL_CHANNEL_THRESHOLD_24, THREAD_THRESHOLD_24, THREAD_THRESHOLD_PREVOLTA_24, LL_MIN_NTHREADS_24 = 8, 64, 32, 64
NTHREADS_24 = 256


#: first NCCL whose ring LL estimate is half the graph bandwidth (tuning.cc ``busBw * .5``, v2.21.5-1)
RING_LL_HALF_VERSION = (2, 21)
#: ring LL's estimate by collective from v2.7.3-1 (tuning.cc line 113); the 2.8 refinements from v2.8.4-1
RING_LL_BY_COLL_VERSION, REFINE_28_VERSION = (2, 7), (2, 8)
#: first NCCL that charges one GPU per node the tree's network hop ("With ppn=1 latencies are fully exposed, use the
#: Tree network latency", v2.23.4-1 src/graph/tuning.cc lines 235-236; v2.22.3-1 line 225 takes the algorithm's own)
PPN1_TREE_NET_LAT_VERSION = (2, 23)
#: tuning.cc ``ll128MaxBwPerCh[NCCL_NUM_FUNCTIONS]`` of v2.8.4-1 / v2.9.9-1 (GB/s per ring channel); a scalar
#: 20.0 from v2.10.3-1 (the model's 2.28 table holds 20.0 for Volta and Ampere)
LL128_PER_CH_BY_COLL_28 = {"broadcast": 18.8, "reduce": 12.0, "allgather": 18.3, "reducescatter": 15.2,
                           "allreduce": 16.9}
LL128_PER_COLL_UNTIL = (2, 10)
#: v2.7.3-1's ``ll128MaxBwPerCh``: 2.8's but 16.7 for all_reduce
LL128_PER_CH_BY_COLL_27 = dict(LL128_PER_CH_BY_COLL_28, allreduce=16.7)


#: what one Blackwell ring LL128 channel moves when it runs (GB/s): NCCL's newest estimate (v2.29.7-1),
#: for every version, since the LL128 primitives it times did not change from v2.25.1-1 (the first with
#: Blackwell rows) to v2.29.7-1 (src/device/prims_ll128.h: abort checks only); the 73.4 of earlier tables
#: is twice Hopper's 36.7, a figure NCCL has since cut to 34.5-40
BLACKWELL_RING_LL128_RUN_GBS = 40.0
BLACKWELL = compcap_index(100)


@functools.lru_cache(maxsize=64)       # asked for every (collective, algorithm, protocol) of every table built
def per_channel_tables(version: tuple) -> tuple[tuple, tuple]:
    """``(perChMaxRingLL128Bws, perChMaxNVLSTreeBws)`` [GPU generation][1, 2, > 2 nodes] of NCCL's tuner
    at ``version`` (``(major, minor)`` or ``(major, minor, patch)``): :mod:`.constants`' 2.28.3 tables with
    the Blackwell rows of later releases (:mod:`.versions_patch`).

    >>> [per_channel_tables(v)[0][3] for v in ((2, 28), (2, 28, 7), (2, 29), (2, 29, 7), (2, 30))]
    [(73.4, 73.4, 73.4), (73.4, 34.6, 73.4), (34.5, 34.6, 34.5), (40.0, 40.0, 40.0), (40.0, 40.0, 40.0)]
    >>> per_channel_tables((2, 28, 9))[1][3], per_channel_tables((2, 30))[1][3], per_channel_tables((2, 30))[0][2]
    ((0.0, 96.0, 43.8), (0.0, 96.0, 80.0), (36.7, 36.7, 36.7))
    """
    def with_row(table, changes):
        row = row_from(changes, version)
        return table if row is None else table[:BLACKWELL] + (row,) + table[BLACKWELL + 1:]
    return (with_row(PER_CH_MAX_RING_LL128, BLACKWELL_RING_LL128_BY_RELEASE),
            with_row(PER_CH_MAX_NVLS_TREE, BLACKWELL_NVLS_TREE_BY_RELEASE))


def ring_ll128_run_gbs(cc: int, nodes_index: int) -> float:
    """GB/s one ring LL128 channel moves when it runs (the execution model, any version): the 2.28 table,
    but Blackwell at :data:`BLACKWELL_RING_LL128_RUN_GBS`.

    >>> ring_ll128_run_gbs(2, 0), ring_ll128_run_gbs(3, 0)
    (36.7, 40.0)
    """
    return BLACKWELL_RING_LL128_RUN_GBS if cc == BLACKWELL else PER_CH_MAX_RING_LL128[cc][nodes_index]


def _refined(version: tuple) -> bool:
    return tuple(version) >= REFINE_28_VERSION


def legacy_latency_rules(version: tuple) -> bool:
    """Whether NCCL's tuner estimates latency by 2.8-2.17's rules (tuning.cc v2.8.4-1 .. v2.17.1-1): an LL
    hop inside a node costs 1.8 x on several nodes (``intraLat *= 1.8``), no per-step network overhead
    (``getNetOverhead`` came with v2.18.1-1), the ring/Simple all_reduce "plateau" 1.9 x from
    ``nRanks / 16 x 64 KiB`` (2.18 on: 1.4 x on sm80+ from 64 B per channel and rank), and the tree rows
    of :data:`~.constants.TREE_LAT_28`.

    >>> legacy_latency_rules((2, 8)), legacy_latency_rules((2, 17)), legacy_latency_rules((2, 18)), legacy_latency_rules((2, 4))
    (True, True, False, False)
    """
    return TREE_LAT_28_VERSIONS[0] <= tuple(version) < TREE_LAT_28_VERSIONS[1]


def net_latency_algo(algo: str, ppn: int, version: tuple, coll: str = "") -> str:
    """The algorithm whose network-hop row (``hwLat[NCCL_HW_NET]``) NCCL ``version`` charges ``algo`` with ``ppn``
    GPUs per node: from 2.23 the tree's when ``ppn`` is 1 (:data:`PPN1_TREE_NET_LAT_VERSION`; v2.29.2-1 lines 355-356
    still), else ``algo``'s own.  Ring broadcast / reduce (``coll``) keep the ring's own row: their branch reads
    ``hwLat[hw[a]][a][p]``, not the substituted ``interLat`` (v2.23.4-1 src/graph/tuning.cc lines 241-249).

    >>> net_latency_algo("ring", 1, (2, 25)), net_latency_algo("ring", 1, (2, 22)), net_latency_algo("ring", 8, (2, 28))
    ('tree', 'ring', 'ring')
    >>> net_latency_algo("ring", 1, (2, 25), "broadcast"), net_latency_algo("tree", 1, (2, 25), "reduce")
    ('ring', 'tree')
    """
    if algo == "ring" and coll in ("broadcast", "reduce"):
        return algo
    return "tree" if ppn == 1 and tuple(version) >= PPN1_TREE_NET_LAT_VERSION else algo


def ring_ll_factor(coll: str, nodes: int, version: tuple) -> float:
    """Share of the ring graph's bandwidth NCCL's tuner gives LL (before ``llMaxBws``' cap): 1/4 on several nodes
    or for all_reduce / reduce, else 1/3, from 2.7 to 2.20; 1/2 from 2.21; 1/4 for all in 2.5-2.6 (v2.5.6-1
    src/graph/tuning.cc line 107, v2.6.4-1 line 110), and in 2.4 (no tuner), which takes 2.5's tables.

    >>> ring_ll_factor("allreduce", 1, (2, 8)), ring_ll_factor("broadcast", 1, (2, 8)), ring_ll_factor("allreduce", 1, (2, 21))
    (0.25, 0.3333333333333333, 0.5)
    >>> [ring_ll_factor("broadcast", n, v) for n, v in ((2, (2, 20)), (1, (2, 5, 6)), (1, (2, 4)))]
    [0.25, 0.25, 0.25]
    """
    if tuple(version) >= RING_LL_HALF_VERSION:
        return 0.5
    return 0.25 if tuple(version) < RING_LL_BY_COLL_VERSION or nodes > 1 or coll in ("allreduce", "reduce") else 1 / 3


def ll128_ring_per_channel_gbs(coll: str, default: float, version: tuple) -> float:
    """GB/s one ring LL128 channel is credited: 2.7-2.9's per-collective table, else ``default``.

    >>> [ll128_ring_per_channel_gbs("allreduce", 20.0, v) for v in ((2, 7), (2, 8), (2, 10))]
    [16.7, 16.9, 20.0]
    """
    v = tuple(version)
    if LL128_PER_CHANNEL_VERSION <= v < REFINE_28_VERSION:
        return LL128_PER_CH_BY_COLL_27.get(coll, default)
    if _refined(version) and v < LL128_PER_COLL_UNTIL:
        return LL128_PER_CH_BY_COLL_28.get(coll, default)
    return default


#: tuning.cc ``ll128MaxBw[NCCL_NUM_FUNCTIONS]`` of v2.5.6-1 .. v2.6.4-1: one ring LL128 bus-bandwidth
#: ceiling per collective (GB/s) whatever the channels; v2.7.3-1 made it per channel
LL128_MAX_BY_COLL_25 = {"broadcast": 113.0, "reduce": 72.0, "allgather": 110.0, "reducescatter": 91.0,
                        "allreduce": 100.0}
LL128_PER_CHANNEL_VERSION = (2, 7)
#: tuning.cc ``busBw * (ppn < 2 ? 0.7 : 0.92)`` for ring LL128: v2.7.3-1 .. v2.22.3-1 (one GPU per node
#: sends and receives through the NIC); 2.5-2.6 ``busBw*120.0/128.0``; 0.92 alone from v2.23.4-1
LL128_PPN1_VERSIONS = ((2, 7), (2, 23))


def ll128_ring_bus_cap_gbs(coll: str, graph_channels: int, per_channel: float, version: tuple) -> float:
    """NCCL's own ceiling (GB/s bus bandwidth) on a ring LL128 ``coll`` whose graph has ``graph_channels``
    channels: 2.5-2.6 one figure per collective; from 2.7 ``graph_channels`` x the per-channel rate
    (:func:`ll128_ring_per_channel_gbs`, ``per_channel`` = the version's row: :mod:`.per_channel`).

    >>> ll128_ring_bus_cap_gbs("allreduce", 6, 20.0, (2, 5)), ll128_ring_bus_cap_gbs("reduce", 6, 20.0, (2, 5))
    (100.0, 72.0)
    >>> round(ll128_ring_bus_cap_gbs("allreduce", 12, 20.0, (2, 8)), 6), ll128_ring_bus_cap_gbs("allreduce", 12, 20.0, (2, 28))
    (202.8, 240.0)
    """
    if tuple(version) < LL128_PER_CHANNEL_VERSION:
        return LL128_MAX_BY_COLL_25.get(coll, math.inf)
    return graph_channels * ll128_ring_per_channel_gbs(coll, per_channel, version)


def ll128_ring_factor(gpus_per_node: int, version: tuple) -> float:
    """NCCL's ring LL128 share of its graph bandwidth: 120/128 up to 2.6, 0.7 with one GPU per node
    in 2.7-2.22, else 0.92.

    >>> ll128_ring_factor(8, (2, 5)), ll128_ring_factor(1, (2, 22)), ll128_ring_factor(1, (2, 23)), ll128_ring_factor(8, (2, 22))
    (0.9375, 0.7, 0.92, 0.92)
    """
    v = tuple(version)
    if v < LL128_PER_CHANNEL_VERSION:
        return 120.0 / 128.0
    return 0.7 if gpus_per_node < 2 and v < LL128_PPN1_VERSIONS[1] else 0.92


#: tree LL128's share across hosts is 0.915 up to 2.9 (v2.7.3-1 line 120, v2.8.3-1 line 129, v2.9.9-1 line 131),
#: 120/128 from v2.10.3-1 (line 132)
TREE_LL128_915_UNTIL = (2, 10)


def tree_ll128_factor(nodes: int, version: tuple) -> float:
    """NCCL's tree LL128 share of the tree bandwidth (2.7 on): 7/9 on one host, across hosts 0.915 up to 2.9
    (:data:`TREE_LL128_915_UNTIL`), then 120/128.

    >>> tree_ll128_factor(1, (2, 9)), tree_ll128_factor(2, (2, 9, 9)), tree_ll128_factor(2, (2, 10))
    (0.7777777777777778, 0.915, 0.9375)
    """
    if nodes == 1:
        return 7.0 / 9.0
    return 0.915 if tuple(version) < TREE_LL128_915_UNTIL else 120.0 / 128.0


#: tuning.cc ``ncclTopoTuneModel``: the compute capabilities (major*10+minor, every GPU of the communicator) LL128 is
#: on by default for, from each NCCL version on: Volta from v2.5.6-1, Ampere (8.0 only) from v2.7.3-1, Hopper (9.0)
#: from v2.15.1-1, Blackwell (10.0, 12.0) from v2.25.1-1; from v2.27.3-1 any of 7.0 or more (Ada 8.9, Ampere 8.6 too)
LL128_ARCHS_BY_VERSION = (((2, 5), (70,)), ((2, 7), (70, 80)), ((2, 15), (70, 80, 90)),
                          ((2, 25), (70, 80, 90, 100, 120)), ((2, 27), None))
#: first NCCL keeping LL128 on Hopper and later when a ring reaches its NIC through another GPU (PXN):
#: tuning.cc ``minCompCap >= 90 && typeInter <= PATH_PXN``, v2.17.1-1 (PXB at most before)
LL128_PXN_VERSION = (2, 17)
#: NCCL versions [from, to) keeping LL128 off on a node's only GPU (PATH_LOC, 0): 2.6's ``typeIntra == LINK_NVL``
#: (v2.6.4-1 tuning.cc line 165); 2.5's graph ``nvlink`` a lone GPU keeps (v2.5.6-1 line 154; search.cc lines 491,
#: 257) and 2.7's ``typeIntra <= PATH_NVL`` (v2.7.8-1 line 176; ``<= PATH_NVB``, v2.26.6-1 line 430) pass it
LL128_LOC_OFF = ((2, 6), (2, 7))


def ll128_default_on(sm: int, type_inter: str, version: tuple, type_intra: str = "NVL") -> bool:
    """Whether NCCL ``version`` turns LL128 on by default (tuning.cc's whole gate) for compute capability ``sm``,
    a graph inside the node over ``type_intra`` (``NVL``; ``LOC``, a node's only GPU, but in :data:`LL128_LOC_OFF`;
    else False) and out of it through ``type_inter`` (``NONE``: one node; ``PIX``, ``PXB``; ``PXN`` from
    :data:`LL128_PXN_VERSION` on sm90 and up; ``PHB`` / ``SYS``, through the CPU: False, ``typeInter <= PATH_PXB``;
    2.6 alone wants ``typeInter <= LINK_PCI``, PIX: v2.6.4-1 line 165, topo.h LINK_PCI = PATH_PIX = 2).

    >>> [ll128_default_on(80, "NONE", v) for v in ((2, 5), (2, 7), (2, 28))], ll128_default_on(70, "NONE", (2, 4))
    ([False, True, True], False)
    >>> [ll128_default_on(90, "NONE", v) for v in ((2, 14), (2, 15))], ll128_default_on(100, "NONE", (2, 24))
    ([False, True], False)
    >>> ll128_default_on(89, "NONE", (2, 26)), ll128_default_on(89, "NONE", (2, 27)), ll128_default_on(60, "NONE", (2, 28))
    (False, True, False)
    >>> ll128_default_on(90, "PXN", (2, 16)), ll128_default_on(90, "PXN", (2, 17)), ll128_default_on(80, "PXN", (2, 28))
    (False, True, False)
    >>> ll128_default_on(90, "PIX", (2, 28)), ll128_default_on(90, "PHB", (2, 28)), ll128_default_on(90, "SYS", (2, 28))
    (True, False, False)
    >>> [ll128_default_on(70, "PXB", v) for v in ((2, 5), (2, 6), (2, 6, 4), (2, 7))], ll128_default_on(70, "PIX", (2, 6))
    ([True, False, False, True], True)
    >>> [ll128_default_on(90, "NONE", (2, 28), t) for t in ("NVL", "LOC", "PCI")]
    [True, True, False]
    >>> [ll128_default_on(70, "PIX", v, "LOC") for v in ((2, 5), (2, 6, 4), (2, 7))]
    [True, False, True]
    """
    lone_ok = type_intra == "LOC" and not LL128_LOC_OFF[0] <= tuple(version)[:2] < LL128_LOC_OFF[1]
    rows = [archs for first, archs in LL128_ARCHS_BY_VERSION if tuple(version) >= first]
    if type_intra != "NVL" and not lone_ok or sm < 70 or not rows or rows[-1] is not None and sm not in rows[-1]:
        return False
    if type_inter in ("NONE", "PIX"):
        return True
    if type_inter == "PXB":     # 2.6: ``typeInter <= LINK_PCI``, LINK_PCI = PATH_PIX (v2.6.4-1 tuning.cc line 165)
        return not (2, 6) <= tuple(version)[:2] < (2, 7)
    return type_inter == "PXN" and sm >= 90 and tuple(version) >= LL128_PXN_VERSION


def _row(table: tuple, version: tuple) -> object:
    found = table[0][1:]
    for entry in table:
        if tuple(version) >= entry[0]:
            found = entry[1:]
    return found


def latency_tables(algo: str, version: tuple, tuner: bool = False) -> tuple[tuple, tuple]:
    """``(base, (NVLink, PCI, NET) hops)`` µs per protocol (LL, LL128, Simple) of ``algo`` at NCCL
    ``version``: the ring rows of that version's table, every other algorithm's from 2.28; for NCCL's
    own estimate (``tuner``) on 2.8-2.17 also that version's tree rows (:data:`~.constants.TREE_LAT_28`),
    on 2.9-2.18 its CollNet rows (:func:`~.collnet_versions.collnet_latency_rows`; 2.6-2.8's chain's for both),
    from 2.28.9 NVLS-tree's network hop (:data:`~.versions_patch.NVLS_TREE_NET_HOP_BY_RELEASE`).

    >>> latency_tables("tree", (2, 8), tuner=True)[1][0], latency_tables("tree", (2, 8))[1][0]
    ((0.52, 1.25, 28.0), (0.6, 1.25, 4.0))
    >>> latency_tables("nvls_tree", (2, 29), tuner=True)[1][2], latency_tables("nvls_tree", (2, 29))[1][2]
    ((0, 0, 20.9), (0, 0, 14))
    >>> latency_tables("nvls_tree", (2, 28, 7), tuner=True)[1][2], latency_tables("nvls_tree", (2, 28, 9), tuner=True)[1][2]
    ((0, 0, 14), (0, 0, 20.9))

    >>> base, hops = latency_tables("ring", (2, 4))
    >>> base[2] + 14 * hops[0][2]        # 8-GPU ring all_reduce, Simple, NVLink (2.5's table)
    88.2
    >>> latency_tables("ring", (2, 28))[1][0], latency_tables("ring", (2, 7))[1][0]
    ((0.6, 1.9, 3.4), (0.47, 1.9, 3.4))
    """
    if algo == "ring":
        base, hops = _row(RING_LAT_BY_VERSION, version)
        return base, hops
    if algo.startswith("collnet") and (tuner or collnet_chain_28(version)):
        rows = collnet_latency_rows(algo, version)     # CollNet's rows by version (:mod:`.collnet_versions`)
        if rows is not None:
            return rows
    if algo == "tree" and tuner and legacy_latency_rules(version):
        return TREE_LAT_28
    a = ALGOS.index(algo)
    hops = (HW_LAT[0][a], HW_LAT[1][a], HW_LAT[2][a])
    later = row_from(NVLS_TREE_NET_HOP_BY_RELEASE, version)
    if algo == "nvls_tree" and tuner and later is not None:
        hops = hops[:HW_NET] + (hops[HW_NET][:2] + (later,),)
    return BASE_LAT[a], hops


def tree_threshold_24(m: NcclMachine, n_channels: int, override: int | None = None) -> float:
    """Bytes up to which NCCL 2.4 runs all_reduce as a tree: ``NCCL_TREE_THRESHOLD`` when set
    (``override``; init.cc ``NCCL_PARAM(TreeThreshold, "TREE_THRESHOLD", -2)``, computed only when
    unset; the variable is gone from 2.5), else init.cc ``ncclTreeThreshold``: 0 on one
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
    >>> tree_threshold_24(NcclMachine.from_topology(cluster("dgx1-v100", nodes=2)), 12, override=0)
    0.0
    """
    if override is not None:
        return float(override)
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


def kernel_info_24(m: NcclMachine, coll: str, nbytes: int, n_channels: int,
                   tree_threshold: int | None = None) -> tuple[str, str, int, int]:
    """``(algorithm, protocol, channels, threads)`` NCCL 2.4 runs (enqueue.cc ``getPatternInfo``,
    ``getLoopInfo``, ``getKernelInfo``).  8 x V100 on one node, 12 channels: LL up to 12 x 256 x 8 x 64
    bytes (1.5 MiB) on ``ceil(nBytes / 16 KiB)`` channels, then Simple on all 12.

    >>> from topo_probe import get_preset
    >>> v100 = NcclMachine.from_topology(get_preset("dgx1-v100"))
    >>> [kernel_info_24(v100, "allreduce", n << 10, 12)[1:] for n in (1, 64, 1024, 1536, 2048)]
    [('LL', 1, 64), ('LL', 4, 256), ('LL', 12, 256), ('LL', 12, 256), ('Simple', 12, 257)]
    """
    multi = m.nodes > 1
    tree = coll == "allreduce" and nbytes <= tree_threshold_24(m, n_channels, tree_threshold)
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


__all__ = ["TUNER_VERSION", "latency_tables", "tree_threshold_24", "kernel_info_24", "ring_ll_factor",
           "legacy_latency_rules", "ll128_ring_per_channel_gbs",
           "RING_LL_HALF_VERSION", "LL128_PER_CH_BY_COLL_28", "LL128_ARCHS_BY_VERSION",
           "LL128_LOC_OFF", "LL128_PXN_VERSION", "ll128_default_on", "LL128_MAX_BY_COLL_25", "LL128_PER_CH_BY_COLL_27",
           "ll128_ring_bus_cap_gbs", "ll128_ring_factor", "net_latency_algo", "PPN1_TREE_NET_LAT_VERSION",
           "tree_ll128_factor"]
