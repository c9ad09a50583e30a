"""Constants of the NCCL model: NCCL's and RCCL's own tuning tables (facts, with their sources)
and the few values fitted on the real logs (``tests/fixtures/real_logs``) all together.

Units: µs for latencies, GB/s (1e9 bytes/s, per direction) for bandwidths.

NCCL facts (NVIDIA/nccl ``src/graph/tuning.cc`` of the 2.19-2.22 series, ``src/graph/topo.h``):

* ``baseLat`` (µs): Tree LL/LL128/Simple 6.8/14.0/0, Ring 6.6/14.0/8.4, CollNet/NVLS 0.
* ``hwLat`` (µs) per hop, NVLink: Tree 0.6/1.25/28, Ring 0.6/1.9/3.4, CollNetDirect 3.7,
  CollNetChain 2.8, NVLS 23, NVLSTree 23; PCI: Tree 1.0/1.9/28, Ring 1.0/2.5/5.7;
  NET: Tree 5.0/8.5/28, Ring 2.7/4.0/14.0, CollNetDirect 31, CollNetChain 30, NVLS 18,
  NVLSTree 14.
* Protocol refinements: Ring LL busBw x 1/4 (x 1/3 for allgather/reducescatter/broadcast on one
  node) capped by ``llMaxBws``; Ring LL128 x 0.92 capped by channels x ``perChMaxRingLL128Bws``
  (Volta/Ampere 20, Hopper 36.7); Tree x 0.92 capped by channels x ``perChMaxTreeBws``
  (Volta 26.5, Ampere 24.0, Hopper 38.7 on one node); Tree LL x 1/3.8; Tree LL128 x 7/9 on one
  node; bus -> algorithm bandwidth: Ring nRanks/nSteps, NVLS and NVLSTree 5/6, others 1/2.
* ``llMaxBws`` one node: Volta 39.0, Ampere 87.7, Hopper 141.0 (2.23+).
* Per-link bandwidth NCCL assumes (``topo.h``): NVLink SM60 18, SM70/SM80 20, SM90 20.6, SM100
  40.1; PCI Gen3 x16 12, Gen4 24, Gen5 48 (NCCL's PCI_BW 12 for Gen3); network 12 per 100 Gb/s.
* Default thread thresholds (``device.h``): LL 8, LL128 8, Simple 64 bytes per thread; LL
  threads 512, LL128 640, Simple 512 (Hopper 640).

RCCL facts (ROCm/rccl ``src/graph/tuning.cc``): ``baseLat`` 12.0/12.0/17.0 (LL/LL128/Simple) for
Tree and Ring; xGMI per-hop latencies LL 0.8, LL128 2.2, Simple 3.6 (ring); MI300X (gfx942) runs
small allreduces with one-shot all-pairs kernels (MSCCL / "allreduce 1step", RCCL's bundled
algorithms) and medium ones with all-pairs reduce-scatter + all-gather ("allreduce-allpairs")
instead of rings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path

from topo_probe.errors import InvalidArgument

ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("LL", "LL128", "Simple")
#: NCCL_ALGO / NCCL_PROTO spellings (case-insensitive) -> ours
ALGO_NAMES = {"tree": "tree", "ring": "ring", "collnetdirect": "collnet_direct", "collnetchain": "collnet_chain",
              "collnet": "collnet_direct", "nvls": "nvls", "nvlstree": "nvls_tree", "pat": "pat"}
PROTO_NAMES = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}
#: the names NCCL's tuner plugin config uses (``ext-tuner/example``)
PLUGIN_ALGO = {"tree": "tree", "ring": "ring", "collnet_direct": "collnet_direct", "collnet_chain": "collnet_chain",
               "nvls": "nvls", "nvls_tree": "nvls_tree", "pat": "pat"}

#: NCCL baseLat [algorithm][protocol] in µs (LL, LL128, Simple)
BASE_LAT_US = {"tree": (6.8, 14.0, 0.0), "ring": (6.6, 14.0, 8.4), "collnet_direct": (0.0, 0.0, 0.0),
               "collnet_chain": (0.0, 0.0, 0.0), "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0),
               "pat": (0.0, 0.0, 8.4)}
#: NCCL hwLat [link][algorithm][protocol] in µs per hop
HW_LAT_US = {
    "nvlink": {"tree": (0.6, 1.25, 28.0), "ring": (0.6, 1.9, 3.4), "collnet_direct": (0.0, 0.0, 3.7),
               "collnet_chain": (0.0, 0.0, 2.8), "nvls": (0.0, 0.0, 23.0), "nvls_tree": (0.0, 0.0, 23.0),
               "pat": (0.0, 0.0, 3.4)},
    "pci": {"tree": (1.0, 1.9, 28.0), "ring": (1.0, 2.5, 5.7), "collnet_direct": (0.0, 0.0, 3.7),
            "collnet_chain": (0.0, 0.0, 2.8), "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0),
            "pat": (0.0, 0.0, 5.7)},
    "net": {"tree": (5.0, 8.5, 28.0), "ring": (2.7, 4.0, 14.0), "collnet_direct": (0.0, 0.0, 31.0),
            "collnet_chain": (0.0, 0.0, 30.0), "nvls": (0.0, 0.0, 18.0), "nvls_tree": (0.0, 0.0, 14.0),
            "pat": (0.0, 0.0, 14.0)},
}
#: RCCL baseLat (LL, LL128, Simple) for ring and tree, and its xGMI ring hop latencies (µs)
RCCL_BASE_LAT_US = (12.0, 12.0, 17.0)
RCCL_XGMI_HOP_US = (0.8, 2.2, 3.6)

#: per-architecture caps (GB/s): llMaxBw (one node), per-channel ring LL128, per-channel tree
LL_MAX_BW = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 141.0, "cdna": 87.7}
PER_CH_RING_LL128 = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 36.7, "cdna": 20.0}
PER_CH_TREE = {"volta": 26.5, "ampere": 24.0, "hopper": 38.7, "blackwell": 38.7, "cdna": 24.0}
PER_CH_TREE_LL128 = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 36.7, "cdna": 20.0}
#: per-link bandwidth NCCL assumes (GB/s per direction), topo.h
NCCL_NVLINK_GBPS = {"sm60": 18.0, "sm70": 20.0, "sm80": 20.0, "sm86": 12.0, "sm90": 20.6, "sm100": 40.1}

#: NCCL thread thresholds (bytes per thread before adding channels) and threads per protocol
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
THREADS = {"LL": 512, "LL128": 640, "Simple": 512}


@dataclass(frozen=True)
class ModelParams:
    """What the real logs taught: one value per GPU architecture or link kind, fitted on every
    log together (``benchmarks/validate_cost_model.py --fit`` searched them; the committed values
    are its result), never per log.

    Attributes
    ----------
    link_gbps : dict
        Achievable GB/s per direction of one link, by link kind and architecture (NVLink on
        SM70/SM80/SM90/SM100, xGMI on gfx90a/gfx942, PCIe generations).
    launch_us : float
        Fixed host cost of one collective call from a process driving one GPU (µs).
    launch_per_gpu_us : float
        Extra host cost per additional GPU driven by the same thread (``nGpus`` > 1 in
        nccl-tests: one thread launches the kernel on every GPU of the group).
    net_latency_scale : dict
        Network hop latency by NIC kind as a multiple of NCCL's NET ``hwLat`` (which is
        InfiniBand's): ``ib`` (InfiniBand / RoCE), ``efa`` (AWS EFA, first generation, p4d),
        ``efa2`` (p5), ``tcpxo`` (GCP GPUDirect-TCPXO).
    net_efficiency : dict
        Achievable fraction of the NICs' line rate by NIC kind.
    nvls_efficiency : float
        NVLink SHARP allreduce: algorithm bandwidth as a fraction of the GPU's NVLink bandwidth
        (published: 8 x H100 NVLS all_reduce about 480 GB/s busbw at >= 1 GiB).
    one_shot_us : float
        Latency of RCCL's one-shot all-pairs allreduce on an xGMI mesh (MI300X small messages).
    p2p_net_fraction : float
        Share of one NIC's line rate a single point-to-point peer gets across nodes (NCCL runs
        few channels per network peer).
    base_us : dict
        Fixed latency of a ring or tree kernel by protocol (µs), in place of NCCL's ``baseLat``.
    hop_us : dict
        Latency of one intra-node ring / tree step by (architecture, protocol) (µs), in place of
        NCCL's NVLink / xGMI ``hwLat``: what a step costs on that GPU generation's links.
    chunk_bytes : dict
        Bytes a channel moves per pipeline step by protocol (NCCL: a 4 MiB Simple buffer in 8
        steps is 512 KiB; LL128 and LL buffers are smaller).
    """

    link_gbps: dict = field(default_factory=lambda: {
        ("nvlink", "sm70"): 24.0, ("nvlink", "sm80"): 19.4, ("nvlink", "sm90"): 20.45, ("nvlink", "sm100"): 40.1,
        ("infinity_fabric", "gfx942"): 45.0, ("infinity_fabric", "gfx90a"): 35.0,
        ("pcie", "gen3"): 12.0, ("pcie", "gen4"): 24.0, ("pcie", "gen5"): 48.0})
    launch_us: float = 6.0
    launch_per_gpu_us: float = 2.5
    net_latency_scale: dict = field(default_factory=lambda: {"ib": 1.0, "efa": 6.0, "efa2": 2.4, "tcpxo": 4.4})
    net_efficiency: dict = field(default_factory=lambda: {"ib": 0.92, "efa": 0.85, "efa2": 0.90, "tcpxo": 0.90})
    nvls_efficiency: float = 0.742
    one_shot_us: float = 8.0
    p2p_net_fraction: float = 0.58
    base_us: dict = field(default_factory=lambda: {"LL": 6.6, "LL128": 14.0, "Simple": 8.4})
    chunk_bytes: dict = field(default_factory=lambda: {"LL": 16384.0, "LL128": 131072.0, "Simple": 524288.0})
    hop_us: dict = field(default_factory=lambda: {
        **{(arch, proto): lat for arch in ("sm70", "sm80", "sm90", "sm100", "gfx90a", "gfx942")
           for proto, lat in (("LL", 0.6), ("LL128", 1.9), ("Simple", 3.4))},
        ("sm80", "Simple"): 9.0, ("sm90", "LL128"): 0.5, ("sm90", "Simple"): 1.0})


def params_to_dict(p: ModelParams) -> dict:
    """JSON-able form: tuple keys become ``"a/b"``."""
    def key(k):
        return "/".join(k) if isinstance(k, tuple) else k
    return {f.name: ({key(k): v for k, v in getattr(p, f.name).items()} if isinstance(getattr(p, f.name), dict)
                     else getattr(p, f.name)) for f in fields(p)}


def params_from_dict(doc: dict) -> ModelParams:
    """The inverse of :func:`params_to_dict` (unknown fields are refused)."""
    known = {f.name: f for f in fields(ModelParams)}
    out = {}
    for name, value in doc.items():
        if name not in known:
            raise InvalidArgument(f"unknown model parameter {name!r}")
        if isinstance(value, dict):
            value = {tuple(k.split("/")) if "/" in k else k: float(v) for k, v in value.items()}
        out[name] = value
    return ModelParams(**out)


#: the committed fit (benchmarks/validate_cost_model.py --fit --write), or the documented start
FITTED = Path(__file__).with_name("fitted_params.json")
DEFAULT_PARAMS = params_from_dict(json.loads(FITTED.read_text())) if FITTED.is_file() else ModelParams()

__all__ = ["params_to_dict", "params_from_dict", "ALGORITHMS", "PROTOCOLS", "ALGO_NAMES", "PROTO_NAMES", "BASE_LAT_US", "HW_LAT_US", "ModelParams",
           "DEFAULT_PARAMS", "LL_MAX_BW", "PER_CH_RING_LL128", "PER_CH_TREE", "PER_CH_TREE_LL128",
           "NCCL_NVLINK_GBPS", "THREAD_THRESHOLD", "THREADS", "RCCL_BASE_LAT_US", "RCCL_XGMI_HOP_US"]
