"""RCCL's choices on AMD GPUs (gfx942 / MI300X, gfx90a / MI250X).

RCCL keeps NCCL's tuner but (a) forces the protocol by message size with its ``llProtoRanges``
(ROCm/rccl src/graph/tuning.cc, ``rcclTuningModel[5]`` for the 8-GPU xGMI mesh of MI300X) and
(b) on 8 gfx942 GPUs in one node runs allreduce between 1 KiB and 16 MiB with the MSCCL
algorithms it ships (ROCm/rccl tools/msccl-algorithms: all-pairs LL up to 320 KiB, one-step LL
above), bypassing the tuner (``RCCL_MSCCL_ENABLE=0`` turns that off), but only when every rank
has a process of its own (src/misc/msccl/msccl_lifecycle.cc ``mscclCommCompatible``: two ranks
with the same host and process hash turn MSCCL off for the communicator, unless
``RCCL_MSCCL_ENABLE_SINGLE_PROCESS=1`` in RCCL versions that have it), so ``-g 8`` runs the ring.  Tree/Simple is off on
gfx942 inside one node, so the ring carries everything else.  Units: bytes, µs, GB/s per direction.
"""

from __future__ import annotations

from synth.model.nccl.constants import LL_DATA_FRACTION, PROTOS, RCCL_GFX942, RCCL_MSCCL_ALLREDUCE_8GPU, busbw_factor
from synth.model.nccl.params import ModelParams
from synth.model.nccl.runtime import host_time_us
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
    ranges = RCCL_GFX942["ll_ranges"].get(coll)
    proto = "Simple"
    if t.env.proto_set(coll):
        enabled = [p for p in PROTOS if t.env.proto_allowed(coll, p)]
        proto = min(enabled or ["Simple"], key=lambda p: t.algo_time_us(coll, "ring", p, nbytes))
    elif ranges:
        proto = "LL" if nbytes <= ranges[0][1] else "LL128" if nbytes <= ranges[1][1] else "Simple"
    nc, nt = t.channels("ring", proto, nbytes)
    return "ring", proto, nc, nt, t.algo_time_us(coll, "ring", proto, nbytes)


def msccl_time_us(t: TuneTable, algo: str, nbytes: int, params: ModelParams) -> float:
    """Time (µs) of RCCL's MSCCL all-pairs / one-step LL allreduce: both move each rank's
    ``2(n-1)/n`` share over all xGMI links at once with LL's 8-of-16-byte payload; only their
    start-up latency differs."""
    m = t.machine
    bus = m.links_per_gpu * m.link_gbs * LL_DATA_FRACTION * params.proto_efficiency(m.arch, "LL")
    lat = params.msccl_allpairs_latency_us if algo == MSCCL_ALLPAIRS else params.msccl_onestep_latency_us
    t_dev = lat + nbytes * busbw_factor("allreduce", m.ranks) / (1000.0 * bus)
    return max(host_time_us(params, m.gpus_per_process, 2, t.version), t_dev)


__all__ = ["rccl_choose", "msccl_applies", "msccl_time_us", "MSCCL_ALLPAIRS", "MSCCL_ONESTEP"]
