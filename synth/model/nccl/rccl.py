"""RCCL's choices on AMD GPUs (gfx942 / MI300X, gfx90a / MI250X).

RCCL keeps NCCL's tuner but (a) forces the protocol by message size with its ``llProtoRanges``
(ROCm/rccl src/graph/tuning.cc, ``rcclTuningModel[5]`` for the 8-GPU xGMI mesh of MI300X) and
(b) on 8 gfx942 GPUs in one node runs allreduce between 1 KiB and 16 MiB with the MSCCL
algorithms it ships (ROCm/rccl tools/msccl-algorithms: all-pairs LL up to 320 KiB, one-step LL
above), bypassing the tuner (``RCCL_MSCCL_ENABLE=0`` turns that off), but only when every rank
has a process of its own (src/misc/msccl/msccl_lifecycle.cc ``mscclCommCompatible``: two ranks
with the same host and process hash turn MSCCL off for the communicator, unless
``RCCL_MSCCL_ENABLE_SINGLE_PROCESS=1`` in RCCL versions that have it), so ``-g 8`` runs the ring.  Tree/Simple is off on
gfx942 inside one node, so the ring carries everything else.  On gfx950 (MI350X / MI355X) RCCL reads
``rcclTuningModel[6]`` instead and picks the protocol as :func:`gfx950_one_node_protocol` says (no MSCCL: RCCL 2.26.6
logs ring LL for a 64 KiB allreduce of 8 one-GPU processes on 8 x MI355X).  Units: bytes, µs, GB/s per direction.
"""

from __future__ import annotations

from synth.model.nccl.constants import (LL_DATA_FRACTION, PROTOS, RCCL_BASE_LAT, RCCL_GFX942, RCCL_GFX950,
                                        RCCL_MSCCL_ALLREDUCE_8GPU, busbw_factor, coll_steps)
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.params import ModelParams
from synth.model.nccl.rccl_net import rccl_net_choose, rccl_net_estimate_us, rccl_partial_host
from synth.model.nccl.latency import host_time_us
from synth.model.nccl.tuning import TuneTable

#: our names of RCCL's MSCCL allreduce kernels
MSCCL_ALLPAIRS, MSCCL_ONESTEP = "msccl_allpairs", "msccl_1step"


def msccl_applies(t: TuneTable, coll: str, nbytes: int) -> bool:
    """Whether RCCL runs this call with one of its shipped MSCCL allreduce algorithms.

    >>> from topo_probe import get_preset
    >>> from synth.model.nccl import NcclModel
    >>> from synth.model.nccl.env import NcclEnv
    >>> from synth.model.nccl.machine import NcclMachine
    >>> def table(g, **env):
    ...     m = NcclMachine.from_topology(get_preset("mi300x"), gpus_per_process=g)
    ...     return NcclModel(m, env=NcclEnv.from_environ(env)).table
    >>> [msccl_applies(table(g), "allreduce", 1 << 20) for g in (1, 8)]
    [True, False]
    >>> msccl_applies(table(8, RCCL_MSCCL_ENABLE_SINGLE_PROCESS="1"), "allreduce", 1 << 20)
    True
    """
    m, limits = t.machine, RCCL_MSCCL_ALLREDUCE_8GPU
    own_process = m.gpus_per_process == 1 or bool(t.env.msccl_single_process)
    return (t.env.msccl_enable != 0 and own_process and m.arch == "gfx942" and m.nodes == 1 and m.gpus_per_node == 8
            and coll == "allreduce" and t.env.algo_allowed(coll, "ring")
            and limits["min_bytes"] <= nbytes <= limits["onestep_max_bytes"])


def rccl_choose(t: TuneTable, coll: str, nbytes: int) -> tuple[str, str, int, int, float]:
    """RCCL's pick: ``(algorithm, protocol, channels, threads, NCCL-style estimate µs)``."""
    if msccl_applies(t, coll, nbytes):
        allpairs = nbytes <= RCCL_MSCCL_ALLREDUCE_8GPU["allpairs_max_bytes"]
        return (MSCCL_ALLPAIRS if allpairs else MSCCL_ONESTEP), "LL", 2, 256, 0.0
    if rccl_partial_host(t.machine) and coll in ("allreduce", "allgather", "reducescatter", "broadcast", "reduce"):
        # part of a host across hosts: rcclTuningModel[0], RCCL's tuner picks tree or ring (:mod:`.rccl_net`)
        algo, proto = rccl_net_choose(t.machine, coll, nbytes, lambda a, p: t.env.algo_allowed(coll, a) and (
            not t.env.proto_set(coll) or t.env.proto_allowed(coll, p)))
        nc, nt = t.channels(algo, proto, nbytes, coll)
        return algo, proto, nc, nt, rccl_net_estimate_us(t.machine, coll, algo, proto, nbytes)
    ranges = RCCL_GFX942["ll_ranges"].get(coll)
    proto = "Simple"
    if t.env.proto_set(coll):
        enabled = [p for p in PROTOS if t.env.proto_allowed(coll, p)]
        proto = min(enabled or ["Simple"], key=lambda p: t.algo_time_us(coll, "ring", p, nbytes))
    elif t.machine.arch == "gfx950" and t.machine.nodes == 1:
        # across hosts RCCL's tuner picks the algorithm (tree too) before model 6's llProtoRanges pick the
        # protocol; the model runs only the ring there, so it keeps the gfx942 ranges (model 6's alone took
        # the 2-host MI355X tables from 12-14 % to 22-34 % median error)
        proto = gfx950_one_node_protocol(t.machine, coll, nbytes)
    elif ranges:
        proto = "LL" if nbytes <= ranges[0][1] else "LL128" if nbytes <= ranges[1][1] else "Simple"
        if proto == "LL128" and t.machine.arch == "gfx942" and not gfx942_ll128_enabled(t.machine, t.version):
            proto = "Simple"
        if proto == "LL128" and t.machine.arch == "gfx950":
            # LL128 is off on gfx950 (init.cc ``topo->ll128Enabled = false``, :data:`RCCL_GFX950`): RCCL 2.26.6
            # across 2 MI355X hosts ran 1-8 MiB allreduce as Simple (Ahalperin/amd-dev 58a032f7
            # results/scale_2x1gpu_all_reduce/nccl_debug.log: "8388608 Bytes -> Algo TREE proto SIMPLE"; its printed
            # tuning table gives ring and tree LL128 0.0 GB/s)
            proto = "Simple"
    nc, nt = t.channels("ring", proto, nbytes)
    return "ring", proto, nc, nt, t.algo_time_us(coll, "ring", proto, nbytes)


#: first RCCL (NCCL-numbered) version whose tuning.cc lets gfx942 run LL128: ROCm/rccl 0cbce2a7 (2.21.5)
#: src/graph/tuning.cc:511-514 enables it on gfx90a alone; RCCL 2.26.6's CHANGELOG.md:36-40 ("RCCL 2.22.3 for ROCm
#: 6.4.2 ... Added support for the LL128 protocol on gfx942"); 2.26.6 (Ahalperin/amd-dev 0d4f8c1 rccl/src/graph/
#: tuning.cc:707-712) on gfx90a, gfx942 and gfx950, where ``topo->ll128Enabled``.  2.22-2.25's gating is not readable
#: here: 2.26.6's is assumed (the ``ll128Enabled`` gate is older: ROCm/rccl 7bbce085, 2022, for gfx90a)
GFX942_LL128_VERSION = (2, 22)
#: RCCL 2.26.6's only gfx942 rome model with ``ll128Enabled=1`` (rome_models.cc:577-578, 817, ``rome_model_81``):
#: 8 GPUs, 8 NICs, 7 xGMI links per GPU; the one-host model (``rome_model_79``, lines 551-561) has no NIC and no LL128
#: (GPUs, NICs, xGMI links per GPU) of a host
ROME_MODEL_81 = (8, 8, 7)


def gfx942_ll128_enabled(m: NcclMachine, version: tuple) -> bool:
    """Whether RCCL lets LL128 run on ``m`` (gfx942) by default.  ``ll128Enabled`` starts false (init.cc:1200 of
    RCCL 2.26.6) and only a matched rome model sets it; matching needs the model's GPU, NIC and link counts
    (rome_models.cc ``parseRome4P2H``, called from search.cc:1060), and on one all-xGMI host ``ncclTopoTrimSystem``
    has removed every NIC first (paths.cc:871-886, unless ``RCCL_ENABLE_INTRANET=1``), so the host matches model 79
    (no NIC, no LL128).  Before :data:`GFX942_LL128_VERSION` tuning.cc turns LL128 off on every gfx942 (2.21.5);
    from it 2.26.6's gate is assumed.  Model 81 wants exactly 8 NICs a host (rome_models.cc:2079-2080: a 16-NIC host
    matches model 84, no LL128); RCCL also compares the link and GPU-NIC path matrices (rome_models.cc:1745-1751,
    1789-1798), taken here as matching where the counts do (an assumption).  ``RCCL_LL128_FORCE_ENABLE`` is not read
    here, and neither is 2.26.6 dropping LL128 under ``NCCL_PROTO=LL128`` where the gate is shut (tuning.cc:705):
    a set ``NCCL_PROTO`` takes :func:`rccl_choose`'s own path.

    >>> from topo_probe import cluster, get_preset
    >>> two = NcclMachine.from_topology(cluster("mi300x", nodes=2))
    >>> one = NcclMachine.from_topology(get_preset("mi300x"))
    >>> [gfx942_ll128_enabled(two, v) for v in ((2, 21), (2, 22), (2, 27))], gfx942_ll128_enabled(one, (2, 28))
    ([False, True, True], False)
    """
    if tuple(version) < GFX942_LL128_VERSION or m.nodes < 2:
        return False
    return (m.gpus_per_node, m.nics_per_node, m.links_per_gpu) == ROME_MODEL_81


def _mi355x() -> NcclMachine:
    """The 8 x MI355X preset (doctests)."""
    from topo_probe import get_preset
    return NcclMachine.from_topology(get_preset("mi355x"))


def rccl_tuner_us(m: NcclMachine, coll: str, proto: str, nbytes: int) -> float:
    """RCCL's own estimate (µs) of a ring ``coll`` with ``proto`` on ONE gfx950 node, as ROCm/rccl
    src/graph/tuning.cc computes it with ``rcclTuningModel[6]`` (code index file 2336120413): busBw =
    xGMI links x RCCL's 48 GB/s per link x ``bwRatio[0][ring][proto]`` (x 1.65 for LL broadcast / reduce,
    char 32765) x n / ring steps; latency ``baseLat`` + ring steps x ``hwLat[xGMI][ring]`` (broadcast /
    reduce: one hop, their channels being the same); one node takes no ring correction factor
    (``ncclTopoGetAlgoTime``, char 48000).  RCCL 2.26.6 printed these very entries on 8 x MI355X
    (Ahalperin/amd-dev 58a032f7 results/scale_8gpu_all_reduce/nccl_debug.log): allreduce ring LL
    23.2 µs / 15.4 GB/s and Simple 46.4 µs / 192 GB/s, broadcast ring LL 12.8 µs / 44.4 GB/s.

    >>> m = _mi355x()
    >>> [round(rccl_tuner_us(m, "allreduce", p, 0), 1) for p in ("LL", "Simple")]
    [23.2, 46.4]
    >>> [round(1e6 / (1000 * (rccl_tuner_us(m, "allreduce", p, 10**6) - rccl_tuner_us(m, "allreduce", p, 0))), 2)
    ...  for p in ("LL", "Simple")]
    [15.36, 192.0]
    >>> round(rccl_tuner_us(m, "broadcast", "LL", 0), 1), round(1e6 / (1000 * (rccl_tuner_us(m, "broadcast", "LL",
    ...     10**6) - 12.8)), 1)
    (12.8, 44.4)
    """
    c, p, n = RCCL_GFX950, PROTOS.index(proto), m.ranks
    steps, rooted = coll_steps(coll, n), coll in ("broadcast", "reduce")
    bus = m.links_per_gpu * c["xgmi_gbs"] * c["ring_bw_ratio"][p]
    bus *= c["ll_rooted_factor"] if (rooted and proto == "LL") else 1.0
    hop = c["hw_lat_xgmi"]["ring"][p]
    lat = RCCL_BASE_LAT[p] + (hop if rooted else steps * hop)
    return lat + nbytes / (1000.0 * bus * n / steps)


def gfx950_one_node_protocol(m: NcclMachine, coll: str, nbytes: int) -> str:
    """The protocol RCCL 2.26 (ROCm 7) runs ``coll`` of ``nbytes`` with on ONE gfx950 node when ``NCCL_PROTO``
    is unset: ``rcclUpdateCollectiveProtocol`` turns allgather up to 88448 B per rank and reducescatter up to
    1 MiB per rank into LL (bytes per rank: ``nbytes / ranks``, rccl_common.h ``rcclGetSizePerRank``, code
    index file 59700929476); otherwise RCCL's tuner compares ring LL and Simple (:func:`rccl_tuner_us`;
    LL128 is off, tree LL is slower than ring LL at every size).  RCCL 2.26.6 on 8 x MI355X logged allreduce
    64 KiB ring LL, 512 KiB and 4 MiB ring Simple (the nccl_debug.log above).

    >>> m = _mi355x()
    >>> [gfx950_one_node_protocol(m, "allreduce", b) for b in (65536, 262144, 524288, 4 << 20)]
    ['LL', 'LL', 'Simple', 'Simple']
    >>> [gfx950_one_node_protocol(m, "allgather", 8 * b) for b in (88448, 88449)]
    ['LL', 'Simple']
    >>> [gfx950_one_node_protocol(m, "reducescatter", 8 * b) for b in (1 << 20, (1 << 20) + 1)]
    ['LL', 'Simple']
    """
    if coll != "allreduce" and nbytes // m.ranks <= RCCL_GFX950["one_node_ll_max"].get(coll, -1):
        return "LL"
    return min(("LL", "Simple"), key=lambda p: rccl_tuner_us(m, coll, p, nbytes))


def msccl_time_us(t: TuneTable, algo: str, nbytes: int, params: ModelParams) -> float:
    """Time (µs) of RCCL's MSCCL all-pairs / one-step LL allreduce: both move each rank's
    ``2(n-1)/n`` share over all xGMI links at once with LL's 8-of-16-byte payload; only their
    start-up latency differs."""
    m = t.machine
    bus = m.links_per_gpu * m.link_gbs * LL_DATA_FRACTION * params.proto_efficiency(m.arch, "LL")
    lat = params.msccl_allpairs_latency_us if algo == MSCCL_ALLPAIRS else params.msccl_onestep_latency_us
    t_dev = lat + nbytes * busbw_factor("allreduce", m.ranks) / (1000.0 * bus)
    return max(host_time_us(params, m.gpus_per_process, 2, t.version, m.threads_per_process), t_dev)


__all__ = ["rccl_choose", "msccl_applies", "msccl_time_us", "MSCCL_ALLPAIRS", "MSCCL_ONESTEP", "rccl_tuner_us",
           "gfx950_one_node_protocol", "gfx942_ll128_enabled"]
