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
``network``        ``net_eff[transport]`` (the NICs' ``transport``, default ``ib``)
=================  =========================================================

A step of a schedule whose transfers cross the network also pays the transport's per-hop latency
(``net_lat[transport, Simple]``, :attr:`CostParams.network_latency_us`), as NCCL's hops do.

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
from dataclasses import replace

from synth.model.cost import CostParams
from synth.model.nccl.machine import _arch
from synth.model.nccl.params import DEFAULT_PARAMS, ModelParams, params_to_dict
from topo_probe.topology.model import Topology

#: fabric resource kind -> link kind of ``ModelParams.link_eff``
LINK_KIND = {"nvlink": "nvlink", "infinity_fabric": "xgmi", "pcie": "pcie", "cpu": "shm"}


def machine_keys(topology: Topology) -> tuple[str, str]:
    """``(GPU architecture, network transport)`` of a topology: the keys of the constant table.

    The transport is the first NIC's ``transport`` attribute, ``ib`` when none says.
    """
    g = topology.graph
    transport = next((d["transport"] for _, d in g.nodes(data=True) if d["kind"] == "nic" and d.get("transport")),
                     "ib")
    return _arch(topology), transport


def efficiencies(arch: str, transport: str, params: ModelParams = DEFAULT_PARAMS) -> dict[str, float]:
    """Achieved fraction of the data-sheet bandwidth per fabric resource kind."""
    out = {kind: params.link_efficiency(arch, link) for kind, link in LINK_KIND.items()}
    out["network"] = params.net_efficiency(transport)
    return {k: min(1.0, v) for k, v in out.items()}


def cost_params_for(where, params: ModelParams = DEFAULT_PARAMS, **overrides) -> CostParams:
    """The :class:`CostParams` of a fabric (or topology): the shared link efficiencies of its GPU
    architecture and network transport, the cost model's calibrated overheads; ``overrides``
    replace fields (e.g. ``launch_us``).  A fabric without its topology gets the defaults."""
    topology = where if isinstance(where, Topology) else getattr(where, "topology", None)
    if topology is None or topology.num_gpus == 0:
        return replace(CostParams(), **overrides)
    arch, transport = machine_keys(topology)
    fields = {f"{k}_efficiency": v for k, v in efficiencies(arch, transport, params).items()}
    fields["network_latency_us"] = params.net_latency_us(transport, "Simple")
    return CostParams(**{**fields, **overrides})


def model_version(params: ModelParams = DEFAULT_PARAMS) -> str:
    """12 hex digits naming every constant a result depends on (the cost model's defaults and
    the shared table): a stored result made with other constants is not reused."""
    doc = json.dumps({"cost": repr(CostParams()), "shared": params_to_dict(params)}, sort_keys=True, default=str)
    return hashlib.sha256(doc.encode()).hexdigest()[:12]


__all__ = ["cost_params_for", "efficiencies", "machine_keys", "model_version", "LINK_KIND"]
