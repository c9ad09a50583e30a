"""NCCL's choice of algorithm, protocol and channels for a collective of a given size, and how
long it takes on the machine.

:class:`NcclModel` enumerates what NCCL (or RCCL) would consider for the collective on the
machine, drops what the environment (:class:`~synth.model.nccl.env.NcclEnv`) and the hardware
rule out, and picks the least time in NCCL's own view (so it chooses as NCCL does); the
prediction is the same choice timed in the ``real`` view (:mod:`.bandwidth`).  Point-to-point
collectives (alltoall, gather, scatter, sendrecv) are modelled as NCCL runs them: concurrent
sends to every peer, over NVLink inside a node and through the NICs between nodes.

>>> from topo_probe import get_preset
>>> model = NcclModel(NcclMachine.from_topology(get_preset("dgx-h100")), env=NcclEnv())
>>> c = model.choose("allreduce", 1 << 30)
>>> c.algorithm, c.protocol, c.channels
('nvls', 'Simple', 16)
>>> ring = NcclModel(model.machine, env=NcclEnv.from_environ({"NCCL_ALGO": "Ring"}))
>>> ring.choose("allreduce", 1 << 30).algorithm, ring.choose("allreduce", 1 << 10).protocol
('ring', 'LL')
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.formats.nccl_tests.conventions import busbw_gbps
from synth.ir.collectives import canonical
from synth.model.nccl.bandwidth import (
    algo_bandwidth,
    channels,
    fill_us,
    latency_us,
    net_gbps,
    refined_bus_bandwidth,
    tree_correction,
)
from synth.model.nccl.constants import DEFAULT_PARAMS, PROTOCOLS, ModelParams
from synth.model.nccl.env import NcclEnv
from synth.model.nccl.machine import NcclMachine
from topo_probe.errors import UnsupportedCollective

#: largest allreduce (bytes) RCCL runs with its bundled MSCCL all-pairs algorithms on MI300X in LL
#: (ROCm/rccl msccl-algorithms: allreduce_1step up to 8 KiB-class sizes, allreduce-allpairs LL
#: minBytes 20481 maxBytes 327680); its LL128 all-pairs files go up to 4 MiB-class sizes
MSCCL_MAX_BYTES = {("one_shot", "LL"): 20480, ("two_shot", "LL"): 327680, ("two_shot", "LL128"): 4194303}
#: collectives NCCL runs as point-to-point sends (nccl-tests names them too)
P2P_COLLECTIVES = ("alltoall", "gather", "scatter", "sendrecv")


@dataclass(frozen=True)
class NcclChoice:
    """What NCCL runs for one call and the predicted time (µs); ``nccl_us`` is NCCL's own
    estimate of that choice (what it compared)."""

    collective: str
    nbytes: int
    algorithm: str
    protocol: str
    channels: int
    time_us: float
    nccl_us: float

    def busbw_gbps(self, ranks: int) -> float:
        return busbw_gbps(self.collective, ranks, self.nbytes, self.time_us) if self.collective in _BUSBW else 0.0

    @property
    def label(self) -> str:
        return f"{self.algorithm}/{self.protocol}/{self.channels}"


_BUSBW = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "gather", "scatter")


class NcclModel:
    """NCCL as it runs on ``machine`` under ``env`` (default: this process's environment).

    Parameters
    ----------
    machine : NcclMachine
    params : ModelParams, optional
        The fitted constants (default :data:`~synth.model.nccl.constants.DEFAULT_PARAMS`).
    env : NcclEnv, optional
        NCCL variables; default ``NcclEnv.from_environ()`` (``os.environ``).
    """

    def __init__(self, machine: NcclMachine, params: ModelParams = DEFAULT_PARAMS, env: NcclEnv | None = None):
        self.machine, self.params = machine, params
        self.env = env if env is not None else NcclEnv.from_environ()
        self.p2p = not self.env.p2p_disable
        self.channels = channels(machine, self.env.min_channels, self.env.max_channels)
        self._default_channels = channels(machine)

    # ------------------------------------------------------------------ what NCCL considers
    def _algorithms(self, coll: str) -> list[str]:
        m, env = self.machine, self.env
        nvls = m.nvls and env.nvls_enable != 0
        collnet = m.collnet and env.collnet_enable == 1
        if coll == "allreduce":
            algos = ["ring", "tree"]
            if nvls:
                algos.append("nvls" if m.nodes == 1 or collnet else "nvls_tree")
            if collnet:
                algos += ["collnet_direct", "collnet_chain"]
            if m.amd and m.intra == "xgmi" and m.nodes == 1:
                algos += ["one_shot", "two_shot"]
        elif coll in ("allgather", "reducescatter"):
            algos = ["ring"]
            if nvls and (m.nodes == 1 or collnet):
                algos.append("nvls")
            if collnet:
                algos.append("collnet_direct")
            if m.nodes > 1 and m.gpus_per_node == 1:
                algos.append("pat")
        else:
            algos = ["ring"]
        allowed = [a for a in algos if env.algo_allowed(coll, a)]
        return allowed or ["ring"]          # NCCL falls back to the ring when nothing is left

    def _protocols(self, coll: str, algo: str) -> list[str]:
        if algo in ("nvls", "nvls_tree", "collnet_direct", "collnet_chain", "pat"):
            protos = ["Simple"]
        elif algo == "one_shot":
            protos = ["LL"]
        elif algo == "two_shot":                  # RCCL ships all-pairs allreduce in LL and LL128 (and
            protos = ["LL", "LL128"]              # Simple, which its tuner leaves to the rings)
        else:
            protos = list(PROTOCOLS)
            m = self.machine
            ll128 = (m.intra in ("nvswitch", "nvlink") and m.p2p and self.p2p and not m.amd
                     and m.family in ("volta", "ampere", "hopper", "blackwell")) or (m.amd and m.intra == "xgmi")
            if not ll128:
                protos.remove("LL128")
        allowed = [p for p in protos if self.env.proto_allowed(coll, p)]
        return allowed or protos

    def candidates(self, collective: str) -> list[tuple[str, str]]:
        """``(algorithm, protocol)`` pairs NCCL would compare for ``collective``."""
        coll = canonical(collective) if collective != "sendrecv" else "sendrecv"
        if coll in P2P_COLLECTIVES:
            return [("p2p", "Simple")]
        return [(a, p) for a in self._algorithms(coll) for p in self._protocols(coll, a)]

    # ------------------------------------------------------------------ times
    def _time(self, coll: str, algo: str, proto: str, nbytes: float, view: str) -> float:
        if algo == "p2p":
            return self._p2p_time(coll, nbytes, view)
        m, ch = self.machine, self.channels
        bw = algo_bandwidth(m, coll, algo, proto, self.params, self._default_channels, self.p2p)
        bw *= tree_correction(algo, proto, nbytes) * ch / self._default_channels
        lat = latency_us(m, coll, algo, proto, view, self.params)
        if view == "real":
            bus = refined_bus_bandwidth(m, coll, algo, proto, self.params, self._default_channels, self.p2p)
            lat += fill_us(m, algo, proto, nbytes, bus * ch / self._default_channels, ch, self.params)
        if (algo == "ring" and proto == "Simple" and m.nodes > 1 and coll == "allreduce"
                and nbytes / (ch * m.ranks) >= 64):
            lat *= 1.9 if m.family == "volta" else 1.4     # NCCL's "plateau effect of ring"
        return lat + nbytes / (1000.0 * bw)

    def _p2p_time(self, coll: str, nbytes: float, view: str) -> float:
        """Every rank sends to its peers at once: the NVLink part and the network part overlap."""
        m, p = self.machine, self.params
        n, g = m.ranks, m.gpus_per_node
        intra = algo_bandwidth(m, "allgather", "ring", "Simple", p, self._default_channels, self.p2p)
        intra *= (n - 1) / n                        # undo the ring ratio: the GPU's link bandwidth
        net = net_gbps(m, p)
        lat = latency_us(m, "allgather", "ring", "Simple", view, p) if view == "real" else 8.4
        if coll == "sendrecv":                      # one peer: rank r -> r + 1
            if m.nodes == 1:
                return lat + nbytes / (1000.0 * intra)
            peer = m.nic_gbps * max(1, m.nics_per_node // g) * (p.p2p_net_fraction if view == "real" else 1.0)
            return lat + nbytes / (1000.0 * min(intra, peer))
        share = nbytes / n                          # alltoall/gather/scatter: 1/n of the buffer per peer
        t_intra = share * (g - 1) / (1000.0 * intra)
        t_net = share * (n - g) * g / (1000.0 * net) if m.nodes > 1 and net > 0 else 0.0
        return lat + max(t_intra, t_net)

    def _pick(self, collective: str, nbytes: int, view: str) -> NcclChoice:
        """The candidate with the least time in ``view``, timed in both views."""
        coll = "sendrecv" if collective in ("sendrecv", "send_recv") else canonical(collective)
        if self.machine.ranks < 2:
            raise UnsupportedCollective("the NCCL model needs at least 2 ranks")
        allowed = [(a, p) for a, p in self.candidates(coll) if nbytes <= MSCCL_MAX_BYTES.get((a, p), nbytes)]
        algo, proto = min(allowed, key=lambda ap: self._time(coll, ap[0], ap[1], nbytes, view))
        return NcclChoice(coll, int(nbytes), algo, proto, self.channels,
                          self._time(coll, algo, proto, nbytes, "real"), self._time(coll, algo, proto, nbytes, "nccl"))

    def choose(self, collective: str, nbytes: int) -> NcclChoice:
        """What NCCL runs for ``collective`` of ``nbytes`` (nccl-tests size) and its time: the
        least time in NCCL's own view."""
        return self._pick(collective, nbytes, "nccl")

    def fastest(self, collective: str, nbytes: int) -> NcclChoice:
        """The (algorithm, protocol) the model predicts fastest, whatever NCCL's own pick
        (what a tuner plugin should ask NCCL for)."""
        return self._pick(collective, nbytes, "real")

    def time_us(self, collective: str, nbytes: int) -> float:
        """Predicted time (µs) of ``collective`` of ``nbytes`` as NCCL runs it."""
        return self.choose(collective, nbytes).time_us


__all__ = ["NcclModel", "NcclChoice", "P2P_COLLECTIVES", "MSCCL_MAX_BYTES"]
