"""One set of physical constants for both sides of every comparison.

The cost model of our schedules (:mod:`synth.model.cost`), the lower bounds
(:mod:`synth.model.bounds`) and the NCCL model (:mod:`synth.model.nccl`) all take what a link
really carries from the same table: the achieved fraction of each link's data-sheet bandwidth,
keyed by GPU architecture and link kind (NVLink, xGMI, PCIe, through host memory) and by network
transport (InfiniBand, RoCE, EFA, TCPXO, sockets), as fitted once on every real log
(``synth/model/nccl/fitted_params.json``).  So a schedule and NCCL's ring over the same NVLinks
move bytes at the same rate, and a bound computed from those rates bounds both.

A fabric resource's ``kind`` maps to a link kind of that table:

=================  =========================================================
``nvlink``         ``link_eff[arch, nvlink]``
``infinity_fabric`` ``link_eff[arch, xgmi]``
``pcie``           ``link_eff[arch, pcie]``
``cpu``            ``link_eff[arch, shm]`` (a socket link or host bridge: staging through host memory)
``network``        the larger of ``net_eff[transport]`` and ``ring_net_eff[transport]`` (what the NICs
                   stream at; the NICs' ``transport``, default ``ib``)
=================  =========================================================

A step of a schedule whose transfers cross the network also pays the transport's per-hop latency
(``net_lat[transport, Simple]``, :attr:`CostParams.network_latency_us`), as NCCL's hops do.

It also holds :class:`CostParams`, what the cost model of our schedules needs: the efficiencies
per resource kind and the overheads (launch, per step, per slice).  :func:`cost_params_for`, what
:class:`synth.model.cost.CostModel` uses by default, takes all of them from the shared table: the
efficiencies as above, the launch and the cost of a step from NCCL's ring/Simple base and hop
latencies scaled by the fitted ratio of the GPU architecture (our executors move a step as Simple
does: the data, then a flag), and the network hop from the same table plus the transport's fitted
extra.  So our ring schedule and NCCL's ring under Simple are timed alike on the same machine
(``tests/synth/model/test_physics.py``); the data-sheet defaults below serve only a fabric with no
topology.

Protocols
---------
Our executors move a step under one of two protocols (:data:`PROTOCOLS`): ``simple`` as above, or
``ll``, NCCL's LL: data and flag in one 16-byte line (4 data bytes, 4 flag bytes, twice), so the
receiver polls the data itself.  ``cost_params_for(fabric, protocol="ll")`` takes the launch and the
hops from NCCL's ring/LL latencies (tuning.cc ``baseLat`` ring 6.6 µs against Simple's 8.4, NVLink
hop 0.6 against 3.4, PCI 1.0 against 5.7, network 2.7 against 14; :mod:`synth.model.nccl.constants`)
scaled by the fitted real/table ratio of the architecture under LL, as the NCCL model times its
own ring/LL; the link efficiencies stay those of the links.  An LL line carries 8 payload bytes of
16 (``LL_DATA_FRACTION``), so the cost model charges ``WIRE_BYTES_PER_BYTE["ll"]`` = 2 bytes on
the wire per byte (:meth:`synth.model.cost.CostModel.estimate`).  The native executor runs LL only
on calls of at most :data:`LL_MAX_BYTES` (nccl-tests size).

The NCCL-specific parts (protocol payload fractions, NVLS efficiency, per-call host costs,
latencies of NCCL's tables) stay in :mod:`synth.model.nccl`: they describe what NCCL's kernels do
with the links, not the links.

>>> from topo_probe import get_preset
>>> from synth.ir.fabric import build_fabric
>>> p = cost_params_for(build_fabric(get_preset("dgx-h100")))
>>> p.nvlink_efficiency == DEFAULT_PARAMS.link_efficiency("sm90", "nvlink")
True
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields, replace

from synth.model.nccl.constants import BASE_LAT, HW_LAT, HW_NET, HW_NVLINK, LL_DATA_FRACTION, PROTOS
from synth.model.nccl.machine import arch_of_topology
from synth.model.nccl.params import DEFAULT_PARAMS, ModelParams, params_to_dict
from topo_probe.errors import InvalidArgument, TopocollError
from topo_probe.limits import MAX_LATENCY_US
from topo_probe.number_checks import check_float
from topo_probe.number_rules import is_int
from topo_probe.topology.model import Topology

# ---------------------------------------------------------------- documented parameters
#: NCCL assumes 20 GB/s per NVLink on SM70/SM80 (src/graph/topo.h ``SM80_NVLINK_BW 20.0``)
#: of the 25 GB/s per direction the links signal.
NVLINK_EFFICIENCY = 20.0 / 25.0
#: NCCL's PCI bandwidth is 12 GB/s for Gen3 x16 (15.75), 24 Gen4 (31.5), 48 Gen5 (63): the same ratio.
PCIE_EFFICIENCY = 24.0 / 31.5
#: CPU interconnect: NCCL assumes 10 GB/s through a Skylake UPI link (20.8 GB/s) and 16 GB/s
#: through AMD xGMI (32 GB/s per link): half the link rate.  Also applied to host-bridge links.
CPU_EFFICIENCY = 0.5
#: NCCL's NET_BW is 12 GB/s for a 100 Gb/s (12.5 GB/s) NIC.
NETWORK_EFFICIENCY = 12.0 / 12.5
#: AMD measures about 48 of the 64 GB/s of an MI300X xGMI link ("Understanding RCCL Bandwidth and
#: xGMI Performance on AMD Instinct MI300X", ROCm blog, March 2025).
INFINITY_FABRIC_EFFICIENCY = 48.0 / 64.0
#: The three overheads below are what ``CostParams()`` holds for a fabric without a topology (a
#: bare test fabric).  A machine's come from the shared table (:func:`cost_params_for`): NCCL's
#: ring/Simple base and hop latencies scaled by the fitted ratio of its GPUs, and no in-step term.
#: Fixed cost of one collective call: NCCL's Ring/LL base latency (src/graph/tuning.cc ``baseLat``).
LAUNCH_US = 6.6
#: Per-step cost (synchronisation between consecutive steps, flag polling, kernel loop); first
#: calibrated on the floor of one 8 x A100 nccl-tests log (results/calibration/, a floor its
#: single-process host cost sets).
STEP_OVERHEAD_US = 1.65
#: Per-slice cost of the in-step two-stage pipeline (the square-root term), from the same log.
SLICE_OVERHEAD_US = 0.47
#: Message slicings tried for cross-step pipelining.
PIPELINE_SLICES = (1, 2, 4, 8, 16, 32, 64)
#: the protocols our executors move a step with, and NCCL's name of each (constants.PROTOS)
PROTOCOLS = {"simple": "Simple", "ll": "LL"}
#: bytes on the wire per payload byte: an LL line carries 8 data bytes of 16 (prims_ll.h)
WIRE_BYTES_PER_BYTE = {"simple": 1.0, "ll": 1.0 / LL_DATA_FRACTION}
#: largest call (nccl-tests size, bytes) the native executor runs under LL (nccl-tests' 1 MiB)
LL_MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class CostParams:
    """Parameters of :class:`CostModel`; every default is a documented module constant.

    Efficiencies are the fraction of a link's nominal bandwidth (``bandwidth_gbps`` of the
    topology) that a collective runtime achieves, per link kind.  Times are µs.
    """

    nvlink_efficiency: float = NVLINK_EFFICIENCY
    pcie_efficiency: float = PCIE_EFFICIENCY
    cpu_efficiency: float = CPU_EFFICIENCY
    network_efficiency: float = NETWORK_EFFICIENCY
    infinity_fabric_efficiency: float = INFINITY_FABRIC_EFFICIENCY
    launch_us: float = LAUNCH_US
    step_overhead_us: float = STEP_OVERHEAD_US
    slice_overhead_us: float = SLICE_OVERHEAD_US
    pipeline_slices: tuple[int, ...] = PIPELINE_SLICES
    #: extra µs of a step whose transfers cross the network: the transport's per-hop latency
    #: (:func:`synth.model.physics.cost_params_for` takes NCCL's fitted ``net_lat`` of the NICs'
    #: transport, so ``--net efa2`` slows both sides alike)
    network_latency_us: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):      # real numbers by the project's rule (not True), kept as plain floats
            v, where = getattr(self, f.name), f"CostParams.{f.name}"
            if f.name.endswith("_efficiency"):
                object.__setattr__(self, f.name, check_float(v, where, InvalidArgument, lo=0.0, hi=1.0, lo_open=True))
            if f.name.endswith("_us"):
                object.__setattr__(self, f.name, check_float(v, where, InvalidArgument, lo=0.0, hi=MAX_LATENCY_US,
                                                             unit="µs"))
        ks = self.pipeline_slices
        if not ks or any(not is_int(k) or k < 1 for k in ks) or 1 not in ks:
            raise InvalidArgument(f"CostParams.pipeline_slices must be positive integers including 1, got {ks!r}")
        object.__setattr__(self, "pipeline_slices", tuple(int(k) for k in ks))     # a numpy.int64 as its int

    def efficiency(self, kind: str) -> float:
        """Achievable fraction of the nominal bandwidth of a link of ``kind``.

        >>> CostParams().efficiency("nvlink")
        0.8
        """
        try:
            return getattr(self, f"{kind}_efficiency")
        except AttributeError:
            raise InvalidArgument(f"link kind {kind!r} has no efficiency factor") from None


#: fabric resource kind -> link kind of ``ModelParams.link_eff``
LINK_KIND = {"nvlink": "nvlink", "infinity_fabric": "xgmi", "pcie": "pcie", "cpu": "shm"}


def machine_keys(topology: Topology) -> tuple[str, str]:
    """``(GPU architecture, network transport)`` of a topology: the keys of the constant table.

    The transport is the first NIC's ``transport`` attribute, ``ib`` when none says.
    """
    g = topology.graph
    transport = next((d["transport"] for _, d in g.nodes(data=True) if d["kind"] == "nic" and d.get("transport")),
                     "ib")
    return arch_of_topology(topology), transport


def efficiencies(arch: str, transport: str, params: ModelParams = DEFAULT_PARAMS) -> dict[str, float]:
    """Achieved fraction of the data-sheet bandwidth per fabric resource kind."""
    out = {kind: params.link_efficiency(arch, link) for kind, link in LINK_KIND.items()}
    out["network"] = max(params.net_efficiency(transport), params.ring_net_efficiency(transport))
    return {k: min(1.0, v) for k, v in out.items()}


def wire_latencies_us(fabric) -> tuple[float, float]:
    """``(intra-host, inter-host)`` µs of the wires alone: the least channel latency from rank 0 to
    a rank of its own host and to a rank of another (the second is 0 on one host)."""
    n = fabric.num_ranks
    hosts = fabric.hosts if len(fabric.hosts) == n else [0] * n
    intra = [fabric.channel_latency_us(0, j) for j in range(1, n) if hosts[j] == hosts[0] and (0, j) in fabric.channels]
    inter = [fabric.channel_latency_us(0, j) for j in range(1, n) if hosts[j] != hosts[0] and (0, j) in fabric.channels]
    return min(intra, default=0.0), min(inter, default=0.0)


def check_protocol(protocol) -> str:
    """``protocol`` if it is one of :data:`PROTOCOLS`, else InvalidArgument naming it."""
    if not isinstance(protocol, str) or protocol not in PROTOCOLS:
        raise InvalidArgument(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    return protocol


def table_protocol_params(simple: CostParams, protocol: str) -> CostParams:
    """``simple`` (parameters of a fabric without a machine behind it) moved to ``protocol``:
    launch, step overhead and network hop times NCCL's table ratio of that protocol to Simple
    (ring base 6.6 / 8.4, NVLink hop 0.6 / 3.4, network hop 2.7 / 14 for LL)."""
    ring, p, s = 1, PROTOS.index(PROTOCOLS[check_protocol(protocol)]), PROTOS.index("Simple")
    return replace(simple, launch_us=simple.launch_us * BASE_LAT[ring][p] / BASE_LAT[ring][s],
                   step_overhead_us=simple.step_overhead_us * HW_LAT[HW_NVLINK][ring][p] / HW_LAT[HW_NVLINK][ring][s],
                   network_latency_us=simple.network_latency_us * HW_LAT[HW_NET][ring][p] / HW_LAT[HW_NET][ring][s])


def step_costs_us(topology: Topology, params: ModelParams = DEFAULT_PARAMS,
                  protocol: str = "simple") -> tuple[float, float, float]:
    """``(launch, hop inside a host, hop between hosts)`` µs of one of our schedules on
    ``topology`` under ``protocol``: what NCCL's ring charges under that protocol (Simple or LL)
    (:func:`synth.model.nccl.latency.hop_latencies_us`, NCCL's tables scaled by the fitted
    real/table ratio of the GPU architecture).  Our executors move a step as Simple does (the data,
    then a flag the receiver polls), so one step of a schedule costs what one ring hop of NCCL's
    costs on the same link, and a step between hosts is one network message (on EFA's SENDRECV
    platforms it pays the plugin's per-message share, :meth:`.ModelParams.net_message_us`).

    >>> from topo_probe import get_preset
    >>> launch, hop, net = step_costs_us(get_preset("dgx-h100"))
    >>> round(hop / launch, 6) == round(3.4 / 8.4, 6)   # NCCL's ring/Simple NVLink hop and base, one scale
    True
    >>> launch, hop, net = step_costs_us(get_preset("dgx-h100"), protocol="ll")
    >>> round(hop / launch, 6) == round(0.6 / 6.6, 6)   # ring/LL
    True
    """
    from synth.model.nccl.machine import NcclMachine
    from synth.model.nccl.latency import hop_latencies_us
    proto = PROTOCOLS[check_protocol(protocol)]
    m = NcclMachine.from_topology(topology)
    launch, hop, net = hop_latencies_us(m, "ring", proto, params)
    return launch, hop, net + params.net_message_us(m.net_kind, proto, m.arch)


def cost_params_for(where, params: ModelParams = DEFAULT_PARAMS, protocol: str = "simple",
                    **overrides) -> CostParams:
    """The :class:`CostParams` of a fabric (or topology), all from the shared table:

    * the link efficiencies of its GPU architecture and network transport (:func:`efficiencies`);
    * ``launch_us``: NCCL's ring/Simple base latency, scaled (:func:`step_costs_us`);
    * ``step_overhead_us``: a ring/Simple hop inside a host less the wire's latency (the cost model
      adds the channel's latency to it, so a step over one link costs exactly the hop);
    * ``network_latency_us``: a hop between hosts (the table's network hop plus the transport's
      fitted extra and a network plugin's share of its latency) less the step overhead and the
      network channel's wire latency;
    * ``slice_overhead_us`` 0: the NCCL model meets the real logs' mid sizes without an in-step
      pipelining term, so with it our ring and NCCL's ring/Simple are timed alike at every size.

    ``protocol`` ``ll``: the same from NCCL's ring/LL latencies (the module docstring).
    ``overrides`` replace fields (e.g. ``launch_us``).  A fabric without its topology gets the
    documented defaults (under LL moved by :func:`table_protocol_params`); so does a topology the
    NCCL model cannot read."""
    topology = where if isinstance(where, Topology) else getattr(where, "topology", None)
    if topology is None or topology.num_gpus == 0:
        return replace(table_protocol_params(CostParams(), protocol), **overrides)
    arch, transport = machine_keys(topology)
    fields = {f"{k}_efficiency": v for k, v in efficiencies(arch, transport, params).items()}
    proto = PROTOCOLS[check_protocol(protocol)]
    fields["network_latency_us"] = params.net_message_hop_us(transport, proto, arch)
    try:
        launch, hop, net_hop = step_costs_us(topology, params, protocol)
    except TopocollError:
        moved = table_protocol_params(CostParams(**fields), protocol)      # launch, step: table ratio
        return replace(moved, **{"network_latency_us": fields["network_latency_us"], **overrides})
    if isinstance(where, Topology):
        from synth.ir.fabric import build_fabric
        where = build_fabric(where)
    wire, net_wire = wire_latencies_us(where)
    step = max(0.0, hop - wire)
    fields.update(launch_us=launch, step_overhead_us=step, network_latency_us=max(0.0, net_hop - step - net_wire),
                  slice_overhead_us=0.0)
    return CostParams(**{**fields, **overrides})


#: how the cost model of our schedules turns the constants into times; a change of the formulas
#: (not of a constant) changes it, and with it :func:`model_version`
COST_FORMULA = ("dataflow critical path; launch, hops from the shared ring/Simple or ring/LL latencies; LL 2x bytes, "
                "Simple launch and first hop")


def model_version(params: ModelParams = DEFAULT_PARAMS) -> str:
    """12 hex digits naming every constant a result depends on (the cost model's defaults, its
    formula revision and the shared table): a stored result made otherwise is not reused."""
    doc = json.dumps({"cost": repr(CostParams()), "formula": COST_FORMULA, "shared": params_to_dict(params)},
                     sort_keys=True, default=str)
    return hashlib.sha256(doc.encode()).hexdigest()[:12]


__all__ = ["CostParams", "cost_params_for", "check_protocol", "efficiencies", "machine_keys", "model_version",
           "step_costs_us", "table_protocol_params", "wire_latencies_us", "LINK_KIND", "LL_MAX_BYTES", "PROTOCOLS",
           "WIRE_BYTES_PER_BYTE"]
