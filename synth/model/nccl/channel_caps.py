"""NCCL's own per-channel ceilings on what a ring's and a tree's LL / LL128 / Simple channels move
(GB/s of bus bandwidth, nccl-tests convention): the caps of the execution model (:mod:`.runtime`)
that come from NCCL's (and RCCL's) tuning tables rather than from the links.
"""

from __future__ import annotations

import math

from synth.model.nccl.constants import (
    LL128_DATA_FRACTION,
    LL_MAX_BWS,
    NCCL_VERSION,
    PER_CH_MAX_TREE_LL128,
    RCCL_GFX9_COMPCAP_INDEX,
    at_sm_clock,
    busbw_factor,
    compcap_index,
    ll_max_bw_gbs,
)
from synth.model.nccl.graphs import CommGraphs
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.params import ModelParams
from synth.model.nccl.per_channel import graph_bus_gbs, ll_max_bws_row
from synth.model.nccl.versions import ll128_ring_bus_cap_gbs, ring_ll128_run_gbs, ring_ll_factor


#: NCCL's ring channels on an NVLink 4 H100 host, the channels its llMaxBws Hopper row (141 GB/s) is reached on: the
#: model's own search on 8 x H100 (``comm_graphs``: 12 rings x 2; tests/synth/model/nccl/test_ll_cta_cap.py checks the
#: two agree), as NCCL's INFO lines print it ("24 coll channels": the Snellius 4 x H100 and Alps 4 x GH200 logs)
HOPPER_LL_CHANNELS = 24
#: channels over which an AMD host's LL cap and its links are spread: 2 x RCCL's 28 rome-model rings, the channels of
#: the MI300X logs the xGMI link efficiency was fitted on; a channel's LL rate (141 / 56 GB/s) and link share do not
#: fall when RCCL 2.26 runs more copies of the rings (112 on 8 x MI350X, whose 64-512 KiB LL rows this fits:
#: tests/synth/model/nccl/test_rccl_ll_cap.py): more workgroups, not more link
AMD_REF_CHANNELS = 56
#: first RCCL after gfx950's LL kernels without inlining: RCCL 2.26.6 (ROCm 7.0.0) "Fixed broken functionality within
#: the LL protocol on gfx950 by disabling inlining of LLGenericOp kernels"; RCCL 2.27.7 (ROCm 7.1.0) "Changed code
#: inlining to improve latency for small message sizes for AllReduce, AllGather, and ReduceScatter" (ROCm/rccl
#: CHANGELOG.md, both entries).  The one-host LL cap on gfx950 stands for 2.26's slow LL kernels and ends here
GFX950_LL_INLINED = (2, 27)


def _table_row(m: NcclMachine) -> tuple[int, int]:
    """``(GPU generation, node-count column)`` of NCCL's per-channel tables for ``m`` (RCCL: the >= 90 row)."""
    return (RCCL_GFX9_COMPCAP_INDEX if m.amd else compcap_index(m.sm)), min(m.nodes, 3) - 1


def ring_channel_cap_gbs(m: NcclMachine, proto: str, channels: int, g: CommGraphs, coll: str = "allreduce",
                         version: tuple = NCCL_VERSION) -> float:
    """Most bus bandwidth ``channels`` CTAs push: NCCL's llMaxBws for LL; for LL128 NCCL's own ring LL128
    ceiling of the run's version, counted as NCCL counts it, on its ring graph's channels (tuning.cc
    ``graphs[a]->nChannels*perChMaxRingLL128Bw``, NVIDIA/nccl v2.10.3-1 .. v2.29.3-1; 2.7-2.9 a per-collective
    rate per channel, 2.5-2.6 one figure per collective, :func:`~.versions.ll128_ring_bus_cap_gbs`; Blackwell at
    NCCL's newest per-channel figure whatever the version, :func:`~.versions.ring_ll128_run_gbs`), shared
    by the channels that run (the graph's are duplicated: 8 x A100 240 GB/s on 12 graph channels, 24 CTAs);
    Simple: the per-channel LL128 figure in payload terms.  Before 2.21 the LL cap is NCCL's own lower
    estimate of that version (a quarter or a third of its ring graph's bandwidth,
    :func:`~.versions.ring_ll_factor`; 8 x A100 on NCCL 2.8: 58.75 GB/s, a quarter of 235, on all 24
    channels), as llMaxBws is of later ones; before 2.8, which has no llMaxBws (:data:`.constants.LL_MAX_BWS_SINCE`),
    that estimate alone.

    On AMD GPUs the LL cap is the model's, not RCCL's tuner's: RCCL keeps the tables (ROCm/rccl 0cbce2a7
    src/graph/tuning.cc lines 269-273, row by ``comm->minCompCap``, 9.x on every gfx9 GPU: the ">= 90" row,
    141 GB/s) but applies ``min(llMaxBw, ...)`` only in the CUDA branch (lines 376-383: under HIP its
    ``bwRatio`` tables alone).  The model keeps 141 GB/s over :data:`AMD_REF_CHANNELS` as the rate of RCCL's LL
    channels on one host, what the one-host MI300X / MI350X rows of RCCL up to 2.26 show; on gfx950 only before
    :data:`GFX950_LL_INLINED` (RCCL 2.26.6 ran gfx950's LL kernels without inlining, 2.27 changed its inlining
    for small-message latency).  Across hosts RCCL takes LL's bandwidth from its ``bwRatio`` tables, which this
    model does not hold, so there it stays uncapped.

    >>> from topo_probe import get_preset
    >>> from synth.model.nccl.env import NcclEnv
    >>> from synth.model.nccl.graphs import comm_graphs
    >>> m = NcclMachine.from_topology(get_preset("mi300x"))
    >>> g = comm_graphs(m, NcclEnv(), (2, 28))
    >>> round(ring_channel_cap_gbs(m, "LL", 4, g) * g.n_channels / 4, 6)
    141.0
    """
    if m.amd and (m.nodes > 1 or (proto == "LL" and m.arch == "gfx950" and tuple(version) >= GFX950_LL_INLINED)):
        return math.inf
    cc, idx2 = _table_row(m)
    if proto == "LL":
        if m.amd:                                               # RCCL 0cbce2a7's (2.21.5) table
            ll = LL_MAX_BWS[cc][idx2]
        else:                                                   # none before 2.8; rows by version
            ll = ll_max_bw_gbs(ll_max_bws_row(m, version), idx2, version)
        factor = ring_ll_factor(coll, m.nodes, version)
        if factor < 0.5 and not m.amd:
            graph_bus = g.ring.n_channels * (g.ring.bw_intra if m.nodes <= 2 else g.ring.bw_inter)
            ll = min(ll, graph_bus_gbs(graph_bus, m.sm, version) * factor)
        if m.nodes == 1 and not m.amd:
            ll = min(ll, ll_cta_cap_gbs(m, g))
        return ll * channels / (AMD_REF_CHANNELS if m.amd else g.n_channels)
    if proto == "LL128":
        own = ll128_ring_bus_cap_gbs(coll, g.ring.n_channels, ring_ll128_run_gbs(cc, idx2), version)
        return own * channels / g.n_channels
    return channels * ring_ll128_run_gbs(cc, idx2) / LL128_DATA_FRACTION


def ll_cta_cap_gbs(m: NcclMachine, g: CommGraphs) -> float:
    """Most bus bandwidth (GB/s) a Blackwell NVLink ring's LL channels move on one NVLink domain: Hopper's
    per-channel LL figure (NCCL's llMaxBws Hopper row, 141 GB/s, over the :data:`HOPPER_LL_CHANNELS` it runs on)
    times the ring's channels, at the GPU's SM clock (:func:`~.constants.at_sm_clock`); ``inf`` elsewhere.

    NCCL's Blackwell row is Hopper's doubled (NVIDIA/nccl v2.29.3-1 src/graph/tuning.cc line 173,
    ``{2*141.0, ...}``, the same from v2.25.1-1 to v2.30.7-1): the doubled NVLink.  An LL channel does not move
    at the link's rate but at its CTA's: every thread stores 8-byte data+flag halves of 16-byte lines with
    volatile stores and its receiver polls each line until the flag matches (v2.29.3-1 src/device/prims_ll.h
    ``storeLL`` / ``readLL``), one CTA a channel, the work of one SM.  NCCL publishes no per-CTA LL figure: that the
    rate follows the SM clock, as a CTA's copy does (:mod:`.ring_steps`), is this model's assumption; Blackwell's SM
    clock is Hopper's.  Where it binds (B200 / GB300 on one NVLink domain, 32 channels): 141 / 24 x 32 = 188 GB/s
    instead of 282.  Not applied to PCIe rings (2-4 channels, whose LL the link bounds) nor to NCCL's CPU rows across
    hosts.

    >>> from topo_probe import get_preset
    >>> from synth.model.nccl.env import NcclEnv
    >>> from synth.model.nccl.graphs import comm_graphs
    >>> b200 = NcclMachine.from_topology(get_preset("hgx-b200"))
    >>> round(ll_cta_cap_gbs(b200, comm_graphs(b200, NcclEnv(), NCCL_VERSION)), 1)
    188.0
    >>> h100 = NcclMachine.from_topology(get_preset("dgx-h100"))
    >>> ll_cta_cap_gbs(h100, comm_graphs(h100, NcclEnv(), NCCL_VERSION))
    inf
    """
    return ll_cta_gbs(m) * g.n_channels


def ll_cta_gbs(m: NcclMachine) -> float:
    """GB/s one CTA's LL moves on a Blackwell NVLink machine ``m`` (one ring channel, or one p2p send's CTA): Hopper's
    llMaxBws row over :data:`HOPPER_LL_CHANNELS`, at ``m``'s SM clock (:func:`ll_cta_cap_gbs`); ``inf`` elsewhere.
    The Hopper row is versioned (:func:`~.constants.ll_max_bw_gbs`) but 141 in every NCCL that runs on Blackwell: the
    first to build for sm_100 is v2.25.1-1 (makefiles/common.mk line 42), the row is 141 from v2.21.5-1 on.

    >>> from topo_probe import get_preset
    >>> ll_cta_gbs(NcclMachine.from_topology(get_preset("hgx-b200")))
    5.875
    """
    if m.amd or m.sm < 100 or m.intra not in ("nvswitch", "nvlink"):
        return math.inf
    return at_sm_clock(LL_MAX_BWS[compcap_index(90)][0] / HOPPER_LL_CHANNELS, m.arch)


def ll128_generation_share(m: NcclMachine) -> float:
    """Share of the LL128 payload rate a GPU generation reaches, by NCCL's own per-channel ring LL128 figure
    (``perChMaxRingLL128Bws``, NVIDIA/nccl v2.28.9-1 src/graph/tuning.cc lines 175-180: Volta and Ampere
    20 GB/s, Hopper 36.7, Blackwell 2 x 36.7; the execution model's figure, :func:`~.versions.ring_ll128_run_gbs`)
    relative to Hopper's, at most 1: the generation-independent ``proto_eff[*, LL128]`` is the fraction on the
    Hopper rings that fit it, where LL128 runs at the link rate.  8 x A100: 20 / 36.7 = 0.545 (it fitted
    0.649 as a constant of its own, ``proto_eff[sm80, LL128]``); Hopper, Blackwell and RCCL's gfx9 GPUs
    (which read the >= 90 row, :data:`~.constants.RCCL_GFX9_COMPCAP_INDEX`): 1.

    >>> from topo_probe import get_preset
    >>> round(ll128_generation_share(NcclMachine.from_topology(get_preset("dgx-a100"))), 4)
    0.545
    >>> ll128_generation_share(NcclMachine.from_topology(get_preset("dgx-h100")))
    1.0
    """
    cc, idx2 = _table_row(m)
    return min(1.0, ring_ll128_run_gbs(cc, idx2) / ring_ll128_run_gbs(compcap_index(90), idx2))


def tree_ll128_cap_gbs(m: NcclMachine, g: CommGraphs, coll: str, params: ModelParams) -> float:
    """Most bus bandwidth (nccl-tests convention, GB/s) a tree's LL128 protocol moves on all its channels:
    NCCL's own per-channel tree LL128 ceiling for the GPU generation and node count
    (``perChMaxTreeLL128Bws``, NVIDIA/nccl v2.28.9-1 src/graph/tuning.cc line 308:
    ``min(..., graphs[a]->nChannels*perChMaxTreeLL128Bw)``) times the tree graph's channels, as a tree's
    algorithm bandwidth (NCCL's ``ratio`` .5 for trees) in bus terms, at the achieved fraction
    ``tree_ll128_channel_eff`` fitted on every in-sample tree row (one constant for every generation, as
    NCCL's table is one per generation; RCCL reads the >= 90 row, :data:`~.constants.RCCL_GFX9_COMPCAP_INDEX`).

    >>> from topo_probe import cluster
    >>> from synth.model.nccl.env import NcclEnv
    >>> from synth.model.nccl.graphs import comm_graphs
    >>> m = NcclMachine.from_topology(cluster("dgx-h100", nodes=2))
    >>> g = comm_graphs(m, NcclEnv(), NCCL_VERSION)
    >>> cap = tree_ll128_cap_gbs(m, g, "allreduce", ModelParams(tree_ll128_channel_eff=1.0))
    >>> round(cap, 6) == round(36.7 * g.tree.n_channels * 0.5 * 2 * 15 / 16, 6)
    True
    """
    if g.tree is None:
        return math.inf
    cc, idx2 = _table_row(m)
    per_channel = PER_CH_MAX_TREE_LL128[cc][idx2]
    return params.tree_ll128_channel_eff * per_channel * g.tree.n_channels * 0.5 * busbw_factor(coll, m.ranks)


__all__ = ["HOPPER_LL_CHANNELS", "GFX950_LL_INLINED", "ll_cta_cap_gbs", "ll_cta_gbs", "ring_channel_cap_gbs",
           "ll128_generation_share", "tree_ll128_cap_gbs"]
