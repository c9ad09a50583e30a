"""What a network plugin adds to NCCL's own network hop: the plugins' published latencies.

NCCL drives AWS EFA through the aws-ofi-nccl plugin and GCP's GPUDirect-TCPXO through Google's
FasTrak plugin; the InfiniBand / RoCE verbs transport is NCCL's own.  EFA has no fitted ``net_lat`` /
``net_chunk`` of its own (nor InfiniBand's: a fit would then tune InfiniBand's on EFA logs); what it
adds to NCCL's own network hop (``hwLat[NET]``) is the following.  A plugin tells NCCL how much
slower than NCCL's verbs transport its network is with one figure, the inter-node latency its
``getProperties`` reports (``ncclNetProperties_t::latency``, µs).  NCCL's tuner adds that figure once
per inter-node hop, twice for Simple (the receive-side flush; NVIDIA/nccl v2.27.3-1
src/graph/tuning.cc lines 333-335: ``interLat += graphs[a]->latencyInter`` and, for
``NCCL_PROTO_SIMPLE``, once more).  The execution-time model uses the same figure for the same two
costs, through one fraction of it fitted on every in-sample log of every plugin transport together
(``plugin_hop_share``, never per transport nor per class, :class:`.params.ModelParams`):

* per inter-node hop: ``plugin_hop_share * latency`` (LL, LL128, and Simple on the RDMA protocol).  NCCL's
  tuner adds the latency to every hop, twice for Simple (the flush); on a SENDRECV platform the model
  charges Simple per network message instead (next term), not per hop: fitted with NCCL's counting
  (twice, or once, per Simple hop) the p4d/p4de 1-2 MiB rows came out 1.3-1.8x the measured ones and
  fewer EFA tables met their target held out.  A point-to-point send and a step of our schedules are
  one message per hop, so they pay the share once on either protocol
  (:meth:`.params.ModelParams.net_message_us`);
* per Simple network message, on a platform whose plugin runs its SENDRECV protocol: the same
  ``plugin_hop_share * latency`` (one inter-node latency).  SENDRECV hands each NCCL message to
  libfabric as one tagged message (aws-ofi-nccl 2daf7d30 src/nccl_ofi_sendrecv.cpp: ``fi_tsend`` line
  1744, ``fi_trecv`` line 963), which the EFA provider moves above its eager size with its long-CTS
  protocol, a request and a clear-to-send before the data (ofiwg/libfabric prov/efa/docs
  efa_rdm_protocol_v4.md section 3.2); the RDMA protocol (p5) writes into a buffer the receiver
  announced with a control message as it posted the receive, NCCL_STEPS ahead
  (src/nccl_ofi_rdma.cpp ``rdma_recv_req::post``, line 2567), so no message waits on a handshake
  (its hops pay the share, above).

The figures (aws/aws-ofi-nccl 2daf7d30 src/platform-aws.cpp ``platform_data_map``, lines 83-139,
``.latency`` and ``.default_protocol``; the latencies' origin: commit d87d61e0 of 2023-05-31
"Variable internode latency reported to NCCL", which lowered p4d/p4de/p5 from the 150 µs every EFA
device reported before to 75 µs and kept p3dn at 150):

=============================  =======  ========  ===========================================
platform                       latency  protocol  net kind of this model
=============================  =======  ========  ===========================================
p4d.24xlarge, p4de.24xlarge    75 µs    SENDRECV  ``efa`` on A100 (sm80)
p3dn.24xlarge                  150 µs   SENDRECV  ``efa`` on V100 (sm70): the only V100 instance with EFA
p5 / p5e                       75 µs    RDMA      ``efa2``
GPUDirect-TCPXO (A3 Mega)      none     -         ``tcpxo``: the FasTrak plugin is not public; it keeps
                                                  its own fitted ``net_lat`` / ``net_chunk``
=============================  =======  ========  ===========================================

"""

from __future__ import annotations

from synth.model.nccl.constants import NET_PLUGIN_LATENCY_US

#: aws-ofi-nccl 2daf7d30 src/platform-aws.cpp platform_data_map's p3dn.24xlarge ``.latency`` (EFA on V100: no
#: other V100 instance has EFA); its other EFA rows are :data:`.constants.NET_PLUGIN_LATENCY_US` (the tuner's table)
P3DN_LATENCY_US = 150.0
#: the same table's ``.default_protocol`` by net kind (p3dn's: SENDRECV too)
PLUGIN_PROTOCOL = {"efa": "sendrecv", "efa2": "rdma"}

#: the NCCL variables of GPUDirect-TCPXO's ``nccl-env-profile.sh`` (the profile the nccl-tcpxo-installer puts beside its
#: NCCL build, which GKE's nccl-test.yaml, the Cluster Toolkit's a3-megagpu-8g run-nccl-tests.sh and dstack's A3 Mega
#: task source) in every release that shipped NCCL 2.21.5 - 2.23.4 from May 20, 2024 to Feb 06, 2025 (plugin v1.0.1 -
#: v1.0.8-1): GoogleCloudPlatform/container-engine-accelerators 992db812 gpudirect-tcpxo/README.md, "NCCL configs" of
#: each release, lines 411-835 (NCCL_PROTO=Simple, NCCL_ALGO=Ring,Tree, NCCL_MIN_NCHANNELS=4, NCCL_NVLS_ENABLE=0; the
#: Apr 17, 2024 release, lines 837-870, had NCCL_ALGO=Ring).  The May 01 and Jun 27, 2025 releases (lines 245-405) kept
#: NCCL 2.23.4 but allowed LL128 (NCCL_PROTO=Simple,LL128): a 2.23 run is taken as the longer-lived profile above.
#: Every release's profile (Apr 17, 2024 - Jan 9, 2026: lines 96, 149, 201, 293, 380, 447, 503, 560, 614, 676, 725, 775,
#: 823 and the Apr 17 block) sets NCCL_BUFFSIZE=8388608: twice NCCL's 4 MiB, a 1 MiB Simple step (a tree's chunk,
#: :func:`.nvls_pipeline.tree_simple_chunk_bytes`).  Its NCCL_DYNAMIC_CHUNK_SIZE (the plugin's own) and NCCL_P2P_*_CHUNKSIZE
#: and its tuner plugin's a3plus_tuner_config.textproto (not NCCL's CSV tuner format) are not modelled; the user's
#: NCCL_* variables win.
TCPXO_PROFILE = {"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring,Tree", "NCCL_MIN_NCHANNELS": "4", "NCCL_NVLS_ENABLE": "0",
                 "NCCL_BUFFSIZE": "8388608"}
#: the same profile from NCCL 2.26 on: the Aug 21, 2025 release (NCCL 2.26.5, lines 161-244) and the Nov 19, 2025 and
#: Jan 9, 2026 releases (NCCL 2.28.7, lines 57-160): NCCL_PROTO=Simple,LL128, NCCL_MIN_NCHANNELS=4,
#: NCCL_NVLSTREE_MAX_CHUNKSIZE=131072 (which Google's config checker enforces, lines 231-239), NCCL_ALGO unset and NVLS
#: on (unset in 2.26.5, NCCL_NVLS_ENABLE=1 in 2.28.7: NCCL's default either way).  Google shipped no 2.24 or 2.25 build;
#: a run of those versions is given this profile, the one that followed 2.23
TCPXO_PROFILE_NCCL_2_26 = {"NCCL_PROTO": "Simple,LL128", "NCCL_MIN_NCHANNELS": "4",
                           "NCCL_NVLSTREE_MAX_CHUNKSIZE": "131072", "NCCL_BUFFSIZE": "8388608"}


def tcpxo_profile(version: tuple) -> dict:
    """The NCCL variables GPUDirect-TCPXO's env profile sets for NCCL ``version`` (major, minor): the 2024-25
    profile (:data:`TCPXO_PROFILE`) up to NCCL 2.23, :data:`TCPXO_PROFILE_NCCL_2_26` after it.

    >>> tcpxo_profile((2, 21))["NCCL_PROTO"], tcpxo_profile((2, 23))["NCCL_ALGO"], tcpxo_profile((2, 28))["NCCL_PROTO"]
    ('Simple', 'Ring,Tree', 'Simple,LL128')
    >>> "NCCL_ALGO" in tcpxo_profile((2, 26)), "NCCL_NVLS_ENABLE" in tcpxo_profile((2, 28))
    (False, False)
    """
    return dict(TCPXO_PROFILE if tuple(version)[:2] <= (2, 23) else TCPXO_PROFILE_NCCL_2_26)


def plugin_latency_us(kind: str, arch: str | None = None) -> float:
    """µs of inter-node latency the network plugin of transport ``kind`` reports to NCCL on a GPU of
    ``arch`` (0 for NCCL's own transports and for a plugin that publishes none); NCCL's tuner adds the
    same figure (:mod:`.tuning`).

    >>> plugin_latency_us("efa", "sm80"), plugin_latency_us("efa", "sm70"), plugin_latency_us("ib", "sm90")
    (75.0, 150.0, 0.0)
    """
    if kind == "efa" and arch == "sm70":
        return P3DN_LATENCY_US
    return NET_PLUGIN_LATENCY_US.get(kind, 0.0)


#: NCCL versions whose tuner reads the plugin's latency (``ncclNetProperties_t::latency``, net API v6 from 2.12) and,
#: from 2.18, adds it to its own network hop rather than replacing that hop (twice for Simple)
PLUGIN_LATENCY_READ, PLUGIN_LATENCY_ADDED = (2, 12), (2, 18)


def tuner_inter_latency_us(hw_net_us: float, plugin_us: float, proto: str, version: tuple) -> float:
    """µs NCCL's tuner counts per inter-node hop (``interLat``) from its own network hop ``hw_net_us``
    (``hwLat[NET]``) and the plugin's reported latency ``plugin_us``, by NCCL ``version``: before 2.12
    the net plugin API (v2-v5) has no latency, so the hop is NCCL's own (NVIDIA/nccl v2.11.4-1
    src/graph/tuning.cc line 141); 2.12-2.17 take the plugin's figure instead of their own where it
    reports one (v2.12.7-1 tuning.cc line 140, v2.17.1-1 line 179: ``latencyInter ? latencyInter :
    hwLat[NET]``; src/graph/search.cc line 468 copies ``net.latency``); from 2.18 its own hop plus the
    plugin's, plus the plugin's once more for Simple, the flush (v2.18.1-1 tuning.cc lines 194-196).

    >>> [tuner_inter_latency_us(9.6, 75.0, "Simple", v) for v in ((2, 9), (2, 17), (2, 23))]
    [9.6, 75.0, 159.6]
    >>> tuner_inter_latency_us(2.7, 150.0, "LL", (2, 20)), tuner_inter_latency_us(9.6, 0.0, "Simple", (2, 17))
    (152.7, 9.6)
    """
    version = tuple(version)[:2]
    if plugin_us <= 0 or version < PLUGIN_LATENCY_READ:
        return hw_net_us
    if version < PLUGIN_LATENCY_ADDED:
        return plugin_us
    return hw_net_us + plugin_us * (2 if proto == "Simple" else 1)


def pays_per_message(kind: str) -> bool:
    """Whether a Simple hop on transport ``kind`` pays its plugin's latency share per network message
    (SENDRECV: p4d, p4de, p3dn) rather than per hop (RDMA: p5; every other protocol).

    >>> pays_per_message("efa"), pays_per_message("efa2"), pays_per_message("ib")
    (True, False, False)
    """
    return PLUGIN_PROTOCOL.get(kind) == "sendrecv"


__all__ = ["P3DN_LATENCY_US", "PLUGIN_PROTOCOL", "PLUGIN_LATENCY_READ", "PLUGIN_LATENCY_ADDED", "TCPXO_PROFILE",
           "TCPXO_PROFILE_NCCL_2_26", "plugin_latency_us", "pays_per_message", "tcpxo_profile", "tuner_inter_latency_us"]
