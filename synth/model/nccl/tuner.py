"""NCCL's (or RCCL's) choice of algorithm, protocol and channels for a collective of a given size,
and how long it takes on the machine: the public face of the model.

:class:`NcclModel` builds NCCL's tuning table for the machine under the environment (with the
platform plugin's own settings underneath, :meth:`NcclMachine.platform_env`), picks what NCCL
picks (:mod:`.tuning`, RCCL's overrides in :mod:`.rccl`, point-to-point collectives in
:mod:`.p2p`) and times that pick with the execution model (:mod:`.runtime`, fitted constants in
:mod:`.params`).  Sizes follow nccl-tests (bytes per rank, the gathered total for allgather).

>>> from topo_probe import get_preset
>>> model = NcclModel(NcclMachine.from_topology(get_preset("dgx-h100")), env=NcclEnv())
>>> c = model.choose("allreduce", 1 << 30)
>>> c.algorithm, c.protocol, c.channels
('nvls', 'Simple', 16)
>>> ring = NcclModel(model.machine, env=NcclEnv.from_environ({"NCCL_ALGO": "Ring"}))
>>> ring.choose("allreduce", 1 << 30).label, ring.choose("allreduce", 1 << 10).protocol
('ring/Simple/24', 'LL')
"""

from __future__ import annotations

from dataclasses import dataclass

from synth.formats.nccl_tests.conventions import busbw_gbps
from synth.ir.collectives import canonical
from synth.model.nccl.env import NcclEnv
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.p2p import p2p_protocol, p2p_time_us
from synth.model.nccl.params import DEFAULT_PARAMS, ModelParams
from synth.model.nccl.rccl import MSCCL_ALLPAIRS, MSCCL_ONESTEP, msccl_time_us, rccl_choose
from synth.model.nccl.runtime import SizeFreeTerms, collective_time_us
from synth.model.nccl.tuning import NCCL_COLLS, NCCL_VERSION, TuneTable
from topo_probe.errors import UnsupportedCollective

#: collectives NCCL runs as point-to-point sends (nccl-tests names them too)
P2P_COLLECTIVES = ("alltoall", "gather", "scatter", "sendrecv")


@dataclass(frozen=True)
class NcclChoice:
    """What NCCL runs for one call and the predicted time (µs); ``nccl_us`` is NCCL's own
    estimate of that choice (what its tuner compared; nan for point-to-point and MSCCL)."""

    collective: str
    nbytes: int
    algorithm: str
    protocol: str
    channels: int
    time_us: float
    nccl_us: float

    def busbw_gbps(self, ranks: int) -> float:
        """nccl-tests bus bandwidth (GB/s) of this call on ``ranks`` ranks (0 for sendrecv)."""
        return busbw_gbps(self.collective, ranks, self.nbytes, self.time_us) if self.collective in _BUSBW else 0.0

    @property
    def label(self) -> str:
        return f"{self.algorithm}/{self.protocol}/{self.channels}"


_BUSBW = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "gather", "scatter")


def _collective(name: str) -> str:
    return "sendrecv" if name in ("sendrecv", "send_recv") else canonical(name)


class NcclModel:
    """NCCL as it runs on ``machine`` under ``env`` (default: this process's environment).

    Parameters
    ----------
    machine : NcclMachine
    params : ModelParams, optional
        The fitted constants (default :data:`~synth.model.nccl.params.DEFAULT_PARAMS`).
    env : NcclEnv, optional
        NCCL variables; default ``NcclEnv.from_environ()`` (``os.environ``).
    version : tuple of int, optional
        NCCL (major, minor): gates LL128 (2.5), NVLS (2.17), NVLSTree (2.18), PAT (2.23); or (major, minor,
        patch) where the log prints it, for the rules that change at a patch release
        (:mod:`~synth.model.nccl.versions_patch`; a bare minor there is its first release); None: the
        model's default (:data:`~.tuning.NCCL_VERSION`).
    """

    def __init__(self, machine: NcclMachine, params: ModelParams = DEFAULT_PARAMS, env: NcclEnv | None = None,
                 version: tuple | None = NCCL_VERSION):
        self.machine, self.params = machine, params
        self.env = env if env is not None else NcclEnv.from_environ()
        version = tuple(version or NCCL_VERSION)[:3]
        #: the NCCL variables the platform's network plugin or its profile sets underneath the user's
        self.platform_env = machine.platform_env(version)
        self.table = TuneTable.build(machine, self.env.under(self.platform_env), version)
        #: the communicator's ring/tree channels (NCCL's comm->nChannels)
        self.channels = self.table.graphs.n_channels
        #: the latency and GPU-link bandwidth of each (collective, algorithm, protocol, channels), memoised for
        #: ``table`` and ``params`` (:meth:`_size_free`): a tuner file asks for thousands of sizes of each
        self._terms = SizeFreeTerms(self.table, self.params)

    def candidates(self, collective: str) -> list[tuple[str, str]]:
        """``(algorithm, protocol)`` pairs NCCL compares for ``collective``."""
        coll = _collective(collective)
        if coll in P2P_COLLECTIVES:
            return [("p2p", "Simple")]
        return self.table.enabled(coll) or [("ring", "Simple")]

    def _timed(self, coll: str, algo: str, proto: str, nbytes: int) -> NcclChoice:
        t = self.table
        if algo in (MSCCL_ALLPAIRS, MSCCL_ONESTEP):
            return NcclChoice(coll, nbytes, algo, proto, 2, msccl_time_us(t, algo, nbytes, self.params), float("nan"))
        ch, _ = t.channels(algo, proto, nbytes, coll)
        time = collective_time_us(t, coll, algo, proto, ch, nbytes, self.params, self._size_free())
        return NcclChoice(coll, nbytes, algo, proto, ch, time, t.algo_time_us(coll, algo, proto, nbytes))

    def _size_free(self) -> SizeFreeTerms:
        """The memo of the size-free terms for this model's table and params, a new one if either was replaced."""
        if not self._terms.serves(self.table, self.params):
            self._terms = SizeFreeTerms(self.table, self.params)
        return self._terms

    def _check(self, collective: str, nbytes: int) -> str:
        if self.machine.ranks < 2:
            raise UnsupportedCollective("the NCCL model needs at least 2 ranks")
        return _collective(collective)

    def choose(self, collective: str, nbytes: int) -> NcclChoice:
        """What NCCL (RCCL on AMD GPUs) runs for ``collective`` of ``nbytes`` and its time."""
        coll, nbytes = self._check(collective, nbytes), int(nbytes)
        m, t = self.machine, self.table
        if coll not in NCCL_COLLS:
            time, ch = p2p_time_us(m, t.graphs, coll, nbytes, self.params, self.env.p2p_off, t.version,
                                   self.env.simple_step_bytes)
            proto = p2p_protocol(m, t.graphs, coll, nbytes, self.env.p2p_off, t.version)
            return NcclChoice(coll, nbytes, "p2p", proto, ch, time, float("nan"))
        algo, proto, _, _, _ = rccl_choose(t, coll, nbytes) if m.amd else t.choose(coll, nbytes)
        return self._timed(coll, algo, proto, nbytes)

    def fastest(self, collective: str, nbytes: int) -> NcclChoice:
        """The (algorithm, protocol) the model predicts fastest, whatever NCCL's own pick (what a
        tuner plugin should ask NCCL for)."""
        own = self.choose(collective, nbytes)
        if own.collective not in NCCL_COLLS:
            return own
        timed = [self._timed(own.collective, a, p, int(nbytes)) for a, p in self.table.enabled(own.collective)]
        return min([own] + timed, key=lambda c: c.time_us)

    def forced(self, collective: str, algorithm: str, protocol: str, nbytes: int) -> NcclChoice:
        """NCCL running ``algorithm``/``protocol`` (model names, e.g. ``ring``/``LL128``) because a
        tuner plugin pinned it, with NCCL's own channel count for that pair, and its time."""
        return self._timed(self._check(collective, nbytes), algorithm, protocol, int(nbytes))

    def time_us(self, collective: str, nbytes: int) -> float:
        """Predicted time (µs) of ``collective`` of ``nbytes`` as NCCL runs it."""
        return self.choose(collective, nbytes).time_us


__all__ = ["NcclModel", "NcclChoice", "P2P_COLLECTIVES"]
