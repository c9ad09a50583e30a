"""Facts of NCCL's and RCCL's tuning model, each with its source (nothing here is fitted:
fitted values are in :mod:`.params` / ``fitted_params.json``).

Units: bandwidth GB/s per direction (1e9 bytes/s), latency µs, sizes bytes.  Index order
follows NCCL: algorithms ``tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree, pat``
(``NCCL_ALGO_*``), protocols ``LL, LL128, Simple`` (``NCCL_PROTO_*``), hardware ``nvlink, pci,
net``.  Tables were read (not copied) from NCCL 2.28 (``zhanglin496/nccl-2.28.3-1``, a mirror of
NCCL 2.28.3, commit 850a18f5; cross-checked with ``NVIDIA/nccl`` b6475625) and ROCm/rccl.

=========================  ===================================================  ============================
constant                   meaning                                              source
=========================  ===================================================  ============================
BASE_LAT                   base latency [algo][proto]                           tuning.cc baseLatencies
HW_LAT                     per-hop latency [hw][algo][proto]                    tuning.cc hwLatencies
RING_LAT_BY_VERSION        ring rows of both by NCCL version (2.5 .. 2.18)      tuning.cc baseLat, hwLat
TREE_LAT_28                tree rows of both, NCCL 2.8 .. 2.17 (tuner only)     tuning.cc baseLat, hwLat
LL_MAX_BWS                 LL cap [GPU gen / CPU vendor][1, 2, >2 nodes]        tuning.cc llMaxBws
PER_CH_MAX_*               per-channel caps (ring LL128, tree, NVLS tree)       tuning.cc perChMax*Bws
NVLS_EFFICIENCY            NVLS achieved / link bandwidth by GPU gen            tuning.cc nvlsEfficiency
TREE_CORRECTION            tree factor by proto and log2(bytes/64)              tuning.cc treeCorrectionFactor
NVLS_TREE_CORRECTION_*     the same factor on Blackwell x86 NVLS-tree           tuning.cc ncclTopoGetAlgoTime
THREAD_THRESHOLD           bytes per thread before adding channels              comm.h NCCL_*_THREAD_THRESHOLD
MAX_NTHREADS               threads per protocol                                 device.h NCCL_*_MAX_NTHREADS
NET_OVERHEAD_US            per ring step across nodes (Intel 1, AMD 2)          tuning.cc getNetOverhead
SPEEDS_INTRA / _INTER      per-channel speeds the graph search tries            search.cc speedArray*
NVLINK_BW_PER_LINK         per-link bandwidth NCCL assumes                      topo.h SM*_NVLINK_BW
PCI_BW_BY_GEN, CPU_LINK_BW PCIe x16 and inter-socket bandwidth                  topo.h PCI_BW, *_QPI_BW, AMD_BW
MAXCHANNELS                32 (ring graph: MAXCHANNELS/2)                       device.h, init.cc
NVLS_NCHANNELS             16 NVLS CTAs on sm90                                 transport/nvls.cc NVLS_NCHANNELS_SM90
NVLS_NCHANNELS_SM100*      32 NVLS CTAs on sm100 (24 in one NVLink domain)      transport/nvls.cc ncclNvlsTuning
NCCL_MAX_NVLS_ARITY        at most 32 NVLS heads (graph channels)               device.h, search.cc ncclTopoCompute
NET_PLUGIN_LATENCY_US      latency the net plugin reports (EFA 75 µs; p3dn: 150, net_transport.py) aws-ofi-nccl platform-aws.c
LL_/LL128_DATA_FRACTION    payload 8 of 16 bytes / 120 of 128 bytes             prims_ll.h, device.h
RCCL_BASE_LAT              12/12/17 µs                                          ROCm/rccl tuning.cc baseLat
RCCL_GFX942                rcclTuningModel[5] (8 x MI300X xGMI mesh)            rccl tuning.cc, rome_models.cc
RCCL_GFX950                rcclTuningModel[6] (MI350X / MI355X), its LL rules    rccl tuning.cc, rccl_wrap.cc
RCCL_MSCCL_ALLREDUCE_8GPU  MSCCL allreduce windows 1 KiB .. 16 MiB              rccl tools/msccl-algorithms
RCCL_GFX9_COMPCAP_INDEX    llMaxBws row of gfx9 GPUs (HIP compute capability 9.x) rccl misc/utils.cc, tuning.cc
=========================  ===================================================  ============================

Feature gates by NCCL version (``FEATURE_VERSION``): LL128 2.5, NVLS 2.17, NVLSTree 2.18, PAT 2.23.
"""

from __future__ import annotations

import functools
import re

ALGOS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOS = ("LL", "LL128", "Simple")
#: backwards-compatible names
ALGORITHMS, PROTOCOLS = ALGOS, PROTOS
HW_NVLINK, HW_PCI, HW_NET = 0, 1, 2
#: NCCL_ALGO / NCCL_PROTO spellings (case-insensitive) -> ours (tuning.cc ncclAlgoStr/ncclProtoStr)
ALGO_NAMES = {"tree": "tree", "ring": "ring", "collnetdirect": "collnet_direct", "collnetchain": "collnet_chain",
              "collnet": "collnet_direct", "nvls": "nvls", "nvlstree": "nvls_tree", "pat": "pat"}
PROTO_NAMES = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}
#: first NCCL version (major, minor) with each feature (release notes)
FEATURE_VERSION = {"LL128": (2, 5), "nvls": (2, 17), "nvls_tree": (2, 18), "pat": (2, 23)}
#: NCCL version whose tables the model holds by default
NCCL_VERSION = (2, 28)
#: paths.cc NCCL_P2P_PER_CHANNEL_NET_BW default (GB/s one p2p channel drives through a NIC, NCCL >= 2.29)
P2P_PER_CHANNEL_NET_BW = 14
#: device.h NCCL_MAX_DEV_WORK_P2P_PER_BATCH: peers one p2p channel serves per round
MAX_DEV_WORK_P2P_PER_BATCH = 8

#: topo.h SM60..SM100_NVLINK_BW, GB/s per link
NVLINK_BW_PER_LINK = {60: 18.0, 70: 20.0, 80: 20.0, 86: 12.0, 90: 20.6, 100: 40.1}
#: topo.h PCI_BW 12 for Gen3 x16; Gen4 24, Gen5 48, Gen6 96: topo.cc scales by generation, width x speed / 80 with
#: kvDictPciGen's 100 Mb/s per lane (v2.28.9-1 src/graph/topo.cc 425, 489-491: "64.0 GT/s PCIe" is 480, since v2.12)
PCI_BW_BY_GEN = {3: 12.0, 4: 24.0, 5: 48.0, 6: 96.0}
#: data-sheet GB/s per direction of a PCIe x16 link by generation (PCI-SIG: 8, 16, 32, 64 GT/s per lane):
#: what a GPU's path to its NIC can physically carry (NCCL's PCI_BW above is its own derated estimate)
PCIE_X16_GBS = {3: 15.75, 4: 31.5, 5: 63.0, 6: 126.0}
#: topo.h inter-socket bandwidth: QPI_BW 6, SKL_QPI_BW 10, SRP_QPI_BW 22, ERP_QPI_BW 40, AMD_BW 16
CPU_LINK_BW = {"intel_bdw": 6.0, "intel_skl": 10.0, "intel_spr": 22.0, "intel_emr": 40.0, "amd": 16.0}

#: search.cc speedArrayIntra / sm90SpeedArrayIntra / sm100SpeedArrayIntra (GB/s per channel)
SPEEDS_INTRA = {
    0: (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    90: (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    100: (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}
#: search.cc speedArrayInter / sm90SpeedArrayInter / sm100SpeedArrayInter
SPEEDS_INTER = {
    0: (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    90: (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    100: (96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
}
MAXCHANNELS = 32
NVLS_NCHANNELS = 16
#: NVIDIA/nccl 5067397c src/transport/nvls.cc: NVLS_NCHANNELS_SM100 (several nodes) and _SM100_NVL (one NVLink
#: domain, ncclNvlsTuning); ncclNvlsTreeSm100Tuning lowers the multi-node count to 24 on >= 3 nodes (or
#: 8 GPUs per node on >= 96 GB/s NICs)
NVLS_NCHANNELS_SM100 = 32
NVLS_NCHANNELS_SM100_NVL = 24
#: device.h NCCL_MAX_NVLS_ARITY: ncclTopoCompute caps an NVLS graph at min(32, GPUs) heads
NCCL_MAX_NVLS_ARITY = 32

#: tuning.cc baseLatencies [algo][proto] (µs)
BASE_LAT = ((6.8, 14.0, 8.4), (6.6, 14.0, 8.4), (0, 0, 0), (0, 0, 0), (0, 0, 0), (0, 0, 0), (8.0, 8.0, 8.0))
#: tuning.cc hwLatencies [hw][algo][proto] (µs per hop)
HW_LAT = (
    ((.6, 1.25, 4.0), (.6, 1.9, 3.4), (0, 0, 3.7), (0, 0, 2.8), (0, 0, 25), (0, 0, 25), (0, 0, 4.0)),
    ((1.0, 1.9, 4.0), (1.0, 2.5, 5.7), (0, 0, 3.7), (0, 0, 2.8), (0, 0, 0), (0, 0, 0), (0, 0, 4.0)),
    ((5.0, 8.5, 14), (2.7, 4.0, 14.0), (0, 0, 31), (0, 0, 30), (0, 0, 18), (0, 0, 14), (0, 0, 14)),
)
#: the ring rows of tuning.cc baseLat and hwLat [NVLink, PCI, NET] (LL, LL128, Simple) µs from the first
#: NCCL version that holds them (NVIDIA/nccl tags v2.5.6-1, v2.7.3-1, v2.12.7-1, v2.14.3-1, v2.18.1-1; the
#: last unchanged to 2.28); a version before 2.5 (which has no table) takes 2.5's
RING_LAT_BY_VERSION = (
    ((2, 5), (3.6, 3.6, 8.4), ((.4, 2.5, 5.7), (1.0, 2.5, 5.7), (.9, 2.5, 6.6))),
    ((2, 7), (3.6, 10.0, 8.4), ((.47, 1.9, 3.4), (1.0, 2.5, 5.7), (2.7, 4.0, 9.6))),
    ((2, 12), (3.6, 10.0, 8.4), ((.47, 1.9, 3.4), (1.0, 2.5, 5.7), (2.7, 4.0, 28.0))),
    ((2, 14), (3.6, 10.0, 8.4), ((.47, 1.9, 3.4), (1.0, 2.5, 5.7), (2.7, 4.0, 9.6))),
    ((2, 18), BASE_LAT[1], (HW_LAT[0][1], HW_LAT[1][1], HW_LAT[2][1])),
)
#: the tree rows of tuning.cc baseLat and hwLat [NVLink, PCI, NET] (LL, LL128, Simple) µs of NVIDIA/nccl v2.8.4-1
#: (unchanged to v2.17.1-1; v2.18.1-1 raised the base to 6.8 / 14.0): "Tree/Simple is the latency a 256kB chunk",
#: 28 µs a hop where 2.23 on say 4.0 (NVLink) / 14 (network).  NCCL's estimate only (:mod:`.tuning`): the
#: execution model times a tree's chunks itself (``runtime.pipeline_fill_us``)
TREE_LAT_28 = ((4.4, 4.4, 0.0), ((.52, 1.25, 28.0), (1.0, 1.9, 28.0), (5.0, 8.5, 28.0)))
TREE_LAT_28_VERSIONS = ((2, 8), (2, 18))
#: tuning.cc llMaxBws [GPU gen on 1 node | CPU vendor (0 Intel, 1 AMD) across nodes][1, 2, >2 nodes]
LL_MAX_BWS = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
#: first NCCL with ``llMaxBws`` (NVIDIA/nccl v2.8.3-1 src/graph/tuning.cc line 75; no such table in v2.7.8-1, whose
#: ring LL is ``busBw *= 1/4 or 1/3`` alone, line 113, and tree LL ``busBw *= 1.0/3.8``, line 119)
LL_MAX_BWS_SINCE = (2, 8)
#: ``llMaxBws`` by release: (first version, rows), the rows as :data:`LL_MAX_BWS`: Volta and Ampere only in
#: v2.8.3-1 .. v2.14.3-1 (src/graph/tuning.cc line 75); a Hopper row equal to Ampere's in v2.15.1-1 .. v2.20.5-1
#: (v2.15.1-1 lines 82-86); Hopper 141 / 45 / 35 from v2.21.5-1 (lines 86-90); a Blackwell row from v2.25.1-1
#: (lines 151-156), the same to v2.30.7-1
LL_MAX_BWS_BY_VERSION = (
    (LL_MAX_BWS_SINCE, LL_MAX_BWS[:2]),
    ((2, 15), LL_MAX_BWS[:2] + (LL_MAX_BWS[1],)),
    ((2, 21), LL_MAX_BWS[:3]),
    ((2, 25), LL_MAX_BWS),
)
#: first NCCL whose one-host row takes ``minCompCap >= 90 / >= 80`` (v2.17.1-1 tuning.cc line 115); before it an
#: exact compute capability: ``compCap80`` (min == max == 80, v2.8.3-1 line 98) or exactly 80 / 90 (v2.15.1-1 line
#: 111), any other GPU (sm86, sm89, Hopper before 2.15, Blackwell) the Volta row
LL_ROW_AT_LEAST_VERSION = (2, 17)
#: tuning.cc perChMaxRingLL128Bws, perChMaxTreeLL128Bws, perChMaxTreeBws, perChMaxNVLSTreeBws [gen][nodes]
PER_CH_MAX_RING_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (73.4, 73.4, 73.4))
PER_CH_MAX_TREE_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
PER_CH_MAX_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
PER_CH_MAX_NVLS_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 43.1))
#: tuning.cc nvlsEfficiency [Volta, Ampere, Hopper, Blackwell]
NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)
#: tuning.cc treeCorrectionFactor [proto][log2(nBytes / 64)], 64 B .. 512 MB (24 columns since NCCL 2.29.2,
#: NVIDIA/nccl ebd1e929; trees read the first 23, ``logSize < 23``)
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)
#: ncclTopoGetAlgoTime (tuning.cc, NCCL 2.29.2 on): NVLS-tree all_reduce on Blackwell (compute capability >= 100)
#: with an x86 CPU takes the trees' correction factor for log2(nBytes / 64) < 24 (up to 512 MiB): NCCL's own
#: statement that its NVLS-tree bandwidth is not reached at medium sizes there
NVLS_TREE_CORRECTION_SM, NVLS_TREE_CORRECTION_COLUMNS, NVLS_TREE_CORRECTION_VERSION = 100, 24, (2, 29)
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
MAX_NTHREADS = {"LL": 512, "LL128": 640, "Simple": 512}
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}
#: ncclNetProperties_t.latency the plugin reports, added per inter-node hop (twice for Simple):
#: aws-ofi-nccl platform_data_map[].latency 75 µs on p4d/p4de/p5; IB/socket report 0; TCPXO unknown (0)
NET_PLUGIN_LATENCY_US = {"ib": 0.0, "roce": 0.0, "efa": 75.0, "efa2": 75.0, "tcpxo": 0.0, "socket": 0.0}
LL_DATA_FRACTION = 0.5
LL128_DATA_FRACTION = 120.0 / 128.0

#: ROCm/rccl tuning.cc baseLat (LL, LL128, Simple), µs
RCCL_BASE_LAT = (12.0, 12.0, 17.0)
#: ROCm/rccl rcclTuningModel[5] (rome_models.cc rome_model_79 / _81 say tuning=5): xGMI and NET hop
#: latencies, bandwidth ratios and llProtoRanges (LL up to the first bound, LL128 up to the second)
RCCL_GFX942 = {
    "hw_lat_xgmi": {"tree": (0.9, 0.9, 2.3), "ring": (0.8, 0.8, 2.1)},
    "hw_lat_net": {"tree": (10.5, 10.5, 25.0), "ring": (9.5, 9.5, 320.0)},
    "ll_ranges": {"reducescatter": ((0, 655360), (131072, 3211264)),
                  "allgather": ((0, 98304), (98304, 5046272)),
                  "allreduce": ((0, 1048576), (1048576, 9437184))},
    "rings": 28,
}
#: ROCm/rccl rcclTuningModel[6] on ONE gfx950 (MI350X / MI355X) node: rome_models.cc sets ``system->tuning = 6`` for
#: gfx950 (code index file 2196204885, near chars 97000 and 104000); tuning.cc ``tuning_model_6`` (file 2336120413
#: from char 20492) gives ``hw_lat_xgmi`` (as model 5) and the ring's one-/two-node ``bw_ratio`` (LL, LL128,
#: Simple); ``one_node_ll_max``: rccl_wrap.cc rcclUpdateCollectiveProtocol's one-node gfx950 rules (LL up to these
#: bytes per rank, file 54824299024 chars 2320-2700); ``ll_rooted_factor``: busBw x 1.65 for ring LL broadcast /
#: reduce on one gfx942 / gfx950 node (tuning.cc char 32765); ``xgmi_gbs``: RCCL's per-link xGMI speed (ROCm/rccl
#: 0cbce2a7 src/graph/topo.h:33 GFX94X_XGMI_WIDTH; RCCL 2.26.6 prints XGMI[48.0] on MI355X, Ahalperin/amd-dev
#: 58a032f7 results/scale_8gpu_all_reduce/nccl_debug.log).  LL128 stays off (init.cc sets ``topo->ll128Enabled =
#: false``, file 2254851798 char 35337).  Model 6's llProtoRanges, which RCCL applies only across hosts, are not
#: held: across hosts the model keeps :data:`RCCL_GFX942`'s (RCCL's tuner picks trees there, which the model does
#: not run on AMD)
RCCL_GFX950 = {
    "hw_lat_xgmi": {"tree": (0.9, 0.9, 2.3), "ring": (0.8, 0.8, 2.1)},
    "ring_bw_ratio": (0.08, 0.08, 1.00),
    "one_node_ll_max": {"allgather": 88448, "reducescatter": 1048576},
    "ll_rooted_factor": 1.65,
    "xgmi_gbs": 48.0,
}
#: NCCL's compute-capability row RCCL uses on gfx9 GPUs (MI250X, MI300X, MI350X): HIP reports compute
#: capability 9.x there and RCCL reads it as ``comm->minCompCap`` (ROCm/rccl 0cbce2a7 src/misc/utils.cc
#: ``ncclCudaCompCap``), so its ``llMaxBws`` / ``perChMax*`` tables (src/graph/tuning.cc) take the >= 90 row
RCCL_GFX9_COMPCAP_INDEX = 2
#: ROCm/rccl tools/msccl-algorithms for 8 x gfx942: allreduce_1step_mccl_8_2_2048_LL.xml minBytes 1024,
#: allreduce-allpairs-8n-ll.xml maxBytes 327680, allreduce_1step_mccl_8_2_16777216_LL.xml (16 MiB)
RCCL_MSCCL_ALLREDUCE_8GPU = {"min_bytes": 1024, "allpairs_max_bytes": 327680, "onestep_max_bytes": 16777216}


#: NCCL's default NCCL_BUFFSIZE (bytes; NVIDIA/nccl v2.8.4-1 src/init.cc line 409, v2.24.3-1 line 598,
#: ``DEFAULT_BUFFSIZE``) and NCCL_STEPS (src/include/device.h line 24), the same through v2.30.7-1; a run's own
#: NCCL_BUFFSIZE is :attr:`.env.NcclEnv.buffsize`
NCCL_BUFFSIZE_BYTES, NCCL_STEPS = 4 << 20, 8
#: bytes of one Simple step by default (src/transport/net.cc line 376: ``stepSize = buffSizes[SIMPLE]/NCCL_STEPS``)
SIMPLE_STEP_BYTES = NCCL_BUFFSIZE_BYTES // NCCL_STEPS


#: GPU boost clock (GHz) by architecture, the part the model's logs run: vendor figures, or a data sheet's FP32 rate
#: over (SMs x 2 x FP32 lanes per SM).  sm60 P100 SXM2 1480 MHz with half Volta's LD/ST units (16 a SM, P100 white
#: paper), so 0.74; sm70 V100 SXM2 1530 MHz, sm80 A100 SXM4 1410 MHz
#: (white papers' GPU Boost Clock); sm86 A40 37.4 TFLOPS / (84 x 256) = 1.74; sm89 RTX 4090 / L40S 2520 MHz (L40S:
#: 91.6 TFLOPS / (142 x 256) = 2.52); sm90 H100 SXM5 67 TFLOPS / (132 x 256) = 1.98 (H200, H800 the same);
#: sm100 B200, HGX B200's 75 TFLOPS FP32 a GPU (NVIDIA's HGX B200 table) / (148 x 256) = 1.98; sm120 RTX 5090
#: 2410 MHz; AMD's peak engine clock: gfx90a MI250X 1700, gfx942 MI300X 2100, gfx950 MI355X 2400 MHz (AMD's rings
#: send 2-7 GB/s a channel, so their copies hardly count, whatever a CU moves a clock; not so RCCL's Simple p2p parts
#: on one xGMI host, where one chunk's copy at this clock is all the fill a part pays: x 1.05 for a part of one
#: chunk at the model's 6 GB/s a channel over 121 GB/s, :func:`.ring_steps.xgmi_p2p`)
SM_CLOCK_GHZ = {"sm60": 0.74, "sm70": 1.53, "sm80": 1.41, "sm86": 1.74, "sm89": 2.52, "sm90": 1.98, "sm100": 1.98,
                "sm120": 2.41, "gfx90a": 1.70, "gfx942": 2.10, "gfx950": 2.40}
#: the architecture whose clock the per-CTA rates (``ring_copy_gbs``, ``p2p_cta_gbs``) are stated at
CLOCK_REF_ARCH = "sm90"
#: parts whose boost clock differs from their architecture's figure above, by GPU name (first match wins; data
#: sheets' FP32 rate over SMs x 2 x FP32 lanes): H100 PCIe / H800 PCIe 51.2 TFLOPS / (114 x 256) = 1.755;
#: H100 NVL 60 / (132 x 256) = 1.78; V100 PCIe 14 / (80 x 128) = 1.37 (NVIDIA: 1380 MHz), V100S 16.4 / (80 x 128)
#: = 1.60; L4 30.3 / (58 x 256) = 2.04; Pascal GP102/GP104 (Tesla P40 11.76 / (30 x 256) = 1.53, its
#: 32 LD/ST units a SM as Volta's: GP102's SM has 4 blocks of 8, unlike P100's 16, so no halving; compute
#: capability 6.1 is read as ``sm60``); P100 PCIe 9.3 / (56 x 128) = 1.30, halved for its 16 LD/ST units: 0.65
SM_CLOCK_BY_PART = ((r"H[18]00 PCIe", 1.755), (r"H100 NVL", 1.78), (r"V100S", 1.60), (r"V100-PCIE|V100 PCIe", 1.37),
                    (r"\bL4\b", 2.04), (r"\bP(40|4|6)\b|GTX 10[5-8]0|TITAN Xp?\b", 1.53),
                    (r"P100-PCIE|P100 PCIe", 0.65))


@functools.lru_cache(maxsize=256)
def sm_clock_ghz(arch: str, gpu_name: str = "") -> float:
    """Boost clock (GHz, LD/ST-equivalent) of a GPU: its part's figure where :data:`SM_CLOCK_BY_PART` names it, else
    its architecture's (:data:`SM_CLOCK_GHZ`).  Memoised (a pure function of its arguments; the model asks it
    on every timed call, each a regular-expression search per part).

    >>> sm_clock_ghz("sm90"), sm_clock_ghz("sm90", "NVIDIA H100 PCIe"), sm_clock_ghz("sm70", "Tesla V100-PCIE-16GB")
    (1.98, 1.755, 1.37)
    >>> sm_clock_ghz("sm89", "NVIDIA L40S"), sm_clock_ghz("sm89", "NVIDIA L4")
    (2.52, 2.04)
    """
    for pattern, ghz in SM_CLOCK_BY_PART:
        if gpu_name and re.search(pattern, gpu_name):
            return ghz
    return SM_CLOCK_GHZ[arch]


def at_sm_clock(gbs_at_ref: float, arch: str, gpu_name: str = "") -> float:
    """GB/s one CTA moves on ``arch`` (the part ``gpu_name`` where :data:`SM_CLOCK_BY_PART` names it) where it
    moves ``gbs_at_ref`` on an H100 SXM5: scaled by the GPU's boost clock over H100's (:func:`sm_clock_ghz`), as
    :mod:`.ring_steps` and :mod:`.p2p_cta` take a CTA's rate.

    >>> round(at_sm_clock(100.0, "sm80"), 2), at_sm_clock(100.0, "sm100")
    (71.21, 100.0)
    >>> round(at_sm_clock(100.0, "sm90", "NVIDIA H100 PCIe"), 1)
    88.6
    """
    return gbs_at_ref * sm_clock_ghz(arch, gpu_name) / SM_CLOCK_GHZ[CLOCK_REF_ARCH]


def compcap_index(sm: int) -> int:
    """NCCL's compute-capability row: 0 Volta, 1 Ampere, 2 Hopper, 3 Blackwell.

    >>> [compcap_index(s) for s in (70, 80, 90, 100)]
    [0, 1, 2, 3]
    """
    return 3 if sm >= 100 else 2 if sm >= 90 else 1 if sm >= 80 else 0


def ll_row_index(sm: int, version: tuple) -> int:
    """The one-host ``llMaxBws`` row NCCL ``version`` picks for compute capability ``sm``
    (:data:`LL_MAX_BWS_BY_VERSION`, :data:`LL_ROW_AT_LEAST_VERSION`).

    >>> [ll_row_index(s, (2, 12)) for s in (70, 80, 86, 90, 100)], [ll_row_index(s, (2, 16)) for s in (86, 90, 100)]
    ([0, 1, 0, 0, 0], [0, 2, 0])
    >>> [ll_row_index(s, (2, 21)) for s in (86, 90, 100)], ll_row_index(100, (2, 25))
    ([1, 2, 2], 3)
    """
    rows = len(_ll_max_bws(version))
    if tuple(version) < LL_ROW_AT_LEAST_VERSION:
        return {80: 1, 90: 2}.get(sm, 0) if rows > 2 else int(sm == 80)
    return min(compcap_index(sm), rows - 1)


def _ll_max_bws(version: tuple) -> tuple:
    rows = LL_MAX_BWS_BY_VERSION[0][1]
    for since, table in LL_MAX_BWS_BY_VERSION:
        rows = table if tuple(version) >= since else rows
    return rows


def ll_max_bw_gbs(idx1: int, idx2: int, version: tuple) -> float:
    """NCCL ``version``'s ``llMaxBws[idx1][idx2]`` (GB/s; ``idx1`` on one host from :func:`ll_row_index`, across
    hosts the CPU vendor); ``inf`` before :data:`LL_MAX_BWS_SINCE`, which has none.

    >>> ll_max_bw_gbs(0, 0, (2, 8, 3)), ll_max_bw_gbs(0, 0, (2, 7, 8)), ll_max_bw_gbs(0, 0, (2, 4))
    (39.0, inf, inf)
    >>> ll_max_bw_gbs(2, 0, (2, 15)), ll_max_bw_gbs(2, 0, (2, 21)), ll_max_bw_gbs(3, 0, (2, 25))
    (87.7, 141.0, 282.0)
    """
    return _ll_max_bws(version)[idx1][idx2] if tuple(version) >= LL_MAX_BWS_SINCE else float("inf")


def coll_steps(coll: str, n_ranks: int) -> int:
    """Ring steps NCCL counts: 2(n-1) for allreduce, n-1 for allgather / reducescatter, else n.

    >>> coll_steps("allreduce", 8), coll_steps("allgather", 8), coll_steps("broadcast", 8)
    (14, 7, 8)
    """
    if coll == "allreduce":
        return 2 * (n_ranks - 1)
    return n_ranks - 1 if coll in ("allgather", "reducescatter") else n_ranks


def busbw_factor(coll: str, n_ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor (``busbw = algbw * factor``, src/*.cu ``*GetBw``).

    >>> busbw_factor("allreduce", 8), busbw_factor("allgather", 8), busbw_factor("reduce", 8)
    (1.75, 0.875, 1.0)
    """
    if n_ranks <= 1:
        return 1.0
    if coll == "allreduce":
        return 2.0 * (n_ranks - 1) / n_ranks
    if coll in ("allgather", "reducescatter", "alltoall", "gather", "scatter"):
        return (n_ranks - 1) / n_ranks
    return 1.0


__all__ = ["ALGOS", "PROTOS", "ALGORITHMS", "PROTOCOLS", "ALGO_NAMES", "PROTO_NAMES", "FEATURE_VERSION",
           "NCCL_VERSION", "P2P_PER_CHANNEL_NET_BW", "MAX_DEV_WORK_P2P_PER_BATCH",
           "HW_NVLINK", "HW_PCI", "HW_NET", "NVLINK_BW_PER_LINK", "PCI_BW_BY_GEN", "PCIE_X16_GBS", "CPU_LINK_BW",
           "SPEEDS_INTRA", "SPEEDS_INTER", "MAXCHANNELS", "NVLS_NCHANNELS", "NVLS_NCHANNELS_SM100",
           "NVLS_NCHANNELS_SM100_NVL", "NCCL_MAX_NVLS_ARITY", "BASE_LAT", "HW_LAT", "RING_LAT_BY_VERSION", "TREE_LAT_28", "TREE_LAT_28_VERSIONS",
           "LL_MAX_BWS", "LL_MAX_BWS_SINCE", "LL_MAX_BWS_BY_VERSION", "LL_ROW_AT_LEAST_VERSION", "ll_max_bw_gbs",
           "ll_row_index",
           "PER_CH_MAX_RING_LL128", "PER_CH_MAX_TREE_LL128", "PER_CH_MAX_TREE", "PER_CH_MAX_NVLS_TREE",
           "NVLS_EFFICIENCY", "TREE_CORRECTION", "NVLS_TREE_CORRECTION_SM", "NVLS_TREE_CORRECTION_COLUMNS",
           "NVLS_TREE_CORRECTION_VERSION", "THREAD_THRESHOLD", "MAX_NTHREADS", "NET_OVERHEAD_US",
           "NET_PLUGIN_LATENCY_US", "LL_DATA_FRACTION", "LL128_DATA_FRACTION", "RCCL_BASE_LAT", "RCCL_GFX942",
           "RCCL_GFX950", "RCCL_MSCCL_ALLREDUCE_8GPU", "RCCL_GFX9_COMPCAP_INDEX", "compcap_index", "coll_steps",
           "busbw_factor",
           "NCCL_BUFFSIZE_BYTES", "NCCL_STEPS", "SIMPLE_STEP_BYTES", "SM_CLOCK_GHZ", "SM_CLOCK_BY_PART", "CLOCK_REF_ARCH", "at_sm_clock", "sm_clock_ghz"]
