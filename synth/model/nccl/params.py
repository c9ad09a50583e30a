"""The fitted constants of the execution-time model (:mod:`.runtime`), one set for every machine.

They were fitted once on every in-sample log together (``benchmarks/fit_nccl_model.py --in-sample``
minimises a soft-L1 loss of ``log(predicted / measured time)`` over every row of every log of
``tests/fixtures/real_logs`` whose machine class is not held out, ``benchmarks/nccl_log_cases.py``);
no constant belongs to one log.  The same table gives the link efficiencies our schedules are
timed with (:mod:`synth.model.physics`).  Keys are GPU architecture, link kind
(``nvlink``, ``xgmi``, ``pcie``, ``shm`` = through host memory) or network transport (``ib``,
``tcpxo``; EFA has none of its own, :mod:`.net_transport`), ``*`` meaning "any".  Where one log alone
exercises a key (the only TCPXO machine, the only MI300X...), that value is calibrated there, not
independently validated: ``results/model_validation/report.md`` lists them.  What constrains each (fit
of 485 rows of 25 tables, soft-L1 cost 2.73):

=====================================  ==================================================
constants                              logs that constrain them
=====================================  ==================================================
host_us, host_us_per_channel           the ``-g 8`` floors: A100, H100 ring / NVLS, V100
proto_eff (*, LL / LL128)              H100 ring logs, MI300X MSCCL-LL, A100 (a ring's LL128 on the GPU links
                                       also x the generation's share, NCCL's per-channel ring LL128 figure over
                                       Hopper's, not fitted: :func:`.channel_caps.ll128_generation_share`)
tree_eff (*)                           p4de, A3 Mega
tree_ll128_channel_eff                 H100 InfiniBand, p5 and A3 Mega tree/LL128 rows (of NCCL's own per-channel
                                       tree LL128 ceiling, one for every GPU generation)
nvls_efficiency, nvls_chunk_us,        H100 NVLS log, p5 and the InfiniBand NVLS-tree logs
lat_scale (*, NVLS)
link_eff (sm70 / sm80 / sm90, nvlink)  V100 / A100 / H100 logs
link_eff (*, xgmi), lat_scale gfx942   MI300X only
lat_scale sm70 LL / sm80 LL, Simple    V100 only / A100 all_reduce only (LL128: ``*``'s, NCCL's latency table
                                       has no GPU generation)
lat_scale (*, Simple), (sm70, Simple)  not fitted: NCCL's own Simple latency table of the run's version
                                       (tuning.cc; V100's 2.4 log takes 2.5's, :mod:`.versions`), 1.0
net_eff (*)                            p4de, A3 Mega, H100 InfiniBand trees (4-10 hosts)
ring_net_eff (ib, roce)                not fitted: NCCL's NET_BW ratio, 12 of 12.5 GB/s (checked on the IB rings)
net_lat, net_chunk (ib)                H100 InfiniBand all_reduce logs of 2, 4, 8 and 10 hosts
net_lat, net_chunk (tcpxo)             A3 Mega only (no public figure of the TCPXO plugin)
plugin_hop_share                       p4de and p5 together: EFA has no net_lat / net_chunk of its own, only this
                                       fraction of aws-ofi-nccl's published latency (:mod:`.net_transport`)
p2p_link_share                         A100 sendrecv only (its 256 MiB - 1 GiB rows: 128 MiB is channel-bound), less
                                       Ampere's read mode (:func:`.p2p.read_mode_share`: 9/10, read from the warp split)
p2p_net_channel_gbs                    H100 InfiniBand sendrecv only
p2p_cta_gbs                            A100 sendrecv's channel-bound rows and the 2-host H100 alltoall's NVLink
                                       hop (PXN); every other GPU takes it on its clock (:mod:`.p2p_cta`)
msccl_*_latency_us                     MI300X only
coop_launch_us                         V100 only (the one log of NCCL < 2.9 with -g 8)
=====================================  ==================================================

>>> DEFAULT_PARAMS.link_efficiency("sm90", "nvlink") < 1.0
True
>>> params_from_dict(params_to_dict(DEFAULT_PARAMS)) == DEFAULT_PARAMS
True
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from synth.model.nccl.net_transport import pays_per_message, plugin_latency_us
from topo_probe.errors import InvalidArgument

#: a transport that runs on another's code path takes that one's network constants when it has
#: none of its own: NCCL drives RoCE NICs with its InfiniBand verbs transport (``NET/IB : Using
#: [0]mlx5_0:1/RoCE``), the same per-message and per-hop work over a different link layer
TRANSPORT_FAMILY = {"roce": "ib"}
#: the tables of ModelParams whose keys are tuples (written ``"a/b"`` in JSON)
TABLES = ("proto_eff", "tree_eff", "link_eff", "lat_scale", "net_eff", "ring_net_eff", "net_lat", "net_chunk")


@dataclass(frozen=True)
class ModelParams:
    """Calibrated constants; units in the names (µs, GB/s) or fractions.

    Attributes
    ----------
    host_us, host_us_per_channel : float
        Host cost (µs) of enqueueing one collective per GPU a process drives, and per channel.
    proto_eff : dict
        ``(arch, proto)``: achieved / nominal payload fraction of LL (1/2) and LL128 (120/128).
    tree_eff : dict
        ``proto`` or ``*``: achieved / modelled bandwidth of a tree's chain inside a node.
    nvls_efficiency : float
        Achieved / NCCL's own NVLS bandwidth estimate.
    nvls_chunk_us : float
        µs each NVLS chunk costs a channel beyond its bytes (the multimem load-reduce-store round and
        the flags between chunks): NCCL cuts the NVLS chunk from 128 KiB down to 16 KiB on mid-size
        messages, so this cost is what makes a mid-size NVLS call slower than its bandwidth.
    link_eff : dict
        ``(arch, link kind)``: achieved fraction of the data-sheet link bandwidth.
    lat_scale : dict
        ``(arch, proto)`` (``NVLS`` for NVLink SHARP): real / NCCL-table intra-node latency.
    net_eff : dict
        transport: achieved fraction of the NICs' line rate (trees, CollNet, sends to many peers).
    ring_net_eff : dict
        transport: achieved fraction of the NICs' line rate when ring channels stream through them
        (one flow in and one out per channel, spread evenly over the NICs), as a send to one peer does.
        Not fitted (a fit would let it absorb what a ring's mid-size rows lack): NCCL's own ``NET_BW``
        ratio, 12 GB/s assumed of a 12.5 GB/s (100 Gb/s) NIC; the real InfiniBand and RoCE rings stream
        at 0.96-0.98.  EFA, TCPXO and sockets (no ring log) take ``net_eff``.
    net_lat : dict
        ``(transport, proto)``: extra µs per inter-node hop (LL128 shares LL's).
    net_chunk : dict
        transport: µs per Simple-protocol network message (bounds mid-size bandwidth).
    p2p_link_share, p2p_net_channel_gbs, p2p_latency_us : float
        Point-to-point: share of the collectives' link efficiency (``link_eff[arch, nvlink|xgmi]``)
        its sends reach, GB/s per network channel, fixed µs.
    msccl_allpairs_latency_us, msccl_onestep_latency_us : float
        Start-up µs of RCCL's MSCCL all-pairs and one-step LL allreduce kernels.
    coop_launch_us : float
        µs per call of the cooperative multi-device launch with which NCCL up to 2.8 started the
        kernels of a process that drives several GPUs (:data:`.latency.COOP_LAUNCH_UNTIL`).
    tree_ll128_channel_eff : float
        Achieved fraction of NCCL's own per-channel tree LL128 ceiling (``perChMaxTreeLL128Bws`` times the
        tree graph's channels, :func:`.channel_caps.tree_ll128_cap_gbs`).
    rccl_channel_gbs : float
        GB/s one RCCL Simple ring channel (one workgroup) moves on one host of AMD GPUs
        (:func:`.rccl_channels.rccl_channel_cap_gbs`).  Hand-set, not fitted: RCCL 2.26.6 rates each ring-graph
        channel of 4 MI355X at 24 GB/s and copies the graph 4 times (``Pattern 4, nChannels 6, bw 24`` ->
        ``24 coll channels``), 24 / 4 = 6 GB/s.  RCCL's rating is no constant (its 8-GPU graph, 28 channels at
        12 GB/s copied 4 times, gives 3), and the in-sample AMD logs (8 x MI300X, 56 channels, bound by their
        links as much) bound it only from below (>= 5.65), so no fit pins it down.
    plugin_hop_share : float
        Fraction of the inter-node latency a network plugin reports (:mod:`.net_transport`: aws-ofi-nccl's
        75 / 150 µs) that one inter-node hop costs (a Simple hop on a SENDRECV platform: one network
        message instead), on top of the transport's ``net_lat`` / ``net_chunk`` (none for EFA); one value
        for every plugin transport.
    ring_copy_gbs : float
        GB/s at which a ring channel's CTA copies a chunk inside an H100 SXM5 (the final receive out of the FIFO,
        an out-of-place all_gather's own chunk: :mod:`.ring_steps`); one constant, which every other GPU takes
        times its boost clock over H100's (:func:`.ring_steps.cta_copy_gbs`).
    p2p_cta_gbs : float
        GB/s one point-to-point channel's CTA moves over NVLink at H100 SXM5's clock; other GPUs times their
        clock over H100's (:func:`.p2p_cta.p2p_cta_gbs`).
    """

    host_us: float = 4.7
    host_us_per_channel: float = 0.07
    proto_eff: dict = field(default_factory=lambda: {("*", "LL"): 1.0, ("*", "LL128"): 1.0})
    tree_eff: dict = field(default_factory=lambda: {"*": 1.0})
    nvls_efficiency: float = 1.0
    nvls_chunk_us: float = 0.0
    link_eff: dict = field(default_factory=lambda: {
        ("sm70", "nvlink"): 0.9, ("sm80", "nvlink"): 0.78, ("sm90", "nvlink"): 0.82,
        ("*", "nvlink"): 0.8, ("*", "xgmi"): 0.7, ("*", "pcie"): 0.8, ("*", "shm"): 0.5})
    lat_scale: dict = field(default_factory=lambda: {("*", "LL"): 1.0, ("*", "LL128"): 1.0, ("*", "Simple"): 1.0})
    net_eff: dict = field(default_factory=lambda: {"*": 0.85})
    ring_net_eff: dict = field(default_factory=lambda: {"ib": 12.0 / 12.5, "roce": 12.0 / 12.5})
    net_lat: dict = field(default_factory=lambda: {("*", "LL"): 0.0, ("*", "LL128"): 0.0, ("*", "Simple"): 0.0})
    net_chunk: dict = field(default_factory=lambda: {"*": 0.0})
    p2p_link_share: float = 0.9
    p2p_net_channel_gbs: float = 14.4
    p2p_latency_us: float = 10.0
    msccl_allpairs_latency_us: float = 13.7
    msccl_onestep_latency_us: float = 20.0
    coop_launch_us: float = 0.0
    tree_ll128_channel_eff: float = 1.0
    plugin_hop_share: float = 0.5
    rccl_channel_gbs: float = 6.0
    ring_copy_gbs: float = 100.0
    p2p_cta_gbs: float = 20.5

    def link_efficiency(self, arch: str, kind: str) -> float:
        """Achieved fraction of the data-sheet bandwidth of a ``kind`` link on ``arch``."""
        return self.link_eff.get((arch, kind), self.link_eff.get(("*", kind), 0.8))

    def proto_efficiency(self, arch: str, proto: str) -> float:
        """Achieved / nominal payload fraction of ``proto`` (1.0 for Simple)."""
        if proto == "Simple":
            return 1.0
        return self.proto_eff.get((arch, proto), self.proto_eff.get(("*", proto), 1.0))

    def latency_scale(self, arch: str, proto: str) -> float:
        """Real / NCCL-table intra-node latency for ``arch`` and ``proto``."""
        return self.lat_scale.get((arch, proto), self.lat_scale.get(("*", proto), 1.0))

    @staticmethod
    def _transports(kind: str) -> tuple[str, ...]:
        """``kind``, the transport whose code path it runs on (:data:`TRANSPORT_FAMILY`), ``*``."""
        return tuple(dict.fromkeys((kind, TRANSPORT_FAMILY.get(kind, kind), "*")))

    def _per_transport(self, table: dict, kind: str, default: float) -> float:
        return next((table[k] for k in self._transports(kind) if k in table), default)

    def net_efficiency(self, kind: str) -> float:
        """Achieved fraction of the NICs' line rate on transport ``kind``."""
        return self._per_transport(self.net_eff, kind, 0.85)

    def ring_net_efficiency(self, kind: str) -> float:
        """Achieved fraction of the NICs' line rate that ring channels stream at on transport ``kind``."""
        return self._per_transport(self.ring_net_eff, kind, self.net_efficiency(kind))

    def tree_efficiency(self, proto: str) -> float:
        """Achieved / modelled bandwidth of a tree's intra-node chain for ``proto``."""
        return self.tree_eff.get(proto, self.tree_eff.get("*", 1.0))

    @classmethod
    def _net_kinds(cls, kind: str, arch: str | None) -> tuple[str, ...]:
        """The keys of ``net_lat`` / ``net_chunk`` transport ``kind`` reads: a transport whose plugin publishes
        a latency (EFA) only the transport-blind ``*`` ones (an older fit's own keys of it are inert)."""
        return ("*",) if plugin_latency_us(kind, arch) > 0.0 else cls._transports(kind)

    def net_message_us(self, kind: str, proto: str, arch: str | None = None) -> float:
        """Extra µs one network message costs on transport ``kind`` (GPUs of ``arch``) beyond its hop: the
        plugin's share of its latency for Simple on a SENDRECV platform
        (:func:`.net_transport.pays_per_message`), else nothing."""
        if proto != "Simple" or not pays_per_message(kind):
            return 0.0
        return self.plugin_hop_share * plugin_latency_us(kind, arch)

    def net_chunk_us(self, kind: str, arch: str | None = None) -> float:
        """µs one Simple-protocol network message costs on transport ``kind`` (GPUs of ``arch``): its
        ``net_chunk`` plus :meth:`net_message_us`."""
        own = next((self.net_chunk[k] for k in self._net_kinds(kind, arch) if k in self.net_chunk), 0.0)
        return own + self.net_message_us(kind, "Simple", arch)

    def net_latency_us(self, kind: str, proto: str, arch: str | None = None) -> float:
        """Extra µs per inter-node hop on transport ``kind`` (GPUs of ``arch``) for ``proto``: its
        ``net_lat`` plus the plugin's share of its latency (:mod:`.net_transport`), except for Simple on a
        SENDRECV platform, which pays it per message instead (:meth:`net_message_us`; a hop of one message:
        :meth:`net_message_hop_us`)."""
        per_message = proto == "Simple" and pays_per_message(kind)
        plugin = 0.0 if per_message else self.plugin_hop_share * plugin_latency_us(kind, arch)
        return self.net_lat_own_us(kind, proto, arch) + plugin

    def net_lat_own_us(self, kind: str, proto: str, arch: str | None = None) -> float:
        """The fitted ``net_lat`` part of :meth:`net_latency_us` alone (no plugin share): what a rooted ring's
        chunk fill replaces (:mod:`.net_fill`)."""
        group = "LL" if proto == "LL128" else proto
        keys = [(t, p) for t in self._net_kinds(kind, arch) for p in (proto, group)]
        return next((self.net_lat[k] for k in keys if k in self.net_lat), 0.0)

    def net_message_hop_us(self, kind: str, proto: str, arch: str | None = None) -> float:
        """Extra µs of an inter-node hop that carries one message (a point-to-point send, a step of our
        schedules): :meth:`net_latency_us` plus :meth:`net_message_us`."""
        return self.net_latency_us(kind, proto, arch) + self.net_message_us(kind, proto, arch)

    def with_vector(self, keys: list[tuple], values) -> "ModelParams":
        """A copy with the constants named by ``keys`` (``(scalar,)`` or ``(table, key...)``) set."""
        tables = {k: dict(getattr(self, k)) for k in TABLES}
        scalars = {}
        for key, value in zip(keys, values):
            if len(key) == 1:
                scalars[key[0]] = float(value)
            else:
                tables[key[0]][key[1] if len(key) == 2 else tuple(key[1:])] = float(value)
        return replace(self, **scalars, **tables)

    def value(self, key: tuple) -> float | None:
        """The constant ``key`` names (see :meth:`with_vector`), None if the table lacks it."""
        if len(key) == 1:
            return getattr(self, key[0])
        return getattr(self, key[0]).get(key[1] if len(key) == 2 else tuple(key[1:]))


def params_to_dict(p: ModelParams) -> dict:
    """JSON-able form: tuple keys become ``"a/b"``."""
    def key(k):
        return "/".join(k) if isinstance(k, tuple) else k
    return {f.name: ({key(k): v for k, v in getattr(p, f.name).items()} if f.name in TABLES
                     else getattr(p, f.name)) for f in fields(p)}


def params_from_dict(doc: dict) -> ModelParams:
    """The inverse of :func:`params_to_dict`; unknown fields are refused."""
    known = {f.name for f in fields(ModelParams)}
    out = {}
    for name, value in doc.items():
        if name not in known:
            raise InvalidArgument(f"unknown NCCL model parameter {name!r}")
        if name in TABLES:
            value = {tuple(k.split("/")) if "/" in k else k: float(v) for k, v in value.items()}
        else:
            value = float(value)
        out[name] = value
    return ModelParams(**out)


#: the committed fit (benchmarks/fit_nccl_model.py --write)
FITTED = Path(__file__).with_name("fitted_params.json")
DEFAULT_PARAMS = params_from_dict(json.loads(FITTED.read_text())) if FITTED.is_file() else ModelParams()

__all__ = ["ModelParams", "DEFAULT_PARAMS", "FITTED", "params_to_dict", "params_from_dict", "TABLES", "TRANSPORT_FAMILY"]
